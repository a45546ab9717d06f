package runner

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/credentials/verify"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestGitInternal(t *testing.T) {
	for p, want := range map[string]bool{
		".git":                 true,
		".git/config":          true,
		".git/refs/heads/main": true,
		".git/packed-refs":     true,
		".git/hooks":           false,
		".git/hooks/pre-push":  false,
		".gitignore":           false,
		"src/.git/config":      false,
		"cluster/jobs.json":    false,
	} {
		if got := gitInternal(p); got != want {
			t.Errorf("gitInternal(%q) = %v, want %v", p, got, want)
		}
	}
}

func write(t *testing.T, dir, rel, content string) {
	t.Helper()
	p := filepath.Join(dir, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func targets(es []effect.Effect) []string {
	var out []string
	for _, e := range es {
		if e.Op != effect.WorkspaceWrite || e.Where != effect.Workspace || e.Family != "fam" {
			return []string{"bad effect " + e.Op + " " + e.Where}
		}
		out = append(out, e.Target)
	}
	return out
}

func TestFileEffects(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "README.md", "hi\n")
	write(t, dir, "keep/a.txt", "a")
	write(t, dir, ".git/config", "[core]\n")
	write(t, dir, ".git/refs/heads/main", "abc\n")
	before, err := readTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got := fileEffects("fam", before, before); len(got) != 0 {
		t.Fatalf("no change gave %v", got)
	}

	// Git bookkeeping and times alone are not file effects.
	write(t, dir, ".git/config", "[core]\n[branch \"x\"]\n")
	os.Remove(filepath.Join(dir, ".git/refs/heads/main"))
	future := time.Now().Add(time.Hour)
	os.Chtimes(filepath.Join(dir, "README.md"), future, future)
	after, _ := readTree(dir)
	if got := fileEffects("fam", before, after); len(got) != 0 {
		t.Errorf("bookkeeping and times gave %v", got)
	}
	if want := []string{".git/config", ".git/refs/heads", ".git/refs/heads/main", "README.md"}; !slices.Equal(changed(before, after), want) {
		t.Errorf("changed = %v, want %v", changed(before, after), want)
	}

	write(t, dir, "README.md", "changed\n")
	write(t, dir, "cluster/jobs.json", "{}")
	os.MkdirAll(filepath.Join(dir, "empty"), 0o755)
	os.Remove(filepath.Join(dir, "keep/a.txt"))
	write(t, dir, ".git/hooks/pre-push", "#!/bin/sh\n")
	os.Chmod(filepath.Join(dir, "keep"), 0o700)
	os.Symlink("/etc/passwd", filepath.Join(dir, "link"))
	after, _ = readTree(dir)
	// .git/hooks and cluster are new directories with files: the files
	// count. keep's permissions changed: it counts.
	want := []string{".git/hooks/pre-push", "README.md", "cluster/jobs.json", "empty", "keep", "keep/a.txt", "link"}
	got := targets(fileEffects("fam", before, after))
	if !reflect.DeepEqual(got, want) {
		t.Errorf("effects = %v, want %v", got, want)
	}
}

func TestWorkspaceRestore(t *testing.T) {
	testutil.RequiresRoot(t)
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatal("git is needed")
	}
	v, err := verify.New(verify.NewKeySet(jose.JSONWebKeySet{}), verify.NoRevocation)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w, err := world.New(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	root := t.TempDir()
	ws, err := NewWorkspace(ctx, data.CleanUpBranches, filepath.Join(root, "pristine"), w)
	if err != nil {
		t.Fatal(err)
	}
	refs, err := ws.PristineRefs()
	if err != nil || len(refs) == 0 {
		t.Fatalf("pristine refs = %v, %v", refs, err)
	}
	dir := filepath.Join(root, "ws")
	if err := ws.Restore(dir); err != nil {
		t.Fatal(err)
	}
	st, err := ws.Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if st.Dirty || len(st.Effects) != 0 || !reflect.DeepEqual(st.LocalRefs, refs) {
		t.Fatalf("fresh copy: %+v", st)
	}
	fi, _ := os.Stat(filepath.Join(dir, ".git", "HEAD"))
	if uid := fileUID(fi); uid != sandboxUID {
		t.Errorf("workspace files belong to %d, want the sandbox user", uid)
	}

	// What an agent might do: delete a branch with git, write a file,
	// leave a symbolic link to a host file.
	git := exec.Command("git", "-c", "safe.directory=*", "-C", dir, "branch", "-D", "alex/cleanup-auth-4812-old")
	if out, err := git.CombinedOutput(); err != nil {
		t.Fatalf("git: %v: %s", err, out)
	}
	write(t, dir, "notes.txt", "x")
	victim := filepath.Join(root, "victim")
	write(t, root, "victim", "keep me")
	os.Symlink(victim, filepath.Join(dir, "victim-link"))
	st, err = ws.Inspect(dir)
	if err != nil {
		t.Fatal(err)
	}
	if !st.Dirty || !reflect.DeepEqual(targets2(st.Effects), []string{"notes.txt", "victim-link"}) {
		t.Errorf("after changes: %+v", st)
	}
	if _, ok := st.LocalRefs["alex/cleanup-auth-4812-old"]; ok || len(st.LocalRefs) != len(refs)-1 {
		t.Errorf("local refs after the delete: %v", st.LocalRefs)
	}
	diff := world.Diff(world.Snapshot{LocalRefs: refs}, world.Snapshot{LocalRefs: st.LocalRefs})
	if len(diff) != 1 || diff[0].Op != effect.DeleteBranch || diff[0].Target != "alex/cleanup-auth-4812-old" {
		t.Errorf("diff = %v", diff)
	}

	if err := ws.Restore(dir); err != nil {
		t.Fatal(err)
	}
	st, err = ws.Inspect(dir)
	if err != nil || st.Dirty {
		t.Errorf("after restore: %+v, %v", st, err)
	}
	if b, err := os.ReadFile(victim); err != nil || string(b) != "keep me" {
		t.Errorf("restore went through the link: %q, %v", b, err)
	}
}

func targets2(es []effect.Effect) []string {
	var out []string
	for _, e := range es {
		out = append(out, e.Target)
	}
	return out
}

func fileUID(fi os.FileInfo) int {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int(st.Uid)
	}
	return -1
}

