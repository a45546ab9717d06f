package perf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/perf/stats"
	"github.com/airlock-sandbox/airlock/policies"
)

// WarmTargetMS is the warm-start goal: the median time from the API call
// to the command's first output byte.
const WarmTargetMS = 50

// WarmRatioTarget is the warm start's goal against the same perimeter
// started cold in the same rounds: the API call to the first output byte
// at most this share of the cold one's, quiet and under load.
const WarmRatioTarget = 0.1

// WarmPoolSize is the size of the measured pool.
const WarmPoolSize = 2

// WarmStart compares sessions that take a sandbox their warm pool prepared
// ahead of time with cold sessions of the same perimeter, through the Go
// API client and through the CLI, in the same interleaved rounds.
type WarmStart struct {
	Runs     int `json:"runs"`
	PoolSize int `json:"pool_size"`
	// TargetMS is the goal for the median of API[0].FirstOutputMS;
	// TargetMet whether it was reached.
	TargetMS  float64 `json:"target_ms"`
	TargetMet bool    `json:"target_met"`
	// API are the Go client's runs: warm (pooled manifest), then cold
	// (the same perimeter without a pool).
	API []APIStart `json:"api"`
	// CLI are `airlock run --rm` runs: warm, then cold.
	CLI []Variant `json:"cli"`
	// RefillMS runs from just before a warm API create (which takes a
	// sandbox and starts the refill) to the first pool listing that shows
	// the pool full again.
	RefillMS stats.Summary `json:"refill_ms"`
	// Pool is the pool as listed after the last run, before its removal.
	Pool *api.Pool `json:"pool,omitempty"`
	// Removed is how the pool's removal went.
	Removed PoolRemoval `json:"removed"`
	// Isolation compares what a warm and a cold session own.
	Isolation Isolation `json:"isolation"`
	// Manifest is the pooled manifest; the cold one differs in its label
	// and has no pool block.
	Manifest string            `json:"manifest"`
	Commands map[string]string `json:"commands"`
	Seconds  float64           `json:"seconds"`
	// Reproduce reruns this section alone.
	Reproduce string `json:"reproduce"`
	// Error says why the rounds stopped early.
	Error string `json:"error,omitempty"`
}

// APIStart is one manifest's starts through the Go client: a long-lived
// api.Client over the unix socket, CreateSession{Start: true}, then
// Logs(follow) of stdout.
type APIStart struct {
	Name string `json:"name"`
	// Pooled is whether the manifest has a pool (its sessions should be
	// warm).
	Pooled bool `json:"pooled"`
	// CreateMS is the create request alone; FirstOutputMS runs from just
	// before it to the first stdout byte read through Logs; ExitMS to the
	// end of the Logs stream (the command exited, its output delivered).
	CreateMS      stats.Summary `json:"create_ms"`
	FirstOutputMS stats.Summary `json:"first_output_ms"`
	ExitMS        stats.Summary `json:"exit_ms"`
	// From just before the create to the first stdout byte, what the
	// scheduler counted (/proc/PID/task/*/schedstat, every thread):
	// airlockd's time on a core and waiting for one (runnable, in the
	// run queue), and the waiting of this harness's threads (the API
	// client; the world they also serve is idle meanwhile). Waits of
	// several threads at once add up.
	DaemonRunMS  stats.Summary `json:"daemon_run_ms"`
	DaemonWaitMS stats.Summary `json:"daemon_wait_ms"`
	ClientWaitMS stats.Summary `json:"client_wait_ms"`
	// WarmRuns counts sessions that reported Warm. A run of a pooled
	// manifest that was not warm (or of the cold one that was) is a
	// failure and not in the timings.
	WarmRuns int    `json:"warm_runs"`
	Failures int    `json:"failures"`
	Error    string `json:"error,omitempty"`
}

// PoolRemoval is what removing the pool at the end of the section did.
type PoolRemoval struct {
	// Ready sandboxes were waiting when the pool was removed.
	Ready int `json:"ready"`
	// SettledMS runs from the removal request until no sandbox directory
	// was left that belongs to no listed session (a refill in flight is
	// finished, then discarded).
	SettledMS float64 `json:"settled_ms"`
	// Left lists what was still there afterwards: containers of the ready
	// sandboxes, sandbox directories 30 s after the removal.
	Left []string `json:"left"`
}

// Isolation compares a warm session's resources with a cold one's, both
// running `sleep 3600` from the same perimeter: each counts the
// session's tracked resources by kind (container, task, snapshot, lease,
// session-dir, shim, process, cgroup, mount, netns, veth, nft) and its
// nftables chains and sets in the gateway.
type Isolation struct {
	Warm    map[string]int `json:"warm"`
	Cold    map[string]int `json:"cold"`
	WarmNFT int            `json:"warm_nft"`
	ColdNFT int            `json:"cold_nft"`
	// Same is true when both counts agree.
	Same  bool   `json:"same"`
	Error string `json:"error,omitempty"`
}

