package httprule

import (
	"strings"
	"testing"
)

func TestPathGlob(t *testing.T) {
	tests := []struct {
		pattern, path string
		want          bool
	}{
		{"/", "/", true},
		{"/", "/a", false},
		{"/a", "/a", true},
		{"/a", "/a/", true}, // a trailing "/" also matches without
		{"/a", "/ab", false},
		{"/a", "/A", false}, // case-sensitive
		{"/a/", "/a/", true},
		{"/a/", "/a", false},
		{"/*", "/", true},
		{"/*", "/abc", true},
		{"/*", "/a/b", false},
		{"/a/*", "/a/", true},
		{"/a/*", "/a/b", true},
		{"/a/*", "/a/b/c", false},
		{"/a*c", "/abbbc", true},
		{"/a*c", "/ac", true},
		{"/a*c", "/abcd", false},
		{"/*.git/info/refs", "/x.git/info/refs", true},
		{"/*.git/info/refs", "/x/y.git/info/refs", false},
		{"/**", "/", true},
		{"/**", "/a/b/c/", true},
		{"/admin/**", "/admin", true},
		{"/admin/**", "/admin/", true},
		{"/admin/**", "/admin/x/y", true},
		{"/admin/**", "/administrator", false},
		{"/admin/**", "/x/admin", false},
		{"/**/git-receive-pack", "/git-receive-pack", true},
		{"/**/git-receive-pack", "/o/r.git/git-receive-pack", true},
		{"/**/git-receive-pack", "/o/r.git/git-receive-pack/", true},
		{"/**/git-receive-pack", "/o/r.git/git-receive-pack/x", false},
		{"/**/git-receive-pack", "/o/r.git/xgit-receive-pack", false},
		{"/a/**/b/**/c", "/a/b/c", true},
		{"/a/**/b/**/c", "/a/x/b/y/z/c", true},
		{"/a/**/b/**/c", "/a/x/c/b", false},
		{"/a/**/b", "/a/b/b/b", true},
		{"/repos/*/*/pulls", "/repos/o/r/pulls", true},
		{"/repos/*/*/pulls", "/repos/o/pulls", false},
		{"/[a]", "/[a]", true}, // '[' is literal
		{"/a.b", "/a.b", true},
		{"/a.b", "/axb", false},
		{"/[a]", "/a", false},
		{"/a b", "/a b", true},
		{"/é/*", "/é/x", true},
	}
	for _, tt := range tests {
		g, err := compilePathGlob(tt.pattern)
		if err != nil {
			t.Errorf("compilePathGlob(%q): %v", tt.pattern, err)
			continue
		}
		if got := matchPath(g, tt.path); got != tt.want {
			t.Errorf("%q matches %q = %v, want %v", tt.pattern, tt.path, got, tt.want)
		}
	}
}

func TestRefGlob(t *testing.T) {
	tests := []struct {
		pattern, ref string
		want         bool
	}{
		{"refs/heads/main", "refs/heads/main", true},
		{"refs/heads/main", "refs/heads/main2", false},
		{"refs/heads/agent/*", "refs/heads/agent/x", true},
		{"refs/heads/agent/*", "refs/heads/agent/x/y", false},
		{"refs/heads/agent/*", "refs/heads/agentx", false},
		{"refs/heads/agent/**", "refs/heads/agent/x/y", true},
		{"refs/heads/agent-*", "refs/heads/agent-1", true},
		{"refs/**", "refs/tags/v1", true},
		{"refs/tags/v*", "refs/tags/v1.2", true},
		{"refs/tags/v*", "refs/heads/v1", false},
	}
	for _, tt := range tests {
		g, err := compileRefGlob(tt.pattern)
		if err != nil {
			t.Errorf("compileRefGlob(%q): %v", tt.pattern, err)
			continue
		}
		if got := g.match(tt.ref); got != tt.want {
			t.Errorf("%q matches %q = %v, want %v", tt.pattern, tt.ref, got, tt.want)
		}
	}
}

func TestGlobErrors(t *testing.T) {
	paths := []string{
		"admin/**", // relative
		"/a//b",    // empty segment
		"/a/../b",  // dot segments never match a normalized path
		"/./a",     //
		"/a**",     // "**" inside a segment
		"/***",     //
		"/a\\b",    // never in a normalized path
		"/a;b",     //
		"/a?x=1",   // queries are not matched
		"/%61dmin", // encoded: write the character
		"/a\x00",   //
		"/a\nb",    //
		"/\xff",    // not UTF-8
	}
	for _, p := range paths {
		if _, err := compilePathGlob(p); err == nil {
			t.Errorf("compilePathGlob(%q) succeeded", p)
		}
	}
	refs := []string{
		"main", "refs/", "heads/main", "refs/heads/a..b", "refs/heads/a b",
		"refs/heads/a~1", "refs/heads/a:b", "refs/heads/[ab]", "refs/heads/a?",
		"refs/heads/@{1}", "refs//heads", "refs/heads/a**", "refs/heads/\\",
	}
	for _, r := range refs {
		if _, err := compileRefGlob(r); err == nil {
			t.Errorf("compileRefGlob(%q) succeeded", r)
		}
	}
}

// Patterns with many "**" against long paths stay fast: the matcher
// backtracks to one point only.
func TestGlobNoBlowup(t *testing.T) {
	g, err := compilePathGlob("/**/a/**/a/**/a/**/a/**/a/**/b")
	if err != nil {
		t.Fatal(err)
	}
	p := "/" + strings.Repeat("a/", 5000) + "c"
	if matchPath(g, p) {
		t.Fatal("matched")
	}
	s, err := compilePathGlob("/*a*a*a*a*a*a*b")
	if err != nil {
		t.Fatal(err)
	}
	if matchPath(s, "/"+strings.Repeat("a", 20000)) {
		t.Fatal("matched")
	}
}
