package main

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
)

// rssLimit is the most airlockd's resident memory may grow per session.
const rssLimit = 1024

// report is a soak's findings.
type report struct {
	o         options
	started   time.Time
	elapsed   time.Duration
	budgetHit bool
	log       string
	kept      string // the run's directory, kept because mounts were left

	outcomes []outcome
	faults   []fault
	samples  []sample
	// settled are samples taken after the daemon gave back what memory
	// it could (see daemon.settled), every settleEvery sessions.
	settled []sample

	startFDs, endFDs       int
	startFDList, endFDList []string
	endRSS                 int64
	endIncarnation         int

	leftSessions   []string
	containerdLeft []string
	census         daemontest.Census
	stopErr        string
}

// segment is the samples of one airlockd process.
type segment struct {
	incarnation int
	n           int
	from, to    int     // sessions finished at its first and last sample
	slope       float64 // bytes of RSS per finished session, least squares
	slopeLate   float64 // the same over its second half
	rss0, rss1  int64
	// Over the settled samples: how many, resident memory's and the live
	// heap's slopes, and their first and last values.
	settledN                int
	settledSlope, heapSlope float64
	anonSlope, fileSlope    float64
	stackSlope              float64
	settled0, settled1      sample
	// After the process's warm-up (its first warmup sessions): the slopes
	// judged, as it ran and of its own pages settled, and how many
	// samples of each they fit.
	warmN, warmSettledN      int
	slopeWarm, anonSlopeWarm float64
}

// warmup is how many sessions of each airlockd process are its warm-up,
// left out of the judged slopes: in its first sessions a daemon pages in
// its code paths and fills what it keeps for reuse (pools, caches, OS
// threads for its peak concurrency), a one-off cost, not a per-session
// one. Measured with -smaps: airlockd's own pages grew 2.4 MiB over its
// first 50 sessions, then by about 700 B a session.
const warmup = 100

func (r *report) segments() []segment {
	var out []segment
	for inc := 1; ; inc++ {
		var xs, ys []float64
		var ss []sample
		for _, s := range r.samples {
			if s.incarnation == inc {
				ss = append(ss, s)
			}
		}
		if len(ss) == 0 {
			if inc > r.endIncarnation {
				return out
			}
			continue
		}
		slices.SortFunc(ss, func(a, b sample) int { return a.done - b.done })
		for _, s := range ss {
			xs, ys = append(xs, float64(s.done)), append(ys, float64(s.rss))
		}
		h := len(xs) / 2
		seg := segment{incarnation: inc, n: len(ss), from: ss[0].done, to: ss[len(ss)-1].done,
			slope: fit(xs, ys), slopeLate: fit(xs[h:], ys[h:]), rss0: ss[0].rss, rss1: ss[len(ss)-1].rss}
		w := sort.SearchFloat64s(xs, float64(seg.from+warmup))
		seg.warmN, seg.slopeWarm = len(xs)-w, fit(xs[w:], ys[w:])
		var st []sample
		for _, s := range r.settled {
			if s.incarnation == inc {
				st = append(st, s)
			}
		}
		slices.SortFunc(st, func(a, b sample) int { return a.done - b.done })
		if len(st) > 0 {
			var sx, sr, sh, sa, sf, sk []float64
			for _, s := range st {
				sx, sr, sh = append(sx, float64(s.done)), append(sr, float64(s.rss)), append(sh, float64(s.heap))
				sa, sf, sk = append(sa, float64(s.rssAnon)), append(sf, float64(s.rssFile)), append(sk, float64(s.stacks))
			}
			seg.settledN, seg.settledSlope, seg.heapSlope = len(st), fit(sx, sr), fit(sx, sh)
			seg.anonSlope, seg.fileSlope, seg.stackSlope = fit(sx, sa), fit(sx, sf), fit(sx, sk)
			seg.settled0, seg.settled1 = st[0], st[len(st)-1]
			w := sort.SearchFloat64s(sx, float64(seg.from+warmup))
			seg.warmSettledN, seg.anonSlopeWarm = len(sx)-w, fit(sx[w:], sa[w:])
		}
		out = append(out, seg)
	}
}

