package runtime

import (
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
)

func TestCgroupListed(t *testing.T) {
	const path = "/airlock-al1234/abc123"
	for _, tt := range []struct {
		listing string
		want    bool
	}{
		{"12:memory:/airlock-al1234/abc123\n11:pids:/airlock-al1234/abc123\n", true},
		{"0::/airlock-al1234/abc123\n", true},
		{"0::/airlock-al1234/abc123/sub\n", true},
		{"0::/airlock-al1234/abc1234\n", false},
		{"0::/airlock-al1234\n", false},
		{"12:memory:/user.slice\n0::/\n", false},
		{"", false},
	} {
		if got := cgroupListed(tt.listing, path); got != tt.want {
			t.Errorf("cgroupListed(%q) = %v, want %v", tt.listing, got, tt.want)
		}
	}
}

// KillInit never signals a process outside the session's cgroup.
func TestKillInitChecksCgroup(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := KillInit(uint32(cmd.Process.Pid), "/airlock-al0000/not-this-one"); err == nil {
		t.Fatal("KillInit signalled a process outside the session's cgroup")
	}
	if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
		t.Fatalf("the process is gone: %v", err)
	}
	if err := KillInit(0, "/x"); err == nil {
		t.Error("KillInit of pid 0 succeeded")
	}
}

// writeFiles makes a fake cgroup mount under a temporary root.
func writeFiles(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestCgroupEmpty(t *testing.T) {
	const path = "/airlock-al0000/abc"
	tests := []struct {
		name  string
		files map[string]string // relative to the cgroup root -> cgroup.procs content
		want  bool
	}{
		{"v2 empty", map[string]string{path: ""}, true},
		{"v2 empty with newline", map[string]string{path: "\n"}, true},
		{"v2 populated", map[string]string{path: "123\n"}, false},
		{"v1 pids empty", map[string]string{"pids" + path: ""}, true},
		{"v1 pids populated", map[string]string{"pids" + path: "1\n2\n"}, false},
		{"v1 memory only, populated", map[string]string{"memory" + path: "7\n"}, false},
		{"v1 memory only, empty", map[string]string{"memory" + path: ""}, true},
		{"v2 wins over v1", map[string]string{path: "9\n", "pids" + path: ""}, false},
		{"no cgroup: not known to be empty", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			files := map[string]string{}
			for dir, procs := range tt.files {
				files[filepath.Join(dir, "cgroup.procs")] = procs
			}
			c := Cgroups{Root: writeFiles(t, files)}
			if got := c.Empty(path); got != tt.want {
				t.Errorf("Empty = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestCgroupOOMKilled(t *testing.T) {
	const path = "/airlock-al0000/abc"
	tests := []struct {
		name  string
		files map[string]string
		want  bool
	}{
		{"v1 killed", map[string]string{"memory" + path + "/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"}, true},
		{"v1 not killed", map[string]string{"memory" + path + "/memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"}, false},
		{"v2 killed", map[string]string{path + "/memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"}, true},
		{"v2 oom without a kill", map[string]string{path + "/memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n"}, false},
		{"no memory cgroup", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Cgroups{Root: writeFiles(t, tt.files)}
			if got := c.OOMKilled(path); got != tt.want {
				t.Errorf("OOMKilled = %v, want %v", got, tt.want)
			}
		})
	}
}

// Remove removes the cgroup in every hierarchy where it is empty, and
// leaves one that still has children.
func TestCgroupRemove(t *testing.T) {
	const path = "/airlock-al0000"
	root := t.TempDir()
	for _, d := range []string{path, "pids" + path, "memory" + path + "/busy", "cpu"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	Cgroups{Root: root}.Remove(path)
	for _, d := range []string{path, "pids" + path} {
		if _, err := os.Stat(filepath.Join(root, d)); !os.IsNotExist(err) {
			t.Errorf("%s still exists (%v)", d, err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "memory"+path+"/busy")); err != nil {
		t.Errorf("a cgroup with a child was removed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "cpu")); err != nil {
		t.Errorf("a hierarchy was removed: %v", err)
	}
}

// RemoveTree takes every empty cgroup beneath a path, deepest first, in
// every hierarchy, and leaves a busy one and those above it.
func TestCgroupRemoveTree(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"airlock-p/a/b", "airlock-p/c", "memory/airlock-p/a", "memory/airlock-p/busy", "memory/other"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A file stands for a process: the directory cannot be removed.
	if err := os.WriteFile(filepath.Join(root, "memory/airlock-p/busy/proc"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	Cgroups{Root: root}.RemoveTree("/airlock-p")
	for p, want := range map[string]bool{
		"airlock-p":             false,
		"memory/airlock-p/a":    false,
		"memory/airlock-p/busy": true,
		"memory/airlock-p":      true,
		"memory/other":          true,
	} {
		_, err := os.Stat(filepath.Join(root, p))
		if got := err == nil; got != want {
			t.Errorf("%s exists: %t, want %t", p, got, want)
		}
	}
}
