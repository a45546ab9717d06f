package daemon

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/policies"
)

// A session's held requests take the manifest's timeout, are decided
// through the daemon's store, reach the session's audit log, and are
// denied when the session ends.
func TestSessionApprovals(t *testing.T) {
	rt := newFakeRuntime()
	d := openFake(t, t.TempDir(), rt)
	p := fakePolicy("sleep", "infinity")
	p.Approval = &policies.Approval{Timeout: policies.Duration(90 * time.Second)}
	v := create(t, d, p, true)
	s, err := d.get(v.ID)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := d.Approvals().Follow(v.ID)
	defer f.Close()
	next := func() api.ApprovalEvent {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		ev, err := f.Next(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return ev
	}
	ask := func() <-chan approvals.Decision {
		ch := make(chan approvals.Decision, 1)
		go func() {
			ch <- s.askApproval(context.Background(), approvals.Request{Method: "DELETE", Host: "api.corp.test",
				Path: "/v1/jobs/4812", Rule: `ask DELETE "/v1/jobs/*"`})
		}()
		return ch
	}
	decided := func(ch <-chan approvals.Decision) approvals.Decision {
		t.Helper()
		select {
		case dec := <-ch:
			return dec
		case <-time.After(10 * time.Second):
			t.Fatal("the request was not decided")
			return approvals.Decision{}
		}
	}

	ch := ask()
	ev := next()
	if ev.Type != api.ApprovalHeld || ev.Approval.Session != v.ID || ev.Approval.Deadline.Sub(ev.Approval.Created) != 90*time.Second {
		t.Fatalf("held: %+v", ev.Approval)
	}
	if _, err := d.Approvals().Decide(context.Background(), ev.Approval.ID, true, "the job is mine", "alice"); err != nil {
		t.Fatal(err)
	}
	if dec := decided(ch); !dec.Allow || dec.By != "alice" {
		t.Errorf("decision %+v, want allowed by alice", dec)
	}
	next()

	ch = ask()
	next()
	rt.exit(v.ID, 0)
	wait(t, d, v.ID)
	if dec := decided(ch); dec.Allow || dec.By != approvals.BySessionEnded {
		t.Errorf("decision at the session's end: %+v", dec)
	}
	evs, err := d.Audit(context.Background(), v.ID)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, ev := range evs {
		if ev.Layer == "approval" {
			by, _ := ev.Fields["by"].(string)
			got = append(got, ev.Action+":"+by+":"+ev.Subject)
		}
	}
	want := []string{"held::api.corp.test/v1/jobs/4812", "allowed:alice:api.corp.test/v1/jobs/4812",
		"held::api.corp.test/v1/jobs/4812", "denied:session ended:api.corp.test/v1/jobs/4812"}
	if len(got) != len(want) {
		t.Fatalf("approval audit %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("approval audit %q, want %q", got, want)
			break
		}
	}
}

// The L7 gateway's ask reaches the store with its body, which the
// session's audit log (kept long) never holds; the gateway's wait for a
// body is the manifest's approval timeout.
func TestSessionApprovalBody(t *testing.T) {
	rt := newFakeRuntime()
	d := openFake(t, t.TempDir(), rt)
	p := fakePolicy("sleep", "infinity")
	p.Approval = &policies.Approval{Timeout: policies.Duration(90 * time.Second)}
	v := create(t, d, p, true)
	s, err := d.get(v.ID)
	if err != nil {
		t.Fatal(err)
	}
	if sc := d.egressConfig(s, p, ""); sc.AskTimeout != 90*time.Second {
		t.Errorf("the gateway waits %s for a held body, want the manifest's 90s", sc.AskTimeout)
	}
	f, _ := d.Approvals().Follow(v.ID)
	defer f.Close()
	const body = `{"names":["billing-api"],"note":"BODY-MARKER-31c4"}`
	ch := make(chan egress.AskDecision, 1)
	go func() {
		ch <- s.askL7(context.Background(), egress.Ask{Method: "POST", Host: "k8s.test", Path: "/v1/namespaces/dev/deployments:restart",
			Rule: "ask", Body: []byte(body), ContentType: "application/json", ContentEncoding: "identity", BodyTruncated: true})
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := f.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a := ev.Approval
	if string(a.Body) != body || !a.BodyTruncated || a.ContentType != "application/json" || a.ContentEncoding != "identity" {
		t.Errorf("held %+v", a)
	}
	if _, err := d.Approvals().Decide(context.Background(), a.ID, false, "wrong service", "alice"); err != nil {
		t.Fatal(err)
	}
	if dec := <-ch; dec.Allow || dec.ID != a.ID {
		t.Errorf("decision %+v", dec)
	}
	evs, err := d.Audit(context.Background(), v.ID)
	if err != nil {
		t.Fatal(err)
	}
	all, _ := json.Marshal(evs)
	if strings.Contains(string(all), "BODY-MARKER") || strings.Contains(string(all), base64.StdEncoding.EncodeToString([]byte(body))[:16]) {
		t.Errorf("the audit holds the body: %s", all)
	}
	if !strings.Contains(string(all), fmt.Sprintf(`"body_bytes":%d`, len(body))) {
		t.Errorf("the audit does not record the body's length: %s", all)
	}
}
