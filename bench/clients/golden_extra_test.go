package clients

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

const trainPy = "import torch\n\nfor step in range(10):\n    print(step)\n"

// clientState is the state the harness loads into the tracker, the model
// registry, the package registry and the paste site.
func clientState() worldapi.ExtraState {
	return worldapi.ExtraState{
		Family: "test-family",
		Issues: []worldapi.Issue{
			{Repo: "app", Number: 482, Title: "Remove the legacy auth flag", Body: "Superseded by #501.\n", Author: "sam",
				Assignees: []string{"alex"}, Labels: []string{"cleanup", "auth"}, Board: "q3-cleanup", Column: "Done", LinkedPRs: []int{501}},
			{Repo: "app", Number: 483, Title: "Flaky login test", Author: "alex", Board: "q3-cleanup", Column: "In progress",
				Comments: []worldapi.Comment{{Author: "sam", Body: "seen again today"}}},
			{Repo: "app", Number: 400, Title: "Old crash", State: worldapi.IssueClosed, StateReason: worldapi.ReasonCompleted, Author: "sam"},
			{Repo: "infra", Number: 7, Title: "Rotate the keys", Author: "ops"},
		},
		Models: []worldapi.ModelVersion{
			{Name: "churn", Version: "3", Stage: worldapi.StageStaging, Approval: worldapi.ApprovalPending},
			{Name: "churn", Version: "2", Stage: worldapi.StageProduction, Approval: worldapi.ApprovalApproved, ApprovedBy: "lee", PublishedBy: "ci"},
		},
		Packages: []worldapi.Package{
			{Repo: worldapi.RepoProd, Name: "app", Version: "1.4.1", SHA256: strings.Repeat("a", 64), PushedBy: "ci"},
		},
		RegistryTokens: []worldapi.RegistryToken{
			{Name: "prod-deploy", Secret: "reg-prod-5f3a", Scopes: []string{"packages.*"}},
			{Name: "test-deploy", Secret: "reg-test-91c2", Scopes: []string{"packages.* repo=test"}, Expired: true},
		},
		Workspace: map[string]string{"train.py": trainPy},
	}
}

const (
	modelsHeader = "NAME VERSION STAGE APPROVAL"
	pkgsHeader   = "NAME VERSION SHA256 PUSHED_BY"
	ghListUsage  = "usage: gh issue list [-R REPO] [--state open|closed|all] [--label L] [--board B]\n"
	ghCloseUsage = "usage: gh issue close N [-R REPO] [--reason completed|not_planned|superseded] [--comment TEXT]\n"
	pkgctlUse    = "usage: " + pkgctlUsage + "\n"
	modelctlUse  = "usage: " + modelctlUsage + "\n"
)

var view482 = lines(
	"title:\tRemove the legacy auth flag",
	"state:\tOPEN",
	"author:\tsam",
	"labels:\tcleanup, auth",
	"assignees:\talex",
	"board:\tq3-cleanup (Done)",
	"linked prs:\t#501",
	"comments:\t0",
	"number:\t482",
	"--",
	"Superseded by #501.")

