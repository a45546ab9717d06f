package perf

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/errdefs"
	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/perf/stats"
)

// Teardown measures how long removing a running session takes until every
// resource it owned is verified gone.
type Teardown struct {
	Runs     int               `json:"runs"`
	Variants []TeardownVariant `json:"variants"`
	Seconds  float64           `json:"seconds"`
	// Reproduce reruns this section alone.
	Reproduce string `json:"reproduce"`
	// Checked lists the kinds of resources verified gone.
	Checked  []string          `json:"checked"`
	Commands map[string]string `json:"commands"`
	// LastGone counts, per variant, which kind of resource was the last to
	// disappear after rm returned.
	LastGone map[string]map[string]int `json:"last_gone"`
	// Timeline follows one more stop and rm of a full-perimeter session,
	// program by program.
	Timeline *Timeline `json:"timeline,omitempty"`
	// CtrMS is bare containerd's teardown in the same rounds: `ctr task
	// rm -f` and `ctr container rm` of a `ctr run -d` container of the
	// same image (task, container and snapshot checked gone).
	CtrMS      stats.Summary `json:"ctr_ms"`
	CtrCommand string        `json:"ctr_command,omitempty"`
	CtrError   string        `json:"ctr_error,omitempty"`
}

// TeardownVariant is one manifest's teardown timings.
type TeardownVariant struct {
	Name string `json:"name"`
	// StopMS is `airlock stop --time 0 ID` (kill and wait for the exit,
	// which also removes the network and revokes credentials).
	StopMS stats.Summary `json:"stop_ms"`
	// RmMS is `airlock rm -f ID` after the stop.
	RmMS stats.Summary `json:"rm_ms"`
	// GoneMS runs from the start of the stop to the end of the first check
	// that found every resource gone.
	GoneMS stats.Summary `json:"gone_ms"`
	// Resources is how many resources were tracked per session.
	Resources int `json:"resources"`
	// Leaked counts sessions with a resource still present 10s after rm.
	Leaked   int      `json:"leaked"`
	LeakedAs []string `json:"leaked_as,omitempty"`
	Failures int      `json:"failures"`
	Error    string   `json:"error,omitempty"`
}

// resource is one kernel, containerd or filesystem object of a session.
type resource struct {
	name string
	gone func(ctx context.Context) bool
}

// MeasureTeardown creates runs sessions per manifest (running `sleep
// 3600`), then times stop + rm and polls until each tracked resource is
// gone: containerd container, task, snapshot and lease; the shim process;
// cgroups; mounts; the session directory; and with egress the session's
// netns, its veth in the gateway and its nftables chains and sets.
func MeasureTeardown(ctx context.Context, e *Env, runs int) (*Teardown, error) {
	start := time.Now()
	hello, full, err := e.startManifests()
	if err != nil {
		return nil, err
	}
	type tv struct{ name, manifest string }
	vs := []tv{{"examples/hello.hcl (no layers)", hello}, {"full perimeter", full}}
	res := &Teardown{Runs: runs, LastGone: map[string]map[string]int{}, Commands: map[string]string{
		"create": e.display(e.CLIArgs("run", "-d", "-f", "MANIFEST", "--", "sleep", "3600")),
		"stop":   e.display(e.CLIArgs("stop", "--time", "0", "ID")),
		"rm":     e.display(e.CLIArgs("rm", "-f", "ID")),
	}}
	type acc struct {
		stop, rm, gone []time.Duration
		n, leaked      int
		leakedAs       []string
		failures       int
		err            string
	}
	accs := make([]acc, len(vs))
	checked := map[string]bool{}
	var ctrTimes []time.Duration
	for round := range runs {
		if d, err := e.ctrTeardownOnce(ctx, fmt.Sprintf("perf-td-%d", round)); err != nil {
			res.CtrError = err.Error()
		} else {
			ctrTimes = append(ctrTimes, d)
		}
		for i, v := range vs {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			a := &accs[i]
			r, err := e.teardownOnce(ctx, v.manifest)
			if err != nil {
				a.failures++
				a.err = err.Error()
				continue
			}
			a.n = len(r.tracked)
			for _, t := range r.tracked {
				checked[kindOf(t)] = true
			}
			if len(r.leaked) > 0 {
				a.leaked++
				a.leakedAs = r.leaked
				continue
			}
			a.stop, a.rm, a.gone = append(a.stop, r.stop), append(a.rm, r.rm), append(a.gone, r.gone)
			if res.LastGone[v.name] == nil {
				res.LastGone[v.name] = map[string]int{}
			}
			last := "none (all gone when rm returned)"
			if r.last != "" {
				last = kindOf(r.last)
			}
			res.LastGone[v.name][last]++
		}
	}
	for i, v := range vs {
		a := accs[i]
		res.Variants = append(res.Variants, TeardownVariant{
			Name: v.name, StopMS: stats.Summarize(stats.Millis(a.stop)), RmMS: stats.Summarize(stats.Millis(a.rm)),
			GoneMS: stats.Summarize(stats.Millis(a.gone)), Resources: a.n, Leaked: a.leaked, LeakedAs: a.leakedAs,
			Failures: a.failures, Error: a.err,
		})
	}
	for k := range checked {
		res.Checked = append(res.Checked, k)
	}
	slices.Sort(res.Checked)
	res.CtrMS = stats.Summarize(stats.Millis(ctrTimes))
	res.CtrCommand = e.display(e.CtrArgs("task", "rm", "-f", "ID")) + "; " + e.display(e.CtrArgs("container", "rm", "ID"))
	res.Timeline = e.teardownTimeline(ctx, full)
	res.Seconds = time.Since(start).Seconds()
	return res, nil
}

