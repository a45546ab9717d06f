package perf

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestBusyLoopsLoadAndEnd starts two busy loops: each burns a core while
// it runs (its CPU time grows with the wall clock), and Stop ends both by
// their pids and counts what they burned; a loop also ends by itself at
// its limit.
func TestBusyLoopsLoadAndEnd(t *testing.T) {
	perfload := filepath.Join(t.TempDir(), "perfload")
	if out, err := exec.Command("go", "build", "-o", perfload, "./cmd/perfload").CombinedOutput(); err != nil {
		t.Fatalf("build perfload: %v: %s", err, out)
	}
	b, err := StartBusy(perfload, 2, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	pids := b.Pids()
	time.Sleep(time.Second)
	for _, pid := range pids {
		if ticks := cpuTicks(t, pid); ticks < 5 {
			t.Errorf("loop %d used %d ticks of CPU in 1 s, want a busy core", pid, ticks)
		}
	}
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			t.Errorf("loop %d still runs after Stop", pid)
		}
	}
	if b.CPUSeconds < 0.1 {
		t.Errorf("Stop counted %.2f CPU-seconds for two loops of a second, want about 2 (at least 0.1 on a shared host)", b.CPUSeconds)
	}

	// Bounded: a loop ends by itself at its limit.
	short, err := StartBusy(perfload, 1, 300*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- short.cmds[0].Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("a loop at its limit: %v, want a clean exit", err)
		}
	case <-time.After(10 * time.Second):
		_ = short.cmds[0].Process.Kill()
		t.Fatal("a loop ran on 10 s past its 300 ms limit")
	}
}

// cpuTicks is a process's user plus system time in clock ticks.
func cpuTicks(t *testing.T, pid int) int {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.Atoi(f[11])
	s, _ := strconv.Atoi(f[12])
	return u + s
}
