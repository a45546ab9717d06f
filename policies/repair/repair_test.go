package repair_test

import (
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/allowlist"
	"github.com/airlock-sandbox/airlock/egress/dnsproxy"
	"github.com/airlock-sandbox/airlock/egress/httprule"
	"github.com/airlock-sandbox/airlock/fsscope"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/policies/repair"
)

const manifest = `
session "t" {
  image   = "img"
  command = ["sleep", "1"]
  user    = "1000:1000"
  workspace "/src" {
    target    = "/workspace"
    protect   = [".github/**", "config/prod/**"]
    deny_read = ["secrets/**"]
  }
  egress {
    allow = ["git.test:443", "svc.test:443", "*.corp.test:443", "10.9.0.0/16:5432"]
    deny  = ["*.evil.corp.test", "192.0.2.66"]
    l7    = "check"
    http "svc.test" {
      rule {
        method = ["GET"]
        action = "allow"
      }
      rule {
        method = ["DELETE"]
        path   = "/jobs/**"
        action = "ask"
      }
      rule {
        path = "/admin/**"
        action = "deny"
      }
    }
    http "git.test" {
      default = "deny"
      rule {
        refs   = ["refs/heads/agent/*"]
        action = "allow"
      }
    }
  }
}
`

func load(t *testing.T) *policies.Policy {
	t.Helper()
	p, err := policies.Load("t.hcl", []byte(manifest), nil)
	if err != nil {
		t.Fatal(err)
	}
	p.ApplyDefaults()
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	return p
}

func nameAllowed(t *testing.T, p *policies.Policy, name string) bool {
	t.Helper()
	l, err := allowlist.Compile(p.Egress.Allow, p.Egress.Deny)
	if err != nil {
		t.Fatal(err)
	}
	f, _ := allowlist.ToFQDN(name)
	return l.MatchName(f).Allowed
}

func change(field, block, op, value string) policies.RepairChange {
	return policies.RepairChange{Field: field, Block: block, Op: op, Value: value}
}

func TestName(t *testing.T) {
	p := load(t)
	for _, c := range []struct {
		name      string
		want      []policies.RepairChange
		allowed   bool
		hcl       string
		revisable bool
	}{
		{name: "api.example.test", want: []policies.RepairChange{change(policies.RepairEgressAllow, "", "add", "api.example.test:443")},
			hcl: `allow = [..., "api.example.test:443"]`, revisable: true},
		{name: "x.evil.corp.test", want: []policies.RepairChange{change(policies.RepairEgressDeny, "", "remove", "*.evil.corp.test")},
			hcl: `deny = [...] # without "*.evil.corp.test"`, revisable: true},
		{name: "build.corp.test", allowed: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, revised := repair.For(p, repair.Action{Kind: repair.KindName, Name: c.name})
			if r.Allowed != c.allowed || !slices.Equal(r.Changes, c.want) || r.Revisable != c.revisable {
				t.Fatalf("repair %+v, want changes %+v allowed %v revisable %v", r, c.want, c.allowed, c.revisable)
			}
			if !strings.Contains(r.HCL, c.hcl) {
				t.Errorf("HCL %q lacks %q", r.HCL, c.hcl)
			}
			if c.allowed {
				if revised != nil {
					t.Error("a revised policy for an allowed name")
				}
				return
			}
			if !nameAllowed(t, revised, c.name) {
				t.Errorf("the revised policy %+v refuses %s", revised.Egress, c.name)
			}
			if nameAllowed(t, p, c.name) {
				t.Error("For changed the policy it was given")
			}
			if d := policies.Diff(p, revised); len(d.Refused) > 0 || !d.Changed() {
				t.Errorf("Diff: %+v", d)
			}
		})
	}
}

