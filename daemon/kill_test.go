package daemon

import (
	"os/exec"
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

// killInit never signals a process outside the session's cgroup.
func TestKillInitChecksCgroup(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	if err := killInit(uint32(cmd.Process.Pid), "/airlock-al0000/not-this-one"); err == nil {
		t.Fatal("killInit signalled a process outside the session's cgroup")
	}
	if err := syscall.Kill(cmd.Process.Pid, 0); err != nil {
		t.Fatalf("the process is gone: %v", err)
	}
	if err := killInit(0, "/x"); err == nil {
		t.Error("killInit of pid 0 succeeded")
	}
}