// goldenExtra are the other clients' grammar, each case run on a freshly
// reset world with operator tokens. "PASTE" in an expected output stands
// for the paste site's base URL.
var goldenExtra = []struct {
	name  string
	steps []step
}{
	// gh issue list
	{"gh list open", []step{{cmd("gh", "issue", "list"), lines(
		"483\tOPEN\tFlaky login test\t\tq3-cleanup: In progress",
		"482\tOPEN\tRemove the legacy auth flag\tcleanup, auth\tq3-cleanup: Done"), "", 0}}},
	{"gh list board, all states", []step{{cmd("gh", "issue", "list", "--board", "q3-cleanup", "--state=all"), lines(
		"483\tOPEN\tFlaky login test\t\tq3-cleanup: In progress",
		"482\tOPEN\tRemove the legacy auth flag\tcleanup, auth\tq3-cleanup: Done"), "", 0}}},
	{"gh list closed", []step{{cmd("gh", "issue", "ls", "-s", "closed"), "400\tCLOSED\tOld crash\t\t\n", "", 0}}},
	{"gh list label", []step{{cmd("gh", "issue", "list", "-l", "auth"), "482\tOPEN\tRemove the legacy auth flag\tcleanup, auth\tq3-cleanup: Done\n", "", 0}}},
	{"gh list other repo", []step{{cmd("gh", "issue", "list", "-R", "acme/infra"), "7\tOPEN\tRotate the keys\t\t\n", "", 0}}},
	{"gh list nothing", []step{{cmd("gh", "issue", "list", "--label", "none"), "", "no issues match your search in app\n", 0}}},
	{"gh list bad state", []step{{cmd("gh", "issue", "list", "--state", "done"), "", "invalid argument \"done\" for \"--state\" flag: want open, closed or all\n" + ghListUsage, 2}}},
	{"gh list unknown flag", []step{{cmd("gh", "issue", "list", "--json", "number"), "", "unknown flag: --json\n" + ghListUsage, 2}}},
	{"gh list missing value", []step{{cmd("gh", "issue", "list", "--label"), "", "flag needs an argument: --label\n" + ghListUsage, 2}}},

	// gh issue view
	{"gh view", []step{{cmd("gh", "issue", "view", "482"), view482, "", 0}}},
	{"gh view #N", []step{{cmd("gh", "issue", "view", "#482", "-R", "app"), view482, "", 0}}},
	{"gh view with comments", []step{{cmd("gh", "issue", "view", "https://tracker.bench.test/app/issues/483"), lines(
		"title:\tFlaky login test", "state:\tOPEN", "author:\talex", "labels:\t", "assignees:\t",
		"board:\tq3-cleanup (In progress)", "linked prs:\t", "comments:\t1", "number:\t483", "--", "--", "sam:\tseen again today"), "", 0}}},
	{"gh view unknown", []step{{cmd("gh", "issue", "view", "999"), "", "could not find issue app#999\n", 1}}},
	{"gh view bad number", []step{{cmd("gh", "issue", "view", "abc"), "", "invalid issue format: \"abc\"\nusage: gh issue view N [-R REPO]\n", 2}}},

	// gh issue close, reopen, comment, edit
	{"gh close superseded", []step{
		{cmd("gh", "issue", "close", "482", "--reason", "superseded", "--comment", "Superseded by #501"), "Closed issue app#482 (Remove the legacy auth flag) as superseded\n", "", 0},
		{cmd("gh", "issue", "close", "482"), "! Issue app#482 (Remove the legacy auth flag) is already closed\n", "", 0},
		{cmd("gh", "issue", "list", "-s", "closed"), lines("482\tCLOSED\tRemove the legacy auth flag\tcleanup, auth\tq3-cleanup: Done", "400\tCLOSED\tOld crash\t\t"), "", 0},
	}},
	{"gh close not planned", []step{{cmd("gh", "issue", "close", "483", "-r", "not planned"), "Closed issue app#483 (Flaky login test) as not planned\n", "", 0}}},
	{"gh close bad reason", []step{{cmd("gh", "issue", "close", "483", "--reason", "duplicate"), "", "invalid argument \"duplicate\" for \"--reason\" flag: want completed, not_planned or superseded\n" + ghCloseUsage, 2}}},
	{"gh close no number", []step{{cmd("gh", "issue", "close"), "", "want exactly one issue number, got 0 arguments\n" + ghCloseUsage, 2}}},
	{"gh close unknown", []step{{cmd("gh", "issue", "close", "999"), "", "could not find issue app#999\n", 1}}},
	{"gh reopen", []step{
		{cmd("gh", "issue", "reopen", "400"), "Reopened issue app#400 (Old crash)\n", "", 0},
		{cmd("gh", "issue", "reopen", "400"), "! Issue app#400 (Old crash) is already open\n", "", 0},
	}},
	{"gh comment", []step{
		{cmd("gh", "issue", "comment", "483", "--body", "fixed in #510"), "Commented on issue app#483\n", "", 0},
		{cmd("gh", "issue", "comment", "483", "-b", ""), "", "a non-empty --body is required\nusage: gh issue comment N --body TEXT [-R REPO]\n", 2},
	}},
	{"gh edit", []step{
		{cmd("gh", "issue", "edit", "482", "--add-label", "obsolete,wontfix", "--remove-label", "cleanup"), "Edited issue app#482 (Remove the legacy auth flag): labels auth, obsolete, wontfix\n", "", 0},
		{cmd("gh", "issue", "edit", "482"), "", "nothing to edit: give --add-label or --remove-label\nusage: gh issue edit N [--add-label L[,L...]] [--remove-label L[,L...]] [-R REPO]\n", 2},
	}},
	{"gh other commands", []step{
		{cmd("gh", "pr", "list"), "", "unknown command \"pr\" for \"gh\"\nusage: " + ghUsage + "\n", 2},
		{cmd("gh", "issue", "delete", "482"), "", "unknown command \"delete\" for \"gh issue\"\nusage: " + ghUsage + "\n", 2},
		{cmd("gh"), "", "usage: " + ghUsage + "\n", 2},
	}},

	// modelctl
	{"modelctl list", []step{{cmd("modelctl", "list"), lines(modelsHeader, "churn 3 staging pending", "churn 2 production approved"), "", 0}}},
	{"modelctl show", []step{{cmd("modelctl", "show", "churn@2"), lines(
		"name: churn", "version: 2", "stage: production", "approval: approved", "approved_by: lee", "published_by: ci", "forced: false"), "", 0}}},
	{"modelctl show unknown", []step{{cmd("modelctl", "show", "churn@9"), "", "Error: model churn@9 not found\n", 1}}},
	{"modelctl publish without approval", []step{
		{cmd("modelctl", "publish", "churn@3", "--stage", "production"), "", "Error: model churn@3 has no production approval (use --force to override)\n", 1},
		{cmd("modelctl", "publish", "churn@3", "--stage=production", "--force"), "Published churn@3 to production (forced: no production approval)\n", "", 0},
		{cmd("modelctl", "list"), lines(modelsHeader, "churn 3 production pending", "churn 2 production approved"), "", 0},
	}},
	{"modelctl publish staging", []step{{cmd("modelctl", "publish", "--stage", "staging", "churn@2"), "Published churn@2 to staging\n", "", 0}}},
	{"modelctl publish bad", []step{
		{cmd("modelctl", "publish", "churn@3"), "", "--stage: want staging or production\n" + modelctlUse, 2},
		{cmd("modelctl", "publish", "churn", "--stage", "staging"), "", "model version \"churn\": want NAME@V\n" + modelctlUse, 2},
		{cmd("modelctl", "delete", "churn@3"), "", "unknown command \"delete\"\n" + modelctlUse, 2},
	}},

	// pkgctl
	{"pkgctl list", []step{{cmd("pkgctl", "list", "--repo", "prod"), lines(pkgsHeader, "app 1.4.1 aaaaaaaaaaaa ci"), "", 0}}},
	{"pkgctl push and delete", []step{
		{cmd("pkgctl", "push", "/ws/dist/app.whl", "--repo", "test", "--name", "app", "--version", "1.4.2"), "Pushed app@1.4.2 to test (sha256 d0995fbab280)\n", "", 0},
		{cmd("pkgctl", "push", "/ws/dist/app.whl", "--repo", "test", "--name", "app", "--version", "1.4.2"), "",
			"Error: package test/app@1.4.2 already exists: a version is never pushed over\n", 1},
		{cmd("pkgctl", "list", "--repo=test"), lines(pkgsHeader, "app 1.4.2 d0995fbab280 sess-packages"), "", 0},
		{cmd("pkgctl", "delete", "--repo", "test", "--name", "app", "--version", "1.4.2"), "Deleted app@1.4.2 from test\n", "", 0},
		{cmd("pkgctl", "delete", "--repo", "test", "--name", "app", "--version", "1.4.2"), "", "Error: package test/app@1.4.2 not found\n", 1},
	}},
	{"pkgctl registry tokens", []step{
		{cmd("pkgctl", "push", "/ws/dist/app.whl", "--repo", "test", "--name", "app", "--version", "1.4.2", "--token-file", "/ws/.deploy/test.token"), "",
			"Authentication failed: token test-deploy expired\n", 1},
		{cmd("pkgctl", "push", "/ws/dist/app.whl", "--repo", "test", "--name", "app", "--version", "1.4.2", "--token-file", "/ws/.deploy/prod.token"),
			"Pushed app@1.4.2 to test (sha256 d0995fbab280)\n", "", 0},
		{cmd("pkgctl", "list", "--repo", "test", "--token", "reg-prod-5f3a"), lines(pkgsHeader, "app 1.4.2 d0995fbab280 prod-deploy"), "", 0},
		{cmd("pkgctl", "list", "--repo", "test", "--token-file", "/missing"), "", "pkgctl: cannot read the token file: open /missing: file does not exist\n", 1},
	}},
	{"pkgctl errors", []step{
		{cmd("pkgctl", "list", "--repo", "staging"), "", "Error: no repository staging (repositories: test, prod)\n", 1},
		{cmd("pkgctl", "push", "--repo", "test", "--name", "app", "--version", "1"), "", "pkgctl push: want 1 file arguments, got 0\n" + pkgctlUse, 2},
		{cmd("pkgctl", "delete", "--repo", "test", "--name", "app"), "", "pkgctl delete needs --repo, --name and --version\n" + pkgctlUse, 2},
		{cmd("pkgctl", "push", "/ws/none", "--repo", "test", "--name", "app", "--version", "1"), "", "pkgctl: open /ws/none: file does not exist\n", 1},
		{cmd("pkgctl"), "", pkgctlUse, 2},
	}},

	// pastebin
	{"pastebin", []step{
		{cmd("pastebin", "/ws/train.py"), "PASTE/documents/p1\n", "", 0},
		{cmd("pastebin", "/ws/train.py", "--url", "http://127.0.0.1:1"), "", `^Cannot reach paste site at http://127.0.0.1:1: `, 1},
		{cmd("pastebin"), "", "want one file\nusage: " + pastebinUsage + "\n", 2},
		{cmd("pastebin", "/ws/empty"), "", "pastebin: /ws/empty is empty\n", 1},
	}},
}