func TestNameDroppedAddresses(t *testing.T) {
	p := load(t)
	// A private address: the repair is allow_private, which a running
	// session cannot take.
	r, revised := repair.For(p, repair.Action{Kind: repair.KindName, Name: "db.corp.test", Dropped: []netip.Addr{netip.MustParseAddr("10.20.0.5")}})
	want := []policies.RepairChange{change(policies.RepairEgressAllowPrivate, "", "add", "10.20.0.5/32")}
	if !slices.Equal(r.Changes, want) || r.Revisable || !strings.Contains(r.Reason, "egress.allow_private") || revised == nil {
		t.Errorf("private: %+v", r)
	}
	// An address a deny entry covers.
	r, _ = repair.For(p, repair.Action{Kind: repair.KindName, Name: "db.corp.test", Dropped: []netip.Addr{netip.MustParseAddr("192.0.2.66")}})
	if want := []policies.RepairChange{change(policies.RepairEgressDeny, "", "remove", "192.0.2.66")}; !slices.Equal(r.Changes, want) || !r.Revisable {
		t.Errorf("denied address: %+v", r)
	}
	// The metadata address: nothing allows it.
	r, revised = repair.For(p, repair.Action{Kind: repair.KindName, Name: "db.corp.test", Dropped: []netip.Addr{netip.MustParseAddr("169.254.169.254")}})
	if len(r.Changes) != 0 || r.Revisable || revised != nil || !strings.Contains(r.Reason, "no session may reach it") {
		t.Errorf("metadata: %+v", r)
	}
}

func TestAddress(t *testing.T) {
	p := load(t)
	r, revised := repair.For(p, repair.Action{Kind: repair.KindAddress, Addr: netip.MustParseAddr("198.51.100.7"), Port: 8080})
	if want := []policies.RepairChange{change(policies.RepairEgressAllow, "", "add", "198.51.100.7/32:8080")}; !slices.Equal(r.Changes, want) || !r.Revisable {
		t.Fatalf("%+v", r)
	}
	if !slices.Contains(revised.Egress.Allow, "198.51.100.7/32:8080") {
		t.Errorf("revised allow %q", revised.Egress.Allow)
	}
	r, _ = repair.For(p, repair.Action{Kind: repair.KindAddress, Addr: netip.MustParseAddr("10.9.3.4"), Port: 5432})
	if !r.Allowed {
		t.Errorf("an allowed CIDR: %+v", r)
	}
	r, _ = repair.For(p, repair.Action{Kind: repair.KindAddress, Addr: netip.MustParseAddr("10.9.3.4"), Port: 22})
	if want := []policies.RepairChange{change(policies.RepairEgressAllow, "", "add", "10.9.3.4/32:22")}; !slices.Equal(r.Changes, want) {
		t.Errorf("another port: %+v", r)
	}
	r, revised = repair.For(p, repair.Action{Kind: repair.KindAddress, Addr: netip.MustParseAddr("127.0.0.1"), Port: 22})
	if len(r.Changes) != 0 || revised != nil || r.Reason == "" {
		t.Errorf("loopback: %+v", r)
	}
}

// decide decides a request under p's http rules, as the gateway does.
func decide(t *testing.T, p *policies.Policy, host string, req httprule.Request) httprule.Decision {
	t.Helper()
	s, err := httprule.Compile(p.Egress.HTTP)
	if err != nil {
		t.Fatal(err)
	}
	return s.For(host).Decide(req)
}