// ctrTeardownOnce starts a container of the agent image with ctr (`sleep
// 3600`), then times its removal by ctr until the task, the container
// and its snapshot are gone.
func (e *Env) ctrTeardownOnce(ctx context.Context, id string) (time.Duration, error) {
	return e.ctrTeardownOnceWith(ctx, id, e.Bin("runc"))
}

// ctrTeardownOnceWith is ctrTeardownOnce with the runtime binary ctr's
// --runc-binary names.
func (e *Env) ctrTeardownOnceWith(ctx context.Context, id, runtimeBinary string) (time.Duration, error) {
	if out, err := e.Ctr("run", "-d", "--runc-binary", runtimeBinary, e.CtrRef, id, "sleep", "3600").CombinedOutput(); err != nil {
		return 0, fmt.Errorf("ctr run -d: %w: %s", err, lastLine(string(out)))
	}
	cctx := ContainerdCtx(context.WithoutCancel(ctx))
	defer func() {
		// A failed step must not leave the container for the next round.
		if c, err := e.ctrd.LoadContainer(cctx, id); err == nil {
			if t, err := c.Task(cctx, nil); err == nil {
				_, _ = t.Delete(cctx, containerd.WithProcessKill)
			}
			_ = c.Delete(cctx, containerd.WithSnapshotCleanup)
		}
	}()
	t0 := time.Now()
	if out, err := e.Ctr("task", "rm", "-f", id).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("ctr task rm -f: %w: %s", err, lastLine(string(out)))
	}
	if out, err := e.Ctr("container", "rm", id).CombinedOutput(); err != nil {
		return 0, fmt.Errorf("ctr container rm: %w: %s", err, lastLine(string(out)))
	}
	d := time.Since(t0)
	if _, err := e.ctrd.LoadContainer(cctx, id); !errdefs.IsNotFound(err) {
		return 0, fmt.Errorf("ctr container %s still there after ctr container rm", id)
	}
	if _, err := e.ctrd.SnapshotService("overlayfs").Stat(cctx, id); !errdefs.IsNotFound(err) {
		return 0, fmt.Errorf("snapshot %s still there after ctr container rm", id)
	}
	return d, nil
}

// teardownTimeline records `stop --time 0` then `rm -f` of one more
// running session of manifest (see Timeline).
func (e *Env) teardownTimeline(ctx context.Context, manifest string) *Timeline {
	tl := &Timeline{Name: "stop and rm, full perimeter"}
	sh, err := exec.LookPath("sh")
	if err == nil {
		sh, err = filepath.EvalSymlinks(sh)
	}
	if err != nil {
		tl.Error = err.Error()
		return tl
	}
	out, err := e.CLI("run", "-d", "-f", manifest, "--", "sleep", "3600").Output()
	if err != nil {
		tl.Error = fmt.Sprintf("create: %v: %s", err, exitStderr(err))
		return tl
	}
	id := strings.TrimSpace(string(out))
	defer func() { _ = e.Client.RemoveSession(context.WithoutCancel(ctx), id, true) }()
	stop, rm := e.CLIArgs("stop", "--time", "0", id), e.CLIArgs("rm", "-f", id)
	script := shellQuote(stop) + " && " + shellQuote(rm)
	*tl = recordTimeline(ctx, e.cfg.Repo, tl.Name, e.display(stop)+" && "+e.display(rm), []string{sh, "-c", script})
	return tl
}

