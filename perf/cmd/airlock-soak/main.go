// Command airlock-soak runs many sessions with every layer through a
// private airlockd, a few at a time, kills its containerd once and airlockd
// once at random points, and checks at the end that every session's
// recorded exit is what its command did and that nothing of the daemon is
// left on the machine. It reports airlockd's memory and open files along
// the way, and writes the report (see `make soak`).
//
// Every session has an egress allowlist through the L7 gateway (a host of
// a test world namespace this process creates), an overlay workspace, and
// memory and time limits. Its command is one of: exit with a chosen code
// after writing a file and fetching from the world host; run past its
// timeout; allocate past its memory limit; sleep until stopped; or write a
// file that is then committed to its host workspace.
//
// Nothing leaves the machine: the daemon's uplink is the world namespace.
package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

const (
	agentImage = "docker.io/airlock/agent:bookworm"
	webHost    = "web.soak.test"
)

var webAddr = netip.MustParseAddr("10.214.0.70")

// The kinds of session, and what each must end with.
const (
	kindExit    = "exit"
	kindTimeout = "timeout"
	kindOOM     = "oom"
	kindStop    = "stop"
	kindCommit  = "commit"
)

var kinds = []string{kindExit, kindExit, kindTimeout, kindOOM, kindStop, kindCommit}

type options struct {
	sessions, parallel int
	binDir, image, out string
	budget             time.Duration
	seed               uint64
	logLevel           string
	// heapProfiles, when set, is a directory where each settled
	// sample's heap profile is saved, airlockd running with heap
	// profiling on (GODEBUG=memprofilerate=heapProfileRate).
	heapProfiles string
	// heapProfileRate is the bytes allocated per sampled allocation
	// (Go's default, 524288, unless -heap-profile-rate): 1 records every
	// allocation, to see the small ones a session leaves behind.
	heapProfileRate int
	// smaps, when set, is a directory where airlockd's /proc/PID/smaps
	// is saved at every settled sample.
	smaps string
}

