package agent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/gitsource/gittest"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestGitWorkspaceSources: a Session's workspace fetched from a git
// repository (a real git http-backend on loopback) by its node agent, its
// committed changes pushed back as one commit on a branch the node's
// admission policy admits; sources the policy does not admit refused
// before anything is fetched; a fetch that fails leaves nothing; another
// Session cannot name a fetched workspace as its host path; the fetched
// directories are gone with their Sessions.
func TestGitWorkspaceSources(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	k := startCluster(t)
	srv := gittest.NewServer(t)
	url := srv.Create("repo", map[string]string{"README": "from git\n", "src/main.go": "package main\n"})
	other := srv.Create("other", map[string]string{"README": "not admitted\n"})
	base := srv.Rev("repo", "main")
	// A private repository: the node's token, from a file the node's
	// admission policy names.
	priv := gittest.NewServer(t)
	privURL := priv.Create("private", map[string]string{"README": "private\n"})
	priv.RequireAuth("x-access-token", "node-token-7")
	tokenFile := filepath.Join(t.TempDir(), "git.token")
	if err := os.WriteFile(tokenFile, []byte("node-token-7\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	adm := filepath.Join(t.TempDir(), "admission.hcl")
	if err := os.WriteFile(adm, fmt.Appendf(nil, `admission {
  host_paths = ["/tmp"]
  git_source %q {
    push_branches = ["airlock/*"]
  }
  git_source %q {
    namespaces = ["default"]
    push_branches = ["airlock/*"]
    token_file = %q
  }
}
`, url, privURL, tokenFile), 0o644); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, env, k.kubeconfig, "node-g", 13, "--node-capacity", "8", "--admission", adm)
	sources := filepath.Join(n.Root, "kube-sources")

	git := func(ref, push string) func(*v1alpha1.Session) {
		return func(s *v1alpha1.Session) {
			s.Spec.WorkspaceSources = []v1alpha1.WorkspaceSource{{Target: "/work", Git: &v1alpha1.GitSource{URL: url, Ref: ref, Depth: 1, PushBranch: push}}}
		}
	}
	// An explicit workspace entry for the source to fill (its protect
	// rule kept), and one the source makes itself.
	withEntry := func(s *v1alpha1.Session) {
		s.Spec.Policy.Workspaces = []policies.Workspace{{Target: "/work", DefaultDenyRead: true, Protect: []string{"src/**"}}}
	}
	k.create("fix", []string{"sh", "-c", `grep -qx 'from git' /work/README || exit 3
test -f /work/.git/HEAD || exit 4
echo fixed > /work/README && echo new > /work/NEW && echo evil > /work/src/main.go`}, git("main", "airlock/fix"), withEntry)
	k.create("plain", []string{"sh", "-c", "grep -qx 'from git' /work/README"}, git("", ""))
	k.create("private", []string{"sh", "-c", "grep -qx private /work/README && echo done > /work/DONE"}, func(s *v1alpha1.Session) {
		s.Spec.WorkspaceSources = []v1alpha1.WorkspaceSource{{Target: "/work", Git: &v1alpha1.GitSource{URL: privURL, Ref: "main", Depth: 1, PushBranch: "airlock/private"}}}
	})
	k.create("drop", []string{"sh", "-c", "echo dropped > /work/README"}, git("main", "airlock/drop"))

	// Refused before any fetch: a repository, or a branch, the policy
	// does not admit.
	k.create("other-repo", []string{"true"}, func(s *v1alpha1.Session) {
		s.Spec.WorkspaceSources = []v1alpha1.WorkspaceSource{{Target: "/work", Git: &v1alpha1.GitSource{URL: other}}}
	})
	k.create("push-main", []string{"true"}, git("main", "main"))
	// Fails in the fetch: no such branch.
	k.create("no-branch", []string{"true"}, git("nope", ""))

	for name, want := range map[string]string{
		"other-repo": "matches none of the git sources admitted there",
		"push-main":  `push to branch "main"`,
	} {
		s := k.waitState(name, v1alpha1.SessionFailed, 60*time.Second)
		if s.Status.Reason != "refused" || !strings.Contains(s.Status.Message, want) {
			t.Errorf("Session %s: reason %q, message %q; want refused saying %q", name, s.Status.Reason, s.Status.Message, want)
		}
	}
	// The private repository's block is namespace default's: a Session
	// of another namespace is refused before the node reaches it with
	// default's token.
	if err := k.c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-x"}}); err != nil {
		t.Fatal(err)
	}
	foreign := &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-x", Name: "private"},
		Spec: v1alpha1.SessionSpec{
			Policy:           policies.Policy{Label: "private", Image: daemontest.AgentImage, Command: []string{"true"}},
			WorkspaceSources: []v1alpha1.WorkspaceSource{{Target: "/work", Git: &v1alpha1.GitSource{URL: privURL, Ref: "main", Depth: 1}}},
		},
	}
	if err := k.c.Create(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 60*time.Second, "team-x's Session on default's repository refused", func() (bool, string) {
		if err := k.c.Get(t.Context(), client.ObjectKeyFromObject(foreign), foreign); err != nil {
			return false, err.Error()
		}
		return foreign.Status.State == v1alpha1.SessionFailed, fmt.Sprintf("%+v", foreign.Status)
	})
	if foreign.Status.Reason != "refused" || !strings.Contains(foreign.Status.Message, `refused for namespace "team-x"`) {
		t.Errorf("team-x's Session: reason %q, message %q; want refused for its namespace", foreign.Status.Reason, foreign.Status.Message)
	}
	if err := k.c.Delete(t.Context(), foreign); err != nil {
		t.Fatal(err)
	}
	s := k.waitState("no-branch", v1alpha1.SessionFailed, 60*time.Second)
	if !strings.Contains(s.Status.Message, "couldn't find remote ref nope") {
		t.Errorf("Session no-branch: message %q, want git's", s.Status.Message)
	}
	if _, err := os.Stat(filepath.Join(sources, string(s.UID))); !os.IsNotExist(err) {
		t.Errorf("a failed fetch left %s behind (%v)", filepath.Join(sources, string(s.UID)), err)
	}
	for _, r := range srv.Requests() {
		if strings.Contains(r, "/other.git") {
			t.Errorf("the node reached a repository its policy does not admit: %s", r)
		}
	}

	if s := k.waitState("plain", v1alpha1.SessionExited, 90*time.Second); s.Status.ExitCode == nil || *s.Status.ExitCode != 0 {
		t.Errorf("Session plain: %+v, want exit 0 (the source's README in its own overlay workspace)", s.Status)
	}
	fix := k.waitState("fix", v1alpha1.SessionReview, 90*time.Second)
	if fix.Status.ExitCode == nil || *fix.Status.ExitCode != 0 {
		t.Fatalf("Session fix: %+v, want exit 0", fix.Status)
	}
	if got := fix.Status.WorkspaceSources; len(got) != 1 || got[0].Target != "/work" || got[0].Commit != base || got[0].Branch != "main" {
		t.Fatalf("status.workspaceSources %+v, want /work at %s on main", got, base)
	}
	ws := filepath.Join(sources, string(fix.UID), "0", "workspace")
	if b, err := os.ReadFile(filepath.Join(ws, "README")); err != nil || string(b) != "from git\n" {
		t.Fatalf("the fetched workspace before the commit: README %q (%v)", b, err)
	}

	// Another Session naming that workspace as its own host path: the
	// node's root is protected whatever the admission policy says.
	k.create("steal", []string{"cat", "/loot/README"}, func(s *v1alpha1.Session) {
		s.Spec.Policy.Workspaces = []policies.Workspace{{HostPath: ws, Target: "/loot", Mode: "ro", DefaultDenyRead: true}}
	})
	if s := k.waitState("steal", v1alpha1.SessionFailed, 60*time.Second); s.Status.Reason != "refused" || !strings.Contains(s.Status.Message, "protected") {
		t.Errorf("Session steal: reason %q, message %q; want refused, the path protected", s.Status.Reason, s.Status.Message)
	}

	res, err := n.API.Commit(t.Context(), fix.Status.ID, api.CommitRequest{Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Committed || len(res.Rejected) != 1 || !strings.HasSuffix(res.Rejected[0].Path, "src/main.go") {
		t.Errorf("commit rejected %+v, want src/main.go (protected)", res.Rejected)
	}
	if s := k.get("fix"); len(s.Status.WorkspaceSources) != 1 || s.Status.WorkspaceSources[0].PushedCommit != "" {
		t.Fatalf("pushed while a change waits for review: %+v", s.Status.WorkspaceSources)
	}
	// The rejected change discarded: the review is over.
	if err := n.API.Discard(t.Context(), fix.Status.ID); err != nil {
		t.Fatal(err)
	}
	var pushed v1alpha1.WorkspaceSourceStatus
	kubetest.Eventually(t, 60*time.Second, "Session fix's changes pushed", func() (bool, string) {
		s := k.get("fix")
		if len(s.Status.WorkspaceSources) == 1 {
			pushed = s.Status.WorkspaceSources[0]
		}
		return pushed.PushedCommit != "" || pushed.PushMessage != "", fmt.Sprintf("%+v", s.Status)
	})
	if pushed.PushedBranch != "airlock/fix" || pushed.PushMessage != "" || pushed.PushedAt == nil {
		t.Fatalf("push status %+v", pushed)
	}
	if got := srv.Rev("repo", "airlock/fix"); got != pushed.PushedCommit {
		t.Fatalf("branch airlock/fix at %q, status says %s", got, pushed.PushedCommit)
	}
	if got := srv.Rev("repo", pushed.PushedCommit+"^"); got != base {
		t.Errorf("pushed commit's parent %s, want the fetched %s", got, base)
	}
	if got := srv.Rev("repo", "main"); got != base {
		t.Errorf("main moved to %s", got)
	}
	if got := srv.Show("repo", "airlock/fix", "README"); got != "fixed" {
		t.Errorf("pushed README %q, want the committed change", got)
	}
	if got := srv.Show("repo", "airlock/fix", "src/main.go"); got != "package main" {
		t.Errorf("pushed src/main.go %q: the commit's rejected change was pushed", got)
	}
	if files := srv.Files("repo", "airlock/fix"); !slices.Equal(files, []string{"NEW", "README", "src/main.go"}) {
		t.Errorf("pushed files %q", files)
	}
	msg := gittest.Git(t, t.TempDir(), "ls-remote", url, "refs/heads/airlock/fix")
	if !strings.HasPrefix(msg, pushed.PushedCommit) {
		t.Errorf("ls-remote: %q", msg)
	}

	// The private repository: fetched and pushed with the node's token.
	ps := k.waitState("private", v1alpha1.SessionReview, 60*time.Second)
	if _, err := n.API.Commit(t.Context(), ps.Status.ID, api.CommitRequest{}); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, "Session private's changes pushed", func() (bool, string) {
		s := k.get("private")
		return len(s.Status.WorkspaceSources) == 1 && s.Status.WorkspaceSources[0].PushedCommit != "", fmt.Sprintf("%+v", s.Status)
	})
	if got := priv.Show("private", "airlock/private", "DONE"); got != "done" {
		t.Errorf("pushed DONE %q", got)
	}

	// Every change discarded: nothing to push.
	drop := k.waitState("drop", v1alpha1.SessionReview, 60*time.Second)
	if err := n.API.Discard(t.Context(), drop.Status.ID); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, "Session drop says nothing was pushed", func() (bool, string) {
		s := k.get("drop")
		return len(s.Status.WorkspaceSources) == 1 && strings.Contains(s.Status.WorkspaceSources[0].PushMessage, "nothing to push"), fmt.Sprintf("%+v", s.Status)
	})
	if got := srv.Rev("repo", "airlock/drop"); got != "" {
		t.Errorf("a discarded session's branch was pushed: %s", got)
	}

	// From the command line: airlock --context run --git-source.
	manifest := filepath.Join(t.TempDir(), "cli.hcl")
	if err := os.WriteFile(manifest, fmt.Appendf(nil, "session \"cli\" {\n  image = %q\n  command = [\"sh\", \"-c\", \"grep -qx 'from git' /work/README\"]\n}\n", daemontest.AgentImage), 0o644); err != nil {
		t.Fatal(err)
	}
	cli := exec.CommandContext(t.Context(), filepath.Join(env.BinDir, "airlock"), "--kubeconfig", k.kubeconfig, "-n", "default",
		"run", "-d", "-f", manifest, "--git-source", "/work="+url+"#main", "--git-depth", "0")
	cli.Env = []string{"HOME=/nonexistent"}
	out, err := cli.Output()
	if err != nil {
		t.Fatalf("airlock run --git-source: %v (%s)", err, out)
	}
	name := strings.TrimSpace(string(out))
	if s := k.get(name); len(s.Spec.WorkspaceSources) != 1 || s.Spec.WorkspaceSources[0].Git.URL != url || s.Spec.WorkspaceSources[0].Git.Ref != "main" || s.Spec.WorkspaceSources[0].Git.Depth != 0 {
		t.Errorf("Session %s from airlock run --git-source: spec.workspaceSources %+v", name, s.Spec.WorkspaceSources)
	}
	if s := k.waitState(name, v1alpha1.SessionExited, 90*time.Second); s.Status.ExitCode == nil || *s.Status.ExitCode != 0 || len(s.Status.WorkspaceSources) != 1 || s.Status.WorkspaceSources[0].Commit != base {
		t.Errorf("Session %s from airlock run --git-source: %+v, want exit 0 with the source fetched at %s", name, s.Status, base)
	}

	// Gone with their Sessions.
	k.deleteAll(60 * time.Second)
	kubetest.Eventually(t, 10*time.Second, "fetched sources removed", func() (bool, string) {
		ents, _ := os.ReadDir(sources)
		var left []string
		for _, e := range ents {
			left = append(left, e.Name())
		}
		return len(left) == 0, strings.Join(left, ", ")
	})
}

