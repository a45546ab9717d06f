package perf

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Timeline is where one run's wall time goes, program by program: every
// program executed on the machine from the client's exec to its exit, with
// when it started and ended relative to the client's exec, taken from the
// kernel's sched_process_exec and sched_process_exit tracepoints (`perf
// record -a`). It is the cross-process profile of a start or a teardown:
// the client, airlockd and containerd are long-lived and show only
// through the programs they run and wait for (the shim, runc, the log
// writer, airlock-init, the command).
type Timeline struct {
	Name    string         `json:"name"`
	Command string         `json:"command"`
	TotalMS float64        `json:"total_ms"`
	Steps   []TimelineStep `json:"steps,omitempty"`
	Error   string         `json:"error,omitempty"`
}

// TimelineStep is one program's life, or the part of a process's life
// between two of its execs.
type TimelineStep struct {
	Program string  `json:"program"`
	PID     int     `json:"pid"`
	StartMS float64 `json:"start_ms"`
	EndMS   float64 `json:"end_ms"`
}

// recordTimeline runs argv under `perf record -a` with the exec and exit
// tracepoints and turns the trace into a Timeline; display is how the
// report shows the command.
func recordTimeline(ctx context.Context, dir, name, display string, argv []string) Timeline {
	tl := Timeline{Name: name, Command: display}
	if _, err := exec.LookPath("perf"); err != nil {
		tl.Error = "perf is not installed (apt-get install linux-perf)"
		return tl
	}
	data, err := os.CreateTemp("", "airlock-timeline-*.data")
	if err != nil {
		tl.Error = err.Error()
		return tl
	}
	data.Close()
	defer os.Remove(data.Name())
	rec := append([]string{"record", "-q", "-a", "-o", data.Name(),
		"-e", "sched:sched_process_exec", "-e", "sched:sched_process_exit", "--"}, argv...)
	cmd := exec.CommandContext(ctx, "perf", rec...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		tl.Error = fmt.Sprintf("perf record: %v: %s", err, lastLine(string(out)))
		return tl
	}
	out, err := exec.CommandContext(ctx, "perf", "script", "-i", data.Name(), "-F", "pid,tid,time,event,trace").Output()
	if err != nil {
		tl.Error = fmt.Sprintf("perf script: %v", err)
		return tl
	}
	steps, total, err := parseTimeline(out, argv[0])
	if err != nil {
		tl.Error = err.Error()
		return tl
	}
	tl.Steps, tl.TotalMS = steps, total
	return tl
}

// parseTimeline reads `perf script -F pid,tid,time,event,trace` output of
// the exec and exit tracepoints. Times are relative to the exec of client;
// a process ends when its last thread exits (group_dead=true).
func parseTimeline(out []byte, client string) ([]TimelineStep, float64, error) {
	var (
		t0     float64
		seen   bool
		steps  []TimelineStep
		open   = map[int]int{} // pid -> index of its running step
		ending = -1.0
	)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		// "PID/TID SECONDS: EVENT: TRACE"
		f := strings.Fields(sc.Text())
		if len(f) < 4 {
			continue
		}
		ps, _, _ := strings.Cut(f[0], "/")
		pid, err := strconv.Atoi(ps)
		if err != nil {
			continue
		}
		ts, err := strconv.ParseFloat(strings.TrimSuffix(f[1], ":"), 64)
		if err != nil {
			continue
		}
		event, trace := f[2], strings.Join(f[3:], " ")
		switch {
		case strings.HasPrefix(event, "sched:sched_process_exec"):
			file := traceField(trace, "filename")
			if !seen {
				if file != client {
					continue
				}
				seen, t0 = true, ts
			}
			at := (ts - t0) * 1000
			if i, ok := open[pid]; ok {
				steps[i].EndMS = at
			}
			open[pid] = len(steps)
			steps = append(steps, TimelineStep{Program: programName(file), PID: pid, StartMS: at, EndMS: -1})
		case strings.HasPrefix(event, "sched:sched_process_exit"):
			if !seen || traceField(trace, "group_dead") != "true" {
				continue
			}
			i, ok := open[pid]
			if !ok {
				continue
			}
			delete(open, pid)
			steps[i].EndMS = (ts - t0) * 1000
			if steps[i].PID == steps[0].PID {
				ending = steps[i].EndMS
			}
		}
	}
	if !seen {
		return nil, 0, fmt.Errorf("no exec of %s in the trace", client)
	}
	if ending < 0 {
		return nil, 0, fmt.Errorf("%s did not exit within the trace", client)
	}
	// Programs still running when the client ended (another session's,
	// say) and the tracer's own are left out.
	var kept []TimelineStep
	for _, s := range steps {
		if s.EndMS < 0 || s.StartMS > ending || s.Program == "perf" {
			continue
		}
		kept = append(kept, s)
	}
	slices.SortStableFunc(kept, func(a, b TimelineStep) int {
		switch {
		case a.StartMS < b.StartMS:
			return -1
		case a.StartMS > b.StartMS:
			return 1
		}
		return 0
	})
	return kept, ending, nil
}

// traceField returns the value of key=value in a tracepoint's text.
func traceField(trace, key string) string {
	for _, kv := range strings.Fields(trace) {
		if v, ok := strings.CutPrefix(kv, key+"="); ok {
			return v
		}
	}
	return ""
}

// programName names a step by its executable; runc re-executes itself
// through /proc/self/fd as `runc init`.
func programName(file string) string {
	if strings.HasPrefix(file, "/proc/self/fd/") {
		return "runc init"
	}
	return filepath.Base(file)
}

func (tl Timeline) markdown(p printer) {
	p("**%s**: `%s`", tl.Name, tl.Command)
	if tl.Error != "" {
		p(" — not recorded: %s\n\n", tl.Error)
		return
	}
	p(", %.0f ms from the client's exec to its exit.\n\n", tl.TotalMS)
	p("| program | pid | start (ms) | end (ms) | ran (ms) |\n|---|---|---|---|---|\n")
	for _, s := range tl.Steps {
		p("| %s | %d | %.1f | %.1f | %.1f |\n", s.Program, s.PID, s.StartMS, s.EndMS, s.EndMS-s.StartMS)
	}
	p("\n")
}
