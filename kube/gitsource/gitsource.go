// Package gitsource fetches a Session's workspace from a git repository
// and pushes the session's committed changes back to it, on the node
// agent's host.
//
// Git runs here as root on the node, on a repository from the network and
// on a work tree a sandbox wrote, so it runs hardened: no system or global
// configuration, hooks off, no fsmonitor, no credential helper, http and
// https only (the local fetch of the agent's own repository aside), or ssh
// for an ssh source alone, no redirects (they would leave the repository
// the admission policy named), fsck of every object received, a bounded
// time, and a clean environment.
//
// An ssh source runs /usr/bin/ssh with no configuration file, the node's
// key alone (no agent, no other identity), the host keys the admission
// policy names alone (a host not among them is refused: no trust on first
// use), no proxy, no connection sharing, no forwarding, no local command,
// in batch mode.
//
// Each source lives in its own directory:
//
//	DIR/base.git   the agent's own bare repository: the fetched commit, as
//	               refs/airlock/base. The sandbox never sees it.
//	DIR/workspace  the session's workspace: a repository of its own,
//	               fetched from base.git, with the branch checked out and
//	               origin set to the source's URL. The sandbox reads it
//	               through its overlay; a commit writes the changes here.
//
// A push never runs git in the workspace's own repository (the sandbox
// may have written its configuration and hooks, which a commit refuses
// but which need not be trusted either): it builds a commit in base.git
// from the workspace's files through a separate index, on top of the
// fetched commit, and pushes that. Commits the session made in its own
// repository are not pushed; its files are, as one commit.
package gitsource

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Source is where a workspace comes from.
type Source struct {
	// URL is the repository's http, https or ssh URL (admitted by the
	// caller).
	URL string
	// Ref is a branch or tag name, or a full commit id; empty is the
	// remote's HEAD.
	Ref string
	// Depth is the history fetched: that many commits; 0 fetches all of it.
	Depth int
	// Auth, when set, is how git authenticates to the repository: a
	// *BasicAuth for http and https, an *SSHKey (required) for ssh.
	Auth Auth
	// MaxBytes bounds what the fetch may write to disk (the agent's
	// repository and the workspace together); 0: no bound. Checked as
	// the fetch goes (every CheckEvery), so it may be passed by what is
	// written in that time; the checkout's files are counted before they
	// are written.
	MaxBytes int64
}

// CheckEvery is how often a fetch's size is measured against
// Source.MaxBytes.
var CheckEvery = 250 * time.Millisecond

// ErrTooLarge is Fetch's error when the source passed Source.MaxBytes.
var ErrTooLarge = errors.New("the source is larger than its bound")

// Fetched is what Fetch made.
type Fetched struct {
	// Workspace is the directory to give the session as its workspace.
	Workspace string
	// Commit is the id of the commit checked out.
	Commit string
	// Branch is the branch checked out in the workspace; empty when the
	// ref was a tag or a commit (HEAD detached).
	Branch string
}

// Auth is how git authenticates to a repository: *BasicAuth or *SSHKey.
type Auth interface {
	// env is the environment that has git use it.
	env() []string
}

// BasicAuth is a username and token sent to a repository as HTTP basic
// authentication (an http.extraHeader, given to git through its
// environment, which only root and the agent's uid can read, never its
// command line).
type BasicAuth struct {
	Username, Token string
}

// env is the environment that has git send a.
func (a *BasicAuth) env() []string {
	if a == nil {
		return nil
	}
	cred := base64.StdEncoding.EncodeToString([]byte(a.Username + ":" + a.Token))
	return []string{"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0=Authorization: Basic " + cred}
}

// SSHKey is how git reaches an ssh repository: the node's private key
// and a known_hosts file of the host keys trusted, by their absolute
// paths (letters, digits and "._+-/" alone: they are written in ssh's
// command line, which a shell reads). Neither file is read here; ssh
// reads them.
type SSHKey struct {
	KeyFile, KnownHostsFile string
}

// SSHProgram is the ssh client ssh sources run.
const SSHProgram = "/usr/bin/ssh"

// SSHConnectTimeout bounds an ssh connection's setup.
const SSHConnectTimeout = 30 * time.Second

// sshPath is what SSHKey's paths may be.
var sshPath = regexp.MustCompile(`^/[A-Za-z0-9._+/-]*$`)

