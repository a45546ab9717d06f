package repair_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/egress/httprule"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/policies/repair"
)

const jsonAskManifest = `
session "t" {
  image   = "img"
  command = ["sleep", "1"]
  user    = "1000:1000"
  egress {
    allow = ["api.test:443"]
    l7    = "check"
    http "api.test" {
      rule {
        method = ["POST"]
        path   = "/v1/delete"
        json "names" {
          values = ["dev-*"]
        }
        action = "ask"
      }
      rule {
        method = ["POST"]
        path   = "/v1/delete"
        action = "deny"
      }
    }
  }
}
`

// TestAttackHTTPRepairDropsBodyConditions: the block asks about bulk
// deletions of dev-* services and denies every other deletion. The
// sandbox sends POST /v1/delete {"names": ["dev-1"]}; the json ask rule
// holds it. Its repair is "allow POST /v1/delete" with no body
// condition, inserted before the ask rule: approve --revise of one
// deletion of dev-1 lets the session delete prod-db (which the deny rule
// refused) and everything else, unasked. The repair is broader than the
// request: it drops the body conditions that decided it and shadows the
// rules after them.
func TestAttackHTTPRepairDropsBodyConditions(t *testing.T) {
	p, err := policies.Load("t.hcl", []byte(jsonAskManifest), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.ApplyDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	dev := httprule.Request{Method: "POST", Path: "/v1/delete", JSONBody: true, JSON: map[string][]string{"names": {"dev-1"}}}
	prod := httprule.Request{Method: "POST", Path: "/v1/delete", JSONBody: true, JSON: map[string][]string{"names": {"prod-db"}}}
	if d := decide(t, p, "api.test", dev); d.Action != "ask" {
		t.Fatalf("the dev deletion: %+v, want it held", d)
	}
	if d := decide(t, p, "api.test", prod); d.Action != "deny" {
		t.Fatalf("the prod deletion: %+v, want it denied", d)
	}
	r, revised := repair.For(p, repair.Action{Kind: repair.KindHTTP, Name: "api.test", Method: "POST", Path: "/v1/delete"})
	if r.Revisable || len(r.Changes) > 0 || !strings.Contains(r.Reason, "by their body") {
		t.Errorf("the repair of a request a json rule held: %+v; want none (approve it once)", r)
	}
	if revised == nil {
		return
	}
	if d := decide(t, revised, "api.test", prod); d.Action == "allow" {
		t.Errorf("approving POST /v1/delete {\"names\": [\"dev-1\"]} by revision (%s, revisable %v) allows {\"names\": [\"prod-db\"]}, which was denied (%s)",
			r.Summary(), r.Revisable, d.Rule)
	}
}
