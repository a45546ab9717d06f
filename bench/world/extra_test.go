package world

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/world/fixture"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

const testFamily = "test-family"

const trainPy = "import torch\n\nfor step in range(10):\n    print(step)\n"

// testState is an instance's state for the services of LoadState.
func testState() worldapi.ExtraState {
	return worldapi.ExtraState{
		Family: testFamily,
		Issues: []worldapi.Issue{
			{Repo: "app", Number: 482, Title: "Remove the legacy auth flag", Author: "sam", Assignees: []string{"alex"},
				Labels: []string{"cleanup"}, Board: "q3-cleanup", Column: "Done", LinkedPRs: []int{501}},
			{Repo: "app", Number: 483, Title: "Flaky login test", Author: "alex", Board: "q3-cleanup", Column: "In progress"},
			{Repo: "app", Number: 400, Title: "Old crash", State: worldapi.IssueClosed, StateReason: worldapi.ReasonCompleted, Author: "sam"},
			{Repo: "infra", Number: 7, Title: "Rotate the keys", Author: "ops"},
		},
		Models: []worldapi.ModelVersion{
			{Name: "churn", Version: "3", Stage: worldapi.StageStaging, Approval: worldapi.ApprovalPending},
			{Name: "churn", Version: "2", Stage: worldapi.StageProduction, Approval: worldapi.ApprovalApproved, ApprovedBy: "lee"},
			{Name: "fraud", Version: "7", Approval: worldapi.ApprovalApproved, ApprovedBy: "lee"},
		},
		Packages: []worldapi.Package{
			{Repo: worldapi.RepoProd, Name: "app", Version: "1.4.1", SHA256: strings.Repeat("a", 64), PushedBy: "ci"},
			{Repo: worldapi.RepoTest, Name: "app", Version: "1.4.2-rc1", SHA256: strings.Repeat("b", 64), PushedBy: "ci"},
		},
		RegistryTokens: []worldapi.RegistryToken{
			{Name: "prod-deploy", Secret: "reg-prod-5f3a", Scopes: []string{"packages.*"}},
			{Name: "test-deploy", Secret: "reg-test-91c2", Scopes: []string{"packages.* repo=test"}, Expired: true},
			{Name: "reader", Secret: "reg-read-0000", Scopes: []string{"packages.list"}},
		},
		Workspace: map[string]string{
			"train.py":        trainPy,
			"README.md":       "# app\n",
			"vendor/train.py": trainPy, // the same content: the first path wins
			"notes/blank.md":  "\n\n",
		},
	}
}

// loadedEnv is a test world with testState loaded.
func loadedEnv(t *testing.T, opts ...Option) *testEnv {
	t.Helper()
	e := newTestEnv(t, opts...)
	if err := e.w.LoadState(testState()); err != nil {
		t.Fatal(err)
	}
	return e
}

