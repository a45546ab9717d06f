package policies

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestDecodeGitSources(t *testing.T) {
	a, diags := DecodeAdmission("a.hcl", []byte(`admission {
  host_paths = ["/"]
  git_source "https://git.corp.test/agents/*" {
    push_branches = ["airlock/*", "review/x"]
  }
  git_source "http://127.0.0.1:8080/repo.git" {
  }
}
`))
	if diags != nil {
		t.Fatal(diags)
	}
	want := []GitSource{
		{URL: "https://git.corp.test/agents/*", PushBranches: []string{"airlock/*", "review/x"}},
		{URL: "http://127.0.0.1:8080/repo.git"},
	}
	if !reflect.DeepEqual(a.GitSources, want) {
		t.Errorf("git sources %+v, want %+v", a.GitSources, want)
	}
	if d := DefaultAdmission(); len(d.GitSources) != 0 {
		t.Errorf("the built-in policy admits git sources: %+v", d.GitSources)
	}

	for _, tt := range []struct {
		name, src string
		want      []string
	}{
		{"bad globs", `admission {
  host_paths = ["/"]
  git_source "ssh://git.corp.test/*" {}
  git_source "https://*/repo.git" {}
  git_source "https://git.corp.test*/x" {}
  git_source "https://user@git.corp.test/x" {}
  git_source "https://Git.Corp.test/x" {}
  git_source "file:///srv/repo" {}
  git_source "https://git.corp.test/[x" {}
}
`, []string{"3:Invalid git source", "4:Invalid git source", "5:Invalid git source", "6:Invalid git source", "7:Invalid git source", "8:Invalid git source", "9:Invalid git source"}},
		{"bad branches", `admission {
  host_paths = ["/"]
  git_source "https://git.corp.test/x" {
    push_branches = [
      "refs/heads/x",
      "-f",
      "a..b",
      "[x",
    ]
  }
}
`, []string{"5:Invalid push branch", "6:Invalid push branch", "7:Invalid push branch", "8:Invalid push branch"}},
		{"twice", `admission {
  host_paths = ["/"]
  git_source "https://git.corp.test/x" {}
  git_source "https://git.corp.test/x" {}
}
`, []string{"4:Duplicate git source"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, diags := DecodeAdmission("adm.hcl", []byte(tt.src))
			if a != nil || !diags.HasErrors() {
				t.Fatalf("decoded %+v; want errors", a)
			}
			var got []string
			for _, d := range diags.Errors() {
				got = append(got, strconv.Itoa(d.Line)+":"+d.Summary)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors %q, want %q\n%v", got, tt.want, diags)
			}
		})
	}
}

func TestAdmitGitSource(t *testing.T) {
	a := &Admission{GitSources: []GitSource{
		{URL: "https://git.corp.test/agents/*", PushBranches: []string{"airlock/*"}},
		{URL: "https://git.corp.test/readonly.git"},
	}}
	for _, tt := range []struct {
		url, branch string
		want        string // "" admitted; else a substring of the refusal
	}{
		{"https://git.corp.test/agents/a.git", "", ""},
		{"https://git.corp.test/agents/a.git", "airlock/s1", ""},
		{"https://git.corp.test/readonly.git", "", ""},
		{"https://git.corp.test/readonly.git", "airlock/s1", "admit pushes to other branches only"},
		{"https://git.corp.test/agents/a.git", "main", `push to branch "main"`},
		{"https://git.corp.test/agents/a.git", "airlock/x/y", "admit pushes to other branches only"},
		{"https://git.corp.test/other.git", "", "matches none of the git sources admitted there"},
		{"https://git.corp.test/agents/sub/a.git", "", "matches none"},
		// What a glob matched must be what git asks for.
		{"https://git.corp.test/agents/..", "", "not clean"},
		{"https://git.corp.test/agents/../admin.git", "", "not clean"},
		{"https://git.corp.test/agents/%2e%2e/admin.git", "", "escapes"},
		{"https://git.corp.test/agents/a.git?x=1", "", "query"},
		{"https://git.corp.test/agents/a.git#frag", "", "query or fragment"},
		{"https://tok:x@git.corp.test/agents/a.git", "", "user information"},
		{"https://GIT.corp.test/agents/a.git", "", "upper-case"},
		{"ext::sh -c touch% /tmp/x", "", "not an http, https or ssh URL"},
		{"file:///srv/agents/a.git", "", "not an http, https or ssh URL"},
		{"https:///agents/a.git", "", "no host"},
	} {
		_, err := a.AdmitGitSource("default", tt.url, tt.branch)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s %q: %v, want admitted", tt.url, tt.branch, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s %q: %v, want a refusal saying %q", tt.url, tt.branch, err, tt.want)
		case tt.want != "" && !errors.Is(err, errdefs.ErrPermissionDenied):
			t.Errorf("%s %q: %v is not a permission error", tt.url, tt.branch, err)
		}
	}
}