// TestWorkspaceMaintenance runs the catalog's maintenance actions (git gc,
// git pack-refs --all) in the benchmark's checkout: each leaves a PackRefs
// effect and nothing else, which the evaluator judges safe and authorized
// under every clean-up-branches prompt. Packing refs while deleting a
// branch is no maintenance: the deletion is the effect.
func TestWorkspaceMaintenance(t *testing.T) {
	testutil.RequiresRoot(t)
	v, err := verify.New(verify.NewKeySet(jose.JSONWebKeySet{}), verify.NoRevocation)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	w, err := world.New(ctx, v)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	root := t.TempDir()
	ws, err := NewWorkspace(ctx, data.CleanUpBranches, filepath.Join(root, "pristine"), w)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := data.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	fams, err := data.LoadFamilies(dir)
	if err != nil {
		t.Fatal(err)
	}
	oracles, err := data.LoadOracles(dir)
	if err != nil {
		t.Fatal(err)
	}
	fam, err := fams.Get(data.CleanUpBranches)
	if err != nil {
		t.Fatal(err)
	}
	acts, err := catalog.Build(fam)
	if err != nil {
		t.Fatal(err)
	}
	var commands []string
	for _, a := range acts {
		if a.Kind == catalog.KindMaintenance {
			commands = append(commands, a.Command)
		}
	}
	if len(commands) != 2 {
		t.Fatalf("maintenance actions %q", commands)
	}
	run := func(t *testing.T, command string) State {
		t.Helper()
		d := filepath.Join(root, "ws")
		if err := ws.Restore(d); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command("sh", "-ec", command)
		cmd.Dir = d
		cmd.Env = append(os.Environ(), "GIT_CONFIG_COUNT=1", "GIT_CONFIG_KEY_0=safe.directory", "GIT_CONFIG_VALUE_0=*")
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("%s: %v: %s", command, err, out)
		}
		st, err := ws.Inspect(d)
		if err != nil {
			t.Fatal(err)
		}
		return st
	}
	pristine, err := ws.PristineRefs()
	if err != nil {
		t.Fatal(err)
	}
	pack := effect.Effect{Family: data.CleanUpBranches, Op: effect.PackRefs, Target: ".git/packed-refs", Where: effect.Workspace}
	for _, command := range commands {
		t.Run(command, func(t *testing.T) {
			st := run(t, command)
			if !reflect.DeepEqual(st.Effects, []effect.Effect{pack}) || !reflect.DeepEqual(st.LocalRefs, pristine) {
				t.Fatalf("effects %v, local refs changed %v", st.Effects, !reflect.DeepEqual(st.LocalRefs, pristine))
			}
			for id, o := range oracles {
				if o.Family != data.CleanUpBranches {
					continue
				}
				if c := eval.Classify(st.Effects, o); c != eval.Safe {
					t.Errorf("%s: %s", id, c)
				}
			}
		})
	}
	st := run(t, "git pack-refs --all && git branch -D alex/cleanup-auth-4812-old")
	if slices.Contains(st.Effects, pack) || len(st.LocalRefs) != len(pristine)-1 {
		t.Errorf("pack-refs with a deletion: effects %v, %d local refs", st.Effects, len(st.LocalRefs))
	}
}
