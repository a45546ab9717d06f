package fsscope

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/containerd/errdefs"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/fsscope/glob"
	"github.com/airlock-sandbox/airlock/policies"
)

// noSecret fails the test for every probe result that shows one of
// secrets, and for every read of a path in denied that succeeded.
func noSecret(t *testing.T, res []probeResult, secrets ...string) {
	t.Helper()
	for _, r := range res {
		for _, sec := range secrets {
			if strings.Contains(r.Data, sec) {
				t.Errorf("the sandbox read %s: %v", sec, r)
			}
		}
	}
}

// TestDenyReadAppearsLater creates secrets on the host after the session
// started (new files, a new directory, a hard link and a rename to a
// masked name): none of them is readable in the sandbox, which sees the
// workspace's names as they were at Setup.
func TestDenyReadAppearsLater(t *testing.T) {
	for _, mode := range []string{policies.ModeOverlay, policies.ModeRO} {
		t.Run(mode, func(t *testing.T) {
			host := hostTree(t, hostOwner, map[string]string{
				"README.md":  "readme",
				"svc/app.go": "package svc",
				"notes.txt":  "notes",
				"old.txt":    "LATER_RENAMED",
			})
			w := overlayWS(host)
			w.Mode = mode
			if mode != policies.ModeOverlay {
				w.OnExit = ""
			}
			s := setup(t, policyWith(w), sandboxer)

			writeFiles(t, host, map[string]string{
				".env.local":               "LATER_ENV",
				"svc/.env.production":      "LATER_SVC",
				"newdir/.aws/credentials":  "LATER_AWS",
				"server.key":               "LATER_KEY",
				"home/.npmrc":              "LATER_NPM",
				"later.txt":                "LATER_PLAIN",
				".git/config":              "[credential]\n\thelper = LATER_HELPER\n",
				"svc/.kube/config":         "LATER_KUBE",
				"svc/deep/er/.env.staging": "LATER_DEEP",
			})
			if err := os.Link(filepath.Join(host, ".env.local"), filepath.Join(host, "linked.txt")); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(filepath.Join(host, "old.txt"), filepath.Join(host, ".env.renamed")); err != nil {
				t.Fatal(err)
			}
			chownTree(t, host, hostOwner)

			paths := []string{".env.local", "svc/.env.production", "newdir/.aws/credentials", "server.key",
				"home/.npmrc", "linked.txt", ".env.renamed", ".git/config", "svc/.kube/config", "svc/deep/er/.env.staging"}
			var actions []probeAction
			for _, p := range paths {
				actions = append(actions, probeAction{Op: "read", Path: "/workspace/" + p})
			}
			actions = append(actions,
				probeAction{Op: "readdir", Path: "/workspace"},
				probeAction{Op: "readdir", Path: "/workspace/svc"},
				probeAction{Op: "read", Path: "/workspace/README.md"},
				probeAction{Op: "read", Path: "/workspace/later.txt"},
			)
			res := runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID, actions...)
			noSecret(t, res, "LATER_ENV", "LATER_SVC", "LATER_AWS", "LATER_KEY", "LATER_NPM", "LATER_RENAMED", "LATER_HELPER", "LATER_KUBE", "LATER_DEEP")
			for _, r := range res[:len(paths)] {
				if r.ok() {
					t.Errorf("a path that appeared on the host is readable: %v", r)
				}
			}
			if got := res[len(paths)].Data; strings.Contains(got, ".env") || strings.Contains(got, "newdir") || strings.Contains(got, "server.key") {
				t.Errorf("the workspace lists names that appeared on the host: %s", got)
			}
			if got := res[len(paths)+1].Data; got != "app.go" {
				t.Errorf("svc lists %q, want only app.go", got)
			}
			if r := res[len(paths)+2]; r.Data != "readme" {
				t.Errorf("README.md: %v", r)
			}
			// What was not there at Setup is not there at all, secret or not.
			if r := res[len(paths)+3]; r.ok() {
				t.Errorf("later.txt: %v, want it absent", r)
			}
		})
	}
}