// fit is the least-squares slope of ys over xs (0 with fewer than two
// distinct xs).
func fit(xs, ys []float64) float64 {
	n := float64(len(xs))
	if n < 2 {
		return 0
	}
	var sx, sy, sxx, sxy float64
	for i := range xs {
		sx, sy, sxx, sxy = sx+xs[i], sy+ys[i], sxx+xs[i]*xs[i], sxy+xs[i]*ys[i]
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0
	}
	return (n*sxy - sx*sy) / den
}

// longest is the segment with the most samples: the RSS criterion is
// judged on it.
func (r *report) longest() (segment, bool) {
	segs := r.segments()
	if len(segs) == 0 {
		return segment{}, false
	}
	return slices.MaxFunc(segs, func(a, b segment) int { return a.n - b.n }), true
}

func (r *report) mismatches() []outcome {
	var out []outcome
	for _, o := range r.outcomes {
		if !o.ok {
			out = append(out, o)
		}
	}
	return out
}

func (r *report) leaked() bool {
	return len(r.leftSessions) > 0 || len(r.containerdLeft) > 0 || r.census.Total() > 0
}

// rssJudged is the fewest sessions over which the RSS slope is judged:
// below it, the Go heap's warm-up is most of the slope.
const rssJudged = 500

func (r *report) rssOK() bool {
	if len(r.outcomes) < rssJudged {
		return true
	}
	s, ok := r.longest()
	return ok && s.warmSettledN >= 3 && s.slopeWarm < rssLimit && s.anonSlopeWarm < rssLimit
}

func (r *report) failed() bool {
	return len(r.mismatches()) > 0 || r.leaked() || !r.rssOK() || r.endFDs > r.startFDs ||
		len(r.faults) < 2 || r.stopErr != ""
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func (r *report) summary() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d sessions in %v, %d mismatched; faults %d; left: %s; RSS slope %s; fds %d -> %d\n",
		len(r.outcomes), r.elapsed.Round(time.Second), len(r.mismatches()), len(r.faults), r.leftString(), r.slopeString(), r.startFDs, r.endFDs)
	if r.failed() {
		b.WriteString("FAIL\n")
	} else {
		b.WriteString("PASS\n")
	}
	return b.String()
}

func (r *report) slopeString() string {
	s, ok := r.longest()
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf("after its first %d sessions %.0f B/session as it ran, %.0f of its own pages settled (airlockd #%d, %d and %d samples); over the whole process %.0f and %.0f (%.0f settled with the binary's)",
		warmup, s.slopeWarm, s.anonSlopeWarm, s.incarnation, s.warmN, s.warmSettledN, s.slope, s.anonSlope, s.settledSlope)
}

func (r *report) leftString() string {
	if !r.leaked() {
		return "nothing"
	}
	var parts []string
	if len(r.leftSessions) > 0 {
		parts = append(parts, fmt.Sprintf("%d sessions", len(r.leftSessions)))
	}
	if len(r.containerdLeft) > 0 {
		parts = append(parts, fmt.Sprintf("%d containerd objects", len(r.containerdLeft)))
	}
	if r.census.Total() > 0 {
		parts = append(parts, fmt.Sprintf("%d on the machine", r.census.Total()))
	}
	return strings.Join(parts, ", ")
}