// check says what is wrong with k.
func (k *SSHKey) check() error {
	for _, p := range []string{k.KeyFile, k.KnownHostsFile} {
		if !sshPath.MatchString(p) || filepath.Clean(p) != p {
			return fmt.Errorf("ssh key or known hosts file %q: not an absolute, clean path of letters, digits and \"._+-/\"", p)
		}
	}
	return nil
}

// sshCommand is the command git runs ssh as (GIT_SSH_COMMAND, which git
// runs through sh with its arguments after it): every setting on the
// command line, no configuration file read.
func (k *SSHKey) sshCommand() string {
	opts := []string{
		"IdentitiesOnly=yes",
		"IdentityAgent=none",
		"PKCS11Provider=none",
		"BatchMode=yes",
		"PreferredAuthentications=publickey",
		"StrictHostKeyChecking=yes",
		"UserKnownHostsFile='" + k.KnownHostsFile + "'",
		"GlobalKnownHostsFile=/dev/null",
		"KnownHostsCommand=none",
		"UpdateHostKeys=no",
		"ProxyCommand=none",
		"ProxyJump=none",
		"ControlMaster=no",
		"ControlPath=none",
		"PermitLocalCommand=no",
		"ForwardAgent=no",
		"ForwardX11=no",
		"ClearAllForwardings=yes",
		"RequestTTY=no",
		"ConnectTimeout=" + strconv.Itoa(int(SSHConnectTimeout/time.Second)),
		"ServerAliveInterval=15",
		"ServerAliveCountMax=4",
		"LogLevel=ERROR",
	}
	// IdentityFile, not -i: ssh drops an -i file that is missing when it
	// starts (a rotated key's old path) and takes root's ~/.ssh/id_*
	// keys instead.
	cmd := SSHProgram + " -F /dev/null -o IdentityFile='" + k.KeyFile + "'"
	for _, o := range opts {
		cmd += " -o " + o
	}
	return cmd
}

// env is the environment that has git reach an ssh repository with k:
// the ssh transport allowed (protocol.ssh.allow, for this command alone),
// ssh run as sshCommand says.
func (k *SSHKey) env() []string {
	if k == nil {
		return nil
	}
	return []string{
		"GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=protocol.ssh.allow", "GIT_CONFIG_VALUE_0=always",
		"GIT_SSH_COMMAND=" + k.sshCommand(),
		"GIT_SSH_VARIANT=ssh",
	}
}

// authEnv is the environment that has git reach url with a, after checking
// that they go together: an ssh URL with an *SSHKey, anything else without
// one.
func authEnv(url string, a Auth) ([]string, error) {
	k, isKey := a.(*SSHKey)
	isKey = isKey && k != nil
	switch {
	case strings.HasPrefix(url, "ssh://") && !isKey:
		return nil, fmt.Errorf("%s: an ssh source needs the node's key and known hosts", url)
	case !strings.HasPrefix(url, "ssh://") && isKey:
		return nil, fmt.Errorf("%s: an ssh key is for ssh:// sources", url)
	case isKey:
		if err := k.check(); err != nil {
			return nil, err
		}
		return k.env(), nil
	case a == nil:
		return nil, nil
	}
	return a.env(), nil
}

// Timeout bounds one fetch or push.
const Timeout = 5 * time.Minute

// Dirs of a source's directory.
const (
	baseDir      = "base.git"
	workspaceDir = "workspace"
	baseRef      = "refs/airlock/base"
)

var (
	commitID = regexp.MustCompile(`^[0-9a-f]{40}([0-9a-f]{24})?$`)
	// refName is what a ref may be written as here: git's own rules
	// (check-ref-format) are enforced by git; this keeps out what git
	// would read as an option or a refspec.
	refName = regexp.MustCompile(`^[A-Za-z0-9._/+-]{1,200}$`)
)

// CheckRef says what is wrong with a ref, or "".
func CheckRef(ref string) string {
	switch {
	case ref == "":
		return ""
	case !refName.MatchString(ref) || strings.HasPrefix(ref, "-") || strings.Contains(ref, ".."):
		return fmt.Sprintf("ref %q: write a branch or tag name or a full commit id", ref)
	}
	return ""
}

