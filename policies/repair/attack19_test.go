package repair_test

import (
	"testing"

	"github.com/airlock-sandbox/airlock/egress/httprule"
	"github.com/airlock-sandbox/airlock/policies/repair"
)

// TestAttackHTTPRepairGlobPath: a sandbox sends a request whose path is
// itself a glob ("/jobs/**", legal in a request target: '*' is a pchar).
// The ask rule holds it; its repair is an allow rule with that path as
// written, which approve --revise applies (Revisable). The operator
// approves one request and the session may then DELETE every job.
func TestAttackHTTPRepairGlobPath(t *testing.T) {
	p := load(t)
	for _, path := range []string{"/jobs/**", "/jobs/*"} {
		a := repair.Action{Kind: repair.KindHTTP, Name: "svc.test", Method: "DELETE", Path: path}
		if n, err := httprule.NormalizePath(path); err != nil || n != path {
			t.Fatalf("the gateway refuses the path %q: %v %q", path, err, n)
		}
		r, revised := repair.For(p, a)
		if !r.Revisable || revised == nil {
			t.Logf("%s: repair not revisable (good): %+v", path, r)
			continue
		}
		for _, other := range []string{"/jobs/1", "/jobs/prod-db"} {
			req := httprule.Request{Method: "DELETE", Path: other}
			if was, now := decide(t, p, "svc.test", req), decide(t, revised, "svc.test", req); was.Action != now.Action {
				t.Errorf("approving DELETE %s by revision (note %q) decides DELETE %s %s, was %s: the repair grants more than the one request",
					path, r.Note, other, now.Action, was.Action)
			}
		}
	}
}