func TestHTTP(t *testing.T) {
	p := load(t)
	for _, c := range []struct {
		name   string
		a      repair.Action
		before int
		rule   policies.HTTPRule
		hcl    string
	}{
		{"ask rule", repair.Action{Kind: repair.KindHTTP, Name: "svc.test", Method: "DELETE", Path: "/jobs/42"}, 2,
			policies.HTTPRule{Methods: []string{"DELETE"}, Path: "/jobs/42", Action: "allow"}, "# before rule 2"},
		{"deny rule", repair.Action{Kind: repair.KindHTTP, Name: "svc.test", Method: "post", Path: "/admin/users"}, 3,
			policies.HTTPRule{Methods: []string{"POST"}, Path: "/admin/users", Action: "allow"}, `path   = "/admin/users"`},
		{"default deny, a push", repair.Action{Kind: repair.KindHTTP, Name: "git.test", Method: "POST", Path: "/app.git/git-receive-pack", Refs: []string{"refs/heads/main"}}, 0,
			policies.HTTPRule{Methods: []string{"POST"}, Path: "/app.git/git-receive-pack", Refs: []string{"refs/heads/main"}, Action: "allow"}, "# after the last rule"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r, revised := repair.For(p, c.a)
			if len(r.Changes) != 1 {
				t.Fatalf("%+v", r)
			}
			ch := r.Changes[0]
			if ch.Field != policies.RepairEgressHTTP || ch.Block != c.a.Name || ch.Op != policies.RepairInsert || ch.Before != c.before || ch.Rule == nil {
				t.Fatalf("change %+v", ch)
			}
			if got := *ch.Rule; !slices.Equal(got.Methods, c.rule.Methods) || got.Path != c.rule.Path || !slices.Equal(got.Refs, c.rule.Refs) || got.Action != "allow" {
				t.Errorf("rule %+v, want %+v", got, c.rule)
			}
			if !strings.Contains(r.HCL, c.hcl) || !strings.Contains(r.HCL, `http "`+c.a.Name+`"`) {
				t.Errorf("HCL:\n%s", r.HCL)
			}
			// The revision is checked by Diff: the running session takes
			// it once http rules are revisable live.
			if d := policies.Diff(p, revised); r.Revisable != (len(d.Refused) == 0) {
				t.Errorf("Revisable %v, Diff refused %v", r.Revisable, d.Refused)
			}
			req := httprule.Request{Method: c.a.Method, Path: c.a.Path}
			for _, ref := range c.a.Refs {
				req.IsPush = true
				req.Push = append(req.Push, httprule.RefUpdate{Ref: ref})
			}
			if d := decide(t, p, c.a.Name, req); d.Action == "allow" {
				t.Fatalf("the running policy allows it: %+v", d)
			}
			if d := decide(t, revised, c.a.Name, req); d.Action != "allow" {
				t.Errorf("the revised policy: %+v", d)
			}
			// Nothing else is allowed: another path of the same method.
			other := req
			other.Path += "x"
			if d, was := decide(t, revised, c.a.Name, other), decide(t, p, c.a.Name, other); d.Action != was.Action {
				t.Errorf("another path: %s, was %s", d.Action, was.Action)
			}
			again, _ := repair.For(revised, c.a)
			if !again.Allowed || len(again.Changes) > 0 {
				t.Errorf("repair under the revised policy: %+v", again)
			}
		})
	}
	r, revised := repair.For(p, repair.Action{Kind: repair.KindHTTP, Name: "other.test", Method: "GET", Path: "/"})
	if len(r.Changes) != 0 || revised != nil || !strings.Contains(r.Reason, "no http block covers other.test") {
		t.Errorf("no block: %+v", r)
	}
}

func TestWrite(t *testing.T) {
	p := load(t)
	r, revised := repair.For(p, repair.Action{Kind: repair.KindWrite, Path: "/workspace/config/prod/db.yaml", Rule: fsscope.RuleProtect})
	want := []policies.RepairChange{change(policies.RepairProtect, "/src", "remove", "config/prod/**")}
	// A running session takes a revised protect rule: it decides the
	// next commit.
	if !slices.Equal(r.Changes, want) || !r.Revisable || r.Reason != "" {
		t.Fatalf("%+v", r)
	}
	if !slices.Equal(revised.Workspaces[0].Protect, []string{".github/**"}) || len(p.Workspaces[0].Protect) != 2 {
		t.Errorf("protect %q, running %q", revised.Workspaces[0].Protect, p.Workspaces[0].Protect)
	}
	if !strings.Contains(r.HCL, `workspace "/src" {`) || !strings.Contains(r.HCL, `protect = [...] # without "config/prod/**"`) {
		t.Errorf("HCL:\n%s", r.HCL)
	}
	r, revised = repair.For(p, repair.Action{Kind: repair.KindWrite, Path: "/workspace/.git/hooks/pre-commit", Rule: fsscope.RuleGitExec})
	if len(r.Changes) != 0 || revised != nil || !strings.Contains(r.Reason, "cannot be turned off") {
		t.Errorf("git_exec: %+v", r)
	}
}

