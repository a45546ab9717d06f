package httprule

import (
	"errors"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

func TestNormalizePath(t *testing.T) {
	ok := []struct{ raw, want string }{
		{"/", "/"},
		{"/a/b", "/a/b"},
		{"/a/b/", "/a/b/"},
		{"/a/./b", "/a/b"},
		{"/a/b/.", "/a/b/"},
		{"/a/b/..", "/a/"},
		{"/a/b/../c", "/a/c"},
		{"/../a", "/a"},
		{"/a/../../b", "/b"},
		{"/..", "/"},
		{"/.", "/"},
		{"//a", "/a"},
		{"/a//b", "/a/b"},
		{"/a///", "/a/"},
		{"/a//b/../c", "/a/c"}, // "//" before a name, not before ".."
		{"/%61dmin", "/admin"},
		{"/a%2Fb", "/a/b"},
		{"/a%2fb", "/a/b"},
		{"/@scope%2Fpkg", "/@scope/pkg"},
		{"/a%2F", "/a/"},
		{"/a%20b", "/a b"},
		{"/100%25", "/100%"},
		{"/%25", "/%"},
		{"/caf%C3%A9", "/café"},
		{"/café", "/café"},
		{"/.a/..b/...", "/.a/..b/..."},
		{"/a.git/info/refs", "/a.git/info/refs"},
	}
	for _, tt := range ok {
		got, err := NormalizePath(tt.raw)
		if err != nil || got != tt.want {
			t.Errorf("NormalizePath(%q) = %q, %v; want %q", tt.raw, got, err, tt.want)
		}
	}
	bad := []string{
		"",
		"a/b",
		"*",
		"http://h/a", // absolute form is reduced by the caller
		"/a b",
		"/a\x00b",
		"/a\tb",
		"/a\x7f",
		"/a\\b",
		"/a;b",
		"/a?q",
		"/a#f",
		"/a%",
		"/a%4",
		"/a%zz",
		"/a%4g",
		"/a%00",
		"/a%0a",
		"/a%7F",
		"/a%5Cb",
		"/a%5cb",
		"/a%3Bb",
		"/a%2561",   // double encoding
		"/a%252F",   //
		"/%2e%2e/a", // decoded dot segments
		"/a/%2E",
		"/a/.%2e/b",
		"/a%2F..%2Fb",
		"/a%2F%2Fb", // decoded "//"
		"/%2Fa",
		"/a%2F/b",
		"/a//../b", // "/a/b" by RFC 3986, "/b" once slashes merge
		"/a/b//..",
		"/%C0%AF", // overlong '/'
		"/%FF",    // not UTF-8
		"/\xff",
		"/caf%C3",
	}
	for _, raw := range bad {
		got, err := NormalizePath(raw)
		if err == nil {
			t.Errorf("NormalizePath(%q) = %q, want an error", raw, got)
		} else if !errors.Is(err, ErrPath) {
			t.Errorf("NormalizePath(%q): %v is not ErrPath", raw, err)
		}
	}
}

// decideRaw is what the gateway does with a request: a path that cannot
// be normalized is refused; else the rules decide.
func decideRaw(h *Host, method, raw string) string {
	p, err := NormalizePath(raw)
	if err != nil {
		return policies.HTTPDeny
	}
	return h.Decide(Request{Method: method, Path: p}).Action
}

// A deny rule on a path holds against every other spelling of the path.
func TestDenyRuleAttacks(t *testing.T) {
	set, err := Compile([]policies.HTTPHost{{
		Host:  "api.test",
		Rules: []policies.HTTPRule{{Path: "/admin/**", Action: policies.HTTPDeny}, {Methods: []string{"DELETE"}, Action: policies.HTTPDeny}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := set.For("api.test")
	if got := decideRaw(h, "GET", "/public/x"); got != policies.HTTPAllow {
		t.Fatalf("/public/x: %s, want allow (the default)", got)
	}
	attacks := []string{
		"/admin",
		"/admin/",
		"/admin/x",
		"/x/../admin",
		"/x/../admin/y",
		"/x/./../admin",
		"/../admin",
		"//admin",
		"///admin/x",
		"/admin//x",
		"/%61dmin",
		"/%61%64%6d%69%6e/x",
		"/adm%69n",
		"/admin%2Fx",
		"/admin%2fx",
		"/admin/./x",
		"/./admin",
		"/admin/.",
		"/x/%2e%2e/admin",
		"/x/..%2Fadmin",
		"/x%2F..%2Fadmin",
		"/x/.%2e/admin",
		"/x/..;/admin",
		"/admin;x/y",
		"/admin;/y",
		"/x\\..\\admin",
		"/admin\\x",
		"/x/..%5Cadmin",
		"/admin\x00.png",
		"/admin%00.png",
		"/x%00/../admin",
		"/%2561dmin",
		"/%adm",
		"/admin%",
		"/admin%zz",
		"/x//../admin",
		"/%C0%AFadmin",
	}
	for _, raw := range attacks {
		if got := decideRaw(h, "GET", raw); got != policies.HTTPDeny {
			t.Errorf("GET %q: %s, want deny", raw, got)
		}
	}
	for _, m := range []string{"DELETE", "delete", "Delete"} {
		if got := decideRaw(h, m, "/public/x"); got != policies.HTTPDeny {
			t.Errorf("%s /public/x: %s, want deny", m, got)
		}
	}
	// Paths are case-sensitive (package doc): "/ADMIN" is another path,
	// which a deny rule on "/admin" does not name.
	if got := decideRaw(h, "GET", "/ADMIN"); got != policies.HTTPAllow {
		t.Errorf("GET /ADMIN: %s, want allow", got)
	}
}

// Against a server that ignores case, allow rules with a deny default
// hold where a deny rule would not.
func TestAllowRulesCaseInsensitiveServer(t *testing.T) {
	set, err := Compile([]policies.HTTPHost{{
		Host:    "api.test",
		Default: policies.HTTPDeny,
		Rules:   []policies.HTTPRule{{Path: "/public/**", Action: policies.HTTPAllow}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	h := set.For("api.test")
	if got := decideRaw(h, "GET", "/public/x"); got != policies.HTTPAllow {
		t.Fatalf("/public/x: %s", got)
	}
	for _, raw := range []string{"/ADMIN", "/Public/x", "/public/../admin", "/public%2F..%2Fadmin", "/public/..;/admin", "/public/..%5Cadmin"} {
		if got := decideRaw(h, "GET", raw); got != policies.HTTPDeny {
			t.Errorf("GET %q: %s, want deny", raw, got)
		}
	}
}

func TestIsReceivePack(t *testing.T) {
	tests := []struct {
		method, path string
		want         bool
	}{
		{"POST", "/o/r.git/git-receive-pack", true},
		{"post", "/o/r.git/git-receive-pack", true},
		{"POST", "/git-receive-pack", true},
		{"POST", "/o/r.git/git-receive-pack/", true},
		{"POST", "/o/r.git/Git-Receive-Pack", true},
		{"GET", "/o/r.git/git-receive-pack", false},
		{"POST", "/o/r.git/git-upload-pack", false},
		{"POST", "/o/r.git/xgit-receive-pack", false},
		{"GET", "/o/r.git/info/refs", false},
	}
	for _, tt := range tests {
		if got := IsReceivePack(tt.method, tt.path); got != tt.want {
			t.Errorf("IsReceivePack(%q, %q) = %v", tt.method, tt.path, got)
		}
	}
}
