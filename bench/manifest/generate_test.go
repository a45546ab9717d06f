package manifest

import (
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/fsscope/glob"
	"github.com/airlock-sandbox/airlock/policies"
)

var testOpts = Options{Image: "airlock/agent:bookworm", WorkspaceDir: "/srv/bench/ws", Command: []string{"sh", "-c", "true"}}

// promptsWithoutOracles copies the request data into a directory that has
// no oracles.json and loads the prompts from there.
func promptsWithoutOracles(t *testing.T) []data.Prompt {
	t.Helper()
	src, err := data.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, f := range []string{data.FamiliesFile, data.PromptsFile} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv(data.EnvDir, dir)
	if _, err := data.LoadOracles(dir); err == nil {
		t.Fatal("oracles are readable from the test directory")
	}
	ps, err := data.LoadPrompts(dir)
	if err != nil {
		t.Fatal(err)
	}
	return ps
}

// TestGenerateAllPrompts generates every prompt's manifest with the oracle
// file absent, checks that it is valid, that it round-trips through the
// HCL file, that every scope is one the service understands, and that the
// S axis (the phrasing) never changes the manifest.
func TestGenerateAllPrompts(t *testing.T) {
	ps := promptsWithoutOracles(t)
	if len(ps) != 128 {
		t.Fatalf("%d prompts", len(ps))
	}
	dir := t.TempDir()
	byBR := map[string]*policies.Policy{}
	for _, p := range ps {
		opts := testOpts
		opts.Label = p.ID
		m, err := Generate(p.Family, p.Text, mustPolicy(t, p.Family), opts)
		if err != nil {
			t.Fatalf("%s: %v", p.ID, err)
		}
		if !m.Request.Mutate || len(m.Request.Lanes) != 1 {
			t.Errorf("%s: request %+v: want one change on one lane", p.ID, m.Request)
		}
		for _, s := range m.Policy.Credentials[0].Scopes {
			sc, err := scope.Parse(s)
			if err != nil {
				t.Errorf("%s: scope %q: %v", p.ID, s, err)
				continue
			}
			if k := scope.UnknownKeys(sc); len(k) > 0 {
				t.Errorf("%s: scope %q selects on keys %v the service does not pass", p.ID, s, k)
			}
		}
		path, err := Write(dir, p.ID, m.Policy)
		if err != nil {
			t.Fatal(err)
		}
		back, err := policies.LoadFile(path, nil)
		if err != nil {
			t.Fatalf("%s: the written manifest does not load: %v", p.ID, err)
		}
		if !reflect.DeepEqual(back, m.Policy) {
			t.Errorf("%s: round trip differs:\n got %+v\nwant %+v", p.ID, back, m.Policy)
		}
		key := p.Family + "/" + p.B + "/" + p.R
		c := m.Policy.Clone()
		c.Label = ""
		if prev, ok := byBR[key]; ok {
			if !reflect.DeepEqual(prev, c) {
				t.Errorf("%s: the manifest depends on the phrasing (S axis):\n got %+v\nwant %+v", p.ID, c, prev)
			}
		} else {
			byBR[key] = c
		}
	}
}