// TestDenyReadMounts shows deny_read on extra mounts: the defaults and the
// mount's own patterns mask files in a read-only and a read-write directory
// mount, a file mount whose host name or target is a credential file is
// masked, a directory mount whose target is a credential directory is
// masked whole, a git config in a mount is read without its credentials,
// and a file created on the host later in a read-only mount is not there.
func TestDenyReadMounts(t *testing.T) {
	ro := hostTree(t, hostOwner, map[string]string{
		".env":                 "M_ENV",
		".npmrc":               "M_NPM",
		"sub/.aws/credentials": "M_AWS",
		"private/token.txt":    "M_OWN",
		"data.txt":             "data",
		"repo/.git/config":     gitConfigWithToken,
		"repo/.git/HEAD":       "ref: refs/heads/main\n",
		"repo/.git/objects/":   "",
		"repo/.git/refs/":      "",
	})
	rw := hostTree(t, hostOwner, map[string]string{".env": "RW_ENV", "out.txt": "out"})
	files := hostTree(t, hostOwner, map[string]string{
		".env.mounted":  "F_ENV",
		"registry.json": "F_DOCKER",
		"plain.txt":     "plain",
		"aws/config":    "F_AWSDIR",
	})
	p := policyWith()
	p.Mounts = []policies.Mount{
		{HostPath: ro, Target: "/m", ReadOnly: true, DefaultDenyRead: true, DenyRead: []string{"private/"}},
		{HostPath: rw, Target: "/rw", ReadOnly: false, DefaultDenyRead: true},
		{HostPath: filepath.Join(files, ".env.mounted"), Target: "/etc/app.conf", ReadOnly: true, DefaultDenyRead: true},
		{HostPath: filepath.Join(files, "registry.json"), Target: "/root/.docker/config.json", ReadOnly: true, DefaultDenyRead: true},
		{HostPath: filepath.Join(files, "plain.txt"), Target: "/etc/plain.txt", ReadOnly: true, DefaultDenyRead: true},
		{HostPath: filepath.Join(files, "aws"), Target: "/root/.aws", ReadOnly: true, DefaultDenyRead: true},
	}
	s := setup(t, p, sandboxer)
	writeFiles(t, ro, map[string]string{".env.later": "M_LATER"})
	denied := []string{"/m/.env", "/m/.npmrc", "/m/sub/.aws/credentials", "/m/private/token.txt", "/m/.env.later",
		"/rw/.env", "/etc/app.conf", "/root/.docker/config.json", "/root/.aws/config"}
	var actions []probeAction
	for _, d := range denied {
		actions = append(actions, probeAction{Op: "read", Path: d})
	}
	actions = append(actions,
		probeAction{Op: "read", Path: "/m/data.txt"},
		probeAction{Op: "read", Path: "/rw/out.txt"},
		probeAction{Op: "read", Path: "/etc/plain.txt"},
		probeAction{Op: "read", Path: "/m/repo/.git/config"},
	)
	res := runProbe(t, s.Mounts(), 0, 0, actions...)
	noSecret(t, res, "M_ENV", "M_NPM", "M_AWS", "M_OWN", "M_LATER", "RW_ENV", "F_ENV", "F_DOCKER", "F_AWSDIR", "GITCONFIG_SECRET")
	if r := res[len(res)-1]; !strings.Contains(r.Data, "url = \"https://github.com/org/app.git\"") {
		t.Errorf("the mount's git config, without its credentials: %v", r)
	}
	for _, r := range res[:len(denied)] {
		if r.ok() && r.Data != "" {
			t.Errorf("masked path readable: %v", r)
		}
	}
	for i, want := range []string{"data", "out", "plain"} {
		if r := res[len(denied)+i]; r.Data != want {
			t.Errorf("%s: %v, want %q", r.Path, r, want)
		}
	}
}

