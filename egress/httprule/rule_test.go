package httprule

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

const (
	allow = policies.HTTPAllow
	deny  = policies.HTTPDeny
	ask   = policies.HTTPAsk
)

func TestCompileErrors(t *testing.T) {
	tests := []struct {
		name  string
		hosts []policies.HTTPHost
		want  string // in the error
	}{
		{"upper-case host", []policies.HTTPHost{{Host: "Git.test"}}, `http "Git.test"`},
		{"trailing dot", []policies.HTTPHost{{Host: "git.test."}}, `http "git.test."`},
		{"bad host", []policies.HTTPHost{{Host: "git test"}}, `http "git test"`},
		{"empty host", []policies.HTTPHost{{Host: ""}}, `http ""`},
		{"wildcard inside", []policies.HTTPHost{{Host: "a.*.test"}}, `http "a.*.test"`},
		{"bare wildcard", []policies.HTTPHost{{Host: "*"}}, `http "*"`},
		{"duplicate", []policies.HTTPHost{{Host: "git.test"}, {Host: "git.test"}}, "second block"},
		{"duplicate wildcard", []policies.HTTPHost{{Host: "*.test"}, {Host: "*.test"}}, "second block"},
		{"bad default", []policies.HTTPHost{{Host: "git.test", Default: "block"}}, `default "block"`},
		{"no action", []policies.HTTPHost{{Host: "git.test", Rules: []policies.HTTPRule{{Action: allow}, {Path: "/a"}}}}, `http "git.test" rule 2: no action`},
		{"bad action", []policies.HTTPHost{{Host: "git.test", Rules: []policies.HTTPRule{{Action: "permit"}}}}, `http "git.test" rule 1: action "permit"`},
		{"lower-case method", []policies.HTTPHost{{Host: "git.test", Rules: []policies.HTTPRule{{Methods: []string{"get"}, Action: deny}}}}, `rule 1: method "get"`},
		{"bad method", []policies.HTTPHost{{Host: "git.test", Rules: []policies.HTTPRule{{Methods: []string{"GET /"}, Action: deny}}}}, `rule 1: method`},
		{"bad path", []policies.HTTPHost{{Host: "git.test", Rules: []policies.HTTPRule{{Action: deny}, {Action: deny}, {Path: "admin", Action: deny}}}}, `http "git.test" rule 3: path "admin"`},
		{"bad path glob", []policies.HTTPHost{{Host: "git.test", Rules: []policies.HTTPRule{{Path: "/a**", Action: deny}}}}, `rule 1: path "a**"`},
		{"bad ref", []policies.HTTPHost{{Host: "git.test", Rules: []policies.HTTPRule{{Refs: []string{"heads/main"}, Action: deny}}}}, `rule 1: ref "heads/main"`},
		{"refs without POST", []policies.HTTPHost{{Host: "git.test", Rules: []policies.HTTPRule{{Methods: []string{"GET"}, Refs: []string{"refs/heads/*"}, Action: allow}}}}, "rule 1: a rule with refs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Compile(tt.hosts)
			if err == nil {
				t.Fatalf("compiled: %+v", s)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %q does not say %q", err, tt.want)
			}
		})
	}
}

func TestFor(t *testing.T) {
	s, err := Compile([]policies.HTTPHost{
		{Host: "git.test"},
		{Host: "*.test"},
		{Host: "*.a.test"},
		{Host: "a.test"},
		{Host: "*.b.a.test"},
	})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct{ host, want string }{
		{"git.test", "git.test"},
		{"GIT.test.", "git.test"},
		{"x.git.test", "*.test"},
		{"a.test", "a.test"}, // the name beats "*.test"
		{"x.a.test", "*.a.test"},
		{"x.y.a.test", "*.a.test"},
		{"b.a.test", "*.a.test"}, // "*.b.a.test" is strictly below
		{"x.b.a.test", "*.b.a.test"},
		{"test", ""},
		{"xtest", ""},
		{"git.test.evil", ""},
		{"", ""},
		{".", ""},
	}
	for _, tt := range tests {
		h := s.For(tt.host)
		got := ""
		if h != nil {
			got = h.Name()
		}
		if got != tt.want {
			t.Errorf("For(%q) = %q, want %q", tt.host, got, tt.want)
		}
		if s.Has(tt.host) != (tt.want != "") {
			t.Errorf("Has(%q) = %v", tt.host, !(tt.want != ""))
		}
	}
	var none *Set
	if none.For("git.test") != nil {
		t.Error("a nil Set has a block")
	}
	empty, err := Compile(nil)
	if err != nil || empty.Has("git.test") {
		t.Errorf("Compile(nil) = %v, %v", empty, err)
	}
}

func push(refs ...string) Request {
	r := Request{Method: "POST", Path: "/o/r.git/git-receive-pack", IsPush: true}
	for _, ref := range refs {
		r.Push = append(r.Push, RefUpdate{Old: zeros(40), New: strings.Repeat("1", 40), Ref: ref})
	}
	return r
}

