package agent_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/gitsource/gittest"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestGitSourceWorkspaceIsNotTheSandboxs: a fetched workspace reaches the
// session through its overlay alone. A Session asking for it with mode
// "rw" (at the source's target, or at a second target naming the fetched
// directory, which the daemon admits by its path alone) would have the
// sandbox write that directory under the node's root itself: past the
// session's disk bound, and into what the node pushes with none of a
// commit's checks. Both are refused before the session runs, and the
// directory is left as fetched. And the sources of a Session together
// take no more of the node's disk than its changes may.
func TestGitSourceWorkspaceIsNotTheSandboxs(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	k := startCluster(t)
	srv := gittest.NewServer(t)
	url := srv.Create("repo", map[string]string{"README": "from git\n"})
	big := srv.Create("big", map[string]string{"blob": string(random(400 << 10))})
	adm := filepath.Join(t.TempDir(), "admission.hcl")
	if err := os.WriteFile(adm, fmt.Appendf(nil, `admission {
  host_paths = ["/tmp"]
  git_source %q {
    push_branches = ["airlock/*"]
  }
  git_source %q {}
}
`, url, big), 0o644); err != nil {
		t.Fatal(err)
	}
	n := startNode(t, env, k.kubeconfig, "node-w", 16, "--node-capacity", "4", "--admission", adm)
	sources := filepath.Join(n.Root, "kube-sources")

	const bound = 2 << 20
	// 8 MiB, four times the session's disk, written by the sandbox.
	fill := func(dir string) []string {
		return []string{"sh", "-c", "dd if=/dev/zero of=" + dir + "/big bs=1M count=8 2>/dev/null; echo sandbox > " + dir + "/README"}
	}
	src := func(s *v1alpha1.Session) {
		s.Spec.WorkspaceSources = []v1alpha1.WorkspaceSource{{Target: "/work", Git: &v1alpha1.GitSource{URL: url, Ref: "main", Depth: 1, PushBranch: "airlock/" + s.Name}}}
		s.Spec.Policy.Resources.Disk = bound
	}
	k.create("rw", fill("/work"), src, func(s *v1alpha1.Session) {
		s.Spec.Policy.Workspaces = []policies.Workspace{{Target: "/work", Mode: policies.ModeRW, DefaultDenyRead: true}}
	})
	// The fetched directory's path is kube-sources/UID/0/workspace: the
	// Session is held from placement until its uid is known and its
	// policy names that path.
	k.create("alias", fill("/w2"), src, func(s *v1alpha1.Session) {
		s.Spec.NodeSelector = map[string]string{"airlock.test/none": "x"}
	})
	alias := k.get("alias")
	alias.Spec.Policy.Workspaces = []policies.Workspace{{
		HostPath: filepath.Join(sources, string(alias.UID), "0", "workspace"), Target: "/w2", Mode: policies.ModeRW, DefaultDenyRead: true,
	}}
	alias.Spec.NodeSelector = nil
	if err := k.c.Update(t.Context(), alias); err != nil {
		t.Fatal(err)
	}

	// Sources together are bounded by the session's disk: eight of a
	// repository that takes about 1.5 MB fetched (its commit in the
	// node's repository and in the workspace's, and the checkout) do not
	// fit in 2.5 MiB, although each would: the second is refused.
	k.create("many", []string{"true"}, func(s *v1alpha1.Session) {
		for _, t := range []string{"/a", "/b", "/c", "/d", "/e", "/f", "/g", "/h"} {
			s.Spec.WorkspaceSources = append(s.Spec.WorkspaceSources, v1alpha1.WorkspaceSource{Target: t, Git: &v1alpha1.GitSource{URL: big, Ref: "main", Depth: 1}})
		}
		s.Spec.Policy.Resources.Disk = 5 << 19
	})

	// Two sources of one target written two ways: one of them would be
	// fetched for nothing and its push lost.
	k.create("twice", []string{"true"}, func(s *v1alpha1.Session) {
		for _, t := range []string{"/work", "/work/"} {
			s.Spec.WorkspaceSources = append(s.Spec.WorkspaceSources, v1alpha1.WorkspaceSource{Target: t, Git: &v1alpha1.GitSource{URL: big, Ref: "main", Depth: 1}})
		}
	})

	for name, want := range map[string]string{
		"twice": "spec.workspaceSources[0] and [1] have the same target /work",
		"rw":    `has mode "rw"`,
		"alias": "is where the node fetches workspace sources",
		"many":  "spec.workspaceSources[1] (target /b): the source is larger than its bound",
	} {
		var s *v1alpha1.Session
		var last string
		deadline := time.Now().Add(120 * time.Second)
		for ; time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
			s = k.get(name)
			last = string(s.Status.State)
			if s.Status.State == v1alpha1.SessionFailed || s.Status.State == v1alpha1.SessionExited || s.Status.State == v1alpha1.SessionReview {
				break
			}
		}
		if s.Status.State != v1alpha1.SessionFailed {
			var held int64
			filepath.Walk(filepath.Join(sources, string(s.UID)), func(p string, fi os.FileInfo, err error) error {
				if st, ok := fi.Sys().(*syscall.Stat_t); err == nil && ok {
					held += st.Blocks * 512
				}
				return nil
			})
			t.Errorf("Session %s ran (state %s, %+v), want it failed saying %q: its fetched directories under the node's root hold %d bytes (its disk: %d)", name, last, s.Status, want, held, s.Spec.Policy.Resources.Disk)
			continue
		}
		if !strings.Contains(s.Status.Message, want) {
			t.Errorf("Session %s: reason %q, message %q; want it failed saying %q", name, s.Status.Reason, s.Status.Message, want)
		}
	}
	for _, r := range srv.Requests() {
		if strings.Contains(r, "git-receive-pack") && !strings.Contains(r, "info/refs") {
			t.Errorf("the node pushed: %s", r)
		}
	}
	k.deleteAll(60 * time.Second)
	if ents, _ := os.ReadDir(sources); len(ents) > 0 {
		t.Errorf("%d fetched directories left behind", len(ents))
	}
}

// random is n bytes that do not compress.
func random(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	return b
}