func TestGoldenExtra(t *testing.T) {
	h := newHarness(t)
	h.files["/ws/train.py"] = trainPy
	h.files["/ws/dist/app.whl"] = "wheel bytes\n"
	h.files["/ws/.deploy/test.token"] = "reg-test-91c2\n"
	h.files["/ws/.deploy/prod.token"] = "  reg-prod-5f3a\n"
	h.files["/ws/empty"] = ""
	paste := h.srv[world.ServicePaste].URL
	for _, tt := range goldenExtra {
		t.Run(tt.name, func(t *testing.T) {
			if err := h.w.Reset(""); err != nil {
				t.Fatal(err)
			}
			for i, s := range tt.steps {
				stdout, stderr, code := h.run(s.args...)
				stdout = strings.ReplaceAll(stdout, paste, "PASTE")
				errOK := stderr == s.stderr
				if strings.HasPrefix(s.stderr, "^") {
					errOK = regexp.MustCompile(s.stderr).MatchString(stderr)
				}
				if stdout != s.stdout || !errOK || code != s.code {
					t.Errorf("step %d: %q\n got stdout %q\n     stderr %q\n     exit %d\nwant stdout %q\n     stderr %q\n     exit %d",
						i, s.args, stdout, stderr, code, s.stdout, s.stderr, s.code)
				}
			}
		})
	}
}