// kindOf strips the session-specific part of a resource name.
func kindOf(name string) string {
	k, _, _ := strings.Cut(name, " ")
	return k
}

type teardownRun struct {
	stop, rm, gone time.Duration
	tracked        []string
	leaked         []string
	// last is the resource that went last ("" if all were gone at the
	// first check after rm returned).
	last string
}

func (e *Env) teardownOnce(ctx context.Context, manifest string) (*teardownRun, error) {
	out, err := e.CLI("run", "-d", "-f", manifest, "--", "sleep", "3600").Output()
	if err != nil {
		return nil, fmt.Errorf("create: %w: %s", err, exitStderr(err))
	}
	id := strings.TrimSpace(string(out))
	defer func() {
		// A failed step must not leave the session for the next run.
		_ = e.Client.RemoveSession(context.WithoutCancel(ctx), id, true)
	}()
	rs, err := e.sessionResources(ctx, id)
	if err != nil {
		return nil, err
	}
	r := &teardownRun{}
	for _, x := range rs {
		if x.gone(ctx) {
			return nil, fmt.Errorf("resource %s of running session %s not found before teardown", x.name, id)
		}
		r.tracked = append(r.tracked, x.name)
	}
	t0 := time.Now()
	if out, err := e.CLI("stop", "--time", "0", id).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("stop: %w: %s", err, out)
	}
	r.stop = time.Since(t0)
	if out, err := e.CLI("rm", "-f", id).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("rm: %w: %s", err, out)
	}
	r.rm = time.Since(t0) - r.stop
	remaining := rs
	deadline := t0.Add(10 * time.Second)
	for {
		var still []resource
		for _, x := range remaining {
			if !x.gone(ctx) {
				still = append(still, x)
			}
		}
		if len(still) == 0 {
			r.gone = time.Since(t0)
			break
		}
		r.last = still[len(still)-1].name
		remaining = still
		if time.Now().After(deadline) {
			for _, x := range still {
				r.leaked = append(r.leaked, x.name)
			}
			return r, nil
		}
		time.Sleep(time.Millisecond)
	}
	return r, nil
}

// sessionResources lists what a running session owns, each with a check
// that it is gone.
func (e *Env) sessionResources(ctx context.Context, id string) ([]resource, error) {
	cctx := ContainerdCtx(ctx)
	c := e.ctrd
	rs := []resource{
		{"container " + id, func(ctx context.Context) bool {
			_, err := c.LoadContainer(ContainerdCtx(ctx), id)
			return errdefs.IsNotFound(err)
		}},
		{"task " + id, func(ctx context.Context) bool {
			ctx = ContainerdCtx(ctx)
			cn, err := c.LoadContainer(ctx, id)
			if errdefs.IsNotFound(err) {
				return true
			}
			if err != nil {
				return false
			}
			_, err = cn.Task(ctx, nil)
			return errdefs.IsNotFound(err)
		}},
		{"snapshot " + id, func(ctx context.Context) bool {
			_, err := c.SnapshotService("overlayfs").Stat(ContainerdCtx(ctx), id)
			return errdefs.IsNotFound(err)
		}},
		{"lease " + id, func(ctx context.Context) bool {
			ls, err := c.LeasesService().List(ContainerdCtx(ctx), fmt.Sprintf("id==%q", id))
			return err == nil && len(ls) == 0
		}},
		{"session-dir " + id, func(context.Context) bool {
			_, err := os.Stat(filepath.Join(e.StateRoot, "sessions", id))
			return errors.Is(err, os.ErrNotExist)
		}},
	}
	if _, err := c.LoadContainer(cctx, id); err != nil {
		return nil, fmt.Errorf("session %s: container: %w", id, err)
	}
	anchorShim := e.anchorShimPID()
	for _, pid := range shimPIDs(id) {
		if pid == anchorShim {
			continue // the shared shim stays with the daemon's anchor
		}
		pid := pid
		rs = append(rs, resource{fmt.Sprintf("shim %d", pid), func(context.Context) bool { return !alive(pid) }})
	}
	for _, p := range processesInCgroupPrefix("airlock-" + e.Prefix + "/" + id) {
		rs = append(rs, resource{fmt.Sprintf("process %d", p), func(context.Context) bool { return !alive(p) }})
	}
	for _, dir := range cgroupDirs(e.Prefix, id) {
		rs = append(rs, resource{"cgroup " + dir, func(context.Context) bool {
			_, err := os.Stat(dir)
			return errors.Is(err, os.ErrNotExist)
		}})
	}
	for _, m := range mountsUnder(e.StateRoot) {
		if strings.Contains(m, id) {
			rs = append(rs, resource{"mount " + m, func(context.Context) bool { return !mounted(m) }})
		}
	}
	key := sessionKey(id)
	nsPath := filepath.Join(netns.DefaultDir, e.Prefix+"-s-"+key)
	if _, err := os.Stat(nsPath); err == nil {
		gw := filepath.Join(netns.DefaultDir, e.Prefix+"-gw")
		rs = append(rs,
			resource{"netns " + nsPath, func(context.Context) bool {
				_, err := os.Stat(nsPath)
				return errors.Is(err, os.ErrNotExist)
			}},
			resource{"veth s-" + key, func(context.Context) bool { return !linkExists(gw, "s-"+key) }},
			resource{"nft " + key, func(context.Context) bool { return len(nftObjects(gw, e.Prefix, key)) == 0 }},
		)
		if len(nftObjects(gw, e.Prefix, key)) == 0 {
			return nil, fmt.Errorf("session %s: no nftables objects named after %s in the gateway", id, key)
		}
	}
	return rs, nil
}