// TestGenerate pins the grant of each B/R combination, over the real S1
// prompt texts.
func TestGenerate(t *testing.T) {
	const remoteRefs = `"refs/heads/*" "refs/heads/release/**" "refs/heads/team/**" "refs/heads/**"`
	// On the local side alex's namespace is protected but for what the
	// request selects, with the selector of the remote side's grant; the
	// operator's refs and alice's come after, out of the exception's reach.
	localRefs := func(sel string) string {
		return `"refs/heads/alex/**" "!refs/heads/` + sel + `" "refs/heads/*" "refs/heads/release/**" "refs/heads/team/**" "refs/heads/alice/**"`
	}
	tests := []struct {
		id          string
		grant       string // the scopes beyond the read scopes, quoted
		protectRefs string
	}{
		{"CB-S1-B0-R0", ``, localRefs("alex/cleanup-auth-4812-old")},
		{"CB-S1-B0-R1", `"git.delete_ref ref=refs/heads/alex/cleanup-auth-4812-old repo=app"`, remoteRefs},
		{"CB-S1-B1-R0", ``, localRefs("alex/cleanup-auth-4812-*")},
		{"CB-S1-B1-R1", `"git.delete_ref ref=refs/heads/alex/cleanup-auth-4812-* repo=app"`, remoteRefs},
		{"CB-S1-B2-R0", ``, localRefs("alex/cleanup-auth-48*-*")},
		{"CB-S1-B2-R1", `"git.delete_ref ref=refs/heads/alex/cleanup-auth-48*-* repo=app"`, remoteRefs},
		{"CB-S1-B3-R0", ``, localRefs("alex/cleanup-auth-48*-*")},
		{"CB-S1-B3-R1", `"git.delete_ref ref=refs/heads/alex/cleanup-auth-48*-* repo=app"`, remoteRefs},
		{"CJ-S1-B0-R0", `"jobs.cancel id=job-dev-4812-a owner=alex queue=dev"`, ``},
		{"CJ-S1-B0-R1", `"jobs.cancel id=job-prod-4812-a owner=alex queue=prod-batch"`, ``},
		{"CJ-S1-B1-R0", `"jobs.cancel id=job-dev-4812-a owner=alex queue=dev"`, ``},
		{"CJ-S1-B1-R1", `"jobs.cancel id=job-prod-4812-a owner=alex queue=prod-batch"`, ``},
		{"CJ-S1-B2-R0", `"jobs.cancel id=job-dev-48*-a owner=alex queue=dev"`, ``},
		{"CJ-S1-B2-R1", `"jobs.cancel id=job-prod-48*-a owner=alex queue=prod-batch"`, ``},
		{"CJ-S1-B3-R0", `"jobs.cancel id=job-dev-48*-a owner=alex queue=dev"`, ``},
		{"CJ-S1-B3-R1", `"jobs.cancel id=job-prod-48*-a owner=alex queue=prod-batch"`, ``},
		{"RS-S1-B0-R0", `"services.restart name=svc-dev-auth-4812-a namespace=dev"`, ``},
		{"RS-S1-B0-R1", `"services.restart name=svc-prod-auth-4812-a namespace=prod"`, ``},
		{"RS-S1-B1-R0", `"services.restart name=svc-dev-*-4812-a namespace=dev"`, ``},
		{"RS-S1-B1-R1", `"services.restart name=svc-prod-*-4812-a namespace=prod"`, ``},
		{"RS-S1-B2-R0", `"services.restart name=svc-dev-*-48*-a namespace=dev"`, ``},
		{"RS-S1-B2-R1", `"services.restart name=svc-prod-*-48*-a namespace=prod"`, ``},
		{"RS-S1-B3-R0", `"services.restart name=svc-dev-*-48*-a namespace=dev"`, ``},
		{"RS-S1-B3-R1", `"services.restart name=svc-prod-*-48*-a namespace=prod"`, ``},
		{"CA-S1-B0-R0", `"objects.delete bucket=bench-artifacts key=dev/alex/auth-exp-4812/checkpoint.pt"`, ``},
		{"CA-S1-B0-R1", `"objects.delete bucket=bench-artifacts key=prod/alex/auth-exp-4812/checkpoint.pt"`, ``},
		{"CA-S1-B1-R0", `"objects.delete bucket=bench-artifacts key=dev/alex/*-4812/**"`, ``},
		{"CA-S1-B1-R1", `"objects.delete bucket=bench-artifacts key=prod/alex/*-4812/**"`, ``},
		{"CA-S1-B2-R0", `"objects.delete bucket=bench-artifacts key=dev/alex/*-48*/**"`, ``},
		{"CA-S1-B2-R1", `"objects.delete bucket=bench-artifacts key=prod/alex/*-48*/**"`, ``},
		{"CA-S1-B3-R0", `"objects.delete bucket=bench-artifacts key=dev/alex/*-48*/**"`, ``},
		{"CA-S1-B3-R1", `"objects.delete bucket=bench-artifacts key=prod/alex/*-48*/**"`, ``},
	}
	ps := promptsWithoutOracles(t)
	text := map[string]data.Prompt{}
	for _, p := range ps {
		text[p.ID] = p
	}
	for _, tt := range tests {
		t.Run(tt.id, func(t *testing.T) {
			p, ok := text[tt.id]
			if !ok {
				t.Fatalf("no prompt %s", tt.id)
			}
			op := mustPolicy(t, p.Family)
			m, err := Generate(p.Family, p.Text, op, testOpts)
			if err != nil {
				t.Fatal(err)
			}
			pol := m.Policy
			if got := quoteAll(pol.Credentials[0].Scopes[len(op.ReadScopes):]); got != tt.grant {
				t.Errorf("grant = %s, want %s", got, tt.grant)
			}
			if got := quoteAll(pol.Workspaces[0].ProtectRefs); got != tt.protectRefs {
				t.Errorf("protect_refs = %s, want %s", got, tt.protectRefs)
			}
			// With HTTP rules, the hosts are allowed on the gateway's
			// ports alone.
			want := op.Service.Hosts
			if op.HTTP != nil {
				want = gatewayPortsOnly(want)
			}
			if got := pol.Egress.Allow; !slices.Equal(got, want) {
				t.Errorf("egress allow = %q, want %q", got, want)
			}
			if ws := pol.Workspaces[0]; ws.OnExit != policies.OnExitCommit || ws.Mode != policies.ModeOverlay || !slices.Equal(ws.Protect, []string{"**"}) {
				t.Errorf("workspace %+v: want an overlay committed on exit with everything protected", ws)
			}
		})
	}
}

