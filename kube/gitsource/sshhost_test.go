package gitsource

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/kube/gitsource/gittest"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestSSHPathNamesNoOtherHost: git reads "@[" anywhere in an ssh URL as
// the start of a bracketed host, path included, and ssh takes the host
// after the last '@': ssh://git@git.corp.test/x@[evil.test]:2222/r.git is
// ssh -p 2222 'git@git.corp.test/x@evil.test', a connection to
// evil.test:2222. An admission glob of two segments ("/*/*", a group and
// its repositories) takes such a URL. The URLs are admitted as the node
// agent admits them (policies.AdmitGitSource) and fetched with the key
// and known hosts of the block that admits them; the host the policy
// does not name (another sshd on loopback, its key in the same known
// hosts file, as one file for a site's git hosts lists them) must see no
// connection.
func TestSSHPathNamesNoOtherHost(t *testing.T) {
	srv := gittest.NewServer(t)
	srv.Create("repo", map[string]string{"README": "x\n"})
	admitted := srv.StartSSH()
	other := srv.StartSSH()
	_, otherPort, err := net.SplitHostPort(other.Addr)
	if err != nil {
		t.Fatal(err)
	}
	ahost, aport, _ := net.SplitHostPort(admitted.Addr)
	knownHosts := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(knownHosts, fmt.Appendf(nil, "[%s]:%s %s\n[127.0.0.1]:%s %s\n", ahost, aport, admitted.HostKey, otherPort, other.HostKey), 0o644); err != nil {
		t.Fatal(err)
	}
	adm, diags := policies.DecodeAdmission("adm.hcl", fmt.Appendf(nil, `admission {
  host_paths = ["/tmp"]
  git_source %q {
    ssh_key_file = %q
    known_hosts  = %q
  }
}
`, admitted.URL+"/*/*", admitted.KeyFile, knownHosts))
	if diags != nil {
		t.Fatal(diags)
	}
	// The glob admits a group's repositories on the admitted host.
	if _, err := adm.AdmitGitSource("default", admitted.URL+"/team/repo.git", ""); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{
		admitted.URL + "/x@[127.0.0.1]:" + otherPort + "/repo.git",
		admitted.URL + "/x@[localhost]:" + otherPort + "/repo.git",
	} {
		g, err := adm.AdmitGitSource("default", u, "")
		if err != nil {
			if !strings.Contains(err.Error(), "'['") {
				t.Errorf("%s: refused with %v, want a refusal of its brackets", u, err)
			}
			continue
		}
		t.Errorf("%s admitted", u)
		key, kh, err := g.SSHFiles()
		if err != nil {
			t.Fatal(err)
		}
		_, err = Fetch(context.Background(), filepath.Join(t.TempDir(), "src"), Source{URL: u, Depth: 1, Auth: &SSHKey{KeyFile: key, KnownHostsFile: kh}})
		t.Logf("fetch %s: %v", u, err)
	}
	// One connection is gittest's, which waited for the server's banner.
	if l := other.Log(); strings.Count(l, "Connection from") > 1 {
		t.Errorf("the node reached %s, which no git_source names:\n%s", other.Addr, l)
	}
}

// TestSSHFetchIPv6: an ssh source on an IPv6 address (a real sshd on
// ::1) is admitted by a git_source block naming that address in
// brackets and fetched with its key and known hosts; a block naming
// another address admits nothing.
func TestSSHFetchIPv6(t *testing.T) {
	srv := gittest.NewServer(t)
	srv.Create("repo", map[string]string{"README": "over ipv6\n"})
	sh := srv.StartSSHOn("::1")
	if !strings.HasPrefix(sh.URL, "ssh://root@[::1]:") {
		t.Fatalf("URL %q", sh.URL)
	}
	decode := func(glob string) *policies.Admission {
		t.Helper()
		adm, diags := policies.DecodeAdmission("adm.hcl", fmt.Appendf(nil, "admission {\n  host_paths = [\"/tmp\"]\n  git_source %q {\n    ssh_key_file = %q\n    known_hosts  = %q\n  }\n}\n",
			glob, sh.KeyFile, sh.KnownHosts))
		if diags != nil {
			t.Fatal(diags)
		}
		return adm
	}
	url := sh.URL + "/repo.git"
	g, err := decode(sh.URL+"/*").AdmitGitSource("default", url, "")
	if err != nil {
		t.Fatal(err)
	}
	key, kh, err := g.SSHFiles()
	if err != nil {
		t.Fatal(err)
	}
	f, err := Fetch(context.Background(), filepath.Join(t.TempDir(), "src"), Source{URL: url, Depth: 1, Auth: &SSHKey{KeyFile: key, KnownHostsFile: kh}})
	if err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(f.Workspace, "README")); string(b) != "over ipv6\n" {
		t.Fatalf("README %q", b)
	}
	if _, err := decode(strings.Replace(sh.URL, "[::1]", "[::2]", 1)+"/*").AdmitGitSource("default", url, ""); err == nil || !strings.Contains(err.Error(), "matches none") {
		t.Errorf("a block for [::2] admitting %s: %v", url, err)
	}
}