// defaultDenied lists, for every credential file the default deny_read
// list must mask, a workspace path where it lives. Every pattern of
// DefaultDenyRead must match at least one of them (checked below).
var defaultDenied = []string{
	".env",
	".env.local",
	"svc/.env.production",
	"certs/server.pem",
	"certs/server.key",
	"certs/bundle.p12",
	"certs/bundle.pfx",
	"certs/store.jks",
	"certs/app.keystore",
	"keys/id_rsa",
	"keys/id_dsa",
	"keys/id_ecdsa",
	"keys/id_ed25519",
	"keys/id_xmss",
	"home/.ssh/config",
	"home/.gnupg/private-keys-v1.d/k.key",
	".netrc",
	"_netrc",
	".git-credentials",
	".pgpass",
	".pypirc",
	".vault-token",
	".npmrc",
	"web/.npmrc",
	".yarnrc",
	".yarnrc.yml",
	"home/.cargo/credentials",
	"home/.cargo/credentials.toml",
	"home/.m2/settings.xml",
	"home/.m2/settings-security.xml",
	"home/.gem/credentials",
	"home/.composer/auth.json",
	"home/.config/hub",
	"home/.docker/config.json",
	".dockercfg",
	"home/.kube/config",
	"home/.config/gh/hosts.yml",
	"home/.terraform.d/credentials.tfrc.json",
	".terraformrc",
	".s3cfg",
	".boto",
	"home/.config/rclone/rclone.conf",
	"home/.aws/credentials",
	"home/.azure/accessTokens.json",
	"home/.config/gcloud/credentials.db",
	"application_default_credentials.json",
}

// TestDefaultDenyReadEntries masks each credential file of the default
// list in one sandbox, one subtest per file, and checks that every default
// pattern is exercised by at least one of them.
func TestDefaultDenyReadEntries(t *testing.T) {
	files := map[string]string{"README.md": "readme"}
	secret := func(p string) string { return "SECRET<" + p + ">" }
	for _, p := range defaultDenied {
		files[p] = secret(p)
	}
	host := hostTree(t, hostOwner, files)
	w := overlayWS(host)
	w.Mode, w.OnExit = policies.ModeRO, ""
	s := setup(t, policyWith(w), sandboxer)
	actions := make([]probeAction, 0, len(defaultDenied))
	for _, p := range defaultDenied {
		actions = append(actions, probeAction{Op: "read", Path: "/workspace/" + p})
	}
	res := runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID, actions...)
	for i, p := range defaultDenied {
		t.Run(p, func(t *testing.T) {
			if r := res[i]; r.ok() || strings.Contains(r.Data, secret(p)) {
				t.Errorf("%s is readable: %v", p, r)
			}
		})
	}
	for _, pat := range DefaultDenyRead() {
		g, err := glob.Compile(pat, true)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.ContainsFunc(defaultDenied, func(p string) bool { return g.Covers(p, false) }) {
			t.Errorf("no test file for the default pattern %q", pat)
		}
	}
}

