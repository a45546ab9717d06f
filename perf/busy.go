package perf

import (
	"errors"
	"fmt"
	"os/exec"
	"syscall"
	"time"
)

// Busy is the load a run is measured under: Loops processes (perfload
// spin), each a busy loop on one core for as long as the run lasts, at
// the same priority as what is measured.
type Busy struct {
	Loops int `json:"loops"`
	// CPUSeconds is what the loops burned, from their rusage.
	CPUSeconds float64 `json:"cpu_s"`
	cmds       []*exec.Cmd
}

// StartBusy starts n busy loops, each ending by itself after limit (and
// with the harness: they die with it). The caller ends them with Stop.
func StartBusy(perfload string, n int, limit time.Duration) (*Busy, error) {
	b := &Busy{Loops: n}
	for range n {
		cmd := exec.Command(perfload, "spin", "-d", limit.String())
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			b.Stop()
			return nil, fmt.Errorf("busy loop: %w", err)
		}
		b.cmds = append(b.cmds, cmd)
	}
	return b, nil
}

// Pids returns the loops' process ids.
func (b *Busy) Pids() []int {
	var out []int
	for _, c := range b.cmds {
		out = append(out, c.Process.Pid)
	}
	return out
}

// Stop ends the loops (by their pids) and records the CPU time they took.
func (b *Busy) Stop() error {
	var errs []error
	for _, c := range b.cmds {
		_ = c.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range b.cmds {
		err := c.Wait()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			errs = append(errs, err)
		}
		if c.ProcessState != nil {
			b.CPUSeconds += (c.ProcessState.UserTime() + c.ProcessState.SystemTime()).Seconds()
		}
	}
	b.cmds = nil
	return errors.Join(errs...)
}
