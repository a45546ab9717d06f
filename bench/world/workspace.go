package world

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// WorkspaceRepo creates at dir (which must not exist, or be empty) the
// agent's checkout of clean-up-branches as the original procedure leaves
// it: on the main branch, every fixture branch also present locally and
// tracking its remote branch, the fixture's user.name and user.email, and
// the remote "origin" pointing at remoteURL (the world's repository as the
// sandbox reaches it, e.g. http://git.bench.test/app.git). It is cloned
// from the world's pristine repository, without hard links.
func (w *World) WorkspaceRepo(ctx context.Context, dir, remoteURL string) error {
	if remoteURL == "" {
		return errors.New("workspace repo: empty remote URL")
	}
	if strings.ContainsAny(remoteURL, "\n\r\"\\") {
		return fmt.Errorf("workspace repo: remote URL %q: newlines, quotes and backslashes are not supported", remoteURL)
	}
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("workspace repo: %s is not empty", dir)
	}
	gf := w.fx.Git
	if _, err := w.git.run(ctx, "", nil, "clone", "--quiet", "--no-hardlinks", "--template=", "--origin", "origin", w.pristine, dir); err != nil {
		return fmt.Errorf("workspace repo: %w", err)
	}
	var cfg strings.Builder
	fmt.Fprintf(&cfg, "[user]\n\tname = %s\n\temail = %s\n", gf.UserName, gf.UserEmail)
	var stdin strings.Builder
	for _, b := range gf.Branches {
		fmt.Fprintf(&cfg, "[branch %q]\n\tremote = origin\n\tmerge = refs/heads/%s\n", b.Name, b.Name)
		fmt.Fprintf(&stdin, "create refs/heads/%s %s\n", b.Name, b.Commit.ID)
	}
	gitDir := filepath.Join(dir, ".git")
	f, err := os.OpenFile(filepath.Join(gitDir, "config"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("workspace repo: %w", err)
	}
	_, err = f.WriteString(cfg.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("workspace repo: %w", err)
	}
	if _, err := w.git.run(ctx, dir, nil, "config", "remote.origin.url", remoteURL); err != nil {
		return fmt.Errorf("workspace repo: %w", err)
	}
	if _, err := w.git.run(ctx, dir, strings.NewReader(stdin.String()), "update-ref", "--stdin"); err != nil {
		return fmt.Errorf("workspace repo: %w", err)
	}
	return nil
}

// SnapshotLocalRefs returns the local branches of the checkout at dir
// (branch name -> commit id), as `git for-each-ref refs/heads` would list
// them. It reads the repository's files itself, without running git, and
// never leaves dir: the checkout is the agent's and may hold anything,
// including symbolic links meant to point elsewhere.
func SnapshotLocalRefs(dir string) (map[string]string, error) {
	refs, err := checkoutRefs(dir, "refs/heads/", false)
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(refs))
	for ref, id := range refs {
		out[strings.TrimPrefix(ref, "refs/heads/")] = id
	}
	return out, nil
}

// SnapshotCheckoutRefs returns every ref of the checkout at dir, loose and
// packed read together as git reads them: full name -> commit id, or
// "ref: TARGET" for a symbolic ref. Two snapshots are equal exactly when
// no ref was created, deleted, moved or made symbolic, wherever git keeps
// it (git pack-refs changes the files, not this). Like SnapshotLocalRefs
// it never runs git and never leaves dir.
func SnapshotCheckoutRefs(dir string) (map[string]string, error) {
	return checkoutRefs(dir, "refs/", true)
}

func checkoutRefs(dir, prefix string, symbolic bool) (map[string]string, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("local refs: %w", err)
	}
	defer root.Close()
	fi, err := root.Lstat(".git")
	if err != nil {
		return nil, fmt.Errorf("local refs: %w", err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("local refs: %s/.git is not a directory (worktrees and gitdir files are not supported)", dir)
	}
	gitRoot, err := root.OpenRoot(".git")
	if err != nil {
		return nil, fmt.Errorf("local refs: %w", err)
	}
	defer gitRoot.Close()
	refs, err := readRefValues(gitRoot.FS(), prefix, symbolic)
	if err != nil {
		return nil, fmt.Errorf("local refs of %s: %w", dir, err)
	}
	return refs, nil
}