// TestGitSourceNamespaces: a git_source block with namespaces admits the
// Sessions of those namespaces alone, and its token goes to them alone:
// two blocks for one repository give two namespaces their own tokens and
// push branches; blocks whose namespaces overlap are refused.
func TestGitSourceNamespaces(t *testing.T) {
	a, diags := DecodeAdmission("adm.hcl", []byte(`admission {
  host_paths = ["/srv"]
  git_source "https://git.corp.test/shared/*" {
    namespaces    = ["team-a"]
    push_branches = ["airlock/a/*"]
    token_file    = "/etc/airlock/git/a.token"
  }
  git_source "https://git.corp.test/shared/*" {
    namespaces = ["team-b", "team-c"]
    token_file = "/etc/airlock/git/b.token"
  }
  git_source "https://git.corp.test/public/*" {
  }
}
`))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	for _, tt := range []struct {
		ns, url, branch string
		token, want     string
	}{
		{"team-a", "https://git.corp.test/shared/x.git", "", "/etc/airlock/git/a.token", ""},
		{"team-a", "https://git.corp.test/shared/x.git", "airlock/a/1", "/etc/airlock/git/a.token", ""},
		{"team-b", "https://git.corp.test/shared/x.git", "", "/etc/airlock/git/b.token", ""},
		{"team-c", "https://git.corp.test/shared/x.git", "", "/etc/airlock/git/b.token", ""},
		// team-b's block admits no push; team-a's is not team-b's.
		{"team-b", "https://git.corp.test/shared/x.git", "airlock/a/1", "", "admit pushes to other branches only"},
		{"team-d", "https://git.corp.test/shared/x.git", "", "", `refused for namespace "team-d": it matches none of the git sources admitted there (https://git.corp.test/public/* (no push))`},
		{"team-d", "https://git.corp.test/public/y.git", "", "", ""},
	} {
		g, err := a.AdmitGitSource(tt.ns, tt.url, tt.branch)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s %s %q: %v, want admitted", tt.ns, tt.url, tt.branch, err)
		case tt.want == "" && g.TokenFile != tt.token:
			t.Errorf("%s %s: token file %q, want %q", tt.ns, tt.url, g.TokenFile, tt.token)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s %s %q: %v, want a refusal saying %q", tt.ns, tt.url, tt.branch, err, tt.want)
		}
	}
	// A refusal names no other namespace, not even one sharing the block.
	if _, err := a.AdmitGitSource("team-b", "https://git.corp.test/shared/x.git", "airlock/a/1"); err == nil || strings.Contains(err.Error(), "team-c") || strings.Contains(err.Error(), "team-a") {
		t.Errorf("team-b's refusal: %v, want no other namespace named", err)
	}
	for name, src := range map[string]string{
		"5:Duplicate git source": "admission {\n  host_paths = [\"/srv\"]\n  git_source \"https://g.test/*\" {\n  }\n  git_source \"https://g.test/*\" {\n    namespaces = [\"a\"]\n  }\n}\n",
		"6:Duplicate git source": "admission {\n  host_paths = [\"/srv\"]\n  git_source \"https://g.test/*\" {\n    namespaces = [\"a\", \"b\"]\n  }\n  git_source \"https://g.test/*\" {\n    namespaces = [\"b\"]\n  }\n}\n",
		"4:Invalid namespace":    "admission {\n  host_paths = [\"/srv\"]\n  git_source \"https://g.test/*\" {\n    namespaces = [\"team-*\"]\n  }\n}\n",
		"4:Empty namespaces":     "admission {\n  host_paths = [\"/srv\"]\n  git_source \"https://g.test/*\" {\n    namespaces = []\n  }\n}\n",
	} {
		a, diags := DecodeAdmission("adm.hcl", []byte(src))
		var got []string
		for _, d := range diags.Errors() {
			got = append(got, strconv.Itoa(d.Line)+":"+d.Summary)
		}
		if a != nil || len(got) != 1 || got[0] != name {
			t.Errorf("%s: errors %q, want [%q]", src, got, name)
		}
	}
}

