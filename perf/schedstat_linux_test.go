package perf

import (
	"os"
	"runtime"
	"testing"
	"time"
)

func TestReadSchedTimes(t *testing.T) {
	before := readSchedTimes(os.Getpid())
	if before.run == 0 {
		t.Fatal("no /proc/PID/task/*/schedstat: the kernel keeps no scheduler statistics (CONFIG_SCHED_INFO)")
	}
	// Spin for 50 ms of wall time: the process's time on a core grows by
	// about that (less if it waited for a core, which wait then counts).
	end := time.Now().Add(50 * time.Millisecond)
	n := 0
	for time.Now().Before(end) {
		n++
	}
	runtime.KeepAlive(n)
	d := readSchedTimes(os.Getpid()).sub(before)
	if d.run+d.wait < 40*time.Millisecond || d.run > 5*time.Second {
		t.Errorf("50 ms of spinning counted as %v on a core and %v waiting", d.run, d.wait)
	}
	if got := readSchedTimes(-1); got != (schedTimes{}) {
		t.Errorf("no process: %+v", got)
	}
}
