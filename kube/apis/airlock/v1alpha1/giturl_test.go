package v1alpha1_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/policies"
)

// gitURLPattern is the CRD's pattern of spec.workspaceSources[].git.url.
func gitURLPattern(t testing.TB) *regexp.Regexp {
	root, err := kubetest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/crds/airlock.dev_sessions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if p, ok := strings.CutPrefix(strings.TrimSpace(l), "pattern: ^(https?://"); ok {
			return regexp.MustCompile("^(https?://" + p)
		}
	}
	t.Fatal("no git url pattern in the Session CRD")
	return nil
}

// gitURLs are URLs the node takes (policies.CheckGitURL) or refuses.
var gitURLs = []string{
	"https://git.corp.test/agents/a.git", "http://127.0.0.1:8080/repo.git", "https://git.corp.test",
	"ssh://git@git.corp.test/agents/a.git", "ssh://deploy.bot-1@127.0.0.1:2222/srv/repo.git", "ssh://_x@h/a/b/c",
	"git@git.corp.test:a.git", "ssh://git.corp.test/a.git", "ssh://git:pw@h/a", "ssh://git@h", "ssh://git@h:x/a",
	"ssh://git@[::1]:22/a", "ssh://git@h/a?x", "ssh://git@h/a#f", "ext::sh -c x", "file:///a",
}

// TestGitURLPattern: every URL the node takes the CRD's schema takes too
// (the schema refuses some early; the node's check is the one that
// decides).
func TestGitURLPattern(t *testing.T) {
	re := gitURLPattern(t)
	for _, u := range gitURLs {
		if policies.CheckGitURL(u) == "" && !re.MatchString(u) {
			t.Errorf("%q: the node takes it, the CRD's pattern does not", u)
		}
	}
	for _, u := range []string{"git@git.corp.test:a.git", "ssh://git.corp.test/a.git", "ssh://git:pw@h/a", "ssh://git@h"} {
		if re.MatchString(u) {
			t.Errorf("%q: the CRD's pattern takes it", u)
		}
	}
}

func FuzzGitURLPattern(f *testing.F) {
	re := gitURLPattern(f)
	for _, u := range gitURLs {
		f.Add(u)
	}
	f.Fuzz(func(t *testing.T, u string) {
		if policies.CheckGitURL(u) == "" && !re.MatchString(u) {
			t.Errorf("%q: the node takes it, the CRD's pattern does not", u)
		}
	})
}
