package daemon_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// What a live revision of a session's egress does to the connections the
// sandbox holds open: none may go on using authority the revision
// withdrew, and those of kept names live on.

// holdHTTP opens one HTTP/1.1 keep-alive connection from session id to
// host:80 and sends a request with Host hdr on it every 0.3 seconds: the
// responses go to /tmp/NAME.out, /tmp/NAME.done appears once it ends.
func holdHTTP(t *testing.T, id, name, host, hdr string) {
	t.Helper()
	script := "(while sleep 0.3; do printf 'GET / HTTP/1.1\\r\\nHost: " + hdr + "\\r\\n\\r\\n'; done | nc " + host +
		" 80 > /tmp/" + name + ".out 2>&1; echo closed > /tmp/" + name + ".done) </dev/null >/dev/null 2>&1 &"
	if out, code := execOut(t, id, "sh", "-c", script); code != 0 {
		t.Fatalf("start %s: exit %d %q", name, code, out)
	}
}

// responses is how many HTTP 200 responses holdHTTP's connection has
// read, and whether it has ended.
func responses(t *testing.T, id, name string) (int, bool) {
	t.Helper()
	out, _ := execOut(t, id, "sh", "-c", "grep -c 'HTTP/1.1 200' /tmp/"+name+".out; test -e /tmp/"+name+".done && echo done")
	fields := strings.Fields(out)
	n := 0
	if len(fields) > 0 {
		n = atoiOr0(fields[0])
	}
	return n, strings.Contains(out, "done")
}

func atoiOr0(s string) int {
	n := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + int(c-'0')
	}
	return n
}

// TestReviseL7KeptNameKeepAliveLivesOn: with l7 = "check", a revision
// that keeps a name leaves the kept name's open keep-alive HTTP
// connection serving requests (README: "a kept name's connections live
// on"): each request is decided under the session's current
// registration, which the revision replaced.
func TestReviseL7KeptNameKeepAliveLivesOn(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	worldHost(t, "keep.l7ka.test", "10.214.0.84")
	worldHost(t, "drop.l7ka.test", "10.214.0.85")

	p := policy("sleep", "600")
	p.Egress = &policies.Egress{Allow: []string{"keep.l7ka.test", "drop.l7ka.test"}, L7: policies.L7Check}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	holdHTTP(t, s.ID, "ka", "keep.l7ka.test", "keep.l7ka.test")
	poll(t, "the keep-alive connection answers", func() bool { n, _ := responses(t, s.ID, "ka"); return n >= 2 })

	revised := policy("sleep", "600")
	revised.Egress = &policies.Egress{Allow: []string{"keep.l7ka.test"}, L7: policies.L7Check}
	if _, err := h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: revised}); err != nil {
		t.Fatalf("update: %v", err)
	}
	n0, _ := responses(t, s.ID, "ka")
	poll(t, "the kept name's connection answers after the revision, or ends", func() bool {
		n, done := responses(t, s.ID, "ka")
		return done || n >= n0+3
	})
	n, done := responses(t, s.ID, "ka")
	out, _ := execOut(t, s.ID, "sh", "-c", "tail -c 300 /tmp/ka.out")
	if done || strings.Contains(out, "being removed") || n < n0+3 {
		t.Errorf("the kept name's keep-alive connection was refused after the revision (%d answers, %d before; ended %v):\n%s", n, n0, done, out)
	}
}