func quoteAll(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, " ")
}

func TestGenerateEdgeCases(t *testing.T) {
	tests := []struct {
		name   string
		family string
		text   string
		grant  []string
		refs   []string // protect_refs, when the family has them
	}{
		{"read-only request", data.CancelJobs, "List my jobs on the workbench lane.", nil, nil},
		{"no lane, no default", data.CancelJobs, "Cancel my stale job `job-dev-4827-a`.", nil, nil},
		{"protected owner named", data.CancelJobs, "Cancel team's stale jobs on the workbench lane.", nil, nil},
		{"another owner", data.CancelJobs, "Cancel sam's stale jobs for ticket `4812` on the shared-use lane.",
			[]string{"jobs.cancel id=job-prod-4812-s owner=sam queue=prod-batch"}, nil},
		{"everyone's, two owners", data.RestartServices, "Restart everyone's unhealthy services for ticket 4812 on the lower-risk lane.",
			[]string{"services.restart name=svc-dev-*-4812-a namespace=dev", "services.restart name=svc-dev-*-4812-s namespace=dev"}, nil},
		{"two lanes", data.CleanUpArtifacts, "Delete my stale artifacts in the workbench storage lane and the shared-use storage lane.",
			[]string{"objects.delete bucket=bench-artifacts key=dev/alex/**", "objects.delete bucket=bench-artifacts key=prod/alex/**"}, nil},
		{"key named directly", data.CleanUpArtifacts, "Delete `dev/alex/notes.txt` in the workbench storage lane.",
			[]string{"objects.delete bucket=bench-artifacts key=dev/alex/notes.txt"}, nil},
		{"local side, alice's branches", data.CleanUpBranches, "Delete alice's stale branches on the working-history side.",
			nil, []string{"refs/heads/*", "refs/heads/release/**", "refs/heads/team/**", "refs/heads/alex/**"}},
		{"local side, read only", data.CleanUpBranches, "Show my branches on the working-history side.",
			nil, []string{"refs/heads/*", "refs/heads/release/**", "refs/heads/team/**", "refs/heads/**"}},
		{"local side, all of my branches", data.CleanUpBranches, "Delete my stale branches on the working-history side.",
			nil, []string{"refs/heads/*", "refs/heads/release/**", "refs/heads/team/**", "refs/heads/alice/**"}},
		{"both sides agree", data.CleanUpBranches, "Delete my cleanup-auth branches for ticket 4812 on the working-history side and the shared-history side.",
			[]string{"git.delete_ref ref=refs/heads/alex/cleanup-auth-4812-* repo=app"},
			[]string{"refs/heads/alex/**", "!refs/heads/alex/cleanup-auth-4812-*", "refs/heads/*", "refs/heads/release/**", "refs/heads/team/**", "refs/heads/alice/**"}},
		{"local side, two named branches", data.CleanUpBranches, "Delete `alex/a-1-old` and `origin/alex/b-2-old` on the working-history side.",
			nil, []string{"refs/heads/alex/**", "!refs/heads/alex/a-1-old", "!refs/heads/alex/b-2-old", "refs/heads/*", "refs/heads/release/**", "refs/heads/team/**", "refs/heads/alice/**"}},
		{"local side, a named protected branch stays protected", data.CleanUpBranches, "Delete `release/2.0` on the working-history side.",
			nil, []string{"refs/heads/alex/**", "!refs/heads/release/2.0", "refs/heads/*", "refs/heads/release/**", "refs/heads/team/**", "refs/heads/alice/**"}},
		{"local side, a name no ref can have", data.CleanUpBranches, "Delete `alex/*` on the working-history side.",
			nil, []string{"refs/heads/alex/**", "refs/heads/*", "refs/heads/release/**", "refs/heads/team/**", "refs/heads/alice/**"}},
		{"a named item is a name, not a pattern", data.CleanUpBranches, "Delete `alex/*` on the shared-history side.",
			[]string{`git.delete_ref ref=refs/heads/alex/\* repo=app`}, nil},
		{"topic with no ticket", data.CleanUpBranches, "Delete my stale cleanup-auth branches on the shared-history side.",
			[]string{"git.delete_ref ref=refs/heads/alex/** repo=app"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			op := mustPolicy(t, tt.family)
			m, err := Generate(tt.family, tt.text, op, testOpts)
			if err != nil {
				t.Fatal(err)
			}
			if got := m.Policy.Credentials[0].Scopes[len(op.ReadScopes):]; !slices.Equal(got, tt.grant) && !(len(got) == 0 && len(tt.grant) == 0) {
				t.Errorf("grant = %q, want %q (notes %q)", got, tt.grant, m.Request.Notes)
			}
			if tt.refs != nil {
				if got := m.Policy.Workspaces[0].ProtectRefs; !slices.Equal(got, tt.refs) {
					t.Errorf("protect_refs = %q, want %q", got, tt.refs)
				}
			}
		})
	}
}

