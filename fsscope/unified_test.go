package fsscope

import (
	"bytes"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// apply rebuilds both sides of an edit script.
func applyEdits(ops []editOp) (a, b []string) {
	for _, o := range ops {
		if o.kind != '+' {
			a = append(a, o.line)
		}
		if o.kind != '-' {
			b = append(b, o.line)
		}
	}
	return a, b
}

func lcs(a, b []string) int {
	dp := make([][]int, len(a)+1)
	for i := range dp {
		dp[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				dp[i][j] = dp[i+1][j+1] + 1
			} else {
				dp[i][j] = max(dp[i+1][j], dp[i][j+1])
			}
		}
	}
	return dp[0][0]
}

func checkLineDiff(t *testing.T, a, b []string) {
	t.Helper()
	ops := lineDiff(a, b)
	ga, gb := applyEdits(ops)
	if strings.Join(ga, "") != strings.Join(a, "") || strings.Join(gb, "") != strings.Join(b, "") {
		t.Fatalf("edit script does not rebuild its inputs:\na=%q\nb=%q\nops=%q", a, b, ops)
	}
	edits := 0
	for _, o := range ops {
		if o.kind != ' ' {
			edits++
		}
	}
	if want := len(a) + len(b) - 2*lcs(a, b); edits != want {
		t.Fatalf("edit script has %d edits, the shortest has %d:\na=%q\nb=%q", edits, want, a, b)
	}
}

func TestLineDiffRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a\n", "b\n", "c\n", "d\n", "e"}
	gen := func() []string {
		n := r.IntN(12)
		out := make([]string, n)
		for i := range out {
			out[i] = alphabet[r.IntN(len(alphabet))]
		}
		return out
	}
	for range 2000 {
		checkLineDiff(t, gen(), gen())
	}
}

func FuzzLineDiff(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nc\nd\n")
	f.Add("", "x")
	f.Fuzz(func(t *testing.T, a, b string) {
		la, lb := splitLines(a), splitLines(b)
		if len(la) > 60 || len(lb) > 60 {
			return
		}
		checkLineDiff(t, la, lb)
		var buf bytes.Buffer
		if err := unifiedText(&buf, a, b); err != nil {
			t.Fatal(err)
		}
	})
}

func TestUnifiedTextAppliesWithGit(t *testing.T) {
	git, err := exec.LookPath("git")
	if err != nil {
		t.Skip("git not installed")
	}
	var oldLines, newLines []string
	for i := range 60 {
		oldLines = append(oldLines, "line "+string(rune('A'+i%26))+"\n")
	}
	newLines = append(newLines, oldLines...)
	newLines[3] = "changed 3\n"
	newLines = append(newLines[:20], append([]string{"inserted\n"}, newLines[20:]...)...)
	newLines = append(newLines[:40], newLines[45:]...)
	newLines[len(newLines)-1] = "last without newline"
	tests := []struct{ name, old, new string }{
		{"edits", strings.Join(oldLines, ""), strings.Join(newLines, "")},
		{"from empty", "", "one\ntwo\n"},
		{"to empty", "one\ntwo\n", ""},
		{"newline at end added", "x", "x\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "f"), []byte(tt.old), 0o644); err != nil {
				t.Fatal(err)
			}
			var patch bytes.Buffer
			patch.WriteString("--- a/f\n+++ b/f\n")
			if err := unifiedText(&patch, tt.old, tt.new); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(git, "apply", "--unidiff-zero", "-")
			cmd.Dir = dir
			cmd.Stdin = bytes.NewReader(patch.Bytes())
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("git apply: %v\n%s\npatch:\n%s", err, out, patch.String())
			}
			got, err := os.ReadFile(filepath.Join(dir, "f"))
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tt.new {
				t.Errorf("patched file = %q, want %q\npatch:\n%s", got, tt.new, patch.String())
			}
		})
	}
}
