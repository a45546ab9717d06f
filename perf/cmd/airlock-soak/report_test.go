package main

import (
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
)

func TestFit(t *testing.T) {
	xs := []float64{1, 2, 3, 4}
	if got := fit(xs, []float64{10, 12, 14, 16}); math.Abs(got-2) > 1e-9 {
		t.Errorf("slope of a line of slope 2: %v", got)
	}
	if got := fit([]float64{5}, []float64{1}); got != 0 {
		t.Errorf("slope of one point: %v", got)
	}
	if got := fit([]float64{3, 3}, []float64{1, 9}); got != 0 {
		t.Errorf("slope over one x: %v", got)
	}
}

func TestMinus(t *testing.T) {
	got := minus([]string{"a", "a", "b", "c"}, []string{"a", "c", "d"})
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("minus: %v", got)
	}
}

// The verdict: a mismatch, a leak, growing open files, a missing fault,
// or (from rssJudged sessions) an RSS slope at the limit each fail it;
// the slope of the longest airlockd is judged, not of the one a kill cut
// short.
func TestVerdict(t *testing.T) {
	good := func() *report {
		r := &report{startFDs: 25, endFDs: 25, endIncarnation: 2, census: daemontest.Census{},
			faults: []fault{{what: "containerd"}, {what: "airlockd"}}}
		for i := range rssJudged {
			r.outcomes = append(r.outcomes, outcome{i: i, kind: kindExit, want: "exited 0", got: "exited 0", ok: true})
		}
		for i := range 10 {
			r.samples = append(r.samples, sample{done: i, incarnation: 1, rss: 40 << 20})
		}
		for i := 10; i < 400; i++ {
			r.samples = append(r.samples, sample{done: i, incarnation: 2, rss: 30<<20 + int64(i)*100})
		}
		// The settled total may climb with the binary's pages; its own
		// pages stay within the limit.
		for i := 10; i < 400; i += 10 {
			r.settled = append(r.settled, sample{done: i, incarnation: 2, rss: 28<<20 + int64(i)*3000, rssAnon: 9<<20 + int64(i)*300, rssFile: 19<<20 + int64(i)*2700, heap: 9<<20 + int64(i)*50})
		}
		return r
	}
	if r := good(); r.failed() {
		t.Fatalf("a clean run failed: %s", r.summary())
	}
	if s, _ := good().longest(); s.incarnation != 2 || math.Abs(s.slope-100) > 1e-6 || math.Abs(s.anonSlope-300) > 1e-6 || math.Abs(s.heapSlope-50) > 1e-6 || s.settledN != 39 ||
		math.Abs(s.slopeWarm-100) > 1e-6 || math.Abs(s.anonSlopeWarm-300) > 1e-6 || s.warmN != 290 || s.warmSettledN != 29 {
		t.Errorf("longest segment: %+v, want airlockd #2 with 39 settled samples (29 after its warm-up, sessions 110 on), slopes 100 (as it ran), 300 (own pages) and 50 (heap)", s)
	}
	// A daemon's warm-up (its first warmup sessions) is a one-off cost:
	// a jump in it passes; the same growth spread over the rest fails.
	jump := func(r *report, from, to int) {
		for i := range r.samples {
			if d := r.samples[i].done; d >= from && d < to {
				r.samples[i].rss += int64(d-from) * 8 * rssLimit
			} else if d >= to {
				r.samples[i].rss += int64(to-from) * 8 * rssLimit
			}
		}
		for i := range r.settled {
			if d := r.settled[i].done; d >= from && d < to {
				r.settled[i].rssAnon += int64(d-from) * 8 * rssLimit
			} else if d >= to {
				r.settled[i].rssAnon += int64(to-from) * 8 * rssLimit
			}
		}
	}
	r := good()
	jump(r, 10, 10+warmup)
	if r.failed() {
		t.Errorf("a run whose memory grew in its warm-up only failed: %s", r.summary())
	}
	if s, _ := r.longest(); s.slope < rssLimit || s.anonSlope < rssLimit {
		t.Errorf("the whole process's slopes (%.0f, %.0f) do not show the warm-up", s.slope, s.anonSlope)
	}
	r = good()
	jump(r, 10+warmup, 400)
	if !r.failed() {
		t.Errorf("a run whose memory grew after its warm-up passed: %s", r.summary())
	}
	for name, spoil := range map[string]func(*report){
		"mismatch":  func(r *report) { r.outcomes[3].ok = false },
		"leak":      func(r *report) { r.census = daemontest.Census{"mount": {"/x"}} },
		"container": func(r *report) { r.containerdLeft = []string{"container x"} },
		"fds":       func(r *report) { r.endFDs = 26 },
		"fault":     func(r *report) { r.faults = r.faults[:1] },
		"rss as it ran": func(r *report) {
			for i := range r.samples {
				r.samples[i].rss += int64(r.samples[i].done) * 2 * rssLimit
			}
		},
		"own pages settled": func(r *report) {
			for i := range r.settled {
				r.settled[i].rssAnon += int64(r.settled[i].done) * 2 * rssLimit
			}
		},
		"no settled samples": func(r *report) { r.settled = r.settled[:12] },
	} {
		r := good()
		spoil(r)
		if !r.failed() {
			t.Errorf("%s: the run passed", name)
		}
		if !strings.Contains(r.markdown(), "# Soak: FAIL") {
			t.Errorf("%s: the report does not say FAIL", name)
		}
	}
}