// Fetch fetches src into dir (which it makes; it must not exist) and makes
// the workspace. On an error dir is removed. A fetch bounded by
// src.MaxBytes that passes it fails with ErrTooLarge.
func Fetch(ctx context.Context, dir string, src Source) (f Fetched, err error) {
	if r := CheckRef(src.Ref); r != "" {
		return f, errors.New(r)
	}
	aenv, err := authEnv(src.URL, src.Auth)
	if err != nil {
		return f, err
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return f, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(dir)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	if src.MaxBytes > 0 {
		var stop func()
		ctx, stop = bound(ctx, dir, src.MaxBytes)
		defer stop()
		defer func() {
			if err != nil && errors.Is(context.Cause(ctx), ErrTooLarge) {
				err = fmt.Errorf("%w (%d bytes): fetch a smaller ref or less history (depth)", ErrTooLarge, src.MaxBytes)
			}
		}()
	}
	base := filepath.Join(dir, baseDir)
	if _, err := run(ctx, dir, nil, "init", "-q", "--bare", base); err != nil {
		return f, err
	}
	from := src.Ref
	if from == "" {
		from = "HEAD"
	}
	args := []string{"--git-dir", base, "fetch", "-q", "--no-tags", "--no-recurse-submodules"}
	if src.Depth > 0 {
		args = append(args, "--depth", fmt.Sprint(src.Depth))
	}
	args = append(args, "--end-of-options", src.URL, "+"+from+":"+baseRef)
	if _, err := run(ctx, dir, aenv, args...); err != nil {
		return f, fmt.Errorf("fetch %s from %s: %w", from, src.URL, err)
	}
	out, err := run(ctx, dir, nil, "--git-dir", base, "rev-parse", "--verify", "-q", baseRef+"^{commit}")
	if err != nil {
		return f, fmt.Errorf("%s of %s is not a commit: %w", from, src.URL, err)
	}
	f.Commit = strings.TrimSpace(string(out))
	if !commitID.MatchString(f.Commit) {
		return f, fmt.Errorf("unexpected commit id %q", f.Commit)
	}
	if b, ok := strings.CutPrefix(src.Ref, "refs/heads/"); ok {
		f.Branch = b
	} else if src.Ref != "" && !commitID.MatchString(src.Ref) && !strings.HasPrefix(src.Ref, "refs/") {
		// A name: a branch unless the remote has a tag of that name.
		if _, err := run(ctx, dir, aenv, "ls-remote", "--exit-code", "-q", "--end-of-options", src.URL, "refs/tags/"+src.Ref); err != nil {
			f.Branch = src.Ref
		}
	}

	if src.MaxBytes > 0 {
		// The checkout is measured before it is written: a small pack
		// can hold files many times its size (one blob under many
		// names), which a checkout writes faster than the bound is
		// checked. The workspace's repository takes about what the
		// agent's does.
		if err := checkoutFits(ctx, dir, base, f.Commit, src.MaxBytes-2*size(base)); err != nil {
			return f, err
		}
	}

	// The workspace: a repository of its own, from the agent's.
	ws := filepath.Join(dir, workspaceDir)
	if _, err := run(ctx, dir, nil, "init", "-q", ws); err != nil {
		return f, err
	}
	args = []string{"-C", ws, "-c", "protocol.file.allow=always", "fetch", "-q", "--no-tags"}
	if src.Depth > 0 {
		args = append(args, "--depth", fmt.Sprint(src.Depth))
	}
	args = append(args, "--end-of-options", base, baseRef)
	if _, err := run(ctx, dir, nil, args...); err != nil {
		return f, err
	}
	checkout := []string{"-C", ws, "checkout", "-q"}
	if f.Branch != "" {
		checkout = append(checkout, "-B", f.Branch, f.Commit)
	} else {
		checkout = append(checkout, "--detach", f.Commit)
	}
	if _, err := run(ctx, dir, nil, checkout...); err != nil {
		return f, err
	}
	if _, err := run(ctx, dir, nil, "-C", ws, "remote", "add", "origin", src.URL); err != nil {
		return f, err
	}
	if src.MaxBytes > 0 && size(dir) > src.MaxBytes {
		return f, fmt.Errorf("%w (%d bytes): fetch a smaller ref or less history (depth)", ErrTooLarge, src.MaxBytes)
	}
	f.Workspace = ws
	return f, nil
}

// checkoutFits fails with ErrTooLarge when checking out commit of the
// repository base takes more than room bytes (each file rounded up to a
// 4 KiB block), without checking it out.
func checkoutFits(ctx context.Context, dir, base, commit string, room int64) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := &treeBytes{room: room, over: cancel}
	err := runTo(ctx, dir, nil, t, "--git-dir", base, "ls-tree", "-r", "-l", "-z", "--full-tree", commit)
	if t.n > room {
		return fmt.Errorf("%w: its files take more than the %d bytes its repository leaves", ErrTooLarge, max(room, 0))
	}
	return err
}