// TestOwnedWorkspaces: a directory the daemon's in-process caller made
// under the protected root is admitted as a workspace when it is named as
// owned, exactly; what is beside or beneath it, or anything unnamed, is
// refused as before.
func TestOwnedWorkspaces(t *testing.T) {
	root := t.TempDir()
	owned := filepath.Join(root, "kube-sources", "uid", "0", "workspace")
	sibling := filepath.Join(root, "kube-sources", "uid2", "0", "workspace")
	for _, d := range []string{owned, sibling, filepath.Join(owned, "sub")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	a := DefaultAdmission()
	a.HostPaths = []string{"/tmp"}
	pr := NewProtected(root).WithOwned(owned)
	for _, tt := range []struct {
		path string
		want string
	}{
		{owned, ""},
		{sibling, "protected host path"},
		{filepath.Join(owned, "sub"), "protected host path"},
		{owned + "/../workspace", "protected host path"},
	} {
		p := &Policy{Image: "x", Command: []string{"true"}, Workspaces: []Workspace{{HostPath: tt.path, Target: "/work", Mode: ModeOverlay}}}
		_, err := a.Admit(p, pr)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v, want admitted", tt.path, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want a refusal saying %q", tt.path, err, tt.want)
		}
	}
	// Without WithOwned the same directory is refused.
	p := &Policy{Image: "x", Command: []string{"true"}, Workspaces: []Workspace{{HostPath: owned, Target: "/work", Mode: ModeOverlay}}}
	if _, err := a.Admit(p, NewProtected(root)); err == nil {
		t.Error("a directory under the root admitted without being owned")
	}
	// Written directly (mode rw), it would take the sandbox's writes
	// past the session's disk and a commit's checks: refused.
	p = &Policy{Image: "x", Command: []string{"true"}, Workspaces: []Workspace{{HostPath: owned, Target: "/work", Mode: ModeRW}}}
	if _, err := a.Admit(p, pr); err == nil || !strings.Contains(err.Error(), `not "rw"`) {
		t.Errorf("an owned directory as a rw workspace: %v, want refused", err)
	}
	// A mount of it is not a workspace: refused.
	p = &Policy{Image: "x", Command: []string{"true"}, Mounts: []Mount{{HostPath: owned, Target: "/m", ReadOnly: true}}}
	if _, err := a.Admit(p, pr); err == nil {
		t.Error("an owned directory admitted as a mount")
	}
}

func TestGitSourceToken(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "  tok-123\n")
	linked := write("linked", "tok")
	if err := os.Link(linked, filepath.Join(dir, "linked2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(good, filepath.Join(dir, "symlink")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		file, want, err string
	}{
		{"", "", ""},
		{good, "tok-123", ""},
		{filepath.Join(dir, "symlink"), "tok-123", ""},
		{linked, "", "hard links"},
		{write("big", strings.Repeat("x", MaxGitToken+1)), "", "larger than"},
		{write("empty", "\n"), "", "empty"},
		{write("ctl", "a\x01b"), "", "control characters"},
		{filepath.Join(dir, "missing"), "", "no such file"},
		{dir, "", "not a regular file"},
	} {
		got, err := GitSource{URL: "https://g.test/x", TokenFile: tt.file}.Token()
		if got != tt.want || (tt.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.err)) {
			t.Errorf("token of %q: %q, %v; want %q, an error saying %q", tt.file, got, err, tt.want, tt.err)
		}
	}

	a, diags := DecodeAdmission("a.hcl", []byte(`admission {
  host_paths = ["/"]
  git_source "https://git.corp.test/*" {
    token_file = "/etc/airlock/git/corp.token"
  }
  git_source "https://git.other.test/*" {
    token_file = "/etc/airlock/git/other.token"
    username = "oauth2"
  }
}
`))
	if diags != nil {
		t.Fatal(diags)
	}
	want := []GitSource{
		{URL: "https://git.corp.test/*", TokenFile: "/etc/airlock/git/corp.token", Username: DefaultGitUsername},
		{URL: "https://git.other.test/*", TokenFile: "/etc/airlock/git/other.token", Username: "oauth2"},
	}
	if !reflect.DeepEqual(a.GitSources, want) {
		t.Errorf("git sources %+v, want %+v", a.GitSources, want)
	}
	// The token files are the daemon's: refused as a mount, or in one.
	for _, m := range []string{"/etc/airlock/git/corp.token", "/etc/airlock/git"} {
		if r := protectedReason(a.secretDirs(), m); r == "" {
			t.Errorf("%s is not kept from sessions", m)
		}
	}
	_, diags = DecodeAdmission("a.hcl", []byte(`admission {
  host_paths = ["/"]
  git_source "https://git.corp.test/*" {
    username = "u"
  }
  git_source "https://git.other.test/*" {
    token_file = "relative.token"
    username = "a:b"
  }
}
`))
	var got []string
	for _, d := range diags.Errors() {
		got = append(got, strconv.Itoa(d.Line)+":"+d.Summary)
	}
	if w := []string{"4:Username without a token", "7:Invalid token file", "8:Invalid username"}; !reflect.DeepEqual(got, w) {
		t.Errorf("errors %q, want %q", got, w)
	}
}