func main() {
	var o options
	flag.IntVar(&o.sessions, "sessions", 2000, "sessions to run")
	flag.IntVar(&o.parallel, "parallel", 8, "sessions at a time")
	flag.StringVar(&o.binDir, "bin-dir", "_output/bin", "directory with airlockd, containerd, the shim, runc, airlock-init and airlock-logger")
	flag.StringVar(&o.image, "image", "", "agent image archive (default: the path in _output/agent-image.path)")
	flag.StringVar(&o.out, "out", "perf/soak.md", "report file")
	flag.DurationVar(&o.budget, "budget", 30*time.Minute, "start no session after this; the report says how many ran")
	flag.Uint64Var(&o.seed, "seed", 0, "seed of the kinds, exit codes and fault points (0: from the clock; reported)")
	flag.StringVar(&o.logLevel, "daemon-log-level", "warn", "airlockd's --log-level")
	flag.StringVar(&o.heapProfiles, "heap-profiles", "", "run airlockd with heap profiling on and save its heap profile at every settled sample into `DIR` (heap-INCARNATION-SESSIONS.pb.gz; compare two with go tool pprof -base); profiling costs memory of its own, so the slopes of such a run are not the daemon's")
	flag.IntVar(&o.heapProfileRate, "heap-profile-rate", 524288, "with -heap-profiles, airlockd's GODEBUG=memprofilerate: bytes allocated per sampled allocation (1 records every one, slowly)")
	flag.StringVar(&o.smaps, "smaps", "", "save airlockd's /proc/PID/smaps at every settled sample into `DIR` (smaps-INCARNATION-SESSIONS.txt), to see which of its mappings grow")
	flag.Parse()
	if o.seed == 0 {
		o.seed = uint64(time.Now().UnixNano())
	}
	if o.image == "" {
		b, err := os.ReadFile("_output/agent-image.path")
		if err != nil {
			fmt.Fprintln(os.Stderr, "airlock-soak: no -image and no _output/agent-image.path (make image)")
			os.Exit(2)
		}
		o.image = strings.TrimSpace(string(b))
	}
	for _, dir := range []string{o.heapProfiles, o.smaps} {
		if dir == "" {
			continue
		}
		if err := os.MkdirAll(dir, 0o755); err != nil {
			fmt.Fprintln(os.Stderr, "airlock-soak:", err)
			os.Exit(2)
		}
	}
	if o.sessions < 1 || o.parallel < 1 {
		fmt.Fprintln(os.Stderr, "airlock-soak: -sessions and -parallel must be at least 1")
		os.Exit(2)
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "airlock-soak: needs root (containerd, namespaces, nftables)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	r, err := soak(ctx, o)
	if r != nil {
		if werr := os.WriteFile(o.out, []byte(r.markdown()), 0o644); werr != nil {
			err = errors.Join(err, werr)
		} else {
			fmt.Printf("report: %s\n%s", o.out, r.summary())
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock-soak:", err)
		os.Exit(1)
	}
	if r.failed() {
		os.Exit(1)
	}
}

// daemon is the private airlockd, restarted after it is killed.
type daemon struct {
	o      options
	root   string
	args   []string
	logf   *os.File
	client *api.Client
	// debug reaches airlockd's --debug-socket (settled samples).
	debug *http.Client

	started time.Time // the run's start

	mu  sync.Mutex
	cmd *exec.Cmd
	// incarnation counts starts: samples of a killed daemon's memory are
	// kept apart from its successor's.
	incarnation int
	exited      chan struct{}
}

func (d *daemon) start(ctx context.Context) error {
	cmd := exec.Command(filepath.Join(d.o.binDir, "airlockd"), d.args...)
	cmd.Stdout, cmd.Stderr = d.logf, d.logf
	if d.o.heapProfiles != "" {
		cmd.Env = append(os.Environ(), fmt.Sprintf("GODEBUG=memprofilerate=%d", d.o.heapProfileRate))
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	d.mu.Lock()
	d.cmd, d.exited = cmd, exited
	d.incarnation++
	d.mu.Unlock()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := d.client.Version(ctx); err == nil {
			return nil
		}
		select {
		case <-exited:
			return fmt.Errorf("airlockd exited at start (log: %s)", d.logf.Name())
		default:
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("airlockd did not come up (log: %s)", d.logf.Name())
		}
	}
}

func (d *daemon) pid() (int, int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.cmd.Process.Pid, d.incarnation
}

// kill9 kills airlockd and starts it again; it returns how long the API
// was away.
func (d *daemon) kill9(ctx context.Context) (time.Duration, error) {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.mu.Unlock()
	t0 := time.Now()
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return 0, err
	}
	<-exited
	err := d.start(ctx)
	return time.Since(t0), err
}

// stop stops airlockd with SIGTERM (it stops its containerd too).
func (d *daemon) stop() error {
	d.mu.Lock()
	cmd, exited := d.cmd, d.exited
	d.mu.Unlock()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(90 * time.Second):
		_ = cmd.Process.Kill()
		<-exited
		return errors.New("airlockd did not stop within 90s of SIGTERM; killed")
	}
}

func (d *daemon) containerd() runtime.Embedded {
	return runtime.Embedded{Dir: filepath.Join(d.root, "containerd")}
}

// atRest measures airlockd with nothing under way: this process's idle
// connections to it closed, and a moment for it to see them go.
func (d *daemon) atRest(pid int) (int64, int) {
	_ = d.client.Close()
	d.debug.CloseIdleConnections()
	time.Sleep(3 * time.Second)
	rss, fds, _ := measure(pid)
	return rss, fds
}

// sample is airlockd's memory and open files after a session ended.
type sample struct {
	done        int // sessions finished
	incarnation int
	rss         int64 // bytes
	fds         int
	// Settled samples only: resident memory split into the process's
	// own (anonymous) pages and pages of files (the binary's code, read
	// in as paths through it are first taken: bounded by its size, shared
	// and reclaimable); the Go heap's live bytes after a collection; and
	// goroutine stacks.
	rssAnon, rssFile int64
	heap, stacks     int64
	// The Go runtime's own view: heap spans in use (live objects and the
	// free space between them), and what it keeps beside the heap: GC
	// metadata, profiling buckets, span structures and the rest.
	heapInuse, gcSys, buckHash, otherSys int64
	// threads is the process's OS thread count.
	threads int64
}