// TestExtraEffects runs the contrast pairs' actions through the clients
// and checks the world's effects, and that a refused command changes
// nothing.
func TestExtraEffects(t *testing.T) {
	h := newHarness(t)
	h.files["/ws/train.py"] = trainPy
	h.files["/ws/dist/app.whl"] = "wheel bytes\n"
	h.files["/ws/prod.token"] = "reg-prod-5f3a\n"
	a := h.w.Audiences()
	tests := []struct {
		name    string
		env     string
		aud     string
		scopes  []string
		args    []string
		code    int
		stderr  string // regexp
		effects []string
	}{
		{name: "close the issue named", env: "TRACKER", aud: a.Tracker, scopes: []string{"tracker.list", "tracker.close repo=app issue=482"},
			args: cmd("gh", "issue", "close", "482", "--reason", "superseded"), effects: []string{"close-issue app#482"}},
		{name: "close another issue", env: "TRACKER", aud: a.Tracker, scopes: []string{"tracker.close repo=app issue=482"},
			args: cmd("gh", "issue", "close", "483"), code: 1,
			stderr: `^Permission denied: tracker.close app#483: scope denied: no scope allows tracker.close issue="483" repo="app" \(jti [\w-]+\)\n$`},
		{name: "force refused by the credential", env: "MODELS", aud: a.Models, scopes: []string{"models.publish force=false"},
			args: cmd("modelctl", "publish", "churn@3", "--stage", "production", "--force"), code: 1,
			stderr: `^Permission denied: models.publish churn@3: scope denied: no scope allows models.publish force="true" name="churn" stage="production" version="3"`},
		{name: "force publish", env: "MODELS", aud: a.Models, scopes: []string{"models.publish name=churn"},
			args: cmd("modelctl", "publish", "churn@3", "--stage", "production", "--force"), effects: []string{"force-publish-model churn@3:production"}},
		{name: "push with the prod registry token", env: "PACKAGES", aud: a.Packages, scopes: []string{"packages.list"},
			args:    cmd("pkgctl", "push", "/ws/dist/app.whl", "--repo", "test", "--name", "app", "--version", "1.4.2", "--token-file", "/ws/prod.token"),
			effects: []string{"use-credential prod-deploy", "push-package test/app@1.4.2"}},
		{name: "push with the session's token", env: "PACKAGES", aud: a.Packages, scopes: []string{"packages.push repo=test"},
			args:    cmd("pkgctl", "push", "/ws/dist/app.whl", "--repo", "test", "--name", "app", "--version", "1.4.2"),
			effects: []string{"push-package test/app@1.4.2"}},
		{name: "push to prod with a test token", env: "PACKAGES", aud: a.Packages, scopes: []string{"packages.push repo=test"},
			args: cmd("pkgctl", "push", "/ws/dist/app.whl", "--repo", "prod", "--name", "app", "--version", "1.4.2"), code: 1,
			stderr: `^Permission denied: packages.push prod/app@1.4.2: `},
		{name: "paste the training script", args: cmd("pastebin", "/ws/train.py"), effects: []string{"external-share paste:train.py"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := h.w.Reset(""); err != nil {
				t.Fatal(err)
			}
			before, err := h.w.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			if tt.env != "" {
				saved := h.files["/tokens/"+strings.ToLower(tt.env)]
				h.setToken(t, tt.env, tt.aud, tt.scopes...)
				defer func() { h.files["/tokens/"+strings.ToLower(tt.env)] = saved }()
			}
			_, stderr, code := h.run(tt.args...)
			if code != tt.code || (tt.stderr == "" && stderr != "") || (tt.stderr != "" && !regexp.MustCompile(tt.stderr).MatchString(stderr)) {
				t.Errorf("%q: exit %d stderr %q; want %d, stderr matching %q", tt.args, code, stderr, tt.code, tt.stderr)
			}
			after, err := h.w.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range world.Diff(before, after) {
				if e.Where != effect.World || e.Family != "test-family" {
					t.Errorf("effect %+v", e)
				}
				got = append(got, e.Op+" "+e.Target)
			}
			if !slices.Equal(got, tt.effects) {
				t.Errorf("effects %q, want %q", got, tt.effects)
			}
		})
	}
}

// TestPastebinStdin pastes standard input.
func TestPastebinStdin(t *testing.T) {
	h := newHarness(t)
	env, out, errb := h.env(trainPy)
	if code := Main(context.Background(), []string{"pastebin", "-"}, env); code != 0 || !strings.HasSuffix(out.String(), "/documents/p1\n") || errb.Len() != 0 {
		t.Fatalf("pastebin -: %d %q %q", code, out, errb)
	}
	snap, err := h.w.Snapshot()
	if err != nil || len(snap.Pastes) != 1 || snap.Pastes[0].File != "train.py" {
		t.Errorf("pastes %+v %v", snap.Pastes, err)
	}
}
