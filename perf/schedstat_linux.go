package perf

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// schedTimes is what the scheduler counted for every thread of a process
// (/proc/PID/task/*/schedstat): time on a core and time runnable but
// waiting for one (run queue delay). Threads that ended between two
// samples are missing from the later one.
type schedTimes struct{ run, wait time.Duration }

// readSchedTimes sums the schedstat of pid's threads; zero if pid is gone
// or the kernel keeps no such statistics.
func readSchedTimes(pid int) schedTimes {
	var t schedTimes
	if pid <= 0 {
		return t
	}
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		f := strings.Fields(string(b))
		if len(f) < 2 {
			continue
		}
		run, _ := strconv.ParseInt(f[0], 10, 64)
		wait, _ := strconv.ParseInt(f[1], 10, 64)
		t.run += time.Duration(run)
		t.wait += time.Duration(wait)
	}
	return t
}

func (t schedTimes) sub(u schedTimes) schedTimes {
	return schedTimes{run: t.run - u.run, wait: t.wait - u.wait}
}