func (r *report) markdown() string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	verdict := "PASS"
	if r.failed() {
		verdict = "FAIL"
	}
	host, _ := os.Hostname()
	p("# Soak: %s\n\n", verdict)
	p("`make soak SOAK_ARGS='-sessions %d -parallel %d -seed %d'` on %s (%d CPUs, %s), %s; ran %v.\n\n",
		r.o.sessions, r.o.parallel, r.o.seed, host, runtime.NumCPU(), runtime.GOOS+"/"+runtime.GOARCH,
		r.started.UTC().Format(time.RFC3339), r.elapsed.Round(time.Second))
	p("Every session: an egress allowlist through the L7 gateway (`l7 = \"check\"`, a world host on port 80), ")
	p("an overlay workspace (default deny_read), a memory limit and a timeout. Kinds: ")
	p("`exit` writes a file, fetches from the world host and exits with a chosen code (99 if the fetch fails); `timeout` sleeps past a 2 s timeout; ")
	p("`oom` allocates 512 MiB under 64 MiB; `stop` fetches, then sleeps until stopped (grace 100 ms); ")
	p("`commit` fetches (exits 99 if that fails) and writes a file, which is then committed and read back from the host.\n\n")
	if r.o.heapProfiles != "" {
		p("**airlockd ran with heap profiling on (`-heap-profiles %s`): its profiling buckets take memory of their own, so the slopes below are not the daemon's alone.**\n\n", r.o.heapProfiles)
	}
	if r.budgetHit {
		p("**The %v budget ended the run after %d of %d sessions.**\n\n", r.o.budget, len(r.outcomes), r.o.sessions)
	}

	p("## Recorded exits\n\n| kind | sessions | as the command did | mismatched |\n|---|---:|---:|---:|\n")
	byKind := map[string][2]int{}
	for _, o := range r.outcomes {
		c := byKind[o.kind]
		c[0]++
		if o.ok {
			c[1]++
		}
		byKind[o.kind] = c
	}
	for _, k := range []string{kindExit, kindTimeout, kindOOM, kindStop, kindCommit} {
		c := byKind[k]
		p("| %s | %d | %d | %d |\n", k, c[0], c[1], c[0]-c[1])
	}
	var durs []time.Duration
	for _, o := range r.outcomes {
		durs = append(durs, o.duration)
	}
	slices.Sort(durs)
	if len(durs) > 0 {
		p("\nA session, create to rm: median %v, p95 %v, max %v.\n", durs[len(durs)/2].Round(time.Millisecond),
			durs[len(durs)*95/100].Round(time.Millisecond), durs[len(durs)-1].Round(time.Millisecond))
	}
	var failedFetch []string
	for _, o := range r.outcomes {
		if o.fetchFailed {
			failedFetch = append(failedFetch, fmt.Sprintf("#%d at %v", o.i, o.ended.Round(time.Second)))
		}
	}
	if len(failedFetch) > 0 {
		p("\n%d sessions' fetch from the world host failed, and their command exited 99 as it does then (recorded so: no mismatch). ", len(failedFetch))
		p("The DNS proxy and the L7 gateway live in airlockd, so while it is down sessions' names do not resolve; see the faults' times. Ended: %s.\n", strings.Join(failedFetch, ", "))
	}
	if mm := r.mismatches(); len(mm) > 0 {
		p("\n### Mismatches\n\n| # | kind | session | command did | recorded | error |\n|---:|---|---|---|---|---|\n")
		for i, o := range mm {
			if i == 50 {
				p("\n%d more.\n", len(mm)-50)
				break
			}
			p("| %d | %s | %s | %s | %s | %s |\n", o.i, o.kind, o.id, o.want, o.got, strings.ReplaceAll(o.err, "|", "/"))
		}
	}

	p("\n## Faults\n\n| fault | at session | after | until the daemon answered again | error |\n|---|---:|---:|---:|---|\n")
	for _, f := range r.faults {
		p("| %s | %d | %v | %v | %s |\n", f.what, f.at, f.when.Round(time.Second), f.recovery.Round(time.Millisecond), f.err)
	}
	if len(r.faults) < 2 {
		p("\nFewer faults than planned (the run ended before their session).\n")
	}

	p("\n## airlockd\n\nResident memory against sessions finished, per airlockd process (the kill starts a new one), as least-squares slopes. ")
	p("*Settled* samples are taken every %d sessions, while sessions run, right after the daemon collected its garbage and gave back to the kernel what it could (`POST /debug/free-os-memory` on `--debug-socket`, which calls runtime/debug.FreeOSMemory): they show what the daemon keeps. ", settleEvery)
	p("Resident memory sampled after every session (as it ran) follows the Go allocator's high-water mark, which gives freed memory back to the kernel minutes later. ")
	p("The limit is %d B per session, judged on the longest process after its first %d sessions (its warm-up: a daemon's first sessions page in its code paths and fill what it keeps for reuse, pools, caches and OS threads for its peak concurrency, a one-off cost; the slopes over the whole process are shown beside them), on two slopes that must both be under it: resident memory as it ran, and the settled resident memory of the process's own (anonymous) pages. ", rssLimit, warmup)
	p("The settled total also counts the pages of the binary's code read in as paths through it are first taken (file-backed: shared with the page cache, and bounded by the binary's size, not by sessions); it is shown, with the live heap (the Go heap after a collection), but not judged.\n\n")
	p("| airlockd | sessions | judged: as it ran, after warm-up | judged: own pages settled, after warm-up | settled samples | settled RSS first → last | settled RSS slope | live heap first → last | live heap slope | samples as it ran | RSS first → last | slope | slope, second half |\n|---:|---|---:|---:|---:|---|---:|---|---:|---:|---|---:|---:|\n")
	for _, s := range r.segments() {
		p("| #%d | %d–%d | %.0f B/session (%d samples) | %.0f B/session (%d samples) | %d | %s → %s | %.0f B/session | %s → %s | %.0f B/session | %d | %s → %s | %.0f B/session | %.0f B/session |\n", s.incarnation, s.from, s.to,
			s.slopeWarm, s.warmN, s.anonSlopeWarm, s.warmSettledN,
			s.settledN, mib(s.settled0.rss), mib(s.settled1.rss), s.settledSlope, mib(s.settled0.heap), mib(s.settled1.heap), s.heapSlope,
			s.n, mib(s.rss0), mib(s.rss1), s.slope, s.slopeLate)
	}
	p("\nThe Go runtime's own accounts at the settled samples (first → last): heap spans in use (live objects and the gaps between them), GC metadata, profiling buckets, other runtime memory.\n\n")
	p("| airlockd | heap in use | GC metadata | profiling buckets | other | OS threads |\n|---:|---|---|---|---|---|\n")
	for _, s := range r.segments() {
		if s.settledN == 0 {
			continue
		}
		a, b := s.settled0, s.settled1
		p("| #%d | %s → %s | %s → %s | %s → %s | %s → %s | %d → %d |\n", s.incarnation, mib(a.heapInuse), mib(b.heapInuse), mib(a.gcSys), mib(b.gcSys),
			mib(a.buckHash), mib(b.buckHash), mib(a.otherSys), mib(b.otherSys), a.threads, b.threads)
	}
	p("\nSettled resident memory by kind: the process's own pages (anonymous) and pages of files (the binary's code, read in as paths through it are first taken; bounded by its size), with goroutine stacks.\n\n")
	p("| airlockd | anonymous first → last | slope | file-backed first → last | slope | stacks first → last | slope |\n|---:|---|---:|---|---:|---|---:|\n")
	for _, s := range r.segments() {
		if s.settledN == 0 {
			continue
		}
		p("| #%d | %s → %s | %.0f B/session | %s → %s | %.0f B/session | %s → %s | %.0f B/session |\n", s.incarnation,
			mib(s.settled0.rssAnon), mib(s.settled1.rssAnon), s.anonSlope, mib(s.settled0.rssFile), mib(s.settled1.rssFile), s.fileSlope,
			mib(s.settled0.stacks), mib(s.settled1.stacks), s.stackSlope)
	}
	p("\nOpen files at rest (no session, no client connection): %d at the start (first airlockd, after one warm-up session), %d at the end (airlockd #%d, every session removed, RSS %s); the end may not be above the start.\n",
		r.startFDs, r.endFDs, r.endIncarnation, mib(r.endRSS))
	if r.startFDs != r.endFDs {
		p("\nOpen at the end, not at the start: %s. Open at the start, not at the end: %s. (A socket is named by the table of the process's network namespace it is in; \"other netns\" is one made in the gateway's.)\n",
			orNone(minus(r.endFDList, r.startFDList)), orNone(minus(r.startFDList, r.endFDList)))
	}
	if len(r.outcomes) < rssJudged {
		p("\nWith %d sessions (fewer than %d) the slopes are mostly the Go heap's warm-up and are not judged; the limit means something over the full run.\n", len(r.outcomes), rssJudged)
	}

	p("\n## Left behind\n\n")
	p("- sessions still listed at the end: %s\n", orNone(r.leftSessions))
	p("- containerd objects (containers other than the shim anchor, leases) before airlockd stopped: %s\n", orNone(r.containerdLeft))
	p("- after airlockd stopped (`--stop-containerd`): processes naming its root or in its cgroups, mounts, loop devices, cgroups, namespaces, interfaces, nftables tables, session directories: %s\n", r.census)
	if r.stopErr != "" {
		p("- stopping airlockd: %s\n", r.stopErr)
	}
	if r.kept != "" {
		p("- mounts were left, so %s was kept\n", r.kept)
	}
	p("\nairlockd's log: %s\n", r.log)
	return b.String()
}

// minus is a without b, as multisets.
func minus(a, b []string) []string {
	n := map[string]int{}
	for _, x := range b {
		n[x]++
	}
	var out []string
	for _, x := range a {
		if n[x] > 0 {
			n[x]--
			continue
		}
		out = append(out, x)
	}
	return out
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}