func TestRead(t *testing.T) {
	p := load(t)
	r, revised := repair.For(p, repair.Action{Kind: repair.KindRead, Path: "/workspace/secrets/a.txt", Rule: "secrets/**"})
	if want := []policies.RepairChange{change(policies.RepairWorkspaceDenyRead, "/src", "remove", "secrets/**")}; !slices.Equal(r.Changes, want) || r.Revisable {
		t.Fatalf("%+v", r)
	}
	if len(revised.Workspaces[0].DenyRead) != 0 {
		t.Errorf("deny_read %q", revised.Workspaces[0].DenyRead)
	}
	r, revised = repair.For(p, repair.Action{Kind: repair.KindRead, Path: "/workspace/.env", Rule: ".env*"})
	if len(r.Changes) < 2 || r.Changes[0] != change(policies.RepairWorkspaceDefault, "/src", "set", "false") {
		t.Fatalf("built-in pattern: %+v", r)
	}
	w := revised.Workspaces[0]
	if w.DefaultDenyRead || slices.Contains(w.DenyRead, ".env*") || !slices.Contains(w.DenyRead, "*.pem") || !slices.Contains(w.DenyRead, "secrets/**") {
		t.Errorf("revised workspace %+v", w)
	}
	r, _ = repair.For(p, repair.Action{Kind: repair.KindRead, Path: "/workspace/x", Rule: "git config credentials"})
	if len(r.Changes) != 0 || r.Reason == "" {
		t.Errorf("not a pattern: %+v", r)
	}
}

func TestFromEvent(t *testing.T) {
	dns := egress.DNSAuditEvent("s1", dnsproxy.Event{Action: dnsproxy.ActionRefused, Name: "db.corp.test.", Rcode: "REFUSED",
		Dropped: []dnsproxy.Dropped{{Addr: netip.MustParseAddr("10.20.0.5"), Reason: "private"}}})
	empty := egress.DNSAuditEvent("s1", dnsproxy.Event{Action: dnsproxy.ActionRefused, Name: "db.corp.test.", Rcode: "NOERROR"})
	l7 := api.AuditEvent{Layer: "l7", Action: "denied", Subject: "svc.test", Fields: map[string]any{
		"kind": "request", "host": "svc.test", "method": "DELETE", "path": "/jobs/1", "rule": `http "svc.test" rule 2`, "refs": []string{"refs/heads/x"}}}
	for _, c := range []struct {
		name string
		ev   api.AuditEvent
		want repair.Action
		ok   bool
	}{
		{"dns", dns, repair.Action{Kind: repair.KindName, Name: "db.corp.test", Dropped: []netip.Addr{netip.MustParseAddr("10.20.0.5")}}, true},
		{"dns empty answer", empty, repair.Action{}, false},
		{"net", api.AuditEvent{Layer: "net", Action: "dropped", Subject: "198.51.100.7:8080"},
			repair.Action{Kind: repair.KindAddress, Addr: netip.MustParseAddr("198.51.100.7"), Port: 8080}, true},
		{"l7", l7, repair.Action{Kind: repair.KindHTTP, Name: "svc.test", Method: "DELETE", Path: "/jobs/1", Refs: []string{"refs/heads/x"}}, true},
		{"l7 allowed", api.AuditEvent{Layer: "l7", Action: "allowed", Subject: "svc.test"}, repair.Action{}, false},
		{"fs", fsscope.Event{Type: fsscope.EventRejected, Path: "/workspace/a", Rule: "protect"}.AuditEvent("s1"),
			repair.Action{Kind: repair.KindWrite, Path: "/workspace/a", Rule: "protect"}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			// As emitted, and as read back from the log.
			b, err := json.Marshal(c.ev)
			if err != nil {
				t.Fatal(err)
			}
			var back api.AuditEvent
			if err := json.Unmarshal(b, &back); err != nil {
				t.Fatal(err)
			}
			for _, ev := range []api.AuditEvent{c.ev, back} {
				got, ok := repair.FromEvent(ev)
				if ok != c.ok || got.Kind != c.want.Kind || got.Name != c.want.Name || !slices.Equal(got.Dropped, c.want.Dropped) ||
					got.Addr != c.want.Addr || got.Port != c.want.Port || got.Method != c.want.Method || got.Path != c.want.Path ||
					!slices.Equal(got.Refs, c.want.Refs) || got.Rule != c.want.Rule {
					t.Errorf("FromEvent = %+v, %v; want %+v, %v", got, ok, c.want, c.ok)
				}
			}
		})
	}
}
