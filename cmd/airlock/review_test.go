package main

import (
	"testing"

	"github.com/airlock-sandbox/airlock/api"
)

// TestChangeDetailEscapes: the sandbox names files and link targets; the
// list of airlock diff shows their non-printable characters escaped.
func TestChangeDetailEscapes(t *testing.T) {
	tests := []struct {
		ch   api.Change
		want string
	}{
		{api.Change{Kind: "renamed", Type: "file", OldPath: "a\nadded  evil"}, `from a\nadded  evil`},
		{api.Change{Kind: "added", Type: "symlink", LinkTarget: "/etc/\x1b[2J\u202e"}, `-> /etc/\x1b[2J\u202e`},
		{api.Change{Kind: "symlink", Type: "symlink", OldLink: `x\y`, LinkTarget: "z"}, `x\\y -> z`},
	}
	for _, tt := range tests {
		if got := changeDetail(tt.ch); got != tt.want {
			t.Errorf("changeDetail(%+v) = %q, want %q", tt.ch, got, tt.want)
		}
	}
}
