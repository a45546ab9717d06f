package gitsource

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/airlock-sandbox/airlock/kube/gitsource/gittest"
)

// traced records the git commands run while the test runs.
func traced(t *testing.T) func() [][]string {
	var mu sync.Mutex
	var runs [][]string
	traceRun = func(args, env []string) {
		mu.Lock()
		defer mu.Unlock()
		runs = append(runs, append(append([]string{"ARGS"}, args...), append([]string{"ENV"}, env...)...))
	}
	t.Cleanup(func() { traceRun = nil })
	return func() [][]string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(runs)
	}
}

// TestSSHFetchAndPush: an ssh source (a real sshd on loopback, git-shell
// behind it) is fetched (a branch, a tag, which asks the remote with
// ls-remote) and pushed to with the node's key and the known hosts
// given. The key's path is in ssh's command alone (git's environment),
// never on git's command line; neither the key nor ssh's settings are in
// the workspace's repository; ssh is allowed for the commands that reach
// the source alone; the known hosts file is not written.
func TestSSHFetchAndPush(t *testing.T) {
	srv := gittest.NewServer(t)
	srv.Create("repo", map[string]string{"README": "over ssh\n"})
	srv.Tag("repo", "main", "v1")
	base := srv.Rev("repo", "main")
	sh := srv.StartSSH()
	url := sh.URL + "/repo.git"
	key := &SSHKey{KeyFile: sh.KeyFile, KnownHostsFile: sh.KnownHosts}
	knownBefore, _ := os.ReadFile(sh.KnownHosts)
	runs := traced(t)

	tagDir := filepath.Join(t.TempDir(), "tag")
	f, err := Fetch(context.Background(), tagDir, Source{URL: url, Ref: "v1", Depth: 1, Auth: key})
	if err != nil {
		t.Fatal(err)
	}
	if f.Commit != base || f.Branch != "" {
		t.Fatalf("fetched tag v1: %+v, want %s detached", f, base)
	}
	dir := filepath.Join(t.TempDir(), "src")
	f, err = Fetch(context.Background(), dir, Source{URL: url, Ref: "main", Depth: 1, Auth: key})
	if err != nil {
		t.Fatal(err)
	}
	if f.Commit != base || f.Branch != "main" {
		t.Fatalf("fetched %+v, want %s on main", f, base)
	}
	if b, _ := os.ReadFile(filepath.Join(f.Workspace, "README")); string(b) != "over ssh\n" {
		t.Fatalf("README %q", b)
	}
	if got := gittest.Git(t, f.Workspace, "remote", "get-url", "origin"); got != url {
		t.Fatalf("origin %q, want %q", got, url)
	}
	if err := os.WriteFile(filepath.Join(f.Workspace, "README"), []byte("pushed over ssh\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	commit, err := Push(context.Background(), dir, url, "airlock/s", "m", who, key)
	if err != nil {
		t.Fatal(err)
	}
	if got := srv.Rev("repo", "airlock/s"); got != commit {
		t.Fatalf("airlock/ssh at %q, want %s", got, commit)
	}
	if got := srv.Show("repo", "airlock/s", "README"); got != "pushed over ssh" {
		t.Fatalf("pushed README %q", got)
	}
	if !strings.Contains(sh.Log(), "Accepted publickey for root") {
		t.Errorf("sshd did not log the key's login:\n%s", sh.Log())
	}

	secret, err := os.ReadFile(sh.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	remote := 0
	for _, r := range runs() {
		i := slices.Index(r, "ENV")
		args, env := r[1:i], r[i+1:]
		for _, a := range args {
			if strings.Contains(a, sh.KeyFile) || strings.Contains(a, sh.KnownHosts) || strings.Contains(a, "ssh") && a != url && a != "core.sshCommand=false" {
				t.Errorf("git's command line holds %q: %q", a, args)
			}
		}
		sub := subcommand(args)
		reaches := slices.Contains(args, url) && (sub == "fetch" || sub == "ls-remote" || sub == "push")
		if reaches {
			remote++
		}
		sshEnv := slices.ContainsFunc(env, func(e string) bool { return strings.HasPrefix(e, "GIT_SSH_COMMAND=") })
		if sshEnv != reaches || slices.Contains(env, "GIT_CONFIG_VALUE_0=always") != reaches {
			t.Errorf("git %q ran with environment %q: ssh allowed and set up for the commands that reach the source alone", args, env)
		}
		if sshEnv && !slices.Contains(env, "GIT_CONFIG_KEY_0=protocol.ssh.allow") {
			t.Errorf("ssh allowed otherwise than by protocol.ssh.allow: %q", env)
		}
		for _, e := range env {
			if cmd, ok := strings.CutPrefix(e, "GIT_SSH_COMMAND="); ok && !strings.HasPrefix(cmd, SSHProgram+" -F /dev/null -o IdentityFile='"+sh.KeyFile+"' ") {
				t.Errorf("ssh command %q", cmd)
			}
		}
	}
	if remote != 5 { // fetch and ls-remote of the tag, and of main; push
		t.Errorf("%d git commands reached the source, want 5", remote)
	}
	for _, d := range []string{dir, tagDir} {
		filepath.WalkDir(d, func(p string, e os.DirEntry, err error) error {
			if err == nil && e.Type().IsRegular() {
				b, _ := os.ReadFile(p)
				if strings.Contains(string(b), string(secret)) || strings.Contains(string(b), sh.KeyFile) || strings.Contains(string(b), "sshCommand") || strings.Contains(string(b), "IdentityFile") {
					t.Errorf("%s holds the key or ssh's settings", p)
				}
			}
			return nil
		})
	}
	if after, _ := os.ReadFile(sh.KnownHosts); string(after) != string(knownBefore) {
		t.Errorf("known hosts written: %q, was %q", after, knownBefore)
	}
}

// TestSSHHostKeyRefused: a server whose host key the known hosts file
// does not list is refused before the node's key is offered to it: one
// answering at the source's address with another host key (the attack),
// and one the file does not name at all (no trust on first use, and the
// file is not written). A key the server does not take is refused too.
func TestSSHHostKeyRefused(t *testing.T) {
	srv := gittest.NewServer(t)
	srv.Create("repo", map[string]string{"README": "x\n"})
	real := srv.StartSSH()
	impostor := srv.StartSSH() // its own host key, on another port
	url := impostor.URL + "/repo.git"

	// The known hosts list the real server's key for the impostor's
	// address: what a node sees when another host answers there.
	swapped := real.WriteKnownHosts(t, impostor.Addr, real.HostKey)
	for name, kh := range map[string]string{
		"another host key": swapped,
		"unlisted host":    real.KnownHosts,
	} {
		t.Run(name, func(t *testing.T) {
			before, _ := os.ReadFile(kh)
			key := &SSHKey{KeyFile: real.KeyFile, KnownHostsFile: kh}
			dir := filepath.Join(t.TempDir(), "src")
			_, err := Fetch(context.Background(), dir, Source{URL: url, Depth: 1, Auth: key})
			if err == nil || !strings.Contains(err.Error(), "Host key verification failed") {
				t.Fatalf("fetch from a host whose key is not known: %v, want ssh's refusal", err)
			}
			if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
				t.Fatalf("%s left behind", dir)
			}
			if after, _ := os.ReadFile(kh); string(after) != string(before) {
				t.Errorf("known hosts written: %q", after)
			}
		})
	}
	if l := impostor.Log(); strings.Contains(l, "Accepted") || strings.Contains(l, "publickey") {
		t.Errorf("the node's key reached a host whose key is not known:\n%s", l)
	}
	// A push meets the same refusal.
	ok := &SSHKey{KeyFile: impostor.KeyFile, KnownHostsFile: impostor.KnownHosts}
	dir := filepath.Join(t.TempDir(), "src")
	f, err := Fetch(context.Background(), dir, Source{URL: url, Ref: "main", Depth: 1, Auth: ok})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.Workspace, "NEW"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Push(context.Background(), dir, url, "airlock/x", "m", who, &SSHKey{KeyFile: impostor.KeyFile, KnownHostsFile: swapped}); err == nil || !strings.Contains(err.Error(), "Host key verification failed") {
		t.Fatalf("push to a host whose key is not known: %v, want ssh's refusal", err)
	}
	// The real server's client key is not the impostor's.
	if _, err := Fetch(context.Background(), filepath.Join(t.TempDir(), "src"), Source{URL: url, Depth: 1, Auth: &SSHKey{KeyFile: real.KeyFile, KnownHostsFile: impostor.KnownHosts}}); err == nil || !strings.Contains(err.Error(), "Permission denied") {
		t.Fatalf("fetch with a key the server does not take: %v, want it refused", err)
	}
}

// TestSSHRefusals: an ssh URL goes with a key, a key with an ssh URL
// alone; paths ssh's command line would read otherwise are refused; with
// ssh allowed, git's other transports are not.
func TestSSHRefusals(t *testing.T) {
	key := &SSHKey{KeyFile: "/etc/airlock/git/key", KnownHostsFile: "/etc/airlock/git/known_hosts"}
	for _, tc := range []struct {
		name string
		src  Source
		want string
	}{
		{"ssh without a key", Source{URL: "ssh://git@127.0.0.1:1/x.git"}, "needs the node's key"},
		{"ssh with a token", Source{URL: "ssh://git@127.0.0.1:1/x.git", Auth: &BasicAuth{Username: "u", Token: "t"}}, "needs the node's key"},
		{"https with a key", Source{URL: "https://127.0.0.1:1/x.git", Auth: key}, "for ssh:// sources"},
		{"ext with a key", Source{URL: "ext::sh -c touch% /tmp/x", Auth: key}, "for ssh:// sources"},
		{"key path with a quote", Source{URL: "ssh://git@127.0.0.1:1/x.git", Auth: &SSHKey{KeyFile: "/k'; touch /tmp/x; '", KnownHostsFile: "/kh"}}, "not an absolute, clean path"},
		{"relative known hosts", Source{URL: "ssh://git@127.0.0.1:1/x.git", Auth: &SSHKey{KeyFile: "/k", KnownHostsFile: "kh"}}, "not an absolute, clean path"},
		{"known hosts with a space", Source{URL: "ssh://git@127.0.0.1:1/x.git", Auth: &SSHKey{KeyFile: "/k", KnownHostsFile: "/a /b"}}, "not an absolute, clean path"},
		{"key path with a token", Source{URL: "ssh://git@127.0.0.1:1/x.git", Auth: &SSHKey{KeyFile: "/k%d", KnownHostsFile: "/kh"}}, "not an absolute, clean path"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "src")
			if _, err := Fetch(context.Background(), dir, tc.src); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one saying %q", err, tc.want)
			}
			if _, err := os.Stat(dir); !os.IsNotExist(err) {
				t.Fatalf("%s made", dir)
			}
			if _, err := Push(context.Background(), dir, tc.src.URL, "b", "m", who, tc.src.Auth); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("push: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	// The environment an ssh source's commands run with allows ssh alone.
	marker := filepath.Join(t.TempDir(), "ran")
	dir := t.TempDir()
	for _, u := range []string{"ext::sh -c touch% " + marker, "file://" + dir, "git://127.0.0.1:1/x.git"} {
		_, err := run(context.Background(), dir, key.env(), "ls-remote", "--end-of-options", u)
		if err == nil || !strings.Contains(err.Error(), "not allowed") {
			t.Errorf("ls-remote %s with ssh allowed: %v, want the transport not allowed", u, err)
		}
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("ext:: ran a command")
	}
}

// TestSSHOffersNoOtherKey: the ssh command git runs names the node's key
// so that ssh takes no other identity, even when the file is gone by the
// time ssh starts: SSHFiles resolves the key's path once for a fetch,
// whose ssh commands run minutes apart, and a rotated key's old path
// goes away (Kubernetes swaps a Secret volume's directory and removes
// the old one). Given with -i, a missing file has ssh fall back to root's
// own ~/.ssh/id_* keys. The real ssh says which identities it would
// offer (-G: its settings, no connection).
func TestSSHOffersNoOtherKey(t *testing.T) {
	key := &SSHKey{KeyFile: filepath.Join(t.TempDir(), "rotated"), KnownHostsFile: "/dev/null"}
	out, err := exec.Command("/bin/sh", "-c", key.sshCommand()+` -G "$@"`, "ssh", "-p", "2222", "git@127.0.0.1").CombinedOutput()
	if err != nil {
		t.Fatalf("ssh -G: %v: %s", err, out)
	}
	var ids []string
	for _, l := range strings.Split(string(out), "\n") {
		if id, ok := strings.CutPrefix(l, "identityfile "); ok {
			ids = append(ids, id)
		}
	}
	if !slices.Equal(ids, []string{key.KeyFile}) {
		t.Errorf("ssh would offer %q, want the node's key alone (%s)", ids, key.KeyFile)
	}
}

// TestSSHIgnoresTheDaemonsEnvironment: git and ssh run with an
// environment of their own, not the daemon's. A daemon started with
// GIT_CONFIG_PARAMETERS (which git adds its -c settings to) rewriting
// ssh:// URLs to ext:: with ext allowed, GIT_ALLOW_PROTOCOL (which
// overrides protocol.allow) and an ssh agent would otherwise have the
// fetch run a command on the node.
func TestSSHIgnoresTheDaemonsEnvironment(t *testing.T) {
	srv := gittest.NewServer(t)
	srv.Create("repo", map[string]string{"README": "x\n"})
	sh := srv.StartSSH()
	url := sh.URL + "/repo.git"
	marker := filepath.Join(t.TempDir(), "ran")
	t.Setenv("GIT_CONFIG_PARAMETERS", "'url.ext::sh -c touch% "+marker+" .insteadof'='ssh://' 'protocol.ext.allow'='always'")
	t.Setenv("GIT_ALLOW_PROTOCOL", "ext:ssh:file:http:https")
	t.Setenv("SSH_AUTH_SOCK", filepath.Join(t.TempDir(), "agent.sock"))
	key := &SSHKey{KeyFile: sh.KeyFile, KnownHostsFile: sh.KnownHosts}
	dir := filepath.Join(t.TempDir(), "src")
	ran := func() {
		t.Helper()
		if _, err := os.Stat(marker); err == nil {
			t.Fatal("the daemon's environment had git run a command")
		}
	}
	f, err := Fetch(context.Background(), dir, Source{URL: url, Ref: "main", Depth: 1, Auth: key})
	ran()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.Workspace, "NEW"), []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = Push(context.Background(), dir, url, "airlock/env", "m", who, key)
	ran()
	if err != nil {
		t.Fatal(err)
	}
}