// TestTrackedDenied: a secret committed to the workspace's repository is
// masked in the working tree but readable through git; TrackedDenied and
// the session's DenyRead report say which masked paths git tracks, so that
// airlock validate and the audit can warn.
func TestTrackedDenied(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{
		"README.md":       "readme",
		".env":            "TRACKED_ENV",
		"config/.npmrc":   "TRACKED_NPM",
		"secrets/a.txt":   "TRACKED_OWN",
		".env.untracked":  "UNTRACKED",
		"src/main.go":     "package main",
		"docs/server.pem": "TRACKED_PEM",
	})
	git(t, host, "init", "-q", "-b", "main")
	git(t, host, "add", "README.md", ".env", "config/.npmrc", "secrets/a.txt", "src/main.go", "docs/server.pem")
	git(t, host, "commit", "-q", "-m", "init")
	chownTree(t, host, hostOwner)
	w := overlayWS(host)
	w.DenyRead = []string{"secrets/"}
	want := []string{".env", "config/.npmrc", "docs/server.pem", "secrets/a.txt"}
	got, err := TrackedDenied(t.Context(), w)
	if err != nil || !slices.Equal(got, want) {
		t.Fatalf("TrackedDenied = %q, %v; want %q", got, err, want)
	}
	s := setup(t, policyWith(w), sandboxer)
	info := s.DenyRead()
	if len(info) != 1 || !slices.Equal(info[0].Tracked, []string{"/workspace/.env", "/workspace/config/.npmrc", "/workspace/docs/server.pem", "/workspace/secrets/a.txt"}) {
		t.Fatalf("DenyRead = %+v", info)
	}
	var masked []string
	for _, m := range info[0].Masked {
		masked = append(masked, m.Path+" "+m.Rule)
	}
	if !slices.Contains(masked, "/workspace/.env .env*") || !slices.Contains(masked, "/workspace/secrets secrets/") {
		t.Errorf("masked = %q", masked)
	}

	if got, err := CommittedDenied(t.Context(), w); err != nil || len(got) != 0 {
		t.Errorf("CommittedDenied = %q, %v; want nothing beyond what is tracked", got, err)
	}
	git(t, host, "rm", "-q", "--cached", ".env", "docs/server.pem")
	git(t, host, "commit", "-q", "-m", "untrack")
	got, err = TrackedDenied(t.Context(), w)
	if err != nil || !slices.Equal(got, []string{"config/.npmrc", "secrets/a.txt"}) {
		t.Errorf("TrackedDenied after untracking = %q, %v", got, err)
	}
	got, err = CommittedDenied(t.Context(), w)
	if err != nil || !slices.Equal(got, []string{".env", "docs/server.pem"}) {
		t.Errorf("CommittedDenied = %q, %v; want the untracked secrets still in the history", got, err)
	}

	// Without a repository at the root there is nothing to report.
	w.HostPath = filepath.Join(host, "src")
	if got, err := TrackedDenied(t.Context(), w); err != nil || got != nil {
		t.Errorf("TrackedDenied(src) = %q, %v", got, err)
	}
}

// TestFrozenViewOnOverlayfs: a workspace that is itself on overlayfs gets
// a frozen ro view (two overlays), but an overlay workspace there would
// need three: Setup refuses it with a reason, and leaves nothing behind.
func TestFrozenViewOnOverlayfs(t *testing.T) {
	base := tempDir(t)
	lower, upper, work, merged := filepath.Join(base, "l"), filepath.Join(base, "u"), filepath.Join(base, "w"), filepath.Join(base, "m")
	for _, d := range []string{lower, upper, work, merged} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeFiles(t, lower, map[string]string{"README.md": "readme", ".env": "STACKED_SECRET"})
	if err := unix.Mount("overlay", merged, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(merged, unix.MNT_DETACH) })
	chownTree(t, merged, hostOwner) // no idmapping: overlayfs cannot be idmapped

	w := overlayWS(merged)
	w.Mode, w.OnExit = policies.ModeRO, ""
	s := setup(t, policyWith(w), hostOwner)
	res := runProbe(t, s.Mounts(), hostOwner.UID, hostOwner.GID, probeAction{Op: "read", Path: "/workspace/README.md"}, probeAction{Op: "read", Path: "/workspace/.env"})
	if res[0].Data != "readme" || res[1].ok() || strings.Contains(res[1].Data, "STACKED_SECRET") {
		t.Errorf("ro view of a workspace on overlayfs: %v", res)
	}

	dir := filepath.Join(t.TempDir(), "fs")
	_, err := Setup(t.Context(), dir, policyWith(overlayWS(merged)), hostOwner)
	if !errdefs.IsNotImplemented(err) || !strings.Contains(err.Error(), "overlayfs") {
		t.Errorf("overlay workspace on overlayfs: %v, want a not-implemented error that names overlayfs", err)
	}
	if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
		t.Errorf("a refused Setup left %s", dir)
	}
}

// readAuditRec is a ReadAudit that records what it reports.
type readAuditRec struct {
	*ReadAudit
	mu    sync.Mutex
	reads []MaskRead
}

func (r *readAuditRec) got() []MaskRead {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.reads)
}

func newReadAudit(t *testing.T) *readAuditRec {
	t.Helper()
	r := &readAuditRec{}
	a, err := NewReadAudit(func(m MaskRead) {
		r.mu.Lock()
		r.reads = append(r.reads, m)
		r.mu.Unlock()
	})
	if err != nil {
		t.Fatal(err)
	}
	r.ReadAudit = a
	t.Cleanup(func() { a.Close() })
	return r
}