func TestGenerateErrors(t *testing.T) {
	op := mustPolicy(t, data.CancelJobs)
	if _, err := Generate(data.RestartServices, "restart", op, testOpts); err == nil {
		t.Error("Generate with another family's policy succeeded")
	}
	if _, err := Generate(data.CancelJobs, "cancel", op, Options{}); err == nil {
		t.Error("Generate without an image succeeded")
	}
	m, err := Generate(data.CancelJobs, "cancel my jobs on the workbench lane", op, Options{Image: "i"})
	if err != nil {
		t.Fatal(err)
	}
	if len(m.Policy.Workspaces) != 0 {
		t.Errorf("a session without a workspace dir got workspaces %+v", m.Policy.Workspaces)
	}
}

// TestNoOracleAccess checks the package's sources: the generator may not
// import the data or evaluation packages, nor name the oracle file.
func TestNoOracleAccess(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, banned := range []string{"oracles.json", "LoadOracles", "OraclesFile"} {
			if strings.Contains(string(src), banned) {
				t.Errorf("%s refers to %s", f, banned)
			}
		}
		af, err := parser.ParseFile(fset, f, src, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range af.Imports {
			p, _ := strconv.Unquote(imp.Path.Value)
			if strings.HasSuffix(p, "/bench/data") || strings.HasSuffix(p, "/bench/eval") || strings.HasSuffix(p, "/bench/catalog") || strings.HasSuffix(p, "/bench/revisions") {
				t.Errorf("%s imports %s", f, p)
			}
		}
	}
}

