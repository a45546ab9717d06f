package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The --context flags: bad use is a usage error, and nothing is sent.
func TestKubeFlags(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "config")
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters:
- name: c
  cluster: {server: "https://127.0.0.1:1"}
users:
- name: token
  user: {token: abc}
- name: cert
  user: {client-certificate-data: "", client-key-data: ""}
contexts:
- name: withtoken
  context: {cluster: c, user: token, namespace: team-a}
- name: certonly
  context: {cluster: c, user: cert}
current-context: withtoken
`), 0o600); err != nil {
		t.Fatal(err)
	}
	manifest := filepath.Join(dir, "hello.hcl")
	if err := os.WriteFile(manifest, []byte(helloHCL), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-n", "team-a", "ps"}, "--namespace needs --context or --kubeconfig"},
		{[]string{"--node-token", "bound", "ps"}, "--node-token needs --context or --kubeconfig"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "withtoken", "--node-token", "sometimes", "ps"}, `--node-token (or AIRLOCK_NODE_TOKEN) "sometimes": want auto, bound or forward`},
		{[]string{"--kubeconfig", kubeconfig, "--context", "withtoken", "update", "x"}, "airlock update does not work with --context"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "withtoken", "approvals"}, "airlock approvals does not work with --context"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "nosuch", "ps"}, `context "nosuch" does not exist`},
		{[]string{"--kubeconfig", kubeconfig, "--context", "certonly", "ps"}, "take bearer tokens only, not client certificates"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "withtoken", "run", "-t", "-f", manifest}, "-t needs a terminal on stdin"},
		{[]string{"run", "-f", manifest, "--git-source", "/work=https://git.test/r.git"}, "work with --context only"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "withtoken", "run", "-f", manifest, "--git-source", "work=https://git.test/r.git"}, "not a clean absolute path"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "withtoken", "run", "-f", manifest, "--git-source", "/work=https://tok@git.test/r.git"}, "without credentials"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "withtoken", "run", "-f", manifest, "--git-source", "/work=file:///srv/r.git"}, "want an http or https URL"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "withtoken", "run", "-f", manifest, "--git-source", "/work=https://git.test/r.git", "--git-push", "/other=airlock/x"}, "no --git-source fills /other"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "withtoken", "run", "-f", manifest, "--git-source", "/work=https://git.test/a.git", "--git-source", "/work=https://git.test/b.git"}, "has a source already"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "withtoken", "run", "-f", manifest, "--git-source", "/work=https://git.test/r.git", "--git-depth", "-1"}, "want 0 (all) or more"},
		{[]string{"run", "-f", manifest, "--volume-claim", "/work=data"}, "work with --context only"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "withtoken", "run", "-f", manifest, "--volume-claim", "/work"}, "want TARGET=CLAIM"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "withtoken", "run", "-f", manifest, "--volume-claim", "work/=data"}, "not a clean absolute path"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "withtoken", "run", "-f", manifest, "--volume-claim", "/work=data", "--git-source", "/work=https://git.test/r.git"}, "has a source already"},
		{[]string{"--kubeconfig", kubeconfig, "--context", "withtoken", "run", "-f", manifest, "--volume-claim", "/work=data", "--git-push", "/work=airlock/x"}, "only a git source is pushed"},
	} {
		r := h.run("", tc.args...)
		if r.code != exitUsage || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("airlock %s: exit %d, stderr %q; want exit 2 saying %q", strings.Join(tc.args, " "), r.code, r.stderr, tc.want)
		}
	}
	if len(h.d.creates) != 0 {
		t.Errorf("the local daemon was asked to create %d sessions", len(h.d.creates))
	}
}

func TestDNSLabel(t *testing.T) {
	for in, want := range map[string]string{
		"hello":                   "hello",
		"Fix the flaky test!":     "fix-the-flaky-test",
		"--":                      "session",
		"":                        "session",
		strings.Repeat("ab-", 30): strings.Repeat("ab-", 13) + "a",
	} {
		if got := dnsLabel(in); got != want {
			t.Errorf("dnsLabel(%q) = %q, want %q", in, got, want)
		}
	}
}

// The git flags make a Session's workspace sources.
func TestGitSourceFlags(t *testing.T) {
	o := gitSourceOptions{sources: []string{"/work=https://git.test/r.git#v1.2", "/docs=http://git.test/d.git"}, pushes: []string{"/work=airlock/fix"}, depth: 0}
	got, err := o.workspaceSources()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Target != "/work" || got[0].Git.URL != "https://git.test/r.git" || got[0].Git.Ref != "v1.2" ||
		got[0].Git.PushBranch != "airlock/fix" || got[0].Git.Depth != 0 || got[1].Target != "/docs" || got[1].Git.Ref != "" || got[1].Git.PushBranch != "" {
		t.Errorf("workspace sources %+v %+v", got[0].Git, got[1].Git)
	}
	o = gitSourceOptions{sources: []string{"/work=ssh://git@git.test:2222/srv/r.git#main"}, depth: 1}
	if got, err := o.workspaceSources(); err != nil || len(got) != 1 || got[0].Git.URL != "ssh://git@git.test:2222/srv/r.git" || got[0].Git.Ref != "main" {
		t.Errorf("ssh source: %+v, %v", got, err)
	}
	for _, bad := range []string{"/work=git@git.test:r.git", "/work=ssh://git.test/r.git", "/work=ssh://git:pw@git.test/r.git"} {
		o = gitSourceOptions{sources: []string{bad}, depth: 1}
		if _, err := o.workspaceSources(); err == nil || !strings.Contains(err.Error(), "ssh://USER@HOST") {
			t.Errorf("--git-source %s: %v, want a usage error", bad, err)
		}
	}
}

// TestVolumeClaimFlags: --volume-claim TARGET=CLAIM[:SUBPATH] takes a
// subPath after the claim's name (which has no ':'), checked as the node
// checks it (v1alpha1.CheckSubPath).
func TestVolumeClaimFlags(t *testing.T) {
	o := gitSourceOptions{claims: []string{"/work=data:repos/app", "/data=shared"}}
	got, err := o.workspaceSources()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].Volume == nil || got[0].Volume.ClaimName != "data" || got[0].Volume.SubPath != "repos/app" ||
		got[1].Volume == nil || got[1].Volume.ClaimName != "shared" || got[1].Volume.SubPath != "" {
		t.Errorf("workspace sources %+v %+v", got[0].Volume, got[1].Volume)
	}
	for bad, want := range map[string]string{
		"/work=data:":          "empty",
		"/work=data:../b":      `a ".." name`,
		"/work=data:a/../../b": `a ".." name`,
		"/work=data:/etc":      "an absolute path",
		"/work=data:a//b":      "an empty name",
		"/work=:sub":           "want TARGET=CLAIM[:SUBPATH]",
	} {
		o = gitSourceOptions{claims: []string{bad}}
		if _, err := o.workspaceSources(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("--volume-claim %s: %v, want a usage error saying %q", bad, err, want)
		}
	}
}
