package api

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// TestFSWireFormat pins the JSON of the filesystem review types: the
// golden files were written from the types as they stood when api and
// fsscope declared them separately, so moving or sharing the types cannot
// change a byte on the wire.
func TestFSWireFormat(t *testing.T) {
	full := ChangeSet{Workspaces: []WorkspaceChanges{
		{
			HostPath: "/home/u/proj",
			Target:   "/workspace",
			Changes: []Change{
				{Path: "a.txt", Kind: "added", Type: "file", Mode: 0o644, Size: 12},
				{Path: "b.bin", Kind: "modified", Type: "file", Mode: 0o755, Size: 4096, Binary: true},
				{Path: "gone", Kind: "deleted", Type: "dir", Mode: 0o755},
				{Path: "new.go", Kind: "renamed", Type: "file", OldPath: "old.go", Mode: 0o644, Size: 3},
				{Path: "run.sh", Kind: "mode", Type: "file", Mode: 0o755, OldMode: 0o644},
				{Path: "link", Kind: "symlink", Type: "symlink", Mode: 0o777, LinkTarget: "b", OldLink: "a"},
				{Path: "x", Kind: "type", Type: "symlink", OldType: "file", Mode: 0o777, LinkTarget: "y"},
			},
			Rejected:  []Rejection{{Path: "/workspace/.git/hooks/pre-commit", Rule: "git_exec", Reason: "hooks run on the host"}},
			Conflicts: []Conflict{{Path: "/workspace/a.txt", Reason: "changed on the host"}},
		},
		{HostPath: "/srv/empty", Target: "/data"},
	}}
	cases := []struct {
		name string
		v    any
	}{
		{"changeset_full", full},
		{"changeset_empty", ChangeSet{Workspaces: []WorkspaceChanges{}}},
		{"commit_full", CommitResult{
			Committed: true,
			Applied:   []string{"/workspace/a.txt", "/workspace/new.go"},
			Rejected:  []Rejection{{Path: "/workspace/.env", Rule: "protect", Reason: "protected path"}},
			Conflicts: []Conflict{{Path: "/workspace/b.bin", Reason: "changed on the host"}},
		}},
		{"commit_empty", CommitResult{Applied: []string{}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := json.MarshalIndent(tc.v, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			golden := filepath.Join("testdata", tc.name+".json")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != string(want) {
				t.Errorf("%s:\ngot  %s\nwant %s", tc.name, got, want)
			}
		})
	}
}