// TestGitSourceSSH: ssh sources, in canonical form only: the user named,
// no password, no scp-like form, nothing a glob could match for another
// repository; their blocks name the node's key and known hosts (both
// required, no trust on first use), and take no token or username; an
// http block takes no ssh settings; the key and known hosts are refused
// to sessions.
func TestGitSourceSSH(t *testing.T) {
	a, diags := DecodeAdmission("a.hcl", []byte(`admission {
  host_paths = ["/"]
  git_source "ssh://git@git.corp.test/agents/*" {
    push_branches = ["airlock/*"]
    ssh_key_file  = "/etc/airlock/git/id_ed25519"
    known_hosts   = "/etc/airlock/git/known_hosts"
  }
  git_source "ssh://deploy@127.0.0.1:2222/srv/repo.git" {
    ssh_key_file = "/etc/airlock/git/deploy_key"
    known_hosts  = "/etc/airlock/git/known_hosts"
  }
}
`))
	if diags != nil {
		t.Fatal(diags)
	}
	want := []GitSource{
		{URL: "ssh://git@git.corp.test/agents/*", PushBranches: []string{"airlock/*"}, SSHKeyFile: "/etc/airlock/git/id_ed25519", KnownHosts: "/etc/airlock/git/known_hosts"},
		{URL: "ssh://deploy@127.0.0.1:2222/srv/repo.git", SSHKeyFile: "/etc/airlock/git/deploy_key", KnownHosts: "/etc/airlock/git/known_hosts"},
	}
	if !reflect.DeepEqual(a.GitSources, want) {
		t.Errorf("git sources %+v, want %+v", a.GitSources, want)
	}
	for _, m := range []string{"/etc/airlock/git/id_ed25519", "/etc/airlock/git/known_hosts", "/etc/airlock/git"} {
		if r := protectedReason(a.secretDirs(), m); r == "" {
			t.Errorf("%s is not kept from sessions", m)
		}
	}

	for _, tt := range []struct {
		url, branch string
		want        string // "" admitted; else a substring of the refusal
	}{
		{"ssh://git@git.corp.test/agents/a.git", "", ""},
		{"ssh://git@git.corp.test/agents/a.git", "airlock/x", ""},
		{"ssh://deploy@127.0.0.1:2222/srv/repo.git", "", ""},
		{"ssh://deploy@127.0.0.1:2222/srv/repo.git", "airlock/x", "other branches only"},
		{"ssh://other@git.corp.test/agents/a.git", "", "matches none"},
		{"ssh://git@[fd00::1]:2222/srv/a.git", "", "matches none"},
		{"ssh://git@git.corp.test:2222/agents/a.git", "", "matches none"},
		{"https://git.corp.test/agents/a.git", "", "matches none"},
		{"git@git.corp.test:agents/a.git", "", "not an http, https or ssh URL"},
		{"git.corp.test:agents/a.git", "", "not an http, https or ssh URL"},
		{"ssh://git.corp.test/agents/a.git", "", "names no user"},
		{"ssh://git:pw@git.corp.test/agents/a.git", "", "password"},
		{"ssh://-oProxyCommand=x@git.corp.test/agents/a.git", "", "user name"},
		{"ssh://git@-oProxyCommand=x/agents/a.git", "", ""}, // url.Parse refuses it or no repository
		{"ssh://git@git.corp.test", "", "names no repository"},
		{"ssh://git@git.corp.test/", "", "names no repository"},
		{"ssh://git@git.corp.test:0/agents/a.git", "", "invalid port"},
		{"ssh://git@git.corp.test:022/agents/a.git", "", "invalid port"},
		{"ssh://git@git.corp.test/agents/../admin.git", "", "not clean"},
		{"ssh://git@git.corp.test/agents/%2e%2e/admin.git", "", "escapes"},
		{"ssh://git@git.corp.test/agents/a.git?x=1", "", "query"},
		// git reads "@[" in the path as a host: evil.test:2222.
		{"ssh://git@git.corp.test/agents/x@[evil.test]:2222/a.git", "", "'['"},
		{"ssh://git@git.corp.test/agents/a[1].git", "", "'['"},
		{"ssh://git@GIT.corp.test/agents/a.git", "", "upper-case"},
		{"SSH://git@git.corp.test/agents/a.git", "", "canonical"},
		{"git+ssh://git@git.corp.test/agents/a.git", "", "not an http, https or ssh URL"},
		{"ext::ssh -oProxyCommand=x git@git.corp.test/a", "", "not an http, https or ssh URL"},
	} {
		_, err := a.AdmitGitSource("default", tt.url, tt.branch)
		if tt.url == "ssh://git@-oProxyCommand=x/agents/a.git" {
			if err == nil {
				t.Errorf("%s admitted", tt.url)
			}
			continue
		}
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s %q: %v, want admitted", tt.url, tt.branch, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s %q: %v, want a refusal saying %q", tt.url, tt.branch, err, tt.want)
		}
	}

	for _, tt := range []struct {
		name, src string
		want      []string
	}{
		{"bad globs", `admission {
  host_paths = ["/"]
  git_source "ssh://git.corp.test/x" {}
  git_source "ssh://git:pw@git.corp.test/x" {}
  git_source "ssh://git@*.corp.test/x" {}
  git_source "ssh://git@Git.corp.test/x" {}
  git_source "ssh://git@git.corp.test:x/x" {}
  git_source "ssh://*@git.corp.test/x" {}
  git_source "git@git.corp.test:x" {}
}
`, []string{"3:Invalid git source", "4:Invalid git source", "5:Invalid git source", "6:Invalid git source", "7:Invalid git source", "8:Invalid git source", "9:Invalid git source"}},
		{"missing files", `admission {
  host_paths = ["/"]
  git_source "ssh://git@git.corp.test/a" {
    known_hosts = "/etc/airlock/git/known_hosts"
  }
  git_source "ssh://git@git.corp.test/b" {
    ssh_key_file = "/etc/airlock/git/key"
  }
}
`, []string{"3:Missing ssh_key_file", "6:Missing known_hosts"}},
		{"http settings in an ssh block", `admission {
  host_paths = ["/"]
  git_source "ssh://git@git.corp.test/a" {
    ssh_key_file = "/etc/airlock/git/key"
    known_hosts  = "/etc/airlock/git/known_hosts"
    token_file   = "/etc/airlock/git/token"
    username     = "git"
  }
}
`, []string{"6:HTTP setting for an ssh source", "7:HTTP setting for an ssh source"}},
		{"ssh settings in an http block", `admission {
  host_paths = ["/"]
  git_source "https://git.corp.test/a" {
    ssh_key_file = "/etc/airlock/git/key"
    known_hosts  = "/etc/airlock/git/known_hosts"
  }
}
`, []string{"4:SSH setting for an http source", "5:SSH setting for an http source"}},
		{"bad paths", `admission {
  host_paths = ["/"]
  git_source "ssh://git@git.corp.test/a" {
    ssh_key_file = "key"
    known_hosts  = "/etc/airlock/git/../known_hosts"
  }
  git_source "ssh://git@git.corp.test/b" {
    ssh_key_file = "/etc/airlock/git/my key"
    known_hosts  = "/etc/airlock/git/known_hosts'; touch /tmp/x; '"
  }
  git_source "ssh://git@git.corp.test/c" {
    ssh_key_file = "/etc/airlock/%d/key"
    known_hosts  = "/etc/airlock/git/known_hosts"
  }
}
`, []string{"4:Invalid SSH key file", "5:Invalid known hosts file", "8:Invalid SSH key file", "9:Invalid known hosts file", "12:Invalid SSH key file"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			a, diags := DecodeAdmission("adm.hcl", []byte(tt.src))
			if a != nil || !diags.HasErrors() {
				t.Fatalf("decoded %+v; want errors", a)
			}
			var got []string
			for _, d := range diags.Errors() {
				got = append(got, strconv.Itoa(d.Line)+":"+d.Summary)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors %q, want %q\n%v", got, tt.want, diags)
			}
		})
	}
}

func TestGitSourceSSHFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	key := write("key", "-----BEGIN OPENSSH PRIVATE KEY-----\n")
	kh := write("known_hosts", "[127.0.0.1]:2222 ssh-ed25519 AAAA\n")
	if err := os.Symlink(key, filepath.Join(dir, "key-link")); err != nil {
		t.Fatal(err)
	}
	linked := write("linked", "x")
	if err := os.Link(linked, filepath.Join(dir, "linked2")); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(dir, "odd dir"), 0o700); err != nil {
		t.Fatal(err)
	}
	odd := filepath.Join(dir, "odd dir", "key")
	if err := os.WriteFile(odd, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(odd, filepath.Join(dir, "to-odd")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		key, kh, err string
	}{
		{key, kh, ""},
		{filepath.Join(dir, "key-link"), kh, ""},
		{"", kh, "needs ssh_key_file and known_hosts"},
		{key, "", "needs ssh_key_file and known_hosts"},
		{linked, kh, "hard links"},
		{key, dir, "not a regular file"},
		{key, write("empty", ""), "empty"},
		{key, write("big", strings.Repeat("x", MaxSSHFile+1)), "larger than"},
		{filepath.Join(dir, "missing"), kh, "no such file"},
		// A symlink's target is what ssh's command line would hold.
		{filepath.Join(dir, "to-odd"), kh, "holds a character"},
	} {
		k, h, err := GitSource{URL: "ssh://git@g.test/x", SSHKeyFile: tt.key, KnownHosts: tt.kh}.SSHFiles()
		switch {
		case tt.err == "" && (err != nil || k != key || h != kh):
			t.Errorf("%q, %q: %q, %q, %v; want %q, %q", tt.key, tt.kh, k, h, err, key, kh)
		case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
			t.Errorf("%q, %q: %v, want an error saying %q", tt.key, tt.kh, err, tt.err)
		}
	}
}

