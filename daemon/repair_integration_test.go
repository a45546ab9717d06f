package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// repairOf is the repair an audit event carries, or nil.
func repairOf(t *testing.T, ev api.AuditEvent) *policies.Repair {
	t.Helper()
	v, ok := ev.Fields["repair"]
	if !ok {
		return nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var r policies.Repair
	if err := json.Unmarshal(b, &r); err != nil {
		t.Fatal(err)
	}
	return &r
}

// TestRepairRefusedLookup: a lookup the allowlist refuses is audited with
// its repair, the allow entry that would let it through; applied as a
// revision, the lookup resolves.
func TestRepairRefusedLookup(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	worldHost(t, "keep.repair.test", "10.214.0.150")
	worldHost(t, "api.repair.test", "10.214.0.151")
	p := policy("sleep", "300")
	p.Egress = &policies.Egress{Allow: []string{"keep.repair.test:443"}}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	dig := func() string {
		out, _ := execOut(t, s.ID, "dig", "+time=2", "+tries=1", "+short", "api.repair.test")
		return strings.TrimSpace(out)
	}
	if out := dig(); out == "10.214.0.151" {
		t.Fatalf("a name not allowed resolved: %q", out)
	}
	var rep *policies.Repair
	poll(t, "the refusal is audited with its repair", func() bool {
		evs, err := h.Daemon.Audit(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if ev.Layer == "dns" && ev.Action == "refused" && ev.Subject == "api.repair.test" {
				rep = repairOf(t, ev)
				return true
			}
		}
		return false
	})
	want := policies.RepairChange{Field: policies.RepairEgressAllow, Op: policies.RepairAdd, Value: "api.repair.test:443"}
	if rep == nil || len(rep.Changes) != 1 || rep.Changes[0] != want || !rep.Revisable ||
		!strings.Contains(rep.HCL, `allow = [..., "api.repair.test:443"]`) {
		t.Fatalf("the refusal's repair %+v, want %+v, revisable, in HCL", rep, want)
	}
	// The repair, applied, lets the name resolve.
	revised := p.Clone()
	revised.Egress.Allow = append(revised.Egress.Allow, rep.Changes[0].Value)
	if _, err := h.Daemon.Update(ctx, s.ID, api.UpdateRequest{Policy: *revised}); err != nil {
		t.Fatal(err)
	}
	if out := dig(); out != "10.214.0.151" {
		t.Errorf("after the repair: %q, want the name resolved", out)
	}
}

// TestApproveRevise holds a request an ask rule matches and approves it by
// a revision: the request goes on, the policy's version is raised, the
// revision's audit event names the approval, and a second identical
// request is allowed without being held. A request whose repair cannot be
// written as a rule (a path with "**" inside a segment, which no path
// pattern may hold) is refused approval by revision, and nothing changes.
func TestApproveRevise(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	var mu sync.Mutex
	var saw []string
	svc := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		saw = append(saw, r.Method+" "+r.URL.Path)
		mu.Unlock()
		fmt.Fprint(rw, "ok")
	})
	if err := h.World.AddHost("jobs.repair.test", netip.MustParseAddr("10.214.0.152"), world.WithHandler(svc)); err != nil && !strings.Contains(err.Error(), "exists") {
		t.Fatal(err)
	}
	p := policy("sleep", "300")
	p.Egress = &policies.Egress{Allow: []string{"jobs.repair.test:80"}, L7: policies.L7Check,
		HTTP: []policies.HTTPHost{{Host: "jobs.repair.test", Rules: []policies.HTTPRule{
			{Methods: []string{"GET"}, Action: policies.HTTPAllow},
			{Methods: []string{"DELETE"}, Path: "/jobs/**", Action: policies.HTTPAsk},
		}}}}
	p.Approval = &policies.Approval{Timeout: policies.Duration(time.Minute), OnTimeout: policies.OnTimeoutDeny}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })

	del := func(path string) <-chan string {
		done := make(chan string, 1)
		go func() {
			out, _ := execOut(t, s.ID, "curl", "-sS", "--max-time", "30", "-o", "/dev/null", "-w", "%{http_code}", "-X", "DELETE", "http://jobs.repair.test"+path)
			done <- out
		}()
		return done
	}
	heldFor := func(path string) api.Approval {
		t.Helper()
		var held api.Approval
		poll(t, "DELETE "+path+" is held", func() bool {
			for _, ap := range h.Daemon.Approvals().List(s.ID) {
				if ap.Path == path {
					held = ap
					return true
				}
			}
			return false
		})
		return held
	}
	version := func() int {
		v, err := h.Daemon.Inspect(ctx, s.ID)
		if err != nil {
			t.Fatal(err)
		}
		return v.PolicyVersion
	}

	// A repair that cannot be a revision: refused, nothing changed, the
	// request still held; then denied.
	done := del("/jobs/a**b")
	held := heldFor("/jobs/a**b")
	if held.Repair == nil || held.Repair.Revisable || !strings.Contains(held.Repair.Reason, "reads as a glob") {
		t.Errorf("held %s with repair %+v; want one that cannot be written", held.ID, held.Repair)
	}
	_, err = h.Daemon.ApproveRevise(ctx, held.ID, "", "test")
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "cannot be made a revision") {
		t.Errorf("ApproveRevise of an unwritable repair: %v, want a failed precondition", err)
	}
	if v := version(); v != 1 {
		t.Errorf("policy version %d after a refused revision, want 1", v)
	}
	if ap, err := h.Daemon.Approvals().Held(held.ID); err != nil || ap.State != api.ApprovalPending {
		t.Errorf("the request after a refused revision: %+v, %v; want it still held", ap, err)
	}
	if _, err := h.Daemon.Approvals().Decide(ctx, held.ID, false, "no", "test"); err != nil {
		t.Fatal(err)
	}
	if out := <-done; out != "403" {
		t.Errorf("denied request: %q, want 403", out)
	}

	// Approved by revision.
	done = del("/jobs/42")
	held = heldFor("/jobs/42")
	want := policies.HTTPRule{Methods: []string{"DELETE"}, Path: "/jobs/42", Action: policies.HTTPAllow}
	if r := held.Repair; r == nil || len(r.Changes) != 1 || r.Changes[0].Rule == nil || r.Changes[0].Before != 2 ||
		fmt.Sprint(*r.Changes[0].Rule) != fmt.Sprint(want) || !strings.Contains(r.HCL, `http "jobs.repair.test"`) {
		t.Fatalf("held %s with repair %+v; want an allow rule %+v before rule 2", held.ID, held.Repair, want)
	}
	if !held.Repair.Revisable {
		t.Fatalf("repair not revisable: %s", held.Repair.Reason)
	}
	a, err := h.Daemon.ApproveRevise(ctx, held.ID, "ticket 7", "test")
	if err != nil {
		t.Fatalf("ApproveRevise: %v", err)
	}
	// Allowed in the approver's name, or by the revision itself, which
	// the L7 gateway applies to the requests it holds.
	if a.State != api.ApprovalAllowed || a.RevisedTo != 2 || (!strings.HasPrefix(a.Reason, "ticket 7; approved by revising the policy to version 2") && a.By != "policy revision 2") {
		t.Errorf("approved %+v, want allowed by revision to version 2", a)
	}
	if out := <-done; out != "200" {
		t.Errorf("approved request: %q, want 200", out)
	}
	if v := version(); v != 2 {
		t.Errorf("policy version %d, want 2", v)
	}
	// The same request again: allowed, never held.
	if out := <-del("/jobs/42"); out != "200" {
		t.Errorf("the same request after the revision: %q, want 200 without a hold", out)
	}
	// Another path still asks.
	done = del("/jobs/43")
	other := heldFor("/jobs/43")
	if _, err := h.Daemon.Approvals().Decide(ctx, other.ID, false, "no", "test"); err != nil {
		t.Fatal(err)
	}
	<-done

	evs, err := h.Daemon.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	var revisions, holds int
	for _, ev := range evs {
		switch {
		case ev.Layer == "policy" && ev.Action == "revised":
			revisions++
			if ev.Fields["approval"] != held.ID || ev.Fields["approved_by"] != "test" || ev.PolicyVersion != 2 {
				t.Errorf("revision event %+v, want it to name approval %s", ev, held.ID)
			}
		case ev.Layer == "approval" && ev.Action == "held":
			holds++
			if repairOf(t, ev) == nil {
				t.Errorf("held event without its repair: %+v", ev)
			}
		}
	}
	if revisions != 1 || holds != 3 {
		t.Errorf("audit: %d revisions, %d holds; want 1 and 3", revisions, holds)
	}
	mu.Lock()
	defer mu.Unlock()
	if got := strings.Join(saw, "|"); got != "DELETE /jobs/42|DELETE /jobs/42" {
		t.Errorf("the service saw %q, want the approved request and its repeat", got)
	}
}
