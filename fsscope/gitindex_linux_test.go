package fsscope

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestGitIndexBadPath reads the indexes git writes (versions 2 to 4,
// split, sparse-free SHA-1 and SHA-256) without complaint, and finds a
// .git entry planted in each by changing one byte of a path.
func TestGitIndexBadPath(t *testing.T) {
	long := strings.Repeat("d/", 150) + "f"
	for _, c := range []struct {
		name  string
		init  []string
		setup [][]string
	}{
		{"v2", nil, nil},
		{"v3 intent-to-add", nil, [][]string{{"add", "-N", "later.txt"}}},
		{"v4", nil, [][]string{{"update-index", "--index-version", "4"}}},
		{"split", nil, [][]string{{"update-index", "--split-index"}, {"add", "later.txt"}}},
		{"sha256", []string{"--object-format=sha256"}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := tempDir(t)
			writeFiles(t, dir, map[string]string{"a.txt": "a\n", ".gis/hooks/post-commit": "x\n", "z/y.txt": "y\n", long: "l\n", "later.txt": "l\n"})
			git(t, dir, append([]string{"init", "-q"}, c.init...)...)
			git(t, dir, "add", "a.txt", ".gis", "z", "d")
			for _, args := range c.setup {
				git(t, dir, args...)
			}
			files, _ := filepath.Glob(filepath.Join(dir, ".git", "sharedindex.*"))
			files = append(files, filepath.Join(dir, ".git", "index"))
			planted := false
			for _, f := range files {
				data, err := os.ReadFile(f)
				if err != nil {
					t.Fatal(err)
				}
				if bad, err := gitIndexBadPath(data); err != nil || bad != "" {
					t.Fatalf("%s: %q, %v", f, bad, err)
				}
				evil := bytes.Replace(data, []byte(".gis/hooks"), []byte(".git/hooks"), 1)
				if bytes.Equal(evil, data) {
					continue
				}
				planted = true
				if bad, err := gitIndexBadPath(evil); err != nil || bad != ".git/hooks/post-commit" {
					t.Errorf("%s with a .git entry: %q, %v", f, bad, err)
				}
			}
			if !planted {
				t.Fatal("no index holds the entry")
			}
		})
	}
	for _, p := range []string{".git/config", "a/.GIT/hooks/x", "a/../b", "./a", "/a", "a//b", ".git./x", ".git /x", "git~1/x", ".g\u200cit/x", ""} {
		if gitTreePathOK(p) {
			t.Errorf("%q accepted", p)
		}
	}
	for _, p := range []string{".gitignore", "a/.github/x", "git", "x.git/y", ".gitmodules"} {
		if !gitTreePathOK(p) {
			t.Errorf("%q refused", p)
		}
	}
	if _, err := gitIndexBadPath([]byte("DIRC\x00\x00\x00\x02\x00\x00\x00\x05short")); err == nil {
		t.Error("a truncated index reads")
	}
}