// settleEvery is how many finished sessions apart settled samples are.
const settleEvery = 50

// debugClient is an HTTP client for airlockd's debug socket.
func debugClient(socket string) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		},
	}}
}

// settled measures airlockd (pid) once its allocator has given back what
// it can: a collection and runtime/debug.FreeOSMemory through its debug
// socket, then its resident memory and the Go heap's live bytes. Resident
// memory sampled without this follows the allocator's high-water mark,
// which lags behind what the daemon frees by minutes; settled, it is what
// the daemon keeps (plus the sessions under way at that moment).
func (d *daemon) settled(pid, inc, done int) (sample, error) {
	resp, err := d.debug.Post("http://airlockd/debug/free-os-memory", "", nil)
	if err != nil {
		return sample{}, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNoContent {
		return sample{}, fmt.Errorf("free-os-memory: %s", resp.Status)
	}
	rss, fds, err := measure(pid)
	if err != nil {
		return sample{}, err
	}
	if d.o.smaps != "" {
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid)); err == nil {
			_ = os.WriteFile(filepath.Join(d.o.smaps, fmt.Sprintf("smaps-%d-%05d.txt", inc, done)), b, 0o644)
		}
	}
	st := sample{done: done, incarnation: inc, rss: rss, fds: fds, heap: -1}
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for l := range strings.SplitSeq(string(b), "\n") {
			k, v, _ := strings.Cut(l, ":")
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			switch k {
			case "RssAnon":
				st.rssAnon = kb << 10
			case "RssFile":
				st.rssFile = kb << 10
			case "Threads":
				st.threads = kb
			}
		}
	}
	resp, err = d.debug.Get("http://airlockd/debug/pprof/heap?debug=1")
	if err != nil {
		return sample{}, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		k, v, ok := strings.Cut(strings.TrimPrefix(sc.Text(), "# "), " = ")
		if !ok || !strings.HasPrefix(sc.Text(), "# ") {
			continue
		}
		n, _ := strconv.ParseInt(strings.Fields(v + " 0")[0], 10, 64)
		switch k {
		case "HeapAlloc":
			st.heap = n
		case "Stack":
			st.stacks = n
		case "HeapInuse":
			st.heapInuse = n
		case "GCSys":
			st.gcSys = n
		case "BuckHashSys":
			st.buckHash = n
		case "OtherSys":
			st.otherSys = n
		}
	}
	if st.heap < 0 {
		return sample{}, fmt.Errorf("no HeapAlloc in the heap profile (%v)", sc.Err())
	}
	if d.o.heapProfiles != "" {
		if err := d.saveHeapProfile(inc, done); err != nil {
			fmt.Printf("heap profile at %d: %v\n", done, err)
		}
	}
	return st, nil
}

// saveHeapProfile writes airlockd's heap profile (binary, as go tool
// pprof reads it) to -heap-profiles.
func (d *daemon) saveHeapProfile(inc, done int) error {
	resp, err := d.debug.Get("http://airlockd/debug/pprof/heap")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("heap profile: %s", resp.Status)
	}
	f, err := os.Create(filepath.Join(d.o.heapProfiles, fmt.Sprintf("heap-%d-%05d.pb.gz", inc, done)))
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func measure(pid int) (rss int64, fds int, err error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	for l := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			rss = kb << 10
		}
	}
	ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	return rss, len(ents), err
}

// fdTargets lists what pid's open files are (sockets and anonymous
// inodes by kind only), to tell what differs when the counts do.
func fdTargets(pid int) []string {
	// Socket inodes by protocol, in the process's own network namespace
	// (sockets it made in the gateway's are "socket (other netns)").
	proto := map[string]string{}
	// The inode's column in each table.
	for f, col := range map[string]int{"unix": 6, "netlink": 9, "tcp": 9, "tcp6": 9, "udp": 9, "udp6": 9, "raw": 9, "packet": 8} {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/net/%s", pid, f))
		for i, l := range strings.Split(string(b), "\n") {
			if fs := strings.Fields(l); i > 0 && col < len(fs) {
				proto[fs[col]] = f
			}
		}
	}
	ents, _ := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	var out []string
	for _, e := range ents {
		t, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, e.Name()))
		if err != nil {
			continue
		}
		if k, ino, ok := strings.Cut(t, ":["); ok {
			t = k
			if k == "socket" {
				if p, ok := proto[strings.TrimSuffix(ino, "]")]; ok {
					t = "socket (" + p + ")"
				} else {
					t = "socket (other netns)"
				}
			}
		}
		out = append(out, t)
	}
	slices.Sort(out)
	return out
}