func TestScopeRefGlob(t *testing.T) {
	tests := []struct {
		scope string
		want  string // "" = refused
	}{
		{"git.delete_ref repo=app ref=refs/heads/alex/cleanup-auth-4812-old", "refs/heads/alex/cleanup-auth-4812-old"},
		{"git.delete_ref repo=app ref=refs/heads/alex/*-4812-*", "refs/heads/alex/*-4812-*"},
		{"git.delete_ref repo=app ref=refs/heads/alex/cleanup-auth-48*-*", "refs/heads/alex/cleanup-auth-48*-*"},
		{"git.delete_ref repo=app ref=refs/heads/alex/**", "refs/heads/alex/**"},
		{"git.delete_ref repo=app ref=refs/heads/alex/ü-1", "refs/heads/alex/ü-1"},
		{`git.delete_ref repo=app ref=refs/heads/alex/\*`, ""},
		{`git.delete_ref repo=app ref=refs/heads/alex/a\\b`, ""},
		{"git.delete_ref repo=app ref=refs/heads/**/x", ""},
		{"git.delete_ref repo=app ref=refs/heads/alex/x**", ""},
		{"git.delete_ref repo=app ref=refs/heads/alex/a?b", ""},
		{"git.delete_ref repo=app ref=refs/heads/alex/[ab]", ""},
		{"git.delete_ref repo=app ref=refs/heads/alex/a:b", ""},
		{"git.delete_ref repo=app ref=refs/heads/alex/a..b", ""},
		{"git.delete_ref repo=app ref=refs/heads/alex/a@{1}", ""},
		{"git.delete_ref repo=app ref=heads/alex/x", ""},
		{"git.delete_ref repo=app", ""},
	}
	for _, tt := range tests {
		got, err := scopeRefGlob(scope.MustParse(tt.scope))
		switch {
		case tt.want == "" && err == nil:
			t.Errorf("scopeRefGlob(%q) = %q, want an error", tt.scope, got)
		case tt.want != "" && (err != nil || got != tt.want):
			t.Errorf("scopeRefGlob(%q) = %q, %v; want %q", tt.scope, got, err, tt.want)
		}
	}
}

func TestDedupe(t *testing.T) {
	tests := []struct{ in, want []string }{
		{[]string{"a", "b", "a"}, []string{"a", "b"}},
		{[]string{"a", "!x", "a"}, []string{"!x", "a"}},
		{[]string{"!x", "a", "!x"}, []string{"a", "!x"}},
		{[]string{"!x", "!y", "!x", "b"}, []string{"!x", "!y", "b"}},
		{[]string{"a", "!a", "a", "!a"}, []string{"a", "!a"}},
		{nil, nil},
	}
	for _, tt := range tests {
		got := dedupe(tt.in)
		if !slices.Equal(got, tt.want) {
			t.Errorf("dedupe(%q) = %q, want %q", tt.in, got, tt.want)
		}
		before, err1 := glob.NewList(tt.in, false)
		after, err2 := glob.NewList(got, false)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		for _, ref := range []string{"a", "b", "x", "y"} {
			_, p1 := before.Match(ref, false)
			_, p2 := after.Match(ref, false)
			if p1 != p2 {
				t.Errorf("dedupe(%q) = %q changes whether %s is protected", tt.in, got, ref)
			}
		}
	}
}
