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
		for i := 10; i < 100; i++ {
			r.samples = append(r.samples, sample{done: i, incarnation: 2, rss: 30<<20 + int64(i)*100})
		}
		// The settled total may climb with the binary's pages; its own
		// pages stay within the limit.
		for i := 10; i < 100; i += 10 {
			r.settled = append(r.settled, sample{done: i, incarnation: 2, rss: 28<<20 + int64(i)*3000, rssAnon: 9<<20 + int64(i)*300, rssFile: 19<<20 + int64(i)*2700, heap: 9<<20 + int64(i)*50})
		}
		return r
	}
	if r := good(); r.failed() {
		t.Fatalf("a clean run failed: %s", r.summary())
	}
	if s, _ := good().longest(); s.incarnation != 2 || math.Abs(s.slope-100) > 1e-6 || math.Abs(s.anonSlope-300) > 1e-6 || math.Abs(s.heapSlope-50) > 1e-6 || s.settledN != 9 {
		t.Errorf("longest segment: %+v, want airlockd #2 with 9 settled samples, slopes 100 (as it ran), 300 (own pages) and 50 (heap)", s)
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
		"no settled samples": func(r *report) { r.settled = r.settled[:2] },
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
