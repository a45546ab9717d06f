package daemon_test

import (
	"context"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// holdEcho opens a connection from session id to the world's TCP echo on
// host (port 7) and keeps it open, sending a line every 0.3 seconds: the
// echoes go to /tmp/NAME.out, and /tmp/NAME.done appears once the
// connection has ended.
func holdEcho(t *testing.T, id, name, host string) {
	t.Helper()
	script := "(while sleep 0.3; do echo ping; done | nc " + host + " 7 > /tmp/" + name + ".out 2>&1; echo closed > /tmp/" + name + ".done) </dev/null >/dev/null 2>&1 &"
	if out, code := execOut(t, id, "sh", "-c", script); code != 0 {
		t.Fatalf("start %s: exit %d %q", name, code, out)
	}
}

// echoes is how many lines the connection of holdEcho has echoed, and
// whether it has ended.
func echoes(t *testing.T, id, name string) (int, bool) {
	t.Helper()
	out, _ := execOut(t, id, "sh", "-c", "grep -c ping /tmp/"+name+".out; test -e /tmp/"+name+".done && echo done")
	fields := strings.Fields(out)
	n := 0
	if len(fields) > 0 {
		n, _ = strconv.Atoi(fields[0])
	}
	return n, strings.Contains(out, "done")
}

// poll calls cond until it holds or a generous deadline passes.
func poll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting until %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestUpdateEgressLive revises a running session's egress allowlist: a
// removed name's open connection is cut and its lookups refused, a kept
// name keeps its open connection and opens new ones, an added name
// resolves and connects. A revision that changes the image is refused and
// changes nothing. The versions are in inspect and in the audit, and the
// revised policy holds across a daemon restart.
func TestUpdateEgressLive(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	worldHost(t, "keep.rev.test", "10.214.0.70")
	dropped := worldHost(t, "drop.rev.test", "10.214.0.71")
	worldHost(t, "add.rev.test", "10.214.0.72")

	p := policy("sleep", "600")
	p.Egress = &policies.Egress{Allow: []string{"keep.rev.test", "drop.rev.test"}}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	if s.PolicyVersion != 1 {
		t.Errorf("created session: policy version %d, want 1", s.PolicyVersion)
	}
	curl := func(url string) (string, int) {
		return execOut(t, s.ID, "curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", url)
	}
	if out, code := curl("http://add.rev.test/"); code == 0 {
		t.Fatalf("a name not yet allowed was reached: %q", out)
	}

	holdEcho(t, s.ID, "keep", "keep.rev.test")
	holdEcho(t, s.ID, "drop", "drop.rev.test")
	for _, name := range []string{"keep", "drop"} {
		poll(t, name+" echoes", func() bool { n, _ := echoes(t, s.ID, name); return n >= 2 })
	}

	revised := policy("sleep", "600")
	revised.Egress = &policies.Egress{Allow: []string{"keep.rev.test", "add.rev.test"}}
	v, err := h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: revised})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	r := v.Revision
	if r == nil || r.Version != 2 || r.Previous != 1 || v.PolicyVersion != 2 {
		t.Fatalf("revision %+v, session version %d; want version 2 after 1", r, v.PolicyVersion)
	}
	if !slices.Equal(r.Allow.Added, []string{"add.rev.test"}) || !slices.Equal(r.Allow.Removed, []string{"drop.rev.test"}) ||
		!slices.Equal(r.Allow.Kept, []string{"keep.rev.test"}) {
		t.Errorf("allow change %+v", r.Allow)
	}
	if !slices.Contains(r.Unpinned, dropped.String()) || r.ConnectionsCut < 1 {
		t.Errorf("revision unpinned %v and cut %d connections; want %v unpinned and its connection cut", r.Unpinned, r.ConnectionsCut, dropped)
	}

	// The removed name's connection ends; the kept one's goes on.
	poll(t, "the removed name's connection is cut", func() bool { _, done := echoes(t, s.ID, "drop"); return done })
	n0, _ := echoes(t, s.ID, "keep")
	poll(t, "the kept name's connection echoes on", func() bool {
		n, done := echoes(t, s.ID, "keep")
		if done {
			t.Fatal("the kept name's connection ended")
		}
		return n >= n0+3
	})
	dig := func(name string) string {
		out, _ := execOut(t, s.ID, "dig", "+time=2", "+tries=1", name)
		return out
	}
	if out := dig("drop.rev.test"); !strings.Contains(out, "status: REFUSED") {
		t.Errorf("dig of the removed name: want REFUSED, got\n%s", out)
	}
	if out, code := curl("http://" + dropped.String() + "/"); code == 0 {
		t.Errorf("the removed name's address was reached: %q", out)
	}
	if out, code := curl("http://keep.rev.test/"); code != 0 || out != "200" {
		t.Errorf("kept name, new connection: curl exit %d %q, want HTTP 200", code, out)
	}
	if out, code := curl("http://add.rev.test/"); code != 0 || out != "200" {
		t.Errorf("added name: curl exit %d %q, want HTTP 200", code, out)
	}

	// A revision that changes the image is refused, naming it; nothing
	// changes.
	bad := revised
	bad.Image = "airlock/other:latest"
	bad.Egress = &policies.Egress{Allow: []string{"keep.rev.test"}}
	if _, err := h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: bad}); err == nil || !errdefs.IsFailedPrecondition(err) ||
		!strings.Contains(err.Error(), "image: cannot change on a running session") {
		t.Errorf("update changing the image: %v, want it refused naming the image", err)
	}
	got, err := h.Daemon.Inspect(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.PolicyVersion != 2 || !slices.Equal(got.Policy.Egress.Allow, revised.Egress.Allow) {
		t.Errorf("after a refused revision: version %d, allow %v; want 2 and %v", got.PolicyVersion, got.Policy.Egress.Allow, revised.Egress.Allow)
	}
	if out, code := curl("http://add.rev.test/"); code != 0 || out != "200" {
		t.Errorf("after a refused revision, the added name: curl exit %d %q", code, out)
	}

	// The versions in the audit: the revision itself, decisions before
	// it under 1, after it under 2.
	evs, err := h.Daemon.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	var revisedEv *api.AuditEvent
	versions := map[string][]int{}
	for i, ev := range evs {
		switch {
		case ev.Layer == "policy" && ev.Action == "revised":
			revisedEv = &evs[i]
		case ev.Layer == "dns":
			versions[ev.Action+" "+ev.Subject] = append(versions[ev.Action+" "+ev.Subject], ev.PolicyVersion)
		}
	}
	if revisedEv == nil || revisedEv.PolicyVersion != 2 || revisedEv.Fields["previous_version"] != float64(1) {
		t.Errorf("revision event %+v", revisedEv)
	} else if allow, _ := revisedEv.Fields["allow"].(map[string]any); allow == nil ||
		!strings.Contains(strings.Join(strings.Fields(fmtAny(allow["removed"])), " "), "drop.rev.test") {
		t.Errorf("revision event does not list the removed name: %v", revisedEv.Fields)
	}
	// (AAAA queries are "refused" with an empty answer whatever the
	// version: no IPv6.)
	for key, want := range map[string][]int{"allowed drop.rev.test": {1}, "allowed add.rev.test": {2}} {
		if !slices.Equal(slices.Compact(versions[key]), want) {
			t.Errorf("audit: dns %s under versions %v, want %v", key, versions[key], want)
		}
	}
	if !slices.Contains(versions["refused drop.rev.test"], 2) || !slices.Contains(versions["refused add.rev.test"], 1) {
		t.Errorf("audit: refusals of the removed name under %v, of the added one under %v; want 2 and 1 among them",
			versions["refused drop.rev.test"], versions["refused add.rev.test"])
	}

	// A restarted daemon re-adopts the session under the revised policy.
	if err := h.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	got, err = h.Daemon.Inspect(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.PolicyVersion != 2 || !slices.Equal(got.Policy.Egress.Allow, revised.Egress.Allow) {
		t.Errorf("after a restart: version %d, allow %v", got.PolicyVersion, got.Policy.Egress.Allow)
	}
	if out := dig("drop.rev.test"); !strings.Contains(out, "status: REFUSED") {
		t.Errorf("after a restart, dig of the removed name: want REFUSED, got\n%s", out)
	}
	if out, code := curl("http://add.rev.test/"); code != 0 || out != "200" {
		t.Errorf("after a restart, the added name: curl exit %d %q", code, out)
	}
	// The kept connection lives across the restart, and through a
	// revision there that withdraws the added name.
	if _, done := echoes(t, s.ID, "keep"); done {
		t.Fatal("the kept name's connection ended across the restart")
	}
	third := policy("sleep", "600")
	third.Egress = &policies.Egress{Allow: []string{"keep.rev.test"}}
	v, err = h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: third})
	if err != nil {
		t.Fatal(err)
	}
	if v.PolicyVersion != 3 || !slices.Equal(v.Revision.Allow.Removed, []string{"add.rev.test"}) {
		t.Errorf("revision after the restart: %+v", v.Revision)
	}
	n0, _ = echoes(t, s.ID, "keep")
	poll(t, "the kept name's connection echoes after the restart's revision", func() bool {
		n, done := echoes(t, s.ID, "keep")
		if done {
			t.Fatal("the kept name's connection ended at a revision after the restart")
		}
		return n >= n0+3
	})
	if out, code := curl("http://add.rev.test/"); code == 0 {
		t.Errorf("the name withdrawn after the restart was reached: %q", out)
	}
}

func fmtAny(v any) string {
	var b strings.Builder
	if xs, ok := v.([]any); ok {
		for _, x := range xs {
			s, _ := x.(string)
			b.WriteString(s + " ")
		}
	}
	return b.String()
}