// outcome is one session's run.
type outcome struct {
	i        int
	kind     string
	id       string
	want     string // what the command did: "exited 3", "timeout", "oom 137", "stopped"
	got      string // what the daemon recorded
	ok       bool
	err      string
	duration time.Duration
	// fetchFailed: the command's fetch from the world host failed and it
	// exited 99, as it does then; recorded so, that is no mismatch.
	fetchFailed bool
	ended       time.Duration // since the run's start
}

// fault is one injected kill.
type fault struct {
	what     string
	at       int // the session whose start triggered it
	when     time.Duration
	recovery time.Duration
	err      string
}

func soak(ctx context.Context, o options) (*report, error) {
	rep := &report{o: o, started: time.Now()}
	rng := rand.New(rand.NewPCG(o.seed, o.seed^0x5eed))
	tmp, err := os.MkdirTemp("/tmp", "soak-")
	if err != nil {
		return nil, err
	}
	root := filepath.Join(tmp, "root")
	wsDir := filepath.Join(tmp, "ws")
	for _, dir := range []string{root, wsDir} {
		if err := os.Mkdir(dir, 0o700); err != nil {
			return nil, err
		}
	}
	tag := make([]byte, 2)
	for i := range tag {
		tag[i] = byte(rng.UintN(256))
	}
	w, err := world.Start(ctx, world.Config{Prefix: "sk" + hex.EncodeToString(tag)})
	if err != nil {
		return nil, err
	}
	defer w.Close()
	if err := w.AddHost(webHost, webAddr); err != nil {
		return nil, err
	}
	logf, err := os.CreateTemp("/tmp", "soak-airlockd-*.log")
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	rep.log = logf.Name()
	sock := filepath.Join(root, "airlock.sock")
	dbg := filepath.Join(root, "debug.sock")
	d := &daemon{o: o, root: root, logf: logf, started: rep.started, client: api.NewClient(sock), debug: debugClient(dbg), args: []string{
		"--root", root, "--socket", sock, "--bin-dir", o.binDir, "--stop-containerd", "--log-level", o.logLevel,
		"--debug-socket", dbg,
		"--uplink", "netns:" + w.NetnsName(), "--dns-upstream", w.DNSAddr().String(), "--allow-private", w.Net().String(),
	}}
	defer d.client.Close()
	if err := d.start(ctx); err != nil {
		return rep, err
	}
	stopped := false
	defer func() {
		// A run that ends early still removes its sessions and stops
		// its daemon (and containerd).
		if !stopped {
			bg := context.Background()
			if list, err := d.client.ListSessions(bg); err == nil {
				for _, s := range list {
					_ = d.client.RemoveSession(bg, s.ID, true)
				}
			}
			_ = d.stop()
		}
	}()
	img, err := os.Open(o.image)
	if err != nil {
		return rep, err
	}
	_, err = d.client.ImportImage(ctx, agentImage, img)
	img.Close()
	if err != nil {
		return rep, fmt.Errorf("import %s: %w", o.image, err)
	}
	// One session of every layer first, not counted, so that what the
	// daemon keeps for reuse (its idmap namespaces, the gateway's
	// connections) is open at the start as at the end.
	if oc := runOne(ctx, d, wsDir, -1, kindCommit, 0); !oc.ok {
		return rep, fmt.Errorf("warm-up session: want %s, got %s %s", oc.want, oc.got, oc.err)
	}
	pid, inc := d.pid()
	rss, fds := d.atRest(pid)
	rep.samples = append(rep.samples, sample{done: 0, incarnation: inc, rss: rss, fds: fds})
	if st, err := d.settled(pid, inc, 0); err == nil {
		rep.settled = append(rep.settled, st)
	} else {
		return rep, fmt.Errorf("settled sample at the start: %w", err)
	}
	rep.startFDs, rep.startFDList = fds, fdTargets(pid)

	// The faults: each at a random session in the middle half of the run.
	mid := func() int { return o.sessions/4 + rng.IntN(max(o.sessions/2, 1)) }
	ctrdAt, daemonAt := mid(), mid()
	// How long after its session starts each fault lands.
	delay := map[int]time.Duration{}
	if ctrdAt == daemonAt {
		daemonAt = (daemonAt + 1 + o.sessions/8) % o.sessions
	}
	for _, at := range []int{ctrdAt, daemonAt} {
		delay[at] = time.Duration(200+rng.IntN(1500)) * time.Millisecond
	}
	plan := make([]struct {
		kind string
		code int
	}, o.sessions)
	for i := range plan {
		plan[i].kind = kinds[rng.IntN(len(kinds))]
		plan[i].code = rng.IntN(10)
	}

	var (
		mu       sync.Mutex
		outcomes []outcome
		done     atomic.Int64
		faultWG  sync.WaitGroup
	)
	jobs := make(chan int)
	var wg sync.WaitGroup
	for range o.parallel {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range jobs {
				oc := runOne(ctx, d, wsDir, i, plan[i].kind, plan[i].code)
				n := done.Add(1)
				p, inc := d.pid()
				rss, fds, err := measure(p)
				mu.Lock()
				outcomes = append(outcomes, oc)
				if err == nil {
					rep.samples = append(rep.samples, sample{done: int(n), incarnation: inc, rss: rss, fds: fds})
				}
				mu.Unlock()
				if n%settleEvery == 0 {
					if st, err := d.settled(p, inc, int(n)); err == nil {
						mu.Lock()
						rep.settled = append(rep.settled, st)
						mu.Unlock()
					} else {
						fmt.Printf("settled sample at %d: %v\n", n, err)
					}
				}
				if n%50 == 0 || !oc.ok {
					fmt.Printf("%s %d/%d %s %s: want %s, got %s %s\n", time.Since(rep.started).Round(time.Second), n, o.sessions, oc.kind, oc.id, oc.want, oc.got, oc.err)
				}
			}
		}()
	}
	inject := func(i int) {
		// Let the session that triggered it get under way first.
		time.Sleep(delay[i])
		f := fault{at: i, when: time.Since(rep.started)}
		var err error
		switch i {
		case ctrdAt:
			f.what = "containerd SIGKILL"
			f.recovery, err = killContainerd(ctx, d)
		case daemonAt:
			f.what = "airlockd SIGKILL and restart"
			f.recovery, err = d.kill9(ctx)
		}
		if err != nil {
			f.err = err.Error()
		}
		mu.Lock()
		rep.faults = append(rep.faults, f)
		mu.Unlock()
		fmt.Printf("%s fault at session %d: %s (recovered in %v) %s\n", f.when.Round(time.Second), i, f.what, f.recovery.Round(time.Millisecond), f.err)
	}
	deadline := rep.started.Add(o.budget)