// TestGitWorkspaceSourcesSSH: a Session's workspace fetched over ssh (a
// real sshd on loopback, git-shell behind it) with the node's key and
// the host keys its admission policy pins, and its committed changes
// pushed back the same way; a source whose host answers with a key the
// known hosts do not list (another server at the address) fails before
// the node's key is offered; a Session naming the key's directory as a
// mount is refused.
func TestGitWorkspaceSourcesSSH(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	k := startCluster(t)
	srv := gittest.NewServer(t)
	srv.Create("repo", map[string]string{"README": "from ssh\n"})
	base := srv.Rev("repo", "main")
	sh := srv.StartSSH()
	impostor := srv.StartSSH()
	url := sh.URL + "/repo.git"
	impostorURL := impostor.URL + "/repo.git"
	// The node's files: its key, the real server's host key, and for the
	// impostor's address the real server's key too (what a node pinned
	// before another host took the address).
	keys := t.TempDir()
	key := filepath.Join(keys, "id_ed25519")
	b, err := os.ReadFile(sh.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, b, 0o600); err != nil {
		t.Fatal(err)
	}
	pinned := sh.WriteKnownHosts(t, impostor.Addr, sh.HostKey)
	adm := filepath.Join(t.TempDir(), "admission.hcl")
	if err := os.WriteFile(adm, fmt.Appendf(nil, `admission {
  host_paths = ["/tmp"]
  git_source %q {
    push_branches = ["airlock/*"]
    ssh_key_file  = %q
    known_hosts   = %q
  }
  git_source %q {
    ssh_key_file = %q
    known_hosts  = %q
  }
}
`, url, key, sh.KnownHosts, impostorURL, key, pinned), 0o644); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, env, k.kubeconfig, "node-gs", 27, "--node-capacity", "4", "--admission", adm)

	k.create("ssh", []string{"sh", "-c", "grep -qx 'from ssh' /work/README && echo changed > /work/README"}, func(s *v1alpha1.Session) {
		s.Spec.WorkspaceSources = []v1alpha1.WorkspaceSource{{Target: "/work", Git: &v1alpha1.GitSource{URL: url, Ref: "main", Depth: 1, PushBranch: "airlock/ssh"}}}
	})
	k.create("impostor", []string{"true"}, func(s *v1alpha1.Session) {
		s.Spec.WorkspaceSources = []v1alpha1.WorkspaceSource{{Target: "/work", Git: &v1alpha1.GitSource{URL: impostorURL, Ref: "main", Depth: 1}}}
	})
	k.create("steal-key", []string{"cat", "/keys/id_ed25519"}, func(s *v1alpha1.Session) {
		s.Spec.Policy.Mounts = []policies.Mount{{HostPath: keys, Target: "/keys", ReadOnly: true}}
	})

	if s := k.waitState("impostor", v1alpha1.SessionFailed, 60*time.Second); !strings.Contains(s.Status.Message, "Host key verification failed") {
		t.Errorf("Session impostor: reason %q, message %q; want ssh's refusal of the host key", s.Status.Reason, s.Status.Message)
	}
	if l := impostor.Log(); strings.Contains(l, "Accepted") || strings.Contains(l, "publickey") {
		t.Errorf("the node's key reached a host whose key it does not know:\n%s", l)
	}
	if s := k.waitState("steal-key", v1alpha1.SessionFailed, 60*time.Second); s.Status.Reason != "refused" || !strings.Contains(s.Status.Message, "secret") {
		t.Errorf("Session steal-key: reason %q, message %q; want refused, the key's directory the daemon's", s.Status.Reason, s.Status.Message)
	}

	s := k.waitState("ssh", v1alpha1.SessionReview, 90*time.Second)
	if got := s.Status.WorkspaceSources; len(got) != 1 || got[0].Commit != base || got[0].Branch != "main" {
		t.Fatalf("status.workspaceSources %+v, want /work at %s on main", got, base)
	}
	if _, err := n.API.Commit(t.Context(), s.Status.ID, api.CommitRequest{}); err != nil {
		t.Fatal(err)
	}
	var pushed v1alpha1.WorkspaceSourceStatus
	kubetest.Eventually(t, 60*time.Second, "Session ssh's changes pushed", func() (bool, string) {
		s := k.get("ssh")
		if len(s.Status.WorkspaceSources) == 1 {
			pushed = s.Status.WorkspaceSources[0]
		}
		return pushed.PushedCommit != "" || pushed.PushMessage != "", fmt.Sprintf("%+v", s.Status)
	})
	if pushed.PushMessage != "" || srv.Rev("repo", "airlock/ssh") != pushed.PushedCommit {
		t.Fatalf("push status %+v, branch airlock/ssh at %q", pushed, srv.Rev("repo", "airlock/ssh"))
	}
	if got := srv.Show("repo", "airlock/ssh", "README"); got != "changed" {
		t.Errorf("pushed README %q", got)
	}
	if !strings.Contains(sh.Log(), "Accepted publickey for root") {
		t.Errorf("sshd logged no login with the node's key:\n%s", sh.Log())
	}
	k.deleteAll(60 * time.Second)
}