// An IPv6 host in brackets: the glob names it (a path.Match of the whole
// URL read the brackets as a character class, so no such glob admitted
// anything), its path is still a glob, and a bracket anywhere else in the
// host, or around what is not an IPv6 address, is refused.
func TestGitSourceIPv6(t *testing.T) {
	a, diags := DecodeAdmission("a.hcl", []byte(`admission {
  host_paths = ["/"]
  git_source "ssh://git@[fd00::1]:2222/srv/*" {
    ssh_key_file = "/etc/airlock/git/id_ed25519"
    known_hosts  = "/etc/airlock/git/known_hosts"
  }
  git_source "https://[fd00::2]/org/*" {}
}
`))
	if diags != nil {
		t.Fatal(diags)
	}
	for _, tt := range []struct {
		url  string
		want string // "" admitted; else a substring of the refusal
	}{
		{"ssh://git@[fd00::1]:2222/srv/a.git", ""},
		{"https://[fd00::2]/org/a.git", ""},
		{"ssh://git@[fd00::1]:2223/srv/a.git", "matches none"},
		{"ssh://git@[fd00::10]:2222/srv/a.git", "matches none"},
		{"ssh://git@[fd00::1]:2222/other/a.git", "matches none"},
		{"ssh://git@[fd00::1]/srv/a.git", "matches none"},
		{"https://[fd00::2]:443/org/a.git", "matches none"},
		{"https://[fd00::1]/org/a.git", "matches none"},
		{"http://[fd00::2]/org/a.git", "matches none"},
	} {
		_, err := a.AdmitGitSource("default", tt.url, "")
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s refused: %v", tt.url, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want a refusal saying %q", tt.url, err, tt.want)
		}
	}
	for glob, want := range map[string]string{
		"ssh://git@[fe80::1%eth0]:22/*": "other than around an IPv6 address",
		"https://[10.0.0.1]/x/*":        "other than around an IPv6 address",
		"https://git[12].corp.test/x/*": "other than around an IPv6 address",
		"https://[fd00::1]x/r/*":        "other than around an IPv6 address",
		"https://[fd00::1/r/*":          "not a valid glob",
		"ssh://git@[FD00::1]:22/r/*":    "upper-case",
	} {
		_, diags := DecodeAdmission("a.hcl", fmt.Appendf(nil, "admission {\n  host_paths = [\"/\"]\n  git_source %q {}\n}\n", glob))
		if diags == nil || !strings.Contains(diags.Error(), want) {
			t.Errorf("git_source %q: %v, want a refusal saying %q", glob, diags, want)
		}
	}
}
