package manifest

import (
	"testing"

	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/egress/httprule"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestHTTPRulesJSONFieldsTogether: a change route whose body names its
// targets in two fields gets, for an allowed scope, one rule that allows
// a body only if the targets of both are granted. One allow rule per
// field allows a body by the field it names whatever the other holds.
func TestHTTPRulesJSONFieldsTogether(t *testing.T) {
	op := mustPolicy(t, data.RestartServices)
	found := false
	for i, r := range op.HTTP.Change {
		if len(r.JSON) > 0 {
			op.HTTP.Change[i].JSON = map[string]string{"names": r.JSON["names"], "also": r.JSON["names"]}
			found = true
		}
	}
	if !found {
		t.Fatal("no change route of restart-services has json fields")
	}
	m, err := Generate(data.RestartServices, "Restart my unhealthy services for ticket 4812 on the shared-impact lane.", op, testOpts)
	if err != nil {
		t.Fatal(err)
	}
	h := hostRules(t, m.Policy)
	const path = "/v1/namespaces/prod/deployments:restart"
	both := httprule.Request{Method: "POST", Path: path, JSONBody: true,
		JSON: map[string][]string{"names": {"svc-prod-auth-4812-a"}, "also": {"svc-prod-auth-4812-a"}}}
	if d := h.Decide(both); d.Action != policies.HTTPAllow {
		t.Errorf("both fields granted: %s by %s, want allow", d.Action, d.Rule)
	}
	for _, other := range []string{"names", "also"} {
		r := httprule.Request{Method: "POST", Path: path, JSONBody: true,
			JSON: map[string][]string{"names": {"svc-prod-auth-4812-a"}, "also": {"svc-prod-auth-4812-a"}}}
		r.JSON[other] = []string{"svc-prod-gateway-rel"}
		if d := h.Decide(r); d.Action == policies.HTTPAllow {
			t.Errorf("%q names a target the grant does not select: allowed by %s", other, d.Rule)
		}
	}
}