// sessionKey is how egress/netns names a session's kernel objects: the
// first 10 hex digits of the SHA-256 of the id.
func sessionKey(id string) string {
	sum := sha256.Sum256([]byte(id))
	return hex.EncodeToString(sum[:])[:10]
}

// shimPIDs finds the runc shim serving a container id.
func shimPIDs(id string) []int {
	var out []int
	for _, p := range allProcesses() {
		if strings.Contains(p.cmd, "containerd-shim-runc-v2") && strings.Contains(p.cmd, " -id "+id+" ") {
			out = append(out, p.pid)
		}
	}
	return out
}

// cgroupDirs lists the session's cgroup directories (every v1 controller,
// or the v2 one).
func cgroupDirs(prefix, id string) []string {
	rel := filepath.Join("airlock-"+prefix, id)
	var out []string
	if _, err := os.Stat(filepath.Join("/sys/fs/cgroup", rel)); err == nil {
		out = append(out, filepath.Join("/sys/fs/cgroup", rel))
	}
	ctrls, _ := os.ReadDir("/sys/fs/cgroup")
	for _, c := range ctrls {
		p := filepath.Join("/sys/fs/cgroup", c.Name(), rel)
		if _, err := os.Stat(p); err == nil {
			out = append(out, p)
		}
	}
	return out
}

func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	// A zombie has exited; its parent just has not reaped it.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	if i := strings.LastIndexByte(string(b), ')'); i > 0 && i+2 < len(b) {
		return b[i+2] != 'Z'
	}
	return true
}

func mounted(path string) bool {
	for _, m := range mountsUnder(filepath.Dir(path)) {
		if m == path {
			return true
		}
	}
	return false
}

func linkExists(nsPath, name string) bool {
	f, err := os.Open(nsPath)
	if err != nil {
		return false
	}
	defer f.Close()
	h, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
	if err != nil {
		return true // cannot tell: keep polling
	}
	defer h.Close()
	_, err = h.LinkByName(name)
	return err == nil
}

// nftObjects lists chains and sets of the gateway's table whose names
// contain key.
func nftObjects(nsPath, table, key string) []string {
	f, err := os.Open(nsPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return []string{"(nftables: " + err.Error() + ")"}
	}
	t := &nftables.Table{Name: table, Family: nftables.TableFamilyINet}
	var out []string
	chains, err := c.ListChainsOfTableFamily(nftables.TableFamilyINet)
	if err != nil {
		return []string{"(nftables: " + err.Error() + ")"}
	}
	for _, ch := range chains {
		if ch.Table.Name == table && strings.Contains(ch.Name, key) {
			out = append(out, "chain "+ch.Name)
		}
	}
	sets, err := c.GetSets(t)
	if err != nil {
		return append(out, "(nftables: "+err.Error()+")")
	}
	for _, s := range sets {
		if strings.Contains(s.Name, key) {
			out = append(out, "set "+s.Name)
		}
	}
	return out
}

// exitStderr is the last line a failed command (run with Output) wrote
// to stderr.
func exitStderr(err error) string {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return lastLine(string(ee.Stderr))
	}
	return ""
}