// TestReviseCutsSplicedTLSOfWithdrawnName: with l7 = "check", two names
// share one address (a CDN). The sandbox opens one TLS connection with
// SNI drop.l7rev.test (spliced by the gateway: no HTTP rules) and sends a
// request on it every 0.3 s. The revision withdraws drop.l7rev.test and
// keeps keep.l7rev.test: the address stays pinned for the kept name, and
// the gateway closes the open connection, whose SNI the revised allowlist
// refuses, as it refuses new ones.
func TestReviseCutsSplicedTLSOfWithdrawnName(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	ip := worldHost(t, "keep.l7rev.test", "10.214.0.80")
	worldHost(t, "drop.l7rev.test", "10.214.0.80")

	p := policy("sleep", "600")
	p.Egress = &policies.Egress{Allow: []string{"keep.l7rev.test", "drop.l7rev.test"}, L7: policies.L7Check}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	// keep resolves first, so the address is pinned for the kept name.
	if out, code := execOut(t, s.ID, "curl", "-sSk", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", "https://keep.l7rev.test/"); code != 0 || out != "200" {
		t.Fatalf("keep before the revision: curl exit %d %q", code, out)
	}
	// One connection, 100 requests 0.3 s apart (curl reuses it:
	// num_connects is 0 after the first).
	script := "(curl -sk --rate 200/m -o /dev/null -w '%{stderr}%{http_code} %{num_connects}\\n' 'https://drop.l7rev.test/?[1-100]' 2> /tmp/tls.out; echo closed > /tmp/tls.done) </dev/null >/dev/null 2>&1 &"
	if out, code := execOut(t, s.ID, "sh", "-c", script); code != 0 {
		t.Fatalf("start: exit %d %q", code, out)
	}
	// The requests answered over the reused connection, every line, and
	// whether curl is done.
	count := func() (int, int, bool, string) {
		out, _ := execOut(t, s.ID, "sh", "-c", "cat /tmp/tls.out; test -e /tmp/tls.done && echo done")
		return strings.Count(out, "200 0\n"), strings.Count(out, "\n"), strings.Contains(out, "done"), out
	}
	poll(t, "the TLS connection is reused", func() bool { n, _, _, _ := count(); return n >= 2 })

	revised := policy("sleep", "600")
	revised.Egress = &policies.Egress{Allow: []string{"keep.l7rev.test"}, L7: policies.L7Check}
	v, err := h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: revised})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	t.Logf("revision: %+v", v.Revision)

	// The gateway refuses the withdrawn name on a new connection...
	if out, code := execOut(t, s.ID, "curl", "-sSk", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}",
		"--resolve", "drop.l7rev.test:443:"+ip.String(), "https://drop.l7rev.test/"); code == 0 {
		t.Fatalf("a new connection for the withdrawn name passed: %q", out)
	}
	// ...and on the open one: after the revision, curl's requests fail
	// (it connects again, and is refused), none more is answered.
	_, l0, _, _ := count()
	poll(t, "curl makes three more requests after the revision, or ends", func() bool {
		_, l, done, _ := count()
		return done || l >= l0+3
	})
	n0, _, _, _ := count()
	poll(t, "curl makes three more requests, or ends", func() bool {
		_, l, done, _ := count()
		return done || l >= l0+6
	})
	n1, _, _, out := count()
	if n1 > n0 {
		t.Errorf("%d requests for the withdrawn name drop.l7rev.test answered 200 after the revision, over a TLS connection opened before it (tail: %q)", n1-n0, out[max(0, len(out)-60):])
	}
}

