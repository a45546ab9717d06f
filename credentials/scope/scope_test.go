package scope

import (
	"errors"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

var parseTests = []struct {
	in      string
	want    string // canonical form; empty means the same as in
	wantErr string // substring of the error; empty means success
}{
	{in: "git.push"},
	{in: "git.push repo=app ref=refs/heads/alex/*", want: "git.push ref=refs/heads/alex/* repo=app"},
	{in: "jobs.cancel owner=alex queue=dev"},
	{in: "objects.delete bucket=bench-artifacts key=dev/alex/*"},
	{in: "services.* namespace=dev"},
	{in: "  git.fetch \t repo=app  ", want: "git.fetch repo=app"},
	{in: "objects.get key=a=b", want: "objects.get key=a=b"},
	{in: `objects.get key=literal\*star`},
	{in: `objects.get key=back\\slash`},
	{in: "objects.get key=**"},
	{in: "objects.get key=dev/**/x*y"},
	{in: "issues.create project=ünïcode"},
	{in: "a_1.b-2 k_1=v"},

	{in: "", wantErr: "empty"},
	{in: "   ", wantErr: "empty"},
	{in: "git", wantErr: "not service.verb"},
	{in: "Git.push", wantErr: "only a-z"},
	{in: "git.Push", wantErr: "only a-z"},
	{in: ".push", wantErr: "empty service"},
	{in: "git.", wantErr: "empty verb"},
	{in: "*.push", wantErr: "only a-z"},
	{in: "*", wantErr: "not service.verb"},
	{in: "git.push.x", wantErr: "only a-z"},
	{in: "git.push repo", wantErr: "not KEY=PATTERN"},
	{in: "git.push =app", wantErr: "empty selector key"},
	{in: "git.push Repo=app", wantErr: "must start with a-z"},
	{in: "git.push 1repo=app", wantErr: "must start with a-z"},
	{in: "git.push re.po=app", wantErr: "only a-z"},
	{in: "git.push repo=", wantErr: "empty pattern"},
	{in: "git.push repo=a repo=b", wantErr: "more than once"},
	{in: "git.push repo=***", wantErr: "more than two"},
	{in: `git.push repo=a\b`, wantErr: `must be followed`},
	{in: `git.push repo=a\`, wantErr: `must be followed`},
	{in: "git.push repo=a\u00a0b", wantErr: "not allowed"},
	{in: "git.push repo=a\nb", wantErr: "not allowed"},
	{in: "git.push repo=\x00", wantErr: "not allowed"},
	{in: "git.push repo=\xff", wantErr: "UTF-8"},
	{in: "git.push " + strings.Repeat("k=v ", 1), want: "git.push k=v"},
	{in: "git.push" + strings.Repeat(" k=v", MaxSelectors+1), wantErr: "selectors"},
	{in: "git.push repo=" + strings.Repeat("a", MaxLen), wantErr: "longer than"},
	{in: "git." + strings.Repeat("a", 65), wantErr: "longer than 64"},
}

func TestParse(t *testing.T) {
	for _, tt := range parseTests {
		t.Run(tt.in, func(t *testing.T) {
			sc, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse(%q) = %q, want error containing %q", tt.in, sc, tt.wantErr)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse(%q) error %q, want it to contain %q", tt.in, err, tt.wantErr)
				}
				if !errors.Is(err, ErrInvalid) {
					t.Fatalf("Parse(%q) error %v does not wrap ErrInvalid", tt.in, err)
				}
				if !sc.IsZero() {
					t.Fatalf("Parse(%q) returned a scope with an error", tt.in)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			want := tt.want
			if want == "" {
				want = tt.in
			}
			if got := sc.String(); got != want {
				t.Fatalf("Parse(%q).String() = %q, want %q", tt.in, got, want)
			}
			again, err := Parse(sc.String())
			if err != nil || !again.Equal(sc) {
				t.Fatalf("Parse(%q) does not round-trip: %v, %v", sc.String(), again, err)
			}
		})
	}
}

func TestAccessors(t *testing.T) {
	sc := MustParse("git.push repo=app ref=refs/heads/alex/*")
	if sc.Action() != "git.push" {
		t.Errorf("Action() = %q", sc.Action())
	}
	want := []Selector{{Key: "ref", Pattern: "refs/heads/alex/*"}, {Key: "repo", Pattern: "app"}}
	if got := sc.Selectors(); !slices.Equal(got, want) {
		t.Errorf("Selectors() = %v, want %v", got, want)
	}
	if (Scope{}).Allows(Request{Action: "git.push"}) {
		t.Error("zero Scope allows a request")
	}
}

func req(action string, kv ...string) Request {
	r := Request{Action: action, Attrs: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		r.Attrs[kv[i]] = kv[i+1]
	}
	return r
}

func TestAllows(t *testing.T) {
	tests := []struct {
		scope string
		req   Request
		want  bool
	}{
		// Actions.
		{"git.push", req("git.push"), true},
		{"git.push", req("git.fetch"), false},
		{"git.push", req("git.push", "repo", "app"), true},
		{"git.*", req("git.delete_ref", "repo", "app"), true},
		{"git.*", req("gitx.push"), false},
		{"git.*", req("git"), false},
		{"git.*", req("git."), false},
		{"git.*", req("git.*"), false},
		{"git.push", req("GIT.PUSH"), false},
		{"git.push", req(""), false},

		// Selectors: all required, extra request attributes unconstrained.
		{"jobs.cancel owner=alex queue=dev", req("jobs.cancel", "owner", "alex", "queue", "dev", "id", "17"), true},
		{"jobs.cancel owner=alex queue=dev", req("jobs.cancel", "owner", "alex", "queue", "prod"), false},
		{"jobs.cancel owner=alex queue=dev", req("jobs.cancel", "owner", "alex"), false},
		{"jobs.cancel owner=alex", req("jobs.cancel", "owner", "bob"), false},
		{"jobs.cancel owner=alex", req("jobs.cancel", "owner", "Alex"), false},
		{"jobs.cancel owner=alex", req("jobs.cancel", "owner", "alexa"), false},
		{"jobs.cancel owner=alex", req("jobs.cancel", "owner", ""), false},
		{"jobs.cancel owner=*", req("jobs.cancel", "owner", ""), true},
		{"jobs.cancel owner=*", req("jobs.cancel"), false},

		// Single-segment star.
		{"git.push repo=app ref=refs/heads/alex/*", req("git.push", "repo", "app", "ref", "refs/heads/alex/fix"), true},
		{"git.push repo=app ref=refs/heads/alex/*", req("git.push", "repo", "app", "ref", "refs/heads/alex/"), true},
		{"git.push repo=app ref=refs/heads/alex/*", req("git.push", "repo", "app", "ref", "refs/heads/alex/a/b"), false},
		{"git.push repo=app ref=refs/heads/alex/*", req("git.push", "repo", "app", "ref", "refs/heads/alex"), false},
		{"git.push repo=app ref=refs/heads/alex/*", req("git.push", "repo", "app", "ref", "refs/heads/main"), false},
		{"git.push repo=app ref=refs/heads/alex/*", req("git.push", "repo", "other", "ref", "refs/heads/alex/x"), false},
		{"git.push ref=refs/heads/*-wip", req("git.push", "ref", "refs/heads/a-b-wip"), true},
		{"git.push ref=refs/heads/*-wip", req("git.push", "ref", "refs/heads/x/y-wip"), false},
		{"git.push ref=*/*/x", req("git.push", "ref", "a/b/x"), true},
		{"git.push ref=*/*/x", req("git.push", "ref", "a/b/c/x"), false},

		// Double star.
		{"objects.delete bucket=bench-artifacts key=dev/alex/**", req("objects.delete", "bucket", "bench-artifacts", "key", "dev/alex/a/b/c"), true},
		{"objects.delete bucket=bench-artifacts key=dev/alex/**", req("objects.delete", "bucket", "bench-artifacts", "key", "dev/bob/a"), false},
		{"objects.delete bucket=bench-artifacts key=dev/alex/*", req("objects.delete", "bucket", "bench-artifacts", "key", "dev/alex/a/b"), false},
		{"objects.get key=a/**/b", req("objects.get", "key", "a/x/y/b"), true},
		{"objects.get key=a/**/b", req("objects.get", "key", "a/b"), false},
		{"objects.get key=**", req("objects.get", "key", "/any/thing"), true},
		{"objects.get key=**.log", req("objects.get", "key", "x/y.log"), true},
		{"objects.get key=*.log", req("objects.get", "key", "x/y.log"), false},

		// Escapes and literal metacharacters.
		{`objects.get key=a\*`, req("objects.get", "key", "a*"), true},
		{`objects.get key=a\*`, req("objects.get", "key", "ab"), false},
		{`objects.get key=a\\b`, req("objects.get", "key", `a\b`), true},
		{"objects.get key=a?b", req("objects.get", "key", "axb"), false},
		{"objects.get key=a[b]", req("objects.get", "key", "a[b]"), true},

		// Unicode.
		{"issues.create project=ü*", req("issues.create", "project", "üx"), true},
		{"issues.create project=*", req("issues.create", "project", "日本"), true},
	}
	for _, tt := range tests {
		sc := MustParse(tt.scope)
		if got := sc.Allows(tt.req); got != tt.want {
			t.Errorf("Parse(%q).Allows(%v) = %v, want %v", tt.scope, tt.req, got, tt.want)
		}
	}
}

func TestSet(t *testing.T) {
	set, err := ParseSet([]string{"git.fetch repo=app", "git.push repo=app ref=refs/heads/alex/*"})
	if err != nil {
		t.Fatal(err)
	}
	if !set.Allows(req("git.fetch", "repo", "app")) {
		t.Error("set denies git.fetch")
	}
	if !set.Allows(req("git.push", "repo", "app", "ref", "refs/heads/alex/x")) {
		t.Error("set denies git.push to own branch")
	}
	if set.Allows(req("git.push", "repo", "app", "ref", "refs/heads/main")) {
		t.Error("set allows git.push to main")
	}
	if (Set{}).Allows(req("git.fetch", "repo", "app")) {
		t.Error("empty set allows a request")
	}
	if got, want := set.Strings(), []string{"git.fetch repo=app", "git.push ref=refs/heads/alex/* repo=app"}; !slices.Equal(got, want) {
		t.Errorf("Strings() = %q, want %q", got, want)
	}
	_, err = ParseSet([]string{"git.fetch", "bad"})
	if err == nil || !strings.Contains(err.Error(), `scope 1 ("bad")`) {
		t.Errorf("ParseSet error = %v, want it to name scope 1", err)
	}
}

func TestValidateAction(t *testing.T) {
	tests := []struct {
		in      string
		wantErr string
	}{
		{"git.push", ""},
		{"objects.delete", ""},
		{"paste.create", ""},
		{"git.*", ""},
		{"git.force_push", "unknown action"},
		{"git.pus", `did you mean "git.push"`},
		{"k8s.restart", `did you mean "services.restart"`},
		{"nope.*", "no service"},
		{"Git.push", "only a-z"},
		{"", "not service.verb"},
	}
	for _, tt := range tests {
		err := ValidateAction(tt.in)
		if tt.wantErr == "" {
			if err != nil {
				t.Errorf("ValidateAction(%q) = %v, want nil", tt.in, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("ValidateAction(%q) = %v, want error containing %q", tt.in, err, tt.wantErr)
		}
	}
	if err := ValidateAction("git.nope"); !errors.Is(err, ErrUnknownAction) {
		t.Errorf("ValidateAction(git.nope) = %v, want ErrUnknownAction", err)
	}
	for a := range KnownActions {
		if err := checkAction(a, false); err != nil {
			t.Errorf("KnownActions has malformed action %q: %v", a, err)
		}
		for _, k := range KnownActions[a].Keys {
			if err := checkKey(k); err != nil {
				t.Errorf("KnownActions[%q] has malformed key %q: %v", a, k, err)
			}
		}
	}
}

func TestUnknownKeys(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"git.push repo=app ref=x", nil},
		{"git.push repos=app", []string{"repos"}},
		{"git.* repo=app ref=x", nil},
		{"services.* namespace=dev bucket=x", []string{"bucket"}},
		{"nope.verb a=b", nil},
	}
	for _, tt := range tests {
		if got := UnknownKeys(MustParse(tt.in)); !slices.Equal(got, tt.want) {
			t.Errorf("UnknownKeys(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

// refMatch is a reference matcher built on regexp, to check pattern.match.
func refMatch(t testing.TB, src, v string) bool {
	var b strings.Builder
	b.WriteString(`^`)
	for i := 0; i < len(src); i++ {
		switch {
		case src[i] == '\\':
			i++
			b.WriteString(regexp.QuoteMeta(src[i : i+1]))
		case strings.HasPrefix(src[i:], "**"):
			b.WriteString(`(?s:.*)`)
			i++
		case src[i] == '*':
			b.WriteString(`[^/]*`)
		default:
			_, size := utf8.DecodeRuneInString(src[i:])
			b.WriteString(regexp.QuoteMeta(src[i : i+size]))
			i += size - 1
		}
	}
	b.WriteString(`$`)
	re, err := regexp.Compile(b.String())
	if err != nil {
		t.Fatalf("reference regexp for %q: %v", src, err)
	}
	return re.MatchString(v)
}

func TestMatchAgainstReference(t *testing.T) {
	pats := []string{"*", "**", "a*", "*a", "a*b", "a**b", "*/*", "**/x", "a/*/b", "*a*a*", `\**`, "x**y*z", "**a**"}
	vals := []string{"", "a", "ab", "a/b", "aab", "a//b", "a/x/b", "xaya", "*", "*a", "x/y/z", "xy/z", "xyz", "ba/a", "aaa/a"}
	for _, p := range pats {
		pat, err := compile(p)
		if err != nil {
			t.Fatalf("compile(%q): %v", p, err)
		}
		for _, v := range vals {
			if got, want := pat.match(v), refMatch(t, p, v); got != want {
				t.Errorf("pattern %q match %q = %v, want %v", p, v, got, want)
			}
		}
	}
}

func BenchmarkAllows(b *testing.B) {
	sc := MustParse("git.push repo=app ref=refs/heads/alex/**/*-wip")
	r := req("git.push", "repo", "app", "ref", "refs/heads/alex/a/b/c/some-long-branch-name-wip")
	b.ReportAllocs()
	for b.Loop() {
		if !sc.Allows(r) {
			b.Fatal("denied")
		}
	}
}