// warmStart holds what the measurement needs between runs.
type warmStart struct {
	e      *Env
	pooled policies.Policy
	cold   policies.Policy
	label  string
	// seen holds every session id a run got: a pooled sandbox serves one
	// session only.
	seen map[string]bool
}

// apiResult is one API run.
type apiResult struct {
	create, first, exit, refill time.Duration
	warm                        bool
	// daemon and client are the scheduler's counts from the call to
	// the first output byte (see APIStart).
	daemon, client schedTimes
}

// MeasureWarmStart declares a pool of WarmPoolSize for the full-perimeter
// manifest and, in runs interleaved rounds, times warm and cold starts
// through the API and the CLI. Before every timed run it waits (untimed)
// until the pool is full and idle, so that only the refill a take itself
// starts runs beside a timed start. It removes the pool at the end.
func MeasureWarmStart(ctx context.Context, e *Env, runs int) (*WarmStart, error) {
	start := time.Now()
	ws := filepath.Join(e.WorkDir, "workspace-warm")
	if err := makeWorkspace(ws); err != nil {
		return nil, err
	}
	pm := FullPerimeter(ws)
	pm.Label, pm.Pool = "perf-pool", WarmPoolSize
	// The label is part of a pool's key: the cold manifest's differs, or
	// its creates would take the pool's sandboxes.
	cm := FullPerimeter(ws)
	cm.Label = "perf-nopool"
	pooledPath, err := pm.Write(e.WorkDir)
	if err != nil {
		return nil, err
	}
	coldPath, err := cm.Write(e.WorkDir)
	if err != nil {
		return nil, err
	}
	pooledSrc, err := pm.HCL()
	if err != nil {
		return nil, err
	}
	w := &warmStart{e: e, label: pm.Label, seen: map[string]bool{}}
	for _, x := range []struct {
		path string
		dst  *policies.Policy
	}{{pooledPath, &w.pooled}, {coldPath, &w.cold}} {
		p, err := policies.LoadFile(x.path, nil)
		if err != nil {
			return nil, err
		}
		*x.dst = *p
	}

	res := &WarmStart{
		Runs: runs, PoolSize: WarmPoolSize, TargetMS: WarmTargetMS, Manifest: string(pooledSrc),
		Commands: map[string]string{
			"api":       fmt.Sprintf("api.Client.CreateSession(ctx, api.CreateRequest{Policy: <%s, command echo x>, Start: true}), then Logs(ctx, id, api.LogsOptions{Follow: true, Stdout: true, Stderr: true}, stdout, stderr), timing the first byte written to stdout", filepath.Base(pooledPath)),
			"cli warm":  e.display(e.CLIArgs("run", "--rm", "-f", pooledPath, "--", "true")),
			"cli cold":  e.display(e.CLIArgs("run", "--rm", "-f", coldPath, "--", "true")),
			"pool wait": "before each timed run, api.Client.ListPools every 10 ms until all of the pool's sandboxes are ready and none is being prepared (untimed)",
		},
	}
	defer func() {
		// Later sections must not share the machine with prepared
		// sandboxes.
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		defer cancel()
		res.Pool, res.Removed = w.removePool(rctx)
		if len(res.Removed.Left) > 0 {
			e.cfg.Logf("warm start: left after removing the pool: %s; airlockd's log ends:\n%s", list(res.Removed.Left), e.DaemonLog())
		}
		res.Seconds = time.Since(start).Seconds()
	}()

	apiVs := []APIStart{
		{Name: "API, warm (pool of " + fmt.Sprint(WarmPoolSize) + ")", Pooled: true},
		{Name: "API, cold (same perimeter, no pool)"},
	}
	cliVs := []variant{
		{"airlock run --rm, warm (full perimeter, pool of " + fmt.Sprint(WarmPoolSize) + ")", func(_ string, c []string) []string {
			return e.CLIArgs(append([]string{"run", "--rm", "-f", pooledPath, "--"}, c...)...)
		}},
		{"airlock run --rm, cold (full perimeter, no pool)", func(_ string, c []string) []string {
			return e.CLIArgs(append([]string{"run", "--rm", "-f", coldPath, "--"}, c...)...)
		}},
	}
	type apiAcc struct {
		create, first, exit               []time.Duration
		daemonRun, daemonWait, clientWait []time.Duration
		warm, failures                    int
		err                               string
	}
	apiAccs := make([]apiAcc, len(apiVs))
	var refill []time.Duration
	exit := make([][]time.Duration, len(cliVs))
	first := make([][]time.Duration, len(cliVs))
	echoExit := make([][]time.Duration, len(cliVs))
	cliFailures := make([]int, len(cliVs))
	cliErrs := make([]string, len(cliVs))

	// Warm-up, unrecorded: the first create of the pooled manifest is
	// cold and declares the pool; one of each variant warms caches.
	if _, err := w.apiRun(ctx, w.pooled, false, nil); err != nil {
		return res, fmt.Errorf("warm-up (declares the pool): %w", err)
	}
	if _, err := w.apiRun(ctx, w.cold, false, nil); err != nil {
		return res, fmt.Errorf("warm-up, cold: %w", err)
	}
	trueCmd, echoCmd := []string{"true"}, []string{"echo", "x"}
	for i, v := range cliVs {
		if _, err := w.waitFull(ctx); err != nil {
			return res, err
		}
		if err := runTimed(ctx, e.cfg.Repo, v.argv("w", trueCmd)).check(""); err != nil {
			return res, fmt.Errorf("warm-up of %s: %w", cliVs[i].name, err)
		}
	}

	// cliRun times one CLI run; a pooled one must have taken a sandbox
	// (the pool's hits grew by one, its misses did not).
	cliRun := func(i int, cmd []string, want string) (TimedRun, error) {
		before, err := w.waitFull(ctx)
		if err != nil {
			return TimedRun{}, err
		}
		r := runTimed(ctx, e.cfg.Repo, cliVs[i].argv("", cmd))
		if err := r.check(want); err != nil {
			return r, err
		}
		if i == 0 {
			after, err := w.pool(ctx)
			if err != nil {
				return r, err
			}
			if after.Hits != before.Hits+1 || after.Misses != before.Misses {
				return r, fmt.Errorf("not warm: pool hits %d → %d, misses %d → %d", before.Hits, after.Hits, before.Misses, after.Misses)
			}
		}
		return r, nil
	}

rounds:
	for range runs {
		for i, v := range apiVs {
			if ctx.Err() != nil {
				res.Error = ctx.Err().Error()
				break rounds
			}
			a := &apiAccs[i]
			pol := w.cold
			if v.Pooled {
				pol = w.pooled
			}
			before, err := w.waitFull(ctx)
			if err != nil {
				res.Error = err.Error()
				break rounds
			}
			r, err := w.apiRun(ctx, pol, v.Pooled, before.ReadyIDs)
			if errors.Is(err, errPoolStuck) {
				res.Error = err.Error()
				break rounds
			}
			if r.warm {
				a.warm++
			}
			if err == nil && r.warm != v.Pooled {
				err = fmt.Errorf("session warm = %v", r.warm)
			}
			if err != nil {
				a.failures++
				a.err = err.Error()
				continue
			}
			a.create, a.first, a.exit = append(a.create, r.create), append(a.first, r.first), append(a.exit, r.exit)
			a.daemonRun, a.daemonWait = append(a.daemonRun, r.daemon.run), append(a.daemonWait, r.daemon.wait)
			a.clientWait = append(a.clientWait, r.client.wait)
			if v.Pooled {
				refill = append(refill, r.refill)
			}
		}
		for i := range cliVs {
			r, err := cliRun(i, trueCmd, "")
			if errors.Is(err, errPoolStuck) {
				res.Error = err.Error()
				break rounds
			}
			if err != nil {
				cliFailures[i]++
				cliErrs[i] = err.Error()
			} else {
				exit[i] = append(exit[i], r.Exit)
			}
			r, err = cliRun(i, echoCmd, "x")
			if errors.Is(err, errPoolStuck) {
				res.Error = err.Error()
				break rounds
			}
			if err != nil {
				cliFailures[i]++
				cliErrs[i] = err.Error()
			} else {
				first[i] = append(first[i], r.FirstByte)
				echoExit[i] = append(echoExit[i], r.Exit)
			}
		}
	}

	for i, v := range apiVs {
		a := apiAccs[i]
		v.CreateMS, v.FirstOutputMS, v.ExitMS = stats.Summarize(stats.Millis(a.create)), stats.Summarize(stats.Millis(a.first)), stats.Summarize(stats.Millis(a.exit))
		v.DaemonRunMS, v.DaemonWaitMS = stats.Summarize(stats.Millis(a.daemonRun)), stats.Summarize(stats.Millis(a.daemonWait))
		v.ClientWaitMS = stats.Summarize(stats.Millis(a.clientWait))
		v.WarmRuns, v.Failures, v.Error = a.warm, a.failures, a.err
		res.API = append(res.API, v)
	}
	for i, v := range cliVs {
		vr := Variant{
			Name: v.name, Command: e.display(v.argv("", trueCmd)),
			ExitMS: stats.Summarize(stats.Millis(exit[i])), FirstOutputMS: stats.Summarize(stats.Millis(first[i])),
			EchoExitMS: stats.Summarize(stats.Millis(echoExit[i])), Failures: cliFailures[i],
		}
		if cliFailures[i] > 0 || vr.ExitMS.N == 0 {
			vr.Error = cliErrs[i]
		}
		res.CLI = append(res.CLI, vr)
	}
	res.RefillMS = stats.Summarize(stats.Millis(refill))
	res.TargetMet = res.API[0].FirstOutputMS.N > 0 && res.API[0].FirstOutputMS.Median <= WarmTargetMS
	if err := ctx.Err(); err != nil {
		return res, err
	}
	if res.Error != "" {
		return res, errors.New(res.Error)
	}
	res.Isolation = w.isolation(ctx)
	return res, nil
}

