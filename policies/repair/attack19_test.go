package repair_test

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/egress/httprule"
	"github.com/airlock-sandbox/airlock/policies"
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
		if r.Revisable || revised != nil || len(r.Changes) > 0 {
			t.Errorf("%s: repair %+v; want none (a rule reads the path as a glob)", path, r)
		}
		if revised == nil {
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

const gitAskManifest = `
session "t" {
  image   = "img"
  command = ["sleep", "1"]
  user    = "1000:1000"
  egress {
    allow = ["git.test:443"]
    l7    = "check"
    http "git.test" {
      rule {
        method = ["GET"]
        action = "allow"
      }
      rule {
        refs   = ["refs/heads/agent/*"]
        action = "allow"
      }
      rule {
        method = ["POST"]
        path   = "/**/git-receive-pack"
        action = "ask"
      }
    }
  }
}
`

// TestAttackHTTPRepairEmptyPush: the sandbox sends a push with no ref
// update at all (the body "0000", which the gateway parses as a push of
// no refs). The refs allow rule does not match it, the ask rule holds it,
// and its repair is an allow rule for POST .../git-receive-pack with no
// refs: approve --revise of this no-op request lets every later push
// update any ref, main included.
func TestAttackHTTPRepairEmptyPush(t *testing.T) {
	p, err := policies.Load("t.hcl", []byte(gitAskManifest), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.ApplyDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	const path = "/app.git/git-receive-pack"
	ups, _, err := httprule.ReadPush(strings.NewReader("0000"), "", 100)
	if err != nil || len(ups) != 0 {
		t.Fatalf("ReadPush(flush) = %v, %v", ups, err)
	}
	empty := httprule.Request{Method: "POST", Path: path, IsPush: true}
	if d := decide(t, p, "git.test", empty); d.Action != "ask" {
		t.Fatalf("the empty push: %+v, want it held", d)
	}
	r, revised := repair.For(p, repair.Action{Kind: repair.KindHTTP, Name: "git.test", Method: "POST", Path: path})
	if r.Revisable || revised != nil || len(r.Changes) > 0 {
		t.Errorf("an empty push's repair: %+v; want none (approve it once)", r)
	}
	if revised == nil {
		return
	}
	main := httprule.Request{Method: "POST", Path: path, IsPush: true, Push: []httprule.RefUpdate{{Ref: "refs/heads/main"}}}
	if was, now := decide(t, p, "git.test", main), decide(t, revised, "git.test", main); now.Action == "allow" && was.Action != "allow" {
		t.Errorf("approving an empty push by revision (%s) allows a push to refs/heads/main (%s, was %s)", r.Summary(), now.Rule, was.Action)
	}
}