feed:
	for i := range o.sessions {
		if time.Now().After(deadline) {
			rep.budgetHit = true
			break
		}
		select {
		case jobs <- i:
		case <-ctx.Done():
			break feed
		}
		if i == ctrdAt || i == daemonAt {
			faultWG.Add(1)
			go func() { defer faultWG.Done(); inject(i) }()
		}
	}
	close(jobs)
	wg.Wait()
	faultWG.Wait()
	rep.outcomes = outcomes
	slices.SortFunc(rep.outcomes, func(a, b outcome) int { return a.i - b.i })

	// The end: nothing running, airlockd's memory and files at rest, then
	// stopped, and nothing left of it.
	if list, err := d.client.ListSessions(context.WithoutCancel(ctx)); err == nil {
		for _, s := range list {
			rep.leftSessions = append(rep.leftSessions, s.ID+" "+string(s.State))
			_ = d.client.RemoveSession(context.WithoutCancel(ctx), s.ID, true)
		}
	} else {
		rep.leftSessions = append(rep.leftSessions, "list: "+err.Error())
	}
	pid, inc = d.pid()
	rep.endRSS, rep.endFDs = d.atRest(pid)
	if st, err := d.settled(pid, inc, len(rep.outcomes)); err == nil {
		rep.settled = append(rep.settled, st)
	}
	rep.endFDList = fdTargets(pid)
	rep.endIncarnation = inc
	objs, err := daemontest.ContainerdObjects(context.WithoutCancel(ctx), d.containerd().Address())
	if err != nil {
		objs = append(objs, "error: "+err.Error())
	}
	rep.containerdLeft = objs
	stopped = true
	if err := d.stop(); err != nil {
		rep.stopErr = err.Error()
	}
	// The shims' last cleanup runs a moment after containerd stops.
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		rep.census = daemontest.TakeCensus(root, w.NetnsPath())
		if rep.census.Total() == 0 || time.Now().After(deadline) {
			break
		}
	}
	rep.elapsed = time.Since(rep.started)
	if len(rep.census["mount"]) == 0 {
		os.RemoveAll(tmp)
	} else {
		rep.kept = tmp
	}
	return rep, ctx.Err()
}

