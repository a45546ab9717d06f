package l7

import (
	"testing"

	"github.com/airlock-sandbox/airlock/egress/httprule"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestAttackRedecideSkipsRevisedJSONDeny: a request held by an ask rule
// (no json conditions then, so the gateway never parsed its body) is
// decided again by a revision that denies POST /deploy whose body names
// env "prod" and allows the other deploys. The revised rules, as the
// gateway decides a new request, deny this body; the redecision, made on
// the request as parsed under the old rules (no JSON fields, not opaque),
// lets the json deny rule fall through and allows the held prod deploy
// "by policy revision 2".
func TestAttackRedecideSkipsRevisedJSONDeny(t *testing.T) {
	const host = "svc.test"
	body := []byte(`{"env":"prod"}`)
	old, err := httprule.Compile([]policies.HTTPHost{{Host: host, Rules: []policies.HTTPRule{
		{Methods: []string{"POST"}, Path: "/deploy", Action: policies.HTTPAsk},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	revised, err := httprule.Compile([]policies.HTTPHost{{Host: host, Rules: []policies.HTTPRule{
		{Methods: []string{"POST"}, Path: "/deploy", Action: policies.HTTPDeny,
			JSON: []policies.HTTPJSONMatch{{Field: "env", Values: []string{"prod"}}}},
		{Methods: []string{"POST"}, Path: "/deploy", Action: policies.HTTPAllow},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	// The request as authorize builds it under the old rules.
	req := httprule.Request{Method: "POST", Path: "/deploy"}
	if old.For(host).NeedsJSON("POST", "/deploy") {
		t.Fatal("the old rules read the body")
	}
	if d := old.For(host).Decide(req); d.Action != policies.HTTPAsk {
		t.Fatalf("old rules: %+v", d)
	}
	// A new request with the same body under the revised rules is denied.
	fresh := httprule.Request{Method: "POST", Path: "/deploy"}
	rh := revised.For(host)
	if !rh.NeedsJSON("POST", "/deploy") {
		t.Fatal("the revised rules do not read the body")
	}
	fresh.JSON, fresh.JSONBody, err = rh.ParseJSON(body)
	if err != nil {
		t.Fatal(err)
	}
	if d := rh.Decide(fresh); d.Action != policies.HTTPDeny {
		t.Fatalf("a new prod deploy under the revised rules: %+v", d)
	}

	ha := &heldAsk{session: "s", name: host, req: req, ch: make(chan AskDecision, 1)}
	ha.redecide(&Session{ID: "s", Version: 2, Rules: revised.For})
	select {
	case d := <-ha.ch:
		if d.Allow {
			t.Errorf("the held prod deploy (body %s) is allowed by the revision (%s: %s), which denies it for every new request", body, d.By, d.Reason)
		}
	default:
		t.Log("left for a person: acceptable")
	}
}