// TestReviseCutsWithdrawnCNAMETarget: alias.cnrev.test is a CNAME of
// target.cnrev.test; both are allowed, so the alias resolves. A revision
// that withdraws the target but keeps the alias (the proxy now refuses
// the alias: a chain target must be allowed), and then one that denies
// the target, judge the alias's pinned address by its whole chain: the
// address is unpinned, the connection to it is cut and no new one opens.
func TestReviseCutsWithdrawnCNAMETarget(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	target := worldHost(t, "target.cnrev.test", "10.214.0.81")
	if err := h.World.AddCNAME("alias.cnrev.test", "target.cnrev.test"); err != nil && !strings.Contains(err.Error(), "exists") {
		t.Fatal(err)
	}

	p := policy("sleep", "600")
	p.Egress = &policies.Egress{Allow: []string{"alias.cnrev.test", "target.cnrev.test"}}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	holdEcho(t, s.ID, "cn", "alias.cnrev.test")
	poll(t, "the alias's connection echoes", func() bool { n, _ := echoes(t, s.ID, "cn"); return n >= 2 })

	for i, eg := range []*policies.Egress{
		{Allow: []string{"alias.cnrev.test"}},                                      // the target withdrawn
		{Allow: []string{"alias.cnrev.test"}, Deny: []string{"target.cnrev.test"}}, // and then denied
	} {
		revised := policy("sleep", "600")
		revised.Egress = eg
		v, err := h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: revised})
		if err != nil {
			t.Fatalf("update: %v", err)
		}
		t.Logf("revision %d: unpinned %v, cut %d", v.PolicyVersion, v.Revision.Unpinned, v.Revision.ConnectionsCut)
		if i == 0 && (len(v.Revision.Unpinned) == 0 || v.Revision.ConnectionsCut == 0) {
			t.Errorf("withdrawing the target unpinned %v and cut %d connections; want its address unpinned and the alias's connection cut", v.Revision.Unpinned, v.Revision.ConnectionsCut)
		}
		out, _ := execOut(t, s.ID, "dig", "+time=2", "+tries=1", "alias.cnrev.test")
		if strings.Contains(out, "status: NOERROR") {
			t.Fatalf("the alias still resolves under %+v:\n%s", eg, out)
		}
		if i == 0 {
			poll(t, "the connection to the withdrawn target ends", func() bool { _, done := echoes(t, s.ID, "cn"); return done })
		}
		if out, code := execOut(t, s.ID, "curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}",
			"http://"+target.String()+"/"); code == 0 && out == "200" {
			t.Errorf("under %+v, a new connection to the withdrawn target's address %v answered 200", eg, target)
		}
	}
}

// TestReviseAppliedAfterCrashBeforeApply: the daemon records a revision
// before it changes the network. A daemon that dies in between
// (reproduced by writing the record as Update writes it, then
// restarting) re-adopts the session under the revised policy and sweeps
// its network as a revision does: the withdrawn name's open connection is
// cut and its address no longer reachable, and the kept name still is.
func TestReviseAppliedAfterCrashBeforeApply(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	worldHost(t, "keep.crashrev.test", "10.214.0.82")
	dropped := worldHost(t, "drop.crashrev.test", "10.214.0.83")

	p := policy("sleep", "600")
	p.Egress = &policies.Egress{Allow: []string{"keep.crashrev.test", "drop.crashrev.test"}}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	holdEcho(t, s.ID, "crash", "drop.crashrev.test")
	poll(t, "the connection echoes", func() bool { n, _ := echoes(t, s.ID, "crash"); return n >= 2 })

	// What Daemon.Update has written when it dies before Revise.
	path := filepath.Join(h.Root, "sessions", s.ID, "session.json")
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(b, &rec); err != nil {
		t.Fatal(err)
	}
	pol := rec["policy"].(map[string]any)
	pol["egress"].(map[string]any)["allow"] = []string{"keep.crashrev.test"}
	rec["policy_version"] = 2
	b, _ = json.Marshal(rec)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := h.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	got, err := h.Daemon.Inspect(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.PolicyVersion != 2 {
		t.Fatalf("restarted daemon: version %d", got.PolicyVersion)
	}
	if out, _ := execOut(t, s.ID, "dig", "+time=2", "+tries=1", "drop.crashrev.test"); !strings.Contains(out, "status: REFUSED") {
		t.Fatalf("withdrawn name still resolves:\n%s", out)
	}
	poll(t, "the withdrawn name's connection ends", func() bool { _, done := echoes(t, s.ID, "crash"); return done })
	if out, code := execOut(t, s.ID, "curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}",
		"http://"+dropped.String()+"/"); code == 0 && out == "200" {
		t.Errorf("a new connection to the withdrawn name's address %v answered 200", dropped)
	}
	if out, code := execOut(t, s.ID, "curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}",
		"http://keep.crashrev.test/"); code != 0 || out != "200" {
		t.Errorf("the kept name after the restart: curl exit %d %q", code, out)
	}
}