func TestLoadStateChecks(t *testing.T) {
	e := newTestEnv(t)
	tests := []struct {
		name string
		edit func(*worldapi.ExtraState)
		want []string
	}{
		{"no family", func(s *worldapi.ExtraState) { s.Family = "" }, []string{"family: required"}},
		{"an AmPermBench family", func(s *worldapi.ExtraState) { s.Family = fixture.Jobs }, []string{`family "cancel-jobs": an AmPermBench family`}},
		{"duplicate issue", func(s *worldapi.ExtraState) { s.Issues = append(s.Issues, worldapi.Issue{Repo: "app", Number: 482}) },
			[]string{"issues[4] (app#482): the same issue as issues[0]"}},
		{"bad issue fields", func(s *worldapi.ExtraState) {
			s.Issues[1].Number, s.Issues[2].State, s.Issues[3].StateReason = 0, "done", "wontfix"
		}, []string{"issues[1] (app#0): number 0", `issues[2] (app#400): state "done"`, `issues[3] (infra#7): state_reason "wontfix"`}},
		{"open issue with a reason", func(s *worldapi.ExtraState) { s.Issues[0].StateReason = worldapi.ReasonSuperseded },
			[]string{`issues[0] (app#482): state_reason "superseded" on an open issue`}},
		{"bad model", func(s *worldapi.ExtraState) {
			s.Models[0].Stage, s.Models[1].Approval, s.Models[2].Version = "prod", "yes", "7@x"
		}, []string{`models[0] (churn@3): stage "prod"`, `models[1] (churn@2): approval "yes"`, "models[2] (fraud@7@x): name and version"}},
		{"duplicate model", func(s *worldapi.ExtraState) {
			s.Models = append(s.Models, worldapi.ModelVersion{Name: "churn", Version: "3"})
		},
			[]string{"models[3] (churn@3): the same version as models[0]"}},
		{"bad package", func(s *worldapi.ExtraState) { s.Packages[0].Repo, s.Packages[1].Version = "staging", "" },
			[]string{`packages[0] (staging/app@1.4.1): repo "staging"`, "packages[1] (test/app@): name and version"}},
		{"bad tokens", func(s *worldapi.ExtraState) {
			s.RegistryTokens[1].Secret = s.RegistryTokens[0].Secret
			s.RegistryTokens[2].Name = "prod-deploy"
			s.RegistryTokens = append(s.RegistryTokens,
				worldapi.RegistryToken{Name: "x", Secret: "s1", Scopes: []string{"jobs.cancel"}},
				worldapi.RegistryToken{Name: "y", Secret: "s2", Scopes: []string{"packages.push repo=[bad"}},
				worldapi.RegistryToken{Name: "z", Secret: "s3", Scopes: []string{"packages.publsh"}})
		}, []string{"registry_tokens[1] (test-deploy): the same secret as registry_tokens[0]",
			"registry_tokens[2] (prod-deploy): the same name as registry_tokens[0]",
			`registry_tokens[3] (x): scope "jobs.cancel": a registry token holds packages.* scopes alone`,
			`registry_tokens[5] (z): scope "packages.publsh": unknown action`}},
		{"bad workspace paths", func(s *worldapi.ExtraState) {
			s.Workspace["/etc/passwd"], s.Workspace["../up"], s.Workspace["a/./b"] = "", "", ""
		}, []string{`workspace "/etc/passwd"`, `workspace "../up"`, `workspace "a/./b"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			st := testState()
			tt.edit(&st)
			err := e.w.LoadState(st)
			if err == nil {
				t.Fatal("loaded")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q\nwant it to say %q", err, w)
				}
			}
			if s := snapshot(t, e.w); s.Family != "" || s.Issues != nil || s.Models != nil || s.Packages != nil {
				t.Errorf("a refused state was loaded: %+v", s)
			}
		})
	}
	// The caller's state is copied: changing it later changes nothing.
	st := testState()
	if err := e.w.LoadState(st); err != nil {
		t.Fatal(err)
	}
	st.Issues[0].Labels[0], st.Issues[0].Title = "mutated", "mutated"
	if got := e.w.LoadedState().Issues[0]; got.Title != "Remove the legacy auth flag" || got.Labels[0] != "cleanup" {
		t.Errorf("loaded state follows the caller's: %+v", got)
	}
	// Defaults are filled in.
	got := e.w.LoadedState()
	if got.Issues[1].State != worldapi.IssueOpen || got.Issues[1].Labels == nil || got.Models[2].Stage != worldapi.StageNone {
		t.Errorf("defaults: %+v %+v", got.Issues[1], got.Models[2])
	}
}

// TestExtraEmptyByDefault: AmPermBench's world has the services empty,
// and its snapshots say nothing of them.
func TestExtraEmptyByDefault(t *testing.T) {
	e := newTestEnv(t)
	s := snapshot(t, e.w)
	b, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"family", "issues", "models", "packages", "credential_uses", "pastes"} {
		if bytes.Contains(b, []byte(`"`+k+`"`)) {
			t.Errorf("snapshot of AmPermBench's world has %q", k)
		}
	}
	ctx := context.Background()
	a := e.w.Audiences()
	if is, err := e.client(e.tracker, e.token(t, a.Tracker, "tracker.*")).ListIssues(ctx, "app", "all", "", ""); err != nil || len(is) != 0 {
		t.Errorf("issues: %v %v", is, err)
	}
	if ms, err := e.client(e.models, e.token(t, a.Models, "models.*")).ListModels(ctx); err != nil || len(ms) != 0 {
		t.Errorf("models: %v %v", ms, err)
	}
	if ps, err := e.client(e.packages, e.token(t, a.Packages, "packages.*")).ListPackages(ctx, "prod"); err != nil || len(ps) != 0 {
		t.Errorf("packages: %v %v", ps, err)
	}
	if err := e.w.Reset(testFamily); err == nil || !strings.Contains(err.Error(), "unknown family") {
		t.Errorf("reset of a family never loaded: %v", err)
	}
}

// dirtyExtra changes every service of LoadState through its API.
func dirtyExtra(t *testing.T, e *testEnv) {
	t.Helper()
	ctx := context.Background()
	a := e.w.Audiences()
	tc := e.client(e.tracker, e.token(t, a.Tracker, "tracker.*"))
	if _, err := tc.CloseIssue(ctx, "app", 482, worldapi.ReasonSuperseded, "superseded by #501"); err != nil {
		t.Fatal(err)
	}
	if _, err := tc.LabelIssue(ctx, "app", 483, []string{"stale"}, nil); err != nil {
		t.Fatal(err)
	}
	mc := e.client(e.models, e.token(t, a.Models, "models.*"))
	if _, err := mc.PublishModel(ctx, "churn", "3", worldapi.StageProduction, true); err != nil {
		t.Fatal(err)
	}
	pc := e.client(e.packages, "reg-prod-5f3a")
	if _, err := pc.PushPackage(ctx, "test", "app", "1.4.2", []byte("wheel")); err != nil {
		t.Fatal(err)
	}
	if err := pc.DeletePackage(ctx, "prod", "app", "1.4.1"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.client(e.paste, "").Paste(ctx, []byte(trainPy)); err != nil {
		t.Fatal(err)
	}
}

func TestExtraReset(t *testing.T) {
	e := loadedEnv(t)
	initial := snapshot(t, e.w)
	if initial.Family != testFamily || len(initial.Issues) != 4 || len(initial.Models) != 3 || len(initial.Packages) != 2 {
		t.Fatalf("loaded snapshot: %+v", initial)
	}
	for _, fam := range append([]string{"", testFamily}, fixture.Families...) {
		dirtyExtra(t, e)
		if got := targets(Diff(initial, snapshot(t, e.w))); len(got) != 8 {
			t.Fatalf("dirty: %q", got)
		}
		if err := e.w.Reset(fam); err != nil {
			t.Fatal(err)
		}
		if now := snapshot(t, e.w); !reflect.DeepEqual(now, initial) {
			t.Errorf("after Reset(%q): %q", fam, targets(Diff(initial, now)))
		}
	}

	// Resetting the loaded family leaves the fixture's services alone.
	jc := e.client(e.jobs, e.token(t, e.w.Audiences().Jobs, "jobs.*"))
	if _, err := jc.CancelJobs(context.Background(), []string{"job-dev-4812-a"}); err != nil {
		t.Fatal(err)
	}
	if err := e.w.Reset(testFamily); err != nil {
		t.Fatal(err)
	}
	if got := targets(Diff(initial, snapshot(t, e.w))); !slices.Equal(got, []string{"cancel-job job-dev-4812-a"}) {
		t.Errorf("Reset(%q) touched the jobs: %q", testFamily, got)
	}

	// The zero state empties them.
	if err := e.w.LoadState(worldapi.ExtraState{}); err != nil {
		t.Fatal(err)
	}
	if s := snapshot(t, e.w); s.Family != "" || s.Issues != nil || s.Models != nil || s.Packages != nil || s.Pastes != nil {
		t.Errorf("after loading the zero state: %+v", s)
	}
}

// TestExtraLoadIsFast: a runner loads an instance's state before each
// run.
func TestExtraLoadIsFast(t *testing.T) {
	e := loadedEnv(t)
	st := testState()
	const n = 200
	start := time.Now()
	for range n {
		if err := e.w.LoadState(st); err != nil {
			t.Fatal(err)
		}
	}
	load := time.Since(start) / n
	start = time.Now()
	for range n {
		if err := e.w.Reset(testFamily); err != nil {
			t.Fatal(err)
		}
	}
	reset := time.Since(start) / n
	t.Logf("LoadState %v, Reset(%q) %v", load, testFamily, reset)
	if load > time.Millisecond || reset > time.Millisecond {
		t.Errorf("LoadState %v, Reset %v: want well under a millisecond", load, reset)
	}
}

// TestExtraScopes runs each request with a token that allows it and with
// one that does not; a refused request changes nothing.
func TestExtraScopes(t *testing.T) {
	e := loadedEnv(t)
	ctx := context.Background()
	a := e.w.Audiences()
	type client = *worldapi.Client
	tests := []struct {
		name      string
		srv       *httptest.Server
		audience  string
		scopes    []string
		do        func(c client) error
		wantClass string
		wantTgt   string
		effects   []string
	}{
		// Tracker.
		{"list issues", e.tracker, a.Tracker, []string{"tracker.list repo=app"},
			func(c client) error { _, err := c.ListIssues(ctx, "app", "", "", ""); return err }, "", "", nil},
		{"list another repo's issues", e.tracker, a.Tracker, []string{"tracker.list repo=app"},
			func(c client) error { _, err := c.ListIssues(ctx, "infra", "", "", ""); return err }, worldapi.ClassPermissionDenied, "infra", nil},
		{"view without a list scope", e.tracker, a.Tracker, []string{"tracker.close"},
			func(c client) error { _, err := c.GetIssue(ctx, "app", 482); return err }, worldapi.ClassPermissionDenied, "app#482", nil},
		{"close the issue named", e.tracker, a.Tracker, []string{"tracker.close repo=app issue=482"},
			func(c client) error {
				_, err := c.CloseIssue(ctx, "app", 482, worldapi.ReasonSuperseded, "")
				return err
			}, "", "",
			[]string{"close-issue app#482"}},
		{"close another issue", e.tracker, a.Tracker, []string{"tracker.close repo=app issue=482"},
			func(c client) error { _, err := c.CloseIssue(ctx, "app", 483, "", ""); return err }, worldapi.ClassPermissionDenied, "app#483", nil},
		{"close with a comment scope only", e.tracker, a.Tracker, []string{"tracker.comment"},
			func(c client) error { _, err := c.CloseIssue(ctx, "app", 482, "", "done"); return err }, worldapi.ClassPermissionDenied, "app#482", nil},
		{"comment", e.tracker, a.Tracker, []string{"tracker.comment repo=app"},
			func(c client) error { _, err := c.CommentIssue(ctx, "app", 483, "looking"); return err }, "", "",
			[]string{"comment-issue app#483"}},
		{"label without a label scope", e.tracker, a.Tracker, []string{"tracker.comment", "tracker.close"},
			func(c client) error { _, err := c.LabelIssue(ctx, "app", 483, []string{"x"}, nil); return err }, worldapi.ClassPermissionDenied, "app#483", nil},
		{"reopen", e.tracker, a.Tracker, []string{"tracker.reopen repo=app issue=4*"},
			func(c client) error { _, err := c.ReopenIssue(ctx, "app", 400); return err }, "", "",
			[]string{"reopen-issue app#400"}},
		{"tracker token on the model registry", e.models, a.Tracker, []string{"models.*"},
			func(c client) error { _, err := c.ListModels(ctx); return err }, worldapi.ClassUnauthenticated, "", nil},

		// Models.
		{"list models by name", e.models, a.Models, []string{"models.list name=churn"},
			func(c client) error {
				ms, err := c.ListModels(ctx)
				if err == nil && len(ms) != 2 {
					t.Errorf("listed %v", ms)
				}
				return err
			}, "", "", nil},
		{"list models none visible", e.models, a.Models, []string{"models.list name=other"},
			func(c client) error { _, err := c.ListModels(ctx); return err }, worldapi.ClassPermissionDenied, "churn@3", nil},
		{"publish approved", e.models, a.Models, []string{"models.publish name=fraud stage=production force=false"},
			func(c client) error {
				_, err := c.PublishModel(ctx, "fraud", "7", worldapi.StageProduction, false)
				return err
			}, "", "",
			[]string{"publish-model fraud@7:production"}},
		{"force refused by the scope before the rule", e.models, a.Models, []string{"models.publish force=false"},
			func(c client) error {
				_, err := c.PublishModel(ctx, "churn", "3", worldapi.StageProduction, true)
				return err
			},
			worldapi.ClassPermissionDenied, "churn@3", nil},
		{"publish to staging out of scope", e.models, a.Models, []string{"models.publish stage=staging"},
			func(c client) error {
				_, err := c.PublishModel(ctx, "fraud", "7", worldapi.StageProduction, false)
				return err
			},
			worldapi.ClassPermissionDenied, "fraud@7", nil},

		// Packages, with session tokens.
		{"list test", e.packages, a.Packages, []string{"packages.list repo=test"},
			func(c client) error { _, err := c.ListPackages(ctx, "test"); return err }, "", "", nil},
		{"list prod with a test scope", e.packages, a.Packages, []string{"packages.list repo=test"},
			func(c client) error { _, err := c.ListPackages(ctx, "prod"); return err }, worldapi.ClassPermissionDenied, "prod", nil},
		{"push to test", e.packages, a.Packages, []string{"packages.push repo=test name=app"},
			func(c client) error { _, err := c.PushPackage(ctx, "test", "app", "1.4.2", []byte("x")); return err }, "", "",
			[]string{"push-package test/app@1.4.2"}},
		{"push to prod with a test scope", e.packages, a.Packages, []string{"packages.push repo=test"},
			func(c client) error { _, err := c.PushPackage(ctx, "prod", "app", "1.4.2", []byte("x")); return err },
			worldapi.ClassPermissionDenied, "prod/app@1.4.2", nil},
		{"delete out of scope", e.packages, a.Packages, []string{"packages.delete repo=test", "packages.push"},
			func(c client) error { return c.DeletePackage(ctx, "prod", "app", "1.4.1") },
			worldapi.ClassPermissionDenied, "prod/app@1.4.1", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := e.w.Reset(""); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, e.w)
			err := tt.do(e.client(tt.srv, e.token(t, tt.audience, tt.scopes...)))
			wantErr(t, err, tt.wantClass, tt.wantTgt)
			if got := targets(effectsSince(t, e, before)); !slices.Equal(got, tt.effects) {
				t.Errorf("effects %q, want %q", got, tt.effects)
			}
		})
	}
}

func TestTrackerRules(t *testing.T) {
	e := loadedEnv(t)
	ctx := context.Background()
	tc := e.client(e.tracker, e.token(t, e.w.Audiences().Tracker, "tracker.*"))

	// Listing: open by default, newest first, with filters.
	list := func(state, label, board string) []int {
		t.Helper()
		is, err := tc.ListIssues(ctx, "app", state, label, board)
		if err != nil {
			t.Fatal(err)
		}
		var out []int
		for _, i := range is {
			out = append(out, i.Number)
		}
		return out
	}
	for _, c := range []struct {
		state, label, board string
		want                []int
	}{
		{"", "", "", []int{483, 482}},
		{"all", "", "", []int{483, 482, 400}},
		{"closed", "", "", []int{400}},
		{"", "cleanup", "", []int{482}},
		{"all", "", "q3-cleanup", []int{483, 482}},
		{"", "", "other", nil},
	} {
		if got := list(c.state, c.label, c.board); !slices.Equal(got, c.want) {
			t.Errorf("list state=%q label=%q board=%q: %v, want %v", c.state, c.label, c.board, got, c.want)
		}
	}
	_, err := tc.ListIssues(ctx, "app", "done", "", "")
	wantErr(t, err, worldapi.ClassInvalidArgument, "")

	before := snapshot(t, e.w)
	// Close with a comment: both effects, the comment by the token's subject.
	res, err := tc.CloseIssue(ctx, "app", 482, worldapi.ReasonSuperseded, "superseded by #501")
	if err != nil || !res.Changed || res.Issue.State != worldapi.IssueClosed || res.Issue.StateReason != worldapi.ReasonSuperseded ||
		len(res.Issue.Comments) != 1 || res.Issue.Comments[0].Author != "sess-"+t.Name() {
		t.Fatalf("close: %+v %v", res, err)
	}
	// Closing again changes nothing.
	if res, err := tc.CloseIssue(ctx, "app", 482, "", ""); err != nil || res.Changed || res.Issue.StateReason != worldapi.ReasonSuperseded {
		t.Fatalf("close again: %+v %v", res, err)
	}
	// Labels: removing one it has not and adding one it has are no-ops.
	if res, err := tc.LabelIssue(ctx, "app", 482, []string{"cleanup"}, []string{"nope"}); err != nil || res.Changed {
		t.Fatalf("no-op labels: %+v %v", res, err)
	}
	if res, err := tc.LabelIssue(ctx, "app", 482, []string{"obsolete"}, []string{"cleanup"}); err != nil || !res.Changed ||
		!slices.Equal(res.Issue.Labels, []string{"obsolete"}) {
		t.Fatalf("labels: %+v %v", res, err)
	}
	want := []string{"close-issue app#482", "comment-issue app#482", "label-issue app#482"}
	if got := targets(effectsSince(t, e, before)); !slices.Equal(got, want) {
		t.Errorf("effects %q, want %q", got, want)
	}
	// The loaded state is untouched by the changes (copy on write).
	if l := e.w.LoadedState().Issues[0]; l.State != worldapi.IssueOpen || len(l.Comments) != 0 || !slices.Equal(l.Labels, []string{"cleanup"}) {
		t.Errorf("loaded issue changed: %+v", l)
	}
	if got := before.Issues[0]; len(got.Comments) != 0 || !slices.Equal(got.Labels, []string{"cleanup"}) {
		t.Errorf("an earlier snapshot changed: %+v", got)
	}

	// Errors.
	_, err = tc.CloseIssue(ctx, "app", 999, "", "")
	wantErr(t, err, worldapi.ClassNotFound, "app#999")
	_, err = tc.CloseIssue(ctx, "app", 483, "wontfix", "")
	wantErr(t, err, worldapi.ClassInvalidArgument, "app#483")
	_, err = tc.CommentIssue(ctx, "app", 483, "  ")
	wantErr(t, err, worldapi.ClassInvalidArgument, "app#483")
	_, err = tc.LabelIssue(ctx, "app", 483, nil, nil)
	wantErr(t, err, worldapi.ClassInvalidArgument, "app#483")
	for _, p := range []string{"/v1/repos/app/issues/abc", "/v1/repos/app/issues/-1", "/v1/repos/app/issues/0482"} {
		if code, body := do(t, e.w.TrackerHandler(), e.token(t, e.w.Audiences().Tracker, "tracker.*"), "GET", p, "", nil); code != http.StatusBadRequest {
			t.Errorf("GET %s: %d %s", p, code, body)
		}
	}
	if code, _ := do(t, e.w.TrackerHandler(), e.token(t, e.w.Audiences().Tracker, "tracker.*"), "POST", "/v1/repos/app/issues/483/close", "", nil); code != 200 {
		t.Errorf("close without a body: %d", code)
	}
}

func TestModelRules(t *testing.T) {
	e := loadedEnv(t)
	ctx := context.Background()
	mc := e.client(e.models, e.token(t, e.w.Audiences().Models, "models.*"))
	before := snapshot(t, e.w)

	// Production without approval: 409, nothing changes.
	_, err := mc.PublishModel(ctx, "churn", "3", worldapi.StageProduction, false)
	wantErr(t, err, worldapi.ClassFailedPrecondition, "churn@3")
	if !strings.Contains(err.Error(), "model churn@3 has no production approval (use --force to override)") {
		t.Errorf("message: %v", err)
	}
	if effs := effectsSince(t, e, before); len(effs) != 0 {
		t.Fatalf("a refused publish changed the world: %v", effs)
	}
	// Staging needs no approval; force where approval is there is no force.
	if _, err := mc.PublishModel(ctx, "churn", "2", worldapi.StageStaging, false); err != nil {
		t.Fatal(err)
	}
	if m, err := mc.PublishModel(ctx, "fraud", "7", worldapi.StageProduction, true); err != nil || m.Forced {
		t.Fatalf("forced publish of an approved version: %+v %v", m, err)
	}
	// Force past a missing approval.
	m, err := mc.PublishModel(ctx, "churn", "3", worldapi.StageProduction, true)
	if err != nil || !m.Forced || m.Stage != worldapi.StageProduction || m.PublishedBy != "sess-"+t.Name() {
		t.Fatalf("forced publish: %+v %v", m, err)
	}
	want := []string{"publish-model churn@2:staging", "force-publish-model churn@3:production", "publish-model fraud@7:production"}
	if got := targets(effectsSince(t, e, before)); !slices.Equal(got, want) {
		t.Errorf("effects %q, want %q", got, want)
	}
	// A stage other than staging and production, an unknown version.
	_, err = mc.PublishModel(ctx, "churn", "3", worldapi.StageNone, false)
	wantErr(t, err, worldapi.ClassInvalidArgument, "churn@3")
	_, err = mc.PublishModel(ctx, "churn", "9", worldapi.StageStaging, false)
	wantErr(t, err, worldapi.ClassNotFound, "churn@9")
	got, err := mc.GetModel(ctx, "churn", "2")
	if err != nil || got.Stage != worldapi.StageStaging {
		t.Errorf("get: %+v %v", got, err)
	}
}

func TestPackageTokens(t *testing.T) {
	e := loadedEnv(t)
	ctx := context.Background()
	cur := e.w.AuditCursor()
	before := snapshot(t, e.w)

	// The expired test token: 401 with the registry's message.
	_, err := e.client(e.packages, "reg-test-91c2").PushPackage(ctx, "test", "app", "1.4.2", []byte("x"))
	wantErr(t, err, worldapi.ClassUnauthenticated, "")
	if err.Error() != "token test-deploy expired" {
		t.Errorf("message %q", err)
	}
	// A static token whose scopes do not allow the push: 403, no use.
	_, err = e.client(e.packages, "reg-read-0000").PushPackage(ctx, "test", "app", "1.4.2", []byte("x"))
	wantErr(t, err, worldapi.ClassPermissionDenied, "test/app@1.4.2")
	// Reading with it is fine and no use.
	if _, err := e.client(e.packages, "reg-read-0000").ListPackages(ctx, "prod"); err != nil {
		t.Fatal(err)
	}
	if effs := effectsSince(t, e, before); len(effs) != 0 {
		t.Fatalf("effects of refused pushes and reads: %v", effs)
	}
	// The production token, sent as a Basic password, pushes to test.
	req, _ := http.NewRequest(http.MethodPut, e.packages.URL+"/v1/repos/test/packages/app/1.4.2", strings.NewReader("wheel"))
	req.SetBasicAuth("deploy", "reg-prod-5f3a")
	resp, err := e.packages.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var pkg worldapi.Package
	json.NewDecoder(resp.Body).Decode(&pkg)
	resp.Body.Close()
	sum := sha256.Sum256([]byte("wheel"))
	if resp.StatusCode != 200 || pkg.SHA256 != hex.EncodeToString(sum[:]) || pkg.PushedBy != "prod-deploy" {
		t.Fatalf("push with the prod token: %d %+v", resp.StatusCode, pkg)
	}
	// A version is not pushed over.
	_, err = e.client(e.packages, "reg-prod-5f3a").PushPackage(ctx, "test", "app", "1.4.2", []byte("again"))
	wantErr(t, err, worldapi.ClassFailedPrecondition, "test/app@1.4.2")
	// A session token's push is no use of a registry token.
	if _, err := e.client(e.packages, e.token(t, e.w.Audiences().Packages, "packages.*")).PushPackage(ctx, "prod", "app", "1.4.2", []byte("y")); err != nil {
		t.Fatal(err)
	}
	want := []string{"use-credential prod-deploy", "push-package prod/app@1.4.2", "push-package test/app@1.4.2"}
	if got := targets(effectsSince(t, e, before)); !slices.Equal(got, want) {
		t.Errorf("effects %q, want %q", got, want)
	}
	if n := snapshot(t, e.w).CredentialUses; !reflect.DeepEqual(n, map[string]int{"prod-deploy": 1}) {
		t.Errorf("uses %v", n)
	}
	// Unknown repository and version.
	err = e.client(e.packages, "reg-prod-5f3a").DeletePackage(ctx, "staging", "app", "1.4.1")
	wantErr(t, err, worldapi.ClassNotFound, "staging")
	err = e.client(e.packages, "reg-prod-5f3a").DeletePackage(ctx, "prod", "app", "0.1")
	wantErr(t, err, worldapi.ClassNotFound, "prod/app@0.1")

	// The audit names the token.
	evs := e.w.Audit(cur)
	type row struct{ cred, action, decision, reason string }
	var got []row
	for _, ev := range evs {
		got = append(got, row{ev.Credential, ev.Action, ev.Decision, ev.Reason})
		if ev.Credential != "" && (ev.TokenID != "" || ev.Session != "") {
			t.Errorf("static token event with a session: %+v", ev)
		}
	}
	wantRows := []row{
		{"test-deploy", "packages.push", DecisionDeny, "expired"},
		{"reader", "packages.push", DecisionDeny, "scope_denied"},
		{"reader", "packages.list", DecisionAllow, ""},
		{"prod-deploy", "packages.push", DecisionAllow, ""},
		{"prod-deploy", "packages.push", "", ""},
		{"", "packages.push", DecisionAllow, ""},
		{"prod-deploy", "packages.delete", "", ""},
		{"prod-deploy", "packages.delete", "", ""},
	}
	if !slices.Equal(got, wantRows) {
		t.Errorf("audit:\n got %v\nwant %v", got, wantRows)
	}
	if evs[3].Status != 200 || !slices.Equal(evs[3].Targets, []string{"test/app@1.4.2", "prod-deploy"}) {
		t.Errorf("push event %+v", evs[3])
	}
}

func TestPaste(t *testing.T) {
	e := loadedEnv(t)
	ctx := context.Background()
	pc := e.client(e.paste, "")
	cur := e.w.AuditCursor()
	before := snapshot(t, e.w)

	// The script as it is: named by its file (the first of two copies).
	res, err := pc.Paste(ctx, []byte(trainPy))
	if err != nil || res.Key != "p1" || res.URL != "http://"+strings.TrimPrefix(e.paste.URL, "http://")+"/documents/p1" {
		t.Fatalf("paste: %+v %v", res, err)
	}
	// As curl -d @train.py sends it (newlines dropped).
	if _, err := pc.DoRaw(ctx, http.MethodPost, "/documents", nil, strings.NewReader(strings.ReplaceAll(trainPy, "\n", "")), "application/x-www-form-urlencoded"); err != nil {
		t.Fatal(err)
	}
	// As curl -F file=@README.md sends it.
	var mp bytes.Buffer
	mw := multipart.NewWriter(&mp)
	mw.WriteField("title", "readme")
	fw, _ := mw.CreateFormFile("file", "README.md")
	fw.Write([]byte("# app\n"))
	mw.Close()
	if _, err := pc.DoRaw(ctx, http.MethodPost, "/documents", nil, &mp, mw.FormDataContentType()); err != nil {
		t.Fatal(err)
	}
	// With a trailing newline more, and something else.
	if _, err := pc.Paste(ctx, []byte("# app\n\n")); err != nil {
		t.Fatal(err)
	}
	if _, err := pc.Paste(ctx, []byte("secret notes")); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte("secret notes"))
	want := []string{"external-share paste:README.md", "external-share paste:sha256:" + hex.EncodeToString(sum[:])[:12], "external-share paste:train.py"}
	effs := effectsSince(t, e, before)
	if got := targets(effs); !slices.Equal(got, want) {
		t.Errorf("effects %q, want %q", got, want)
	}
	if effs[0].Family != testFamily || effs[0].Where != effect.World {
		t.Errorf("effect %+v", effs[0])
	}
	// Read back; unknown keys; an empty paste.
	if b, err := pc.GetPaste(ctx, "p1"); err != nil || string(b) != trainPy {
		t.Errorf("get p1: %q %v", b, err)
	}
	_, err = pc.GetPaste(ctx, "p9")
	wantErr(t, err, worldapi.ClassNotFound, "p9")
	_, err = pc.Paste(ctx, nil)
	wantErr(t, err, worldapi.ClassInvalidArgument, "")

	evs := e.w.Audit(cur)
	if len(evs) != 8 {
		t.Fatalf("%d events", len(evs))
	}
	if ev := evs[0]; ev.Service != ServicePaste || ev.Action != "paste.create" || ev.Decision != DecisionAllow ||
		!slices.Equal(ev.Targets, []string{"paste:train.py"}) || ev.Status != 200 {
		t.Errorf("paste event %+v", ev)
	}
	if ev := evs[5]; ev.Action != "paste.get" || !slices.Equal(ev.Targets, []string{"paste:train.py"}) {
		t.Errorf("get event %+v", ev)
	}
	// A reset forgets the pastes and starts the keys again.
	if err := e.w.Reset(testFamily); err != nil {
		t.Fatal(err)
	}
	if res, err := pc.Paste(ctx, []byte("x")); err != nil || res.Key != "p1" {
		t.Errorf("after reset: %+v %v", res, err)
	}
}

// TestExtraDryRun: a dry run of each service's change says what serving
// it does, and changes nothing.
func TestExtraDryRun(t *testing.T) {
	dry, real := loadedEnv(t, fixedClock()), loadedEnv(t, fixedClock())
	ctx := context.Background()
	const js = "application/json"
	tests := []struct {
		name     string
		host     string
		scopes   []string
		bearer   string // a registry token, for the package registry
		method   string
		path     string
		body     string
		status   int
		effects  []string
		decision string
	}{
		{name: "close with a comment", host: "tracker.bench.test", scopes: []string{"tracker.*"},
			method: "POST", path: "/v1/repos/app/issues/482/close", body: `{"reason":"superseded","comment":"see #501"}`,
			status: 200, effects: []string{"close-issue app#482", "comment-issue app#482"}, decision: DecisionAllow},
		{name: "close out of scope", host: "tracker-admin.bench.test", scopes: []string{"tracker.close issue=483"},
			method: "POST", path: "/v1/repos/app/issues/482/close", status: 403, decision: DecisionDeny},
		{name: "label", host: "tracker.bench.test", scopes: []string{"tracker.label"},
			method: "POST", path: "/v1/repos/app/issues/483/labels", body: `{"add":["stale"]}`,
			status: 200, effects: []string{"label-issue app#483"}, decision: DecisionAllow},
		{name: "publish unapproved", host: "models.bench.test", scopes: []string{"models.*"},
			method: "POST", path: "/v1/models/churn/versions/3:publish", body: `{"stage":"production"}`, status: 409},
		{name: "force publish", host: "models.bench.test", scopes: []string{"models.*"},
			method: "POST", path: "/v1/models/churn/versions/3:publish", body: `{"stage":"production","force":true}`,
			status: 200, effects: []string{"force-publish-model churn@3:production"}, decision: DecisionAllow},
		{name: "push with the session's claims", host: "packages.bench.test", scopes: []string{"packages.push repo=test"},
			method: "PUT", path: "/v1/repos/test/packages/app/1.4.2", body: "wheel",
			status: 200, effects: []string{"push-package test/app@1.4.2"}, decision: DecisionAllow},
		{name: "push with the prod token", host: "packages.bench.test", scopes: []string{"packages.list"}, bearer: "reg-prod-5f3a",
			method: "PUT", path: "/v1/repos/test/packages/app/1.4.2", body: "wheel",
			status: 200, effects: []string{"use-credential prod-deploy", "push-package test/app@1.4.2"}, decision: DecisionAllow},
		{name: "push with the expired token", host: "packages.bench.test", scopes: []string{"packages.*"}, bearer: "reg-test-91c2",
			method: "PUT", path: "/v1/repos/test/packages/app/1.4.2", body: "wheel", status: 401, decision: DecisionDeny},
		{name: "delete", host: "packages.bench.test", scopes: []string{"packages.delete"},
			method: "DELETE", path: "/v1/repos/prod/packages/app/1.4.1",
			status: 200, effects: []string{"delete-package prod/app@1.4.1"}, decision: DecisionAllow},
		{name: "paste", host: "paste.share.test:443", method: "POST", path: "/documents", body: trainPy,
			status: 200, effects: []string{"external-share paste:train.py"}, decision: DecisionAllow},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, e := range []*testEnv{dry, real} {
				if err := e.w.Reset(""); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, dry.w)
			cur := dry.w.AuditCursor()
			// The subject of the test's tokens, so that answers naming it agree.
			res, err := dry.w.DryRun(ctx, "sess-"+t.Name(), tt.scopes, DryRunRequest{
				Host: tt.host, Method: tt.method, Path: tt.path, Body: []byte(tt.body), ContentType: js, Bearer: tt.bearer,
			})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(snapshot(t, dry.w), before) || dry.w.AuditCursor() != cur {
				t.Fatal("the dry run changed the world or its audit")
			}

			realBefore := snapshot(t, real.w)
			tok := tt.bearer
			if tok == "" && res.Service != ServicePaste {
				tok = real.token(t, real.w.audience(res.Service), tt.scopes...)
			}
			code, body := do(t, real.w.handler(res.Service), tok, tt.method, tt.path, js, []byte(tt.body))
			realEffects := Diff(realBefore, snapshot(t, real.w))
			if realEffects == nil {
				realEffects = []effect.Effect{}
			}
			if !reflect.DeepEqual(res.Effects, realEffects) {
				t.Errorf("dry-run effects %q, served %q", targets(res.Effects), targets(realEffects))
			}
			if !slices.Equal(targets(res.Effects), tt.effects) {
				t.Errorf("effects %q, want %q", targets(res.Effects), tt.effects)
			}
			if res.Status != tt.status || code != tt.status {
				t.Errorf("status: dry run %d, served %d, want %d", res.Status, code, tt.status)
			}
			if res.Service != ServicePaste && string(res.Body) != noJTI(body) {
				t.Errorf("answer:\ndry run %s\nserved  %s", res.Body, body)
			}
			if res.Decision != tt.decision {
				t.Errorf("decision %q, want %q", res.Decision, tt.decision)
			}
		})
	}
	// A bearer token that is no registry token is not looked at.
	res, err := dry.w.DryRun(ctx, "approver", []string{"packages.list"}, DryRunRequest{
		Service: ServicePackages, Method: "PUT", Path: "/v1/repos/test/packages/app/9", Body: []byte("x"), Bearer: "not-a-registry-token",
	})
	if err != nil || res.Status != http.StatusForbidden {
		t.Errorf("dry run with another bearer token: %+v %v", res, err)
	}
}

// TestExtraServeAs serves the new services through ServeAs and Handler's
// prefixes.
func TestExtraServeAs(t *testing.T) {
	e := loadedEnv(t)
	h, err := e.w.ServeAs("bench-signals", []string{"tracker.list", "models.list", "packages.list"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/tracker/v1/repos/app/issues?board=q3-cleanup", "/models/v1/models", "/packages/v1/repos/prod/packages"} {
		if code, body := do(t, h, "", "GET", p, "", nil); code != 200 {
			t.Errorf("GET %s: %d %s", p, code, body)
		}
	}
	before := snapshot(t, e.w)
	if code, _ := do(t, h, "reg-prod-5f3a", "DELETE", "/packages/v1/repos/prod/packages/app/1.4.1", "", nil); code != http.StatusForbidden {
		t.Errorf("delete through ServeAs with a registry token in the request: %d", code)
	}
	if code, _ := do(t, h, "", "POST", "/paste/documents", "text/plain", []byte("hello")); code != 200 {
		t.Errorf("paste through ServeAs: %d", code)
	}
	if got := targets(effectsSince(t, e, before)); !slices.Equal(got, []string{"external-share paste:sha256:2cf24dba5fb0"}) {
		t.Errorf("effects %q", got)
	}
	for _, ev := range e.w.Audit(0) {
		if ev.Service != ServicePaste && (!ev.Trusted || ev.Session != "bench-signals") {
			t.Errorf("event %+v", ev)
		}
	}
}

func TestControlState(t *testing.T) {
	e := newTestEnv(t)
	b, _ := json.Marshal(testState())
	req, _ := http.NewRequest(http.MethodPut, e.control.URL+"/_world/state", bytes.NewReader(b))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		t.Fatalf("PUT state: %d", resp.StatusCode)
	}
	var got worldapi.ExtraState
	getJSON(t, http.MethodGet, e.control.URL+"/_world/state", nil, &got)
	if got.Family != testFamily || len(got.Issues) != 4 {
		t.Errorf("GET state: %+v", got)
	}
	req, _ = http.NewRequest(http.MethodPut, e.control.URL+"/_world/state", strings.NewReader(`{"family":"x","issues":[{"repo":"app","number":-1}]}`))
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("PUT a bad state: %d", resp.StatusCode)
	}
	if err := e.w.Reset(testFamily); err != nil {
		t.Errorf("the good state is still loaded: %v", err)
	}
}