// killContainerd kills the embedded containerd and returns how long until
// the daemon answers a call that needs containerd again.
func killContainerd(ctx context.Context, d *daemon) (time.Duration, error) {
	b, err := os.ReadFile(d.containerd().PidFile())
	if err != nil {
		return 0, err
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return 0, err
	}
	for ctx.Err() == nil && time.Since(t0) < 2*time.Minute {
		if _, err := d.client.ListImages(ctx); err == nil && time.Since(t0) > 500*time.Millisecond {
			return time.Since(t0), nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return time.Since(t0), errors.New("the daemon did not reach a containerd again within 2 minutes")
}

// retry calls fn until it succeeds, fails for a reason other than the
// daemon or its containerd being away (a transport error or a 5xx), or
// two minutes have passed.
func retry(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(2 * time.Minute)
	for {
		err := fn()
		if err == nil || ctx.Err() != nil {
			return err
		}
		var ae *api.Error
		if errors.As(err, &ae) && ae.Status < 500 {
			return err
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// policyFor is session i's manifest: every layer, and the command of its
// kind.
func policyFor(i int, kind string, code int, ws string) policies.Policy {
	p := policies.Policy{
		Label:     fmt.Sprintf("soak-%d", i),
		Image:     agentImage,
		Timeout:   policies.Duration(5 * time.Minute),
		Resources: policies.Resources{Memory: 256 << 20},
		Workspaces: []policies.Workspace{{HostPath: ws, Target: "/w", Mode: policies.ModeOverlay,
			DefaultDenyRead: true, OnExit: policies.OnExitDiscard}},
		Egress: &policies.Egress{Allow: []string{webHost + ":80"}, L7: policies.L7Check},
	}
	fetch := fmt.Sprintf("curl -sS -o /dev/null --max-time 20 http://%s/ || exit 99", webHost)
	switch kind {
	case kindExit:
		p.Command = []string{"sh", "-c", fmt.Sprintf("echo %d > /w/out.txt; %s; exit %d", i, fetch, code)}
	case kindTimeout:
		p.Timeout = policies.Duration(2 * time.Second)
		p.Command = []string{"sleep", "300"}
	case kindOOM:
		p.Resources.Memory = 64 << 20
		p.Command = []string{"python3", "-c", "b = bytearray(512 * 1024 * 1024); print('allocated')"}
	case kindStop:
		// The fetch's outcome does not change how it ends.
		p.Command = []string{"sh", "-c", strings.TrimSuffix(fetch, " || exit 99") + "; exec sleep 300"}
	case kindCommit:
		p.Workspaces[0].OnExit = policies.OnExitReview
		p.Command = []string{"sh", "-c", fmt.Sprintf("%s; echo %d > /w/out.txt", fetch, i)}
	}
	return p
}

func runOne(ctx context.Context, d *daemon, wsDir string, i int, kind string, code int) (oc outcome) {
	defer func() { oc.ended = time.Since(d.started) }()
	t0 := time.Now()
	oc = outcome{i: i, kind: kind}
	defer func() {
		oc.duration = time.Since(t0)
		oc.fetchFailed = (kind == kindExit || kind == kindCommit) && oc.got == "exited 99"
		oc.ok = oc.err == "" && (oc.want == oc.got || oc.fetchFailed)
	}()
	switch kind {
	case kindExit:
		oc.want = fmt.Sprintf("exited %d", code)
	case kindTimeout:
		oc.want = "timeout"
	case kindOOM:
		oc.want = "oom 137"
	case kindStop:
		oc.want = "stopped"
	case kindCommit:
		oc.want = "exited 0, committed"
	}
	ws := filepath.Join(wsDir, strconv.Itoa(i))
	if err := os.Mkdir(ws, 0o755); err != nil {
		oc.err = err.Error()
		return oc
	}
	defer os.RemoveAll(ws)
	p := policyFor(i, kind, code, ws)
	c := d.client
	// A create the daemon's death cut short may still have made the
	// session: look for it by its label before asking again.
	err := retry(ctx, func() error {
		if list, err := c.ListSessions(ctx); err == nil {
			for _, s := range list {
				if s.Policy.Label == p.Label {
					oc.id = s.ID
					return nil
				}
			}
		}
		s, err := c.CreateSession(ctx, api.CreateRequest{Policy: p, Start: true})
		if err == nil {
			oc.id = s.ID
		}
		return err
	})
	if err != nil {
		oc.err = "create: " + err.Error()
		return oc
	}
	// A create cut short after the session was made but before its
	// command started leaves it created: start it, as the caller would.
	if err := retry(ctx, func() error {
		v, err := c.InspectSession(ctx, oc.id)
		if err != nil || v.State != api.StateCreated {
			return err
		}
		_, err = c.StartSession(ctx, oc.id)
		return err
	}); err != nil {
		oc.err = "start: " + err.Error()
		return oc
	}
	defer func() {
		if err := retry(context.WithoutCancel(ctx), func() error { return c.RemoveSession(context.WithoutCancel(ctx), oc.id, true) }); err != nil && oc.err == "" {
			oc.err = "rm: " + err.Error()
		}
	}()
	if kind == kindStop {
		time.Sleep(time.Duration(500+i%1000) * time.Millisecond)
		if err := retry(ctx, func() error {
			_, err := c.StopSession(ctx, oc.id, api.StopRequest{Grace: policies.Duration(100 * time.Millisecond)})
			return err
		}); err != nil {
			oc.err = "stop: " + err.Error()
			return oc
		}
	}
	var wr *api.WaitResponse
	if err := retry(ctx, func() error {
		var err error
		wr, err = c.WaitSession(ctx, oc.id)
		return err
	}); err != nil {
		oc.err = "wait: " + err.Error()
		return oc
	}
	switch {
	case kind == kindExit, kind == kindOOM, kind == kindCommit, wr.Reason == "exited":
		oc.got = fmt.Sprintf("%s %d", wr.Reason, wr.ExitCode)
	default:
		oc.got = wr.Reason
	}
	// What inspect records agrees with what wait said.
	var s *api.Session
	if err := retry(ctx, func() error {
		var err error
		s, err = c.InspectSession(ctx, oc.id)
		return err
	}); err != nil {
		oc.err = "inspect: " + err.Error()
		return oc
	}
	if s.ExitCode == nil || *s.ExitCode != wr.ExitCode || s.Reason != wr.Reason {
		oc.err = fmt.Sprintf("inspect says %v %q, wait said %d %q", s.ExitCode, s.Reason, wr.ExitCode, wr.Reason)
	}
	if kind == kindCommit {
		if oc.got != "exited 0" {
			return oc // a failed fetch, or a mismatch
		}
		if err := retry(ctx, func() error {
			_, err := c.Commit(ctx, oc.id, api.CommitRequest{})
			return err
		}); err != nil {
			oc.err = "commit: " + err.Error()
			return oc
		}
		b, err := os.ReadFile(filepath.Join(ws, "out.txt"))
		if err != nil || !bytes.Equal(bytes.TrimSpace(b), []byte(strconv.Itoa(i))) {
			oc.err = fmt.Sprintf("committed out.txt: %q %v", b, err)
			return oc
		}
		oc.got += ", committed"
	}
	return oc
}