func TestDecide(t *testing.T) {
	hosts := []policies.HTTPHost{
		{
			Host: "git.test",
			Rules: []policies.HTTPRule{
				{Methods: []string{"POST"}, Path: "/**/git-receive-pack", Refs: []string{"refs/heads/agent/*", "refs/tags/v*"}, Action: allow},
				{Refs: []string{"refs/heads/main", "refs/heads/release/**"}, Action: ask},
				{Refs: []string{"refs/**"}, Action: deny},
				{Methods: []string{"GET", "HEAD"}, Path: "/private/**", Action: deny},
				{Path: "/private/**", Action: ask},
				{Methods: []string{"DELETE"}, Action: deny},
			},
		},
		{Host: "closed.test", Default: deny, Rules: []policies.HTTPRule{{Methods: []string{"GET"}, Action: allow}}},
		{Host: "held.test", Default: ask},
	}
	s, err := Compile(hosts)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		host   string
		req    Request
		action string
		index  int
	}{
		{"no block", "other.test", Request{Method: "DELETE", Path: "/"}, allow, -1},
		{"default allow", "git.test", Request{Method: "GET", Path: "/o/r"}, allow, -1},
		{"method and path", "git.test", Request{Method: "GET", Path: "/private/x"}, deny, 3},
		{"method case", "git.test", Request{Method: "head", Path: "/private/x"}, deny, 3},
		{"first match wins", "git.test", Request{Method: "DELETE", Path: "/private/x"}, ask, 4},
		{"later rule", "git.test", Request{Method: "DELETE", Path: "/o/r"}, deny, 5},
		{"push to allowed ref", "git.test", push("refs/heads/agent/x"), allow, 0},
		{"push to allowed refs", "git.test", push("refs/heads/agent/x", "refs/tags/v1"), allow, 0},
		{"allowed ref beside main", "git.test", push("refs/heads/agent/x", "refs/heads/main"), ask, 1},
		{"main beside allowed ref", "git.test", push("refs/heads/main", "refs/heads/agent/x"), ask, 1},
		{"ask ref beside denied ref", "git.test", push("refs/heads/release/1", "refs/heads/other"), ask, 1},
		{"denied ref beside allowed ref", "git.test", push("refs/heads/agent/x", "refs/heads/other"), deny, 2},
		{"nested ref past *", "git.test", push("refs/heads/agent/x/y"), deny, 2},
		{"no updates", "git.test", push(), allow, -1},
		{"refs rules need IsPush", "git.test", Request{Method: "POST", Path: "/o/r.git/info/x", Push: push("refs/heads/main").Push}, allow, -1},
		{"push not read", "git.test", Request{Method: "POST", Path: "/o/r.git/git-receive-pack"}, deny, -1},
		{"default deny", "closed.test", Request{Method: "POST", Path: "/"}, deny, -1},
		{"default deny, rule allows", "closed.test", Request{Method: "GET", Path: "/"}, allow, 0},
		{"default ask", "held.test", Request{Method: "GET", Path: "/"}, ask, -1},
		{"push to a host without refs rules", "held.test", Request{Method: "POST", Path: "/r.git/git-receive-pack"}, ask, -1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := s.For(tt.host).Decide(tt.req)
			if d.Action != tt.action || d.Index != tt.index {
				t.Fatalf("%+v, want %s by rule index %d", d, tt.action, tt.index)
			}
		})
	}
}

func TestDecisionRule(t *testing.T) {
	s, err := Compile([]policies.HTTPHost{{
		Host: "git.test",
		Rules: []policies.HTTPRule{
			{Methods: []string{"GET", "HEAD"}, Path: "/a/**", Action: deny},
			{Methods: []string{"POST"}, Path: "/**/git-receive-pack", Refs: []string{"refs/heads/agent/*", "refs/tags/*"}, Action: allow},
			{Action: ask},
		},
	}, {Host: "*.test", Default: deny}})
	if err != nil {
		t.Fatal(err)
	}
	h := s.For("git.test")
	tests := []struct {
		req  Request
		want string
	}{
		{Request{Method: "GET", Path: "/a/b"}, `http "git.test" rule 1 (GET,HEAD /a/** -> deny)`},
		{push("refs/heads/agent/x"), `http "git.test" rule 2 (POST /**/git-receive-pack refs [refs/heads/agent/* refs/tags/*] -> allow)`},
		{Request{Method: "PUT", Path: "/"}, `http "git.test" rule 3 (any method any path -> ask)`},
	}
	for _, tt := range tests {
		if got := h.Decide(tt.req).Rule; got != tt.want {
			t.Errorf("Rule = %s, want %s", got, tt.want)
		}
	}
	if got := s.For("x.test").Decide(Request{Method: "GET", Path: "/"}).Rule; got != `http "*.test" default` {
		t.Errorf("default: Rule = %s", got)
	}
	var none *Host
	if d := none.Decide(Request{Method: "GET", Path: "/"}); d != (Decision{Action: allow, Index: -1}) {
		t.Errorf("nil Host: %+v", d)
	}
	if none.NeedsPush() || !h.NeedsPush() || s.For("x.test").NeedsPush() {
		t.Error("NeedsPush")
	}
}