// errPoolStuck ends the rounds: the pool did not fill up.
var errPoolStuck = errors.New("pool not full")

// pool lists the measured pool.
func (w *warmStart) pool(ctx context.Context) (api.Pool, error) {
	ps, err := w.e.Client.ListPools(ctx)
	if err != nil {
		return api.Pool{}, fmt.Errorf("list pools: %w", err)
	}
	for _, p := range ps {
		if p.Label == w.label {
			return p, nil
		}
	}
	return api.Pool{}, fmt.Errorf("%w: no pool labelled %s in %d pools", errPoolStuck, w.label, len(ps))
}

// waitFull polls until the pool has all its sandboxes ready and prepares
// none, and returns it.
func (w *warmStart) waitFull(ctx context.Context) (api.Pool, error) {
	deadline := time.Now().Add(90 * time.Second)
	for {
		p, err := w.pool(ctx)
		if err == nil && p.Ready >= p.Size && p.Size > 0 && !p.Preparing {
			return p, nil
		}
		if time.Now().After(deadline) {
			if err != nil {
				return p, err
			}
			return p, fmt.Errorf("%w: %d of %d ready after 90s (last error: %q)", errPoolStuck, p.Ready, p.Size, p.LastError)
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// apiRun creates and starts a session of pol running `echo x` through the
// Go client and reads its stdout with Logs(follow). With pooled, the
// session must have taken one of the sandboxes listed in ready just
// before, and after the stream ends apiRun times the refill. The session
// is removed afterwards (untimed).
func (w *warmStart) apiRun(ctx context.Context, pol policies.Policy, pooled bool, ready []string) (apiResult, error) {
	var r apiResult
	rctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	pol.Command = []string{"echo", "x"}
	var out firstWriter
	var errOut limitedBuffer
	daemon0, client0 := readSchedTimes(w.e.DaemonPID()), readSchedTimes(os.Getpid())
	out.onFirst = func() {
		r.daemon = readSchedTimes(w.e.DaemonPID()).sub(daemon0)
		r.client = readSchedTimes(os.Getpid()).sub(client0)
	}
	t0 := time.Now()
	s, err := w.e.Client.CreateSession(rctx, api.CreateRequest{Policy: pol, Start: true})
	r.create = time.Since(t0)
	if err != nil {
		return r, fmt.Errorf("create: %w", err)
	}
	defer func() {
		_ = w.e.Client.RemoveSession(context.WithoutCancel(ctx), s.ID, true)
	}()
	r.warm = s.Warm
	lerr := w.e.Client.Logs(rctx, s.ID, api.LogsOptions{Follow: true, Stdout: true, Stderr: true}, &out, &errOut)
	r.exit = time.Since(t0)
	if !out.first.IsZero() {
		r.first = out.first.Sub(t0)
	}
	if w.seen[s.ID] {
		return r, fmt.Errorf("session id %s served a second session", s.ID)
	}
	w.seen[s.ID] = true
	switch {
	case lerr != nil:
		return r, fmt.Errorf("logs: %w", lerr)
	case strings.TrimSpace(out.buf.String()) != "x":
		return r, fmt.Errorf("stdout %q, want \"x\" (stderr %q)", out.buf.String(), lastLine(errOut.String()))
	}
	if pooled && s.Warm {
		if !slices.Contains(ready, s.ID) {
			return r, fmt.Errorf("warm session %s was not among the ready sandboxes %v", s.ID, ready)
		}
		for {
			p, err := w.pool(ctx)
			if err != nil {
				return r, err
			}
			if p.Ready >= p.Size {
				r.refill = time.Since(t0)
				break
			}
			if time.Since(t0) > 90*time.Second {
				return r, fmt.Errorf("%w: %d of %d ready 90s after a take (last error: %q)", errPoolStuck, p.Ready, p.Size, p.LastError)
			}
			select {
			case <-ctx.Done():
				return r, ctx.Err()
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	return r, nil
}

// isolation starts one warm and one cold session running `sleep 3600`
// and compares what each owns.
func (w *warmStart) isolation(ctx context.Context) Isolation {
	var iso Isolation
	count := func(pol policies.Policy, wantWarm bool) (map[string]int, int, error) {
		if _, err := w.waitFull(ctx); err != nil {
			return nil, 0, err
		}
		pol.Command = []string{"sleep", "3600"}
		s, err := w.e.Client.CreateSession(ctx, api.CreateRequest{Policy: pol, Start: true})
		if err != nil {
			return nil, 0, fmt.Errorf("create: %w", err)
		}
		defer func() {
			_ = w.e.Client.RemoveSession(context.WithoutCancel(ctx), s.ID, true)
		}()
		if s.Warm != wantWarm {
			return nil, 0, fmt.Errorf("session %s: warm = %v", s.ID, s.Warm)
		}
		rs, err := w.e.sessionResources(ctx, s.ID)
		if err != nil {
			return nil, 0, err
		}
		kinds := map[string]int{}
		for _, x := range rs {
			kinds[kindOf(x.name)]++
		}
		key := sessionKey(s.ID)
		return kinds, len(nftObjects(filepath.Join(netns.DefaultDir, w.e.Prefix+"-gw"), w.e.Prefix, key)), nil
	}
	var err error
	if iso.Warm, iso.WarmNFT, err = count(w.pooled, true); err != nil {
		iso.Error = "warm: " + err.Error()
		return iso
	}
	if iso.Cold, iso.ColdNFT, err = count(w.cold, false); err != nil {
		iso.Error = "cold: " + err.Error()
		return iso
	}
	iso.Same = iso.WarmNFT == iso.ColdNFT && len(iso.Warm) == len(iso.Cold)
	for k, n := range iso.Warm {
		iso.Same = iso.Same && iso.Cold[k] == n
	}
	return iso
}

// removePool removes the measured pool and checks that its ready
// sandboxes' containers are gone.
func (w *warmStart) removePool(ctx context.Context) (*api.Pool, PoolRemoval) {
	rm := PoolRemoval{Left: []string{}}
	p, err := w.pool(ctx)
	if err != nil {
		return nil, rm
	}
	rm.Ready = len(p.ReadyIDs)
	t0 := time.Now()
	if err := w.e.Client.RemovePool(ctx, p.Key); err != nil {
		rm.Left = append(rm.Left, "pool "+p.Key+": "+err.Error())
		return &p, rm
	}
	if _, err := w.pool(ctx); err == nil {
		rm.Left = append(rm.Left, "pool "+p.Key+" still listed")
	}
	for _, id := range p.ReadyIDs {
		if _, err := w.e.ctrd.LoadContainer(ContainerdCtx(ctx), id); err == nil {
			rm.Left = append(rm.Left, "container "+id)
		}
	}
	for {
		orphans, err := w.orphanDirs(ctx)
		if err != nil {
			rm.Left = append(rm.Left, err.Error())
			break
		}
		if len(orphans) == 0 {
			rm.SettledMS = float64(time.Since(t0)) / float64(time.Millisecond)
			break
		}
		if time.Since(t0) > 30*time.Second || ctx.Err() != nil {
			for _, id := range orphans {
				rm.Left = append(rm.Left, "sandbox directory "+id)
			}
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	return &p, rm
}

// orphanDirs lists the sandbox directories in the daemon's state that
// belong to no session it lists: prepared or preparing sandboxes.
func (w *warmStart) orphanDirs(ctx context.Context) ([]string, error) {
	list, err := w.e.Client.ListSessions(ctx)
	if err != nil {
		return nil, err
	}
	known := map[string]bool{}
	for _, s := range list {
		known[s.ID] = true
	}
	entries, err := os.ReadDir(filepath.Join(w.e.StateRoot, "sessions"))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, en := range entries {
		if en.IsDir() && !known[en.Name()] {
			out = append(out, en.Name())
		}
	}
	return out, nil
}

// firstWriter keeps what is written and when the first byte came;
// onFirst, if set, runs then.
type firstWriter struct {
	first   time.Time
	buf     limitedBuffer
	onFirst func()
}

func (f *firstWriter) Write(p []byte) (int, error) {
	if len(p) > 0 && f.first.IsZero() {
		f.first = time.Now()
		if f.onFirst != nil {
			f.onFirst()
		}
	}
	return f.buf.Write(p)
}

func (ws *WarmStart) markdown(p printer) {
	p("## 2. Warm start\n\nReproduce: `%s` (%d interleaved rounds after one unrecorded warm-up of each variant).\n\n", ws.Reproduce, ws.Runs)
	p("Target: with a pool of prepared sandboxes, the time from the API call to the command's first output ≤ %.0f ms at the median, with the same isolation as a cold session. ", ws.TargetMS)
	if a := ws.API; len(a) > 0 && a[0].FirstOutputMS.N > 0 {
		verdict := "not met"
		if ws.TargetMet {
			verdict = "met"
		}
		p("Measured: **%.1f ms** median (p10–p90 %.1f–%.1f) over %d warm runs: %s.\n\n", a[0].FirstOutputMS.Median, a[0].FirstOutputMS.P10, a[0].FirstOutputMS.P90, a[0].FirstOutputMS.N, verdict)
	} else {
		p("Not measured.\n\n")
	}
	p("The pooled manifest is the full perimeter of the cold start (overlay workspace, egress to one world host, one credential) plus `pool { size = %d }`. airlockd prepares each pooled sandbox ahead of time (container, overlay workspace, network namespace with nftables rules and DNS registration, credential tmpfs, a running task whose first process, airlock-init, waits for the command) and hands it to exactly one session: a create takes it, mints the credentials and sends the command, which airlock-init executes in place; the sandbox is never returned to the pool, and the take starts preparing a replacement in the background, one at a time per pool. The cold comparison is the same manifest without the pool block and with another label (the label is part of the pool's key; with the same one its creates would take the pool's sandboxes).\n\n", ws.PoolSize)
	p("Before every timed run, warm or cold, the harness waits (untimed) until the pool is full and idle; so the only background work beside a timed start is the refill its own take starts.\n\n")
	p("Through the Go client (one long-lived `api.Client` over the unix socket, as an orchestrator holds it; `CreateSession` with `Start: true`, then `Logs` with follow, of `echo x`):\n\n")
	p("| variant | create response (ms) | API call → first output byte (ms) | API call → end of output (ms) | warm sessions | failures |\n|---|---|---|---|---|---|\n")
	for _, v := range ws.API {
		if v.FirstOutputMS.N == 0 {
			p("| %s | – | – | – | %d | %d: %s |\n", v.Name, v.WarmRuns, v.Failures, v.Error)
			continue
		}
		p("| %s | %s | %s | %s | %d of %d | %d |\n", v.Name, v.CreateMS.Spread("%.1f"), v.FirstOutputMS.Spread("%.1f"), v.ExitMS.Spread("%.1f"), v.WarmRuns, v.FirstOutputMS.N+v.Failures, v.Failures)
	}
	for _, v := range ws.API {
		if v.Error != "" && v.FirstOutputMS.N > 0 {
			p("\n%s, last failure: %s\n", v.Name, v.Error)
		}
	}
	if len(ws.API) == 2 && ws.API[1].FirstOutputMS.Median > 0 {
		p("\nWarm vs cold, medians: create ×%s, first output ×%s (%s ms).\n", ratio(ws.API[0].CreateMS.Median, ws.API[1].CreateMS.Median),
			ratio(ws.API[0].FirstOutputMS.Median, ws.API[1].FirstOutputMS.Median), signed(ws.API[0].FirstOutputMS.Median-ws.API[1].FirstOutputMS.Median))
	}
	p("\nFrom the API call to the first output byte, what the scheduler counted for airlockd's threads and the client's (`/proc/PID/task/*/schedstat`; waits of threads waiting at once add up):\n\n")
	p("| variant | airlockd on a core (ms) | airlockd waiting for a core (ms) | client waiting for a core (ms) |\n|---|---|---|---|\n")
	for _, v := range ws.API {
		if v.DaemonRunMS.N == 0 {
			continue
		}
		p("| %s | %s | %s | %s |\n", v.Name, v.DaemonRunMS.Spread("%.1f"), v.DaemonWaitMS.Spread("%.1f"), v.ClientWaitMS.Spread("%.1f"))
	}
	p("\nThrough the CLI (a new `airlock` process per run: manifest decoding, a new connection; the same columns as the cold-start table):\n\n")
	p("| variant | to exit, `true` (ms) | first output byte, `echo x` (ms) | `echo x` to exit (ms) | failures |\n|---|---|---|---|---|\n")
	for _, v := range ws.CLI {
		if v.ExitMS.N == 0 {
			p("| %s | – | – | – | not measured: %s |\n", v.Name, v.Error)
			continue
		}
		p("| %s | %s | %s | %s | %d |\n", v.Name, v.ExitMS.Spread("%.0f"), v.FirstOutputMS.Spread("%.0f"), v.EchoExitMS.Spread("%.0f"), v.Failures)
	}
	for _, v := range ws.CLI {
		if v.Error != "" && v.ExitMS.N > 0 {
			p("\n%s, last failure: %s\n", v.Name, v.Error)
		}
	}
	p("\nA warm CLI run counts only when the pool's hits grew by one and its misses did not; a warm API run only when the session reports `warm` and its id was among the pool's ready sandboxes just before (every session id was seen once).\n\n")
	if r := ws.RefillMS; r.N > 0 {
		p("Refill: from a take (the warm API create) until the pool listed %d ready sandboxes again took %s ms (median, p10–p90; max %.0f ms) over %d takes, one at a time, polled every 10 ms: the time to prepare one replacement, about %.1f a second. airlockd prepares up to `--pool-refill` replacements of a pool at once (2 by default, as here), so back-to-back takes are served faster as far as the cores allow; that rate is not measured here. A burst beyond the %d ready sandboxes starts cold.\n\n",
			ws.PoolSize, r.Spread("%.0f"), r.Max, r.N, 1000/r.Median, ws.PoolSize)
	}
	if pl := ws.Pool; pl != nil {
		p("The pool after the last run: %d hits, %d misses, %d discarded", pl.Hits, pl.Misses, pl.Discarded)
		if pl.LastError != "" {
			p(", last preparation error %q", pl.LastError)
		}
		p(". Removing it tore down its %d ready sandboxes; %.0f ms after the request no sandbox of it was left (a refill in flight is finished, then discarded); left afterwards: %s.\n\n", ws.Removed.Ready, ws.Removed.SettledMS, list(ws.Removed.Left))
	}
	iso := ws.Isolation
	switch {
	case iso.Error != "":
		p("Isolation check: not completed: %s.\n\n", iso.Error)
	case iso.Warm != nil:
		same := "the same"
		if !iso.Same {
			same = "NOT the same"
		}
		p("Isolation check: a warm and a cold session, each running `sleep 3600`, owned %s resources (the teardown section's tracker): warm %s, %d nftables chains and sets in the gateway; cold %s, %d.\n\n",
			same, kindCounts(iso.Warm), iso.WarmNFT, kindCounts(iso.Cold), iso.ColdNFT)
	}
	if ws.Error != "" {
		p("Rounds stopped early: %s.\n\n", ws.Error)
	}
	p("Commands: API `%s`; CLI warm `%s`; CLI cold `%s` (the `echo x` runs replace `true`); %s.\n\nPooled manifest:\n\n```hcl\n%s```\n\n",
		ws.Commands["api"], ws.Commands["cli warm"], ws.Commands["cli cold"], ws.Commands["pool wait"], ws.Manifest)
}

// kindCounts renders resource counts by kind, sorted: "cgroup ×12, ...".
func kindCounts(m map[string]int) string {
	parts := make([]string, 0, len(m))
	for _, k := range sortedKeys(m) {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// summary adds the warm rows to the report's summary table.
func (ws *WarmStart) summary(p printer) {
	if len(ws.API) == 2 {
		w, c := ws.API[0], ws.API[1]
		if w.FirstOutputMS.N > 0 {
			verdict := "not met"
			if ws.TargetMet {
				verdict = "met"
			}
			p("| warm start: API call to first output of `echo x`, full perimeter, pool of %d (ms; target ≤ %.0f: %s; ≤ ×%.1f of cold: %s) | %s | cold, same perimeter: %s | ×%s |\n",
				ws.PoolSize, ws.TargetMS, verdict, WarmRatioTarget, metText(w.FirstOutputMS.Median <= WarmRatioTarget*c.FirstOutputMS.Median),
				w.FirstOutputMS.Spread("%.1f"), c.FirstOutputMS.Spread("%.1f"), ratio(w.FirstOutputMS.Median, c.FirstOutputMS.Median))
			p("| warm start: API create response, full perimeter (ms) | %s | cold, same perimeter: %s | ×%s |\n",
				w.CreateMS.Spread("%.1f"), c.CreateMS.Spread("%.1f"), ratio(w.CreateMS.Median, c.CreateMS.Median))
		} else {
			p("| warm start (API) | – | not measured: %s | – |\n", w.Error)
		}
	}
	if len(ws.CLI) == 2 && ws.CLI[0].ExitMS.N > 0 {
		w, c := ws.CLI[0], ws.CLI[1]
		p("| warm start to exit, `airlock run --rm`, full perimeter (ms) | %s | cold, same perimeter: %s | ×%s |\n",
			w.ExitMS.Spread("%.0f"), c.ExitMS.Spread("%.0f"), ratio(w.ExitMS.Median, c.ExitMS.Median))
		p("| warm first output of `echo x`, `airlock run --rm`, full perimeter (ms) | %s | cold, same perimeter: %s | ×%s |\n",
			w.FirstOutputMS.Spread("%.0f"), c.FirstOutputMS.Spread("%.0f"), ratio(w.FirstOutputMS.Median, c.FirstOutputMS.Median))
	}
	if ws.RefillMS.N > 0 {
		p("| warm pool refill, from a take until full again (ms) | %s | – | – |\n", ws.RefillMS.Spread("%.0f"))
	}
}

// findings are the warm-start observations; cs (optional) supplies the
// `ctr run --rm` baseline of the cold-start section.
func (ws *WarmStart) findings(cs *ColdStart) []string {
	var out []string
	if len(ws.API) == 2 && ws.API[0].FirstOutputMS.N > 0 && ws.API[1].FirstOutputMS.N > 0 {
		w, c := ws.API[0], ws.API[1]
		s := fmt.Sprintf("Warm start: with a pool of %d prepared sandboxes, the API call to the first output byte of `echo x` took %.1f ms at the median (p90 %.1f ms, %d runs) against %.1f ms for the same perimeter started cold in the same rounds (×%.2f); ",
			ws.PoolSize, w.FirstOutputMS.Median, w.FirstOutputMS.P90, w.FirstOutputMS.N, c.FirstOutputMS.Median, w.FirstOutputMS.Median/c.FirstOutputMS.Median)
		if ws.TargetMet {
			s += fmt.Sprintf("the ≤ %.0f ms target is met with %.1f ms to spare.", ws.TargetMS, ws.TargetMS-w.FirstOutputMS.Median)
		} else {
			s += fmt.Sprintf("the ≤ %.0f ms target is missed by %.1f ms.", ws.TargetMS, w.FirstOutputMS.Median-ws.TargetMS)
		}
		s += fmt.Sprintf(" The create response alone took %.1f ms warm (credentials minted, the command handed to the waiting airlock-init) against %.1f ms cold; from the response to the first byte (the Logs request, the exec, the output through the log writer) %.1f ms warm.",
			w.CreateMS.Median, c.CreateMS.Median, w.FirstOutputMS.Median-w.CreateMS.Median)
		if w.DaemonRunMS.N > 0 {
			s += fmt.Sprintf(" Until the first byte warm, airlockd's threads were on a core for %.1f ms and waited %.1f ms for one (the client's: %.1f ms), medians",
				w.DaemonRunMS.Median, w.DaemonWaitMS.Median, w.ClientWaitMS.Median)
			if w.DaemonWaitMS.Median > w.DaemonRunMS.Median {
				s += ": more of the warm start is spent waiting for a core than working on one, which only fewer processes on the cores (or a higher priority for airlockd) would shorten"
			}
			s += "."
		}
		if w.ExitMS.N > 0 && c.ExitMS.N > 0 {
			tail, coldTail := w.ExitMS.Median-w.FirstOutputMS.Median, c.ExitMS.Median-c.FirstOutputMS.Median
			s += fmt.Sprintf(" The end of the output stream (the exit seen by airlockd, the log writer's end-of-file markers) came %.0f ms after the first byte warm and %.0f ms cold", tail, coldTail)
			if tail > w.FirstOutputMS.Median {
				s += fmt.Sprintf(": for a short command that exit path, not the start, is most (%.0f%%) of a warm session's time", 100*tail/w.ExitMS.Median)
			}
			s += "."
		}
		out = append(out, s)
	}
	if len(ws.CLI) == 2 && ws.CLI[0].ExitMS.N > 0 && ws.CLI[1].ExitMS.N > 0 {
		w, c := ws.CLI[0], ws.CLI[1]
		s := fmt.Sprintf("Warm start through the CLI: `airlock run --rm` of a pooled full-perimeter session ran `true` to exit in %.0f ms against %.0f ms cold in the same rounds (×%.2f), and printed the first byte of `echo x` after %.0f ms (cold %.0f ms)",
			w.ExitMS.Median, c.ExitMS.Median, w.ExitMS.Median/c.ExitMS.Median, w.FirstOutputMS.Median, c.FirstOutputMS.Median)
		if len(ws.API) > 0 && ws.API[0].FirstOutputMS.N > 0 {
			s += fmt.Sprintf("; %.0f ms of that first-output time are the CLI's own (a new process, manifest decoding, a new connection) over the API client's %.1f ms", w.FirstOutputMS.Median-ws.API[0].FirstOutputMS.Median, ws.API[0].FirstOutputMS.Median)
		}
		s += "."
		if cs != nil && len(cs.Variants) >= 3 && cs.Variants[2].ExitMS.N > 0 {
			ctr := cs.Variants[2].ExitMS.Median
			s += fmt.Sprintf(" Against `ctr run --rm` of the cold-start section (%.0f ms to exit, separate rounds), the warm full perimeter is ×%.2f.", ctr, w.ExitMS.Median/ctr)
		}
		out = append(out, s)
	}
	if r := ws.RefillMS; r.N > 0 {
		s := fmt.Sprintf("Refill: a take starts preparing a replacement at once; the pool was full again %.0f ms later at the median (p90 %.0f ms, %d takes)", r.Median, r.P90, r.N)
		if len(ws.API) == 2 && ws.API[1].FirstOutputMS.N > 0 {
			s += fmt.Sprintf(", ×%.2f of a cold API start to first output", r.Median/ws.API[1].FirstOutputMS.Median)
		}
		s += fmt.Sprintf(": one replacement takes that long (about %.1f a second); a pool prepares up to `--pool-refill` at once (2 by default, as here), so back-to-back takes are served faster as far as the cores allow, which this run does not measure; starts beyond the pool's rate, once its %d ready sandboxes are taken, are cold.", 1000/r.Median, ws.PoolSize)
		out = append(out, s)
	}
	if iso := ws.Isolation; iso.Error == "" && iso.Warm != nil {
		n := 0
		for _, k := range iso.Warm {
			n += k
		}
		if iso.Same {
			out = append(out, fmt.Sprintf("Isolation: a warm session owned the same %d resources as a cold one of the same perimeter, kind by kind (%s), and as many nftables chains and sets in the gateway (%d): a pooled sandbox is a complete, fresh sandbox, used by one session only.", n, kindCounts(iso.Warm), iso.WarmNFT))
		} else {
			out = append(out, fmt.Sprintf("Isolation: a warm session's resources differ from a cold one's: warm %s, %d nftables objects; cold %s, %d.", kindCounts(iso.Warm), iso.WarmNFT, kindCounts(iso.Cold), iso.ColdNFT))
		}
	}
	notWarm := 0
	total := 0
	if len(ws.API) > 0 {
		notWarm += ws.API[0].Failures
		total += ws.API[0].Failures + ws.API[0].FirstOutputMS.N
	}
	if len(ws.CLI) > 0 {
		notWarm += ws.CLI[0].Failures
		total += ws.CLI[0].Failures + ws.CLI[0].ExitMS.N + ws.CLI[0].FirstOutputMS.N
	}
	if notWarm > 0 {
		out = append(out, fmt.Sprintf("Warm start failures: %d of %d pooled runs (API and CLI) failed or did not get a prepared sandbox; the section gives the last error.", notWarm, total))
	}
	return out
}
