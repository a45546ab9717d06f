package daemon_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestEgressL7Fronting runs curl in a sandbox with `l7 = "check"` against
// two names on one address: the allowed name passes over HTTP and TLS,
// fronting the other by Host or by SNI (--resolve) is refused, and the
// session's audit has a layer "l7" event for each.
func TestEgressL7Fronting(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	ip := worldHost(t, "shared.l7.test", "10.214.0.40")
	worldHost(t, "other.l7.test", "10.214.0.40")

	p := policy("sleep", "300")
	p.Egress = &policies.Egress{Allow: []string{"shared.l7.test"}, L7: policies.L7Check}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })

	curl := func(args ...string) (string, int) {
		return execOut(t, s.ID, append([]string{"curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}"}, args...)...)
	}
	if out, code := curl("http://shared.l7.test/"); code != 0 || out != "200" {
		t.Errorf("allowed name over HTTP: curl exit %d %q, want 200", code, out)
	}
	if out, code := curl("-k", "https://shared.l7.test/"); code != 0 || out != "200" {
		t.Errorf("allowed name over TLS: curl exit %d %q, want 200", code, out)
	}
	if out, code := curl("-H", "Host: other.l7.test", "http://shared.l7.test/"); code != 0 || out != "403" {
		t.Errorf("fronting by Host: curl exit %d %q, want 403", code, out)
	}
	if out, code := curl("-k", "--resolve", "other.l7.test:443:"+ip.String(), "https://other.l7.test/"); code == 0 {
		t.Errorf("fronting by SNI reached the server: %q", out)
	}

	// A passed connection is audited when it ends, a moment after curl
	// exits.
	want := []string{
		"allowed shared.l7.test http", "allowed shared.l7.test tls",
		"refused other.l7.test http", "refused other.l7.test tls",
	}
	seen := map[string]bool{}
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		evs, err := h.Daemon.Audit(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Layer == "l7" {
				proto, _ := ev.Fields["proto"].(string)
				seen[ev.Action+" "+ev.Subject+" "+proto] = true
			}
		}
		if !slices.ContainsFunc(want, func(w string) bool { return !seen[w] }) || time.Now().After(deadline) {
			break
		}
	}
	for _, w := range want {
		if !seen[w] {
			t.Errorf("audit lacks l7 %q; have %v", w, keys(seen))
		}
	}
}