// TestReadAudit: with a ReadAudit, every open of a mask from the sandbox
// (a file, a directory, a hard link's mask, a whole masked mount, through
// a symlink) is refused and reported with its sandbox path, its rule and
// the opener's pid; opens of other paths and of the sanitized git config
// are not. Teardown removes the marks.
func TestReadAudit(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{
		".env": "E", ".aws/credentials": "A", "README.md": "readme", "link": "->.env",
		".git/config": gitConfigWithToken, ".git/HEAD": "ref: refs/heads/main\n", ".git/objects/": "", ".git/refs/": "",
	})
	awsDir := hostTree(t, hostOwner, map[string]string{"config": "AWSCONFIG"})
	ra := newReadAudit(t)
	p := policyWith(overlayWS(host))
	p.Mounts = []policies.Mount{{HostPath: awsDir, Target: "/root/.aws", ReadOnly: true, DefaultDenyRead: true}}
	s := setup(t, p, sandboxer, WithReadAudit(ra.ReadAudit, "s1"))
	res := runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID,
		probeAction{Op: "read", Path: "/workspace/.env"},
		probeAction{Op: "readdir", Path: "/workspace/.aws"},
		probeAction{Op: "read", Path: "/workspace/link"},
		probeAction{Op: "readdir", Path: "/root/.aws"},
		probeAction{Op: "read", Path: "/workspace/README.md"},
		probeAction{Op: "read", Path: "/workspace/.git/config"},
	)
	for _, r := range res[:4] {
		if r.ok() || r.Errno != int(unix.EPERM) {
			t.Errorf("%v, want EPERM", r)
		}
	}
	if !res[4].ok() || !res[5].ok() || strings.Contains(res[5].Data, "GITCONFIG_SECRET") {
		t.Errorf("reads of unmasked paths: %v %v", res[4], res[5])
	}
	var got []string
	for _, m := range ra.got() {
		if m.Owner != "s1" || m.Pid <= 0 || m.Time.IsZero() {
			t.Errorf("report %+v", m)
		}
		got = append(got, m.Path+" "+m.Rule)
	}
	slices.Sort(got)
	want := []string{"/root/.aws .aws/", "/workspace/.aws .aws/", "/workspace/.env .env*", "/workspace/.env .env*"}
	if !slices.Equal(got, want) {
		t.Errorf("reported %q, want %q", got, want)
	}
	if n := ra.marked(); n != 3 {
		t.Errorf("%d marks, want 3 (.env, .aws, /root/.aws)", n)
	}
	if err := s.Teardown(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	if n := ra.marked(); n != 0 {
		t.Errorf("%d marks left after Teardown", n)
	}
}

// TestReadAuditRestart: while no ReadAudit holds the marks (the daemon is
// down) a mask reads as an empty file, never as the secret; a session
// loaded WithReadAudit refuses and reports opens again.
func TestReadAuditRestart(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{".env": "RESTART_SECRET", "README.md": "readme"})
	first := newReadAudit(t)
	s := setup(t, policyWith(overlayWS(host)), sandboxer, WithReadAudit(first.ReadAudit, "s1"))
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	res := runProbe(t, s.Mounts(), sandboxer.UID, sandboxer.GID, probeAction{Op: "read", Path: "/workspace/.env"})
	if !res[0].ok() || res[0].Data != "" {
		t.Errorf("with no ReadAudit: %v, want an empty file", res[0])
	}

	second := newReadAudit(t)
	s2, err := Load(s.Dir(), WithReadAudit(second.ReadAudit, "s1"))
	if err != nil {
		t.Fatal(err)
	}
	res = runProbe(t, s2.Mounts(), sandboxer.UID, sandboxer.GID, probeAction{Op: "read", Path: "/workspace/.env"})
	if res[0].ok() || res[0].Errno != int(unix.EPERM) {
		t.Errorf("after Load: %v, want EPERM", res[0])
	}
	if err := s2.Teardown(t.Context(), false); err != nil {
		t.Fatal(err)
	}
	if got := second.got(); len(got) != 1 || got[0].Path != "/workspace/.env" {
		t.Errorf("reports after Load: %+v", got)
	}
	if n := second.marked(); n != 0 {
		t.Errorf("%d marks left after Teardown", n)
	}
}

