package perf

import "testing"

func TestParseTimeline(t *testing.T) {
	out := []byte(`100/100 10.000000: sched:sched_process_exit: comm=old pid=100 prio=120 group_dead=true
200/200 10.500000: sched:sched_process_exec: filename=/bin/other pid=200 old_pid=200
300/300 11.000000: sched:sched_process_exec: filename=/x/airlock pid=300 old_pid=300
310/310 11.010000: sched:sched_process_exec: filename=/x/runc pid=310 old_pid=310
311/311 11.012000: sched:sched_process_exec: filename=/proc/self/fd/6 pid=311 old_pid=311
310/312 11.020000: sched:sched_process_exit: comm=runc pid=312 prio=120 group_dead=false
310/310 11.030000: sched:sched_process_exit: comm=runc pid=310 prio=120 group_dead=true
311/311 11.040000: sched:sched_process_exec: filename=/bin/true pid=311 old_pid=311
311/311 11.041000: sched:sched_process_exit: comm=true pid=311 prio=120 group_dead=true
400/400 11.045000: sched:sched_process_exec: filename=/usr/bin/perf pid=400 old_pid=400
400/400 11.046000: sched:sched_process_exit: comm=perf pid=400 prio=120 group_dead=true
500/500 11.047000: sched:sched_process_exec: filename=/bin/sleep pid=500 old_pid=500
300/300 11.050000: sched:sched_process_exit: comm=airlock pid=300 prio=120 group_dead=true
`)
	steps, total, err := parseTimeline(out, "/x/airlock")
	if err != nil {
		t.Fatal(err)
	}
	if total < 49.9 || total > 50.1 {
		t.Errorf("total %.3f ms, want 50", total)
	}
	want := []struct {
		prog       string
		start, end float64
	}{{"airlock", 0, 50}, {"runc", 10, 30}, {"runc init", 12, 40}, {"true", 40, 41}}
	if len(steps) != len(want) {
		t.Fatalf("steps %+v, want %d", steps, len(want))
	}
	for i, w := range want {
		s := steps[i]
		if s.Program != w.prog || s.StartMS < w.start-0.01 || s.StartMS > w.start+0.01 || s.EndMS < w.end-0.01 || s.EndMS > w.end+0.01 {
			t.Errorf("step %d = %+v, want %s %.0f..%.0f", i, s, w.prog, w.start, w.end)
		}
	}
	if _, _, err := parseTimeline(out, "/x/missing"); err == nil {
		t.Error("no error for a client that never ran")
	}
}