// treeBytes adds up the sizes of the files `git ls-tree -r -l -z` writes
// to it, rounded up to a 4 KiB block, and calls over once they pass room.
type treeBytes struct {
	partial []byte
	n, room int64
	over    func()
}

func (t *treeBytes) Write(p []byte) (int, error) {
	if t.n > t.room {
		return len(p), nil
	}
	t.partial = append(t.partial, p...)
	for {
		i := bytes.IndexByte(t.partial, 0)
		if i < 0 {
			break
		}
		rec := t.partial[:i]
		t.partial = t.partial[i+1:]
		meta, _, ok := bytes.Cut(rec, []byte{'\t'})
		f := bytes.Fields(meta)
		if !ok || len(f) != 4 {
			continue
		}
		if n, err := strconv.ParseInt(string(f[3]), 10, 64); err == nil && n > 0 {
			t.n += (n + 4095) &^ 4095
		}
		if t.n > t.room {
			t.over()
			return len(p), nil
		}
	}
	t.partial = append([]byte(nil), t.partial...)
	return len(p), nil
}

// bound returns a context that is cancelled with ErrTooLarge once what is
// under dir takes more than max bytes, and the function that stops
// measuring.
func bound(ctx context.Context, dir string, max int64) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(ctx)
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(CheckEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			if size(dir) > max {
				cancel(ErrTooLarge)
				return
			}
		}
	}()
	return ctx, func() { close(done); cancel(nil) }
}

// Size is the space the files under dir take (blocks allocated), as
// Source.MaxBytes counts it.
func Size(dir string) int64 { return size(dir) }

// size is the space the files under dir take (blocks allocated).
func size(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if fi, err := d.Info(); err == nil {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			} else {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

// Workspace is the workspace directory of a source's directory.
func Workspace(dir string) string { return filepath.Join(dir, workspaceDir) }

// Identity is who a pushed commit says made it.
type Identity struct {
	Name, Email string
}

// ErrNothingToPush is Push's error when the workspace's files are the
// fetched commit's.
var ErrNothingToPush = errors.New("nothing to push: the workspace's files are the fetched commit's")

// Push makes one commit of the workspace's files (every file, as a
// `git add -A` of it would take them: its .gitignore is honoured, its
// .git is not read; a .git below its root refuses the push with
// ErrNestedRepository) on top of the fetched commit, with message and who as
// author and committer, and pushes it to url as branch (a new branch, or
// a fast-forward of it). It returns the commit's id.
func Push(ctx context.Context, dir, url, branch, message string, who Identity, auth Auth) (string, error) {
	aenv, err := authEnv(url, auth)
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, Timeout)
	defer cancel()
	base := filepath.Join(dir, baseDir)
	index := filepath.Join(dir, "push.index")
	os.Remove(index)
	defer os.Remove(index)
	env := []string{
		"GIT_DIR=" + base,
		"GIT_WORK_TREE=" + filepath.Join(dir, workspaceDir),
		"GIT_INDEX_FILE=" + index,
		"GIT_AUTHOR_NAME=" + who.Name, "GIT_AUTHOR_EMAIL=" + who.Email,
		"GIT_COMMITTER_NAME=" + who.Name, "GIT_COMMITTER_EMAIL=" + who.Email,
	}
	if err := checkNoRepository(filepath.Join(dir, workspaceDir)); err != nil {
		return "", err
	}
	if _, err := run(ctx, dir, env, "read-tree", baseRef); err != nil {
		return "", err
	}
	if _, err := run(ctx, dir, env, "add", "-A", "--", "."); err != nil {
		return "", fmt.Errorf("take the workspace's files: %w", err)
	}
	tree, err := run(ctx, dir, env, "write-tree")
	if err != nil {
		return "", err
	}
	baseTree, err := run(ctx, dir, env, "rev-parse", baseRef+"^{tree}")
	if err != nil {
		return "", err
	}
	if bytes.Equal(tree, baseTree) {
		return "", ErrNothingToPush
	}
	out, err := run(ctx, dir, env, "commit-tree", "-p", baseRef, "-m", message, strings.TrimSpace(string(tree)))
	if err != nil {
		return "", err
	}
	commit := strings.TrimSpace(string(out))
	if !commitID.MatchString(commit) {
		return "", fmt.Errorf("unexpected commit id %q", commit)
	}
	if _, err := run(ctx, dir, append(env, aenv...), "push", "-q", "--no-recurse-submodules", "--end-of-options", url, commit+":refs/heads/"+branch); err != nil {
		return "", fmt.Errorf("push to branch %s of %s: %w", branch, url, err)
	}
	return commit, nil
}

// ErrNestedRepository is Push's error when the workspace holds a git
// repository below its root.
var ErrNestedRepository = errors.New("the workspace holds a git repository below its root")

// checkNoRepository refuses a work tree that has a ".git" (of any type)
// anywhere but at its root. `git add` takes a directory holding one for a
// submodule and resolves its HEAD as root on the node, following the
// symlinks the sandbox put there: to any file of the node, whose content
// would be pushed as the submodule's commit id, to a fifo that blocks it,
// or to /dev/zero, read until the node's memory runs out. No repository
// a session fetched has one (git refuses ".git" in a tree), so only the
// sandbox can have made it. The walk follows no symlink.
func checkNoRepository(ws string) error {
	return filepath.WalkDir(ws, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("take the workspace's files: %w", err)
		}
		if d.Name() != ".git" || p == ws {
			return nil
		}
		if filepath.Dir(p) == ws {
			// The workspace's own repository: git add never reads it
			// (GIT_DIR is the agent's).
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		rel, _ := filepath.Rel(ws, p)
		return fmt.Errorf("%w (%s): not pushed (remove it, or commit its files without its .git)", ErrNestedRepository, rel)
	})
}