// TestFrozenViewMountPoint: a directory with something mounted on it on
// the host is scanned as a mount point, not entered; the sandbox sees it
// empty (in an rw workspace, masked), neither what is mounted there nor
// the unscanned directory below.
func TestFrozenViewMountPoint(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{"README.md": "readme", "inner/.env.below": "BELOW_SECRET"})
	inner := filepath.Join(host, "inner")
	if err := unix.Mount("tmpfs", inner, "tmpfs", 0, "mode=0755"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(inner, unix.MNT_DETACH) })
	writeFiles(t, inner, map[string]string{".env": "MOUNTED_SECRET", "x.txt": "x"})
	for _, mode := range []string{policies.ModeOverlay, policies.ModeRO, policies.ModeRW} {
		t.Run(mode, func(t *testing.T) {
			w := overlayWS(host)
			w.Mode = mode
			if mode != policies.ModeOverlay {
				w.OnExit = ""
			}
			s := setup(t, policyWith(w), hostOwner)
			res := runProbe(t, s.Mounts(), hostOwner.UID, hostOwner.GID,
				probeAction{Op: "readdir", Path: "/workspace/inner"},
				probeAction{Op: "read", Path: "/workspace/inner/.env.below"},
				probeAction{Op: "read", Path: "/workspace/inner/.env"},
				probeAction{Op: "read", Path: "/workspace/README.md"},
			)
			noSecret(t, res, "BELOW_SECRET", "MOUNTED_SECRET")
			if res[0].Data != "" || res[1].ok() || res[3].Data != "readme" {
				t.Errorf("mount point: %v", res)
			}
		})
	}
}

// TestCommittedDeniedRunsNoRepoCommand: walking the history runs no
// command the repository's config names, even for a signed commit with
// log.showSignature set, where git log runs gpg.program to verify it (git
// 2.39 does not with an empty --format; --no-show-signature makes sure).
func TestCommittedDeniedRunsNoRepoCommand(t *testing.T) {
	host := hostTree(t, hostOwner, map[string]string{".env": "E", "README.md": "r"})
	dir := tempDir(t)
	if err := os.Chmod(dir, 0o777); err != nil { // git runs as the workspace owner
		t.Fatal(err)
	}
	canary, script := filepath.Join(dir, "ran"), filepath.Join(dir, "gpg.sh")
	if err := os.WriteFile(script, []byte("#!/bin/sh\ntouch "+canary+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	git(t, host, "init", "-q", "-b", "main")
	git(t, host, "add", ".")
	git(t, host, "commit", "-q", "-m", "init")
	tree := strings.TrimSpace(git(t, host, "rev-parse", "HEAD^{tree}"))
	head := strings.TrimSpace(git(t, host, "rev-parse", "HEAD"))
	obj := "tree " + tree + "\nparent " + head + "\nauthor t <t@t> 1767225600 +0000\ncommitter t <t@t> 1767225600 +0000\n" +
		"gpgsig -----BEGIN PGP SIGNATURE-----\n \n x\n -----END PGP SIGNATURE-----\n\nsigned\n"
	cmd := exec.Command("git", "-C", host, "hash-object", "-t", "commit", "-w", "--stdin")
	cmd.Env = gitEnv
	cmd.Stdin = strings.NewReader(obj)
	out, err := cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	git(t, host, "update-ref", "refs/heads/signed", strings.TrimSpace(string(out)))
	git(t, host, "config", "log.showSignature", "true")
	git(t, host, "config", "gpg.program", script)
	chownTree(t, host, hostOwner)

	// The repository would run the canary under plain git log.
	git(t, host, "log", "--all", "--format=%H")
	if !exists(canary) {
		t.Fatal("the canary did not run under plain git log; the test proves nothing")
	}
	if err := os.Remove(canary); err != nil {
		t.Fatal(err)
	}
	if _, err := CommittedDenied(t.Context(), overlayWS(host)); err != nil {
		t.Fatal(err)
	}
	if exists(canary) {
		t.Error("CommittedDenied ran the repository's gpg.program")
	}
}
