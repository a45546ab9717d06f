package authgate

import (
	"bytes"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/bench/effect"
)

// TestWorkspacesWithGit builds every shipped pair's workspace as a real git
// checkout and checks the data against git itself: the tracked, untracked
// and ignored flags against git's view; each workspace step of the
// trajectory runs, succeeds and changes no file; and a workspace action
// changes exactly the files its expect names.
func TestWorkspacesWithGit(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Fatalf("git is needed: %v", err)
	}
	set := mustDefault(t)
	for _, p := range set.Pairs {
		if len(p.World.Workspace) == 0 {
			continue
		}
		t.Run(p.ID, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			env := gitEnv(t)
			makeWorkspace(t, dir, env, p.World.Workspace)
			checkGitView(t, dir, env, p.World.Workspace)

			before := snapshot(t, dir)
			for _, st := range p.Trajectory {
				if !workspaceCommand(st) {
					continue
				}
				if out, err := runShell(dir, env, st); err != nil {
					t.Errorf("trajectory step %q: %v\n%s", st, err, out)
				}
				if after := snapshot(t, dir); !maps.Equal(before, after) {
					t.Fatalf("trajectory step %q changed the workspace: %v", st, changedPaths(before, after))
				}
			}

			var want []string
			for _, e := range p.Expect {
				if e.Op == effect.WorkspaceWrite {
					want = append(want, e.Target)
				}
			}
			if !workspaceCommand(p.Action) {
				if len(want) > 0 {
					t.Fatalf("action %q is not a workspace command but expects workspace writes %v", p.Action, want)
				}
				return
			}
			if out, err := runShell(dir, env, p.Action); err != nil {
				t.Fatalf("action %q: %v\n%s", p.Action, err, out)
			}
			got := changedPaths(before, snapshot(t, dir))
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("action %q changed %v; expect says %v", p.Action, got, want)
			}
		})
	}
}

// workspaceCommand reports whether a step runs in the workspace alone
// (the world's CLIs are not installed here).
func workspaceCommand(line string) bool {
	cmd, _, _ := strings.Cut(line, " ")
	return slices.Contains([]string{"git", "rm", "cat", "head", "tail", "wc", "sha256sum", "ls", "grep", "find"}, cmd)
}

func gitEnv(t *testing.T) []string { return GitEnv(t.TempDir()) }

func runShell(dir string, env []string, line string) ([]byte, error) {
	cmd := exec.Command("sh", "-c", line)
	cmd.Dir, cmd.Env = dir, env
	return cmd.CombinedOutput()
}

func git(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir, cmd.Env = dir, env
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// makeWorkspace builds the checkout with BuildWorkspace.
func makeWorkspace(t *testing.T, dir string, _ []string, files []File) {
	t.Helper()
	if err := BuildWorkspace(dir, files); err != nil {
		t.Fatal(err)
	}
}

// checkGitView compares git's status of every file with the data's flags.
func checkGitView(t *testing.T, dir string, env []string, files []File) {
	lsFiles := strings.Split(git(t, dir, env, "ls-files", "-z"), "\x00")
	var untracked []string
	for _, f := range files {
		if got := slices.Contains(lsFiles, f.Path); got != f.Tracked {
			t.Errorf("%s: git says tracked=%v, the data says %v", f.Path, got, f.Tracked)
		}
		if !f.Tracked {
			untracked = append(untracked, f.Path)
		}
	}
	if len(untracked) == 0 {
		return
	}
	cmd := exec.Command("git", "check-ignore", "-z", "--stdin")
	cmd.Dir, cmd.Env = dir, env
	cmd.Stdin = strings.NewReader(strings.Join(untracked, "\x00") + "\x00")
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); err != nil && (!ok || ee.ExitCode() != 1) {
		t.Fatalf("git check-ignore: %v", err)
	}
	ignored := strings.Split(string(out), "\x00")
	for _, f := range files {
		if got := slices.Contains(ignored, f.Path); !f.Tracked && got != f.Ignored {
			t.Errorf("%s: git says ignored=%v, the data says %v", f.Path, got, f.Ignored)
		}
	}
}

// snapshot maps every file outside .git to its content.
func snapshot(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		if rel == ".git" {
			return filepath.SkipDir
		}
		if d.Type().IsRegular() {
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func changedPaths(before, after map[string]string) []string {
	var out []string
	for p, b := range before {
		if a, ok := after[p]; !ok || !bytes.Equal([]byte(a), []byte(b)) {
			out = append(out, p)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}