// hardened are the configuration settings every git command here runs
// with.
var hardened = []string{
	"core.hooksPath=/dev/null",
	"core.fsmonitor=false",
	"core.sshCommand=false",
	"credential.helper=",
	"protocol.allow=never",
	"protocol.http.allow=always",
	"protocol.https.allow=always",
	"http.followRedirects=false",
	"transfer.fsckObjects=true",
	"fetch.recurseSubmodules=false",
	"submodule.recurse=false",
	"http.lowSpeedLimit=1024",
	"http.lowSpeedTime=60",
	"init.defaultBranch=main",
	"advice.detachedHead=false",
	"gc.auto=0",
	"maintenance.auto=false",
}

// run runs git with args in dir, hardened, with env added to a clean
// environment, and returns its standard output; an error carries the
// last lines of its standard error.
func run(ctx context.Context, dir string, env []string, args ...string) ([]byte, error) {
	var stdout bytes.Buffer
	if err := runTo(ctx, dir, env, &stdout, args...); err != nil {
		return nil, err
	}
	return stdout.Bytes(), nil
}

// runTo is run that writes git's standard output to stdout.
func runTo(ctx context.Context, dir string, env []string, stdout io.Writer, args ...string) error {
	full := make([]string, 0, 2*len(hardened)+len(args))
	for _, c := range hardened {
		full = append(full, "-c", c)
	}
	full = append(full, args...)
	if traceRun != nil {
		traceRun(full, env)
	}
	cmd := exec.CommandContext(ctx, "git", full...)
	cmd.Dir = dir
	cmd.Env = append([]string{
		"PATH=/usr/local/bin:/usr/bin:/bin",
		"HOME=/nonexistent",
		"LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=/bin/false",
		"SSH_ASKPASS=/bin/false",
		"GIT_PROTOCOL_FROM_USER=0",
		"GIT_NO_REPLACE_OBJECTS=1",
		"GIT_OPTIONAL_LOCKS=0",
	}, env...)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = stdout, &limited{w: &stderr, n: 8 << 10}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		msg := strings.TrimSpace(stderr.String())
		// What git says after ssh's refusal adds nothing to it.
		msg = strings.TrimSpace(strings.TrimSuffix(msg, "Please make sure you have the correct access rights\nand the repository exists."))
		for len(msg) > 600 {
			i := strings.IndexByte(msg, '\n')
			if i < 0 {
				break
			}
			msg = msg[i+1:]
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
		if msg != "" {
			return fmt.Errorf("git %s: %w: %s", subcommand(args), err, msg)
		}
		return fmt.Errorf("git %s: %w", subcommand(args), err)
	}
	return nil
}

// traceRun, when set (by tests), is called with the arguments and the
// added environment of each git command run.
var traceRun func(args, env []string)

// subcommand is the git command args run, past the options before it.
func subcommand(args []string) string {
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-C", "-c", "--git-dir":
			i++
		default:
			return args[i]
		}
	}
	return ""
}

// limited keeps the first n bytes written to it.
type limited struct {
	w *bytes.Buffer
	n int
}

func (l *limited) Write(p []byte) (int, error) {
	if room := l.n - l.w.Len(); room > 0 {
		l.w.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}
