package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestBundleArg(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--root", "/r", "create", "--bundle", "/b", "id"}, "/b"},
		{[]string{"create", "-b", "/b2", "id"}, "/b2"},
		{[]string{"create", "--bundle=/b3", "id"}, "/b3"},
		{[]string{"--root", "/r", "start", "id"}, ""},
		{[]string{"create", "--bundle"}, ""},
	} {
		if got := bundleArg(tc.args); got != tc.want {
			t.Errorf("bundleArg(%q) = %q, want %q", tc.args, got, tc.want)
		}
	}
}

// TestLabel: the version is replaced, every other field kept.
func TestLabel(t *testing.T) {
	p := filepath.Join(t.TempDir(), "config.json")
	src := `{"ociVersion":"1.3.0","process":{"args":["true"],"noNewPrivileges":true},"linux":{"seccomp":{"defaultAction":"SCMP_ACT_ERRNO"}}}`
	if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := label(p); err != nil {
		t.Fatal(err)
	}
	var before, after map[string]any
	b, _ := os.ReadFile(p)
	if err := json.Unmarshal(b, &after); err != nil {
		t.Fatal(err)
	}
	_ = json.Unmarshal([]byte(src), &before)
	if after["ociVersion"] != specVersion {
		t.Errorf("ociVersion %v, want %s", after["ociVersion"], specVersion)
	}
	delete(after, "ociVersion")
	delete(before, "ociVersion")
	a, _ := json.Marshal(after)
	w, _ := json.Marshal(before)
	if string(a) != string(w) {
		t.Errorf("fields changed:\n%s\nwant\n%s", a, w)
	}
	if err := label(filepath.Join(t.TempDir(), "missing.json")); err == nil {
		t.Error("a missing config.json: no error")
	}
}
