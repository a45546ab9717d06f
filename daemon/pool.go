package daemon

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// warmPools keeps sandboxes prepared ahead of their sessions, one pool
// per policy key. A prepared sandbox is fresh: its own session directory,
// workspace overlay, network namespace, allow set and credential tmpfs,
// and a task whose init waits for a command. A session takes it out of
// its pool; it is never returned.
//
// The pools know the daemon only through the functions they are given.
// Lock order: the pools' lock, then the daemon's (take's keep runs under
// the pools' lock); never the reverse. The daemon reads how many
// sandboxes wait (Waiting) under its own lock without taking the pools'.
type warmPools struct {
	// prepare makes a sandbox for a pool; discard tears down one no
	// session took.
	prepare func(ctx context.Context, p policies.Policy) (*session, error)
	discard func(ctx context.Context, s *session)
	// reserve takes a place under the session limit for a sandbox about
	// to be prepared; release gives it back.
	reserve func() error
	release func()
	// turn, if set, waits for the filler's turn among the sandboxes
	// being prepared and returns what ends it; a filler waits for it
	// before it reserves, so that one waiting holds no place under the
	// session limit that a create could use.
	turn func(ctx context.Context) (func(), error)
	// refill is how many sandboxes one pool prepares at once (at least 1).
	refill int
	ctx    context.Context // done when the daemon stops
	wg     sync.WaitGroup

	waiting atomic.Int64 // sandboxes ready in any pool

	mu     sync.Mutex
	pools  map[string]*pool // +checklocks:mu
	closed bool             // +checklocks:mu
	// held maps every ready sandbox to its pool.
	held map[*session]*pool // +checklocks:mu
	// dropped are sandboxes torn down without a session, until the exit
	// of their init, which records nothing.
	dropped map[*session]bool // +checklocks:mu
	// watchers are the callers of watch, each with the labels of the
	// pools changed since it was last told.
	watchers map[*poolWatcher]struct{} // +checklocks:mu
}

// poolWatcher is one caller of warmPools.watch.
type poolWatcher struct {
	wake    chan struct{}   // holds a token when changed is not empty
	changed map[string]bool // labels; guarded by the pools' lock
}

// pool is one policy's prepared sandboxes.
type pool struct {
	key    string
	policy policies.Policy // template: command and timeout unset
	size   int
	ready  []*session
	// fillers counts the filler goroutines running, at most the pools'
	// refill; each prepares one sandbox at a time.
	fillers int
	// inflight counts the sandboxes being prepared.
	inflight  int
	hits      uint64
	misses    uint64
	discarded uint64
	failures  int
	lastErr   string
	// toldReady and toldErr are the ready count and last error the
	// watchers were last told of (changedLocked).
	toldReady int
	toldErr   string
}

// poolKey identifies what a prepared sandbox fixes: everything in the
// policy but the command, the timeout and the pool itself.
func poolKey(p *policies.Policy) string {
	q := *p.Clone()
	q.Command = nil
	q.Timeout = 0
	q.Pool = nil
	b, err := json.Marshal(&q)
	if err != nil {
		panic(err) // a Policy always encodes
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:8])
}

// Waiting counts the sandboxes ready in any pool.
func (w *warmPools) Waiting() int { return int(w.waiting.Load()) }

// ensure declares (or resizes) the pool of policy p and starts filling it.
func (w *warmPools) ensure(p *policies.Policy) {
	size := 0
	if p.Pool != nil {
		size = min(p.Pool.Size, policies.MaxPoolSize)
	}
	key := poolKey(p)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return
	}
	pl := w.pools[key]
	if pl == nil {
		if size == 0 {
			return
		}
		tmpl := *p.Clone()
		tmpl.Command, tmpl.Timeout = nil, 0
		pl = &pool{key: key, policy: tmpl}
		w.pools[key] = pl
	}
	pl.size = size
	w.fillLocked(pl)
}

// take removes a ready sandbox from the pool of key, or returns nil. keep
// runs before the sandbox stops counting as waiting, so that it keeps its
// place under the session limit and no filler can take that place.
//
// A take that finds no sandbox starts the pool's fillers at once. One that
// finds one leaves its replacement to replenish, which the caller calls once
// the sandbox is claimed: preparing a sandbox keeps the runtime busy for
// about as long as a cold start, and on a machine of few cores that work,
// started here, delayed the claim it replaces by half (the warm start's
// first output took 23 ms with the refill beside it).
func (w *warmPools) take(key string, keep func(*session)) *session {
	w.mu.Lock()
	defer w.mu.Unlock()
	pl := w.pools[key]
	if pl == nil {
		return nil
	}
	if len(pl.ready) == 0 {
		pl.misses++
		w.fillLocked(pl)
		return nil
	}
	s := pl.ready[0]
	pl.ready = pl.ready[1:]
	delete(w.held, s)
	keep(s)
	w.waiting.Add(-1)
	pl.hits++
	w.changedLocked(pl)
	return s
}

// replenish starts the fillers of the pool of key, if it lacks sandboxes:
// after a take's claim, whatever its outcome.
func (w *warmPools) replenish(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if pl := w.pools[key]; pl != nil {
		w.fillLocked(pl)
	}
}

// whyCold says why a create of policy p (pool key key) found no prepared
// sandbox, when a pool has p's label: its policy differs (the fields that
// do, as the API names them), or none of its sandboxes was ready. "" when
// no pool has the label.
func (w *warmPools) whyCold(key string, p *policies.Policy) string {
	if p.Label == "" {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var same *pool
	var others []*pool
	for _, pl := range w.pools {
		switch {
		case pl.key == key:
			same = pl
		case pl.policy.Label == p.Label:
			others = append(others, pl)
		}
	}
	if same != nil {
		return fmt.Sprintf("started cold: pool %q had no sandbox ready (%d being prepared)", p.Label, same.inflight)
	}
	if len(others) == 0 {
		return ""
	}
	pl := others[0]
	return fmt.Sprintf("started cold: its policy differs from pool %q's in %s (a pool's sandboxes serve its own policy alone: all but command and timeout)",
		p.Label, strings.Join(policyDiff(&pl.policy, p), ", "))
}

// policyDiff names the top-level fields (as the API spells them) in which
// a and b differ, the command, timeout and pool aside.
func policyDiff(a, b *policies.Policy) []string {
	fields := func(p *policies.Policy) map[string]json.RawMessage {
		q := *p.Clone()
		q.Command, q.Timeout, q.Pool = nil, 0, nil
		raw, _ := json.Marshal(&q)
		m := map[string]json.RawMessage{}
		_ = json.Unmarshal(raw, &m)
		return m
	}
	fa, fb := fields(a), fields(b)
	var out []string
	for k, v := range fa {
		if !bytes.Equal(v, fb[k]) {
			out = append(out, k)
		}
	}
	for k := range fb {
		if _, ok := fa[k]; !ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	if len(out) == 0 {
		out = []string{"nothing the API shows"}
	}
	return out
}

// stale counts a taken sandbox of the pool of key that could not be used.
func (w *warmPools) stale(key string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if pl := w.pools[key]; pl != nil {
		pl.discarded++
	}
}

// fillLocked starts fillers, up to the pools' refill and no more than the
// pool lacks sandboxes, unless the pools are closed.
func (w *warmPools) fillLocked(pl *pool) {
	for !w.closed && pl.fillers < max(w.refill, 1) && len(pl.ready)+pl.fillers < pl.size {
		pl.fillers++
		w.wg.Add(1)
		go w.fill(pl)
	}
}

// fill prepares sandboxes one at a time until the pool is full or
// prepared for: the sandboxes ready and those the pool's fillers are
// preparing make its size. A pool fills only while the session limit
// leaves room; it resumes when a session takes one of its sandboxes.
// Failures back off, up to 30 s, and are reported by list.
func (w *warmPools) fill(pl *pool) {
	defer w.wg.Done()
	ctx := log.With(w.ctx, "pool", pl.key, "label", pl.policy.Label)
	for {
		endTurn := func() {}
		if w.turn != nil {
			end, err := w.turn(ctx)
			if err != nil { // the daemon stops
				w.mu.Lock()
				pl.fillers--
				w.mu.Unlock()
				return
			}
			endTurn = end
		}
		// Deciding to stop and leaving the fillers happen under one lock,
		// so that a take, a drop or a resize in between starts a filler.
		w.mu.Lock()
		if w.closed || len(pl.ready)+pl.inflight >= pl.size || w.pools[pl.key] != pl {
			pl.fillers--
			w.mu.Unlock()
			endTurn()
			return
		}
		// The session limit is checked under the pools' lock (the lock
		// order allows it): a take racing with a full limit sees either
		// this filler running or it stopped.
		if err := w.reserve(); err != nil {
			pl.fillers--
			pl.lastErr = err.Error()
			w.changedLocked(pl)
			w.mu.Unlock()
			endTurn()
			log.G(ctx).Warn("pool not filled", "reason", err)
			return
		}
		pl.inflight++
		w.mu.Unlock()
		s, err := w.prepare(ctx, pl.policy)
		endTurn()
		if err != nil {
			w.release()
			w.mu.Lock()
			pl.inflight--
			pl.failures++
			pl.lastErr = err.Error()
			wait := min(time.Duration(pl.failures)*time.Second, 30*time.Second)
			w.changedLocked(pl)
			w.mu.Unlock()
			log.G(ctx).Warn("prepare a pooled sandbox", "error", err, "retry_in", wait)
			select {
			case <-time.After(wait):
			case <-w.ctx.Done():
				// The daemon stops: no more tries.
				w.mu.Lock()
				pl.fillers--
				w.mu.Unlock()
				return
			}
			continue
		}
		w.mu.Lock()
		pl.inflight--
		pl.failures = 0
		pl.lastErr = ""
		if w.closed || w.pools[pl.key] != pl {
			w.dropped[s] = true
			w.mu.Unlock()
			w.release()
			w.discard(ctx, s)
			continue
		}
		pl.ready = append(pl.ready, s)
		w.held[s] = pl
		// Counted as waiting before its reservation is released: the
		// session limit never sees a gap.
		w.waiting.Add(1)
		w.changedLocked(pl)
		w.mu.Unlock()
		w.release()
		log.G(ctx).Debug("pooled sandbox ready", "session", s.rec.ID)
	}
}

// drop handles the exit of a sandbox's init: one waiting in a pool is
// removed from it and torn down. It reports whether s belonged to the
// pools (waiting, or already torn down by them); the exit of such an init
// records nothing.
func (w *warmPools) drop(ctx context.Context, s *session) bool {
	w.mu.Lock()
	if w.dropped[s] {
		// Torn down by the pools; its exit is the last they hear of it.
		delete(w.dropped, s)
		w.mu.Unlock()
		return true
	}
	pl := w.held[s]
	if pl == nil {
		w.mu.Unlock()
		return false
	}
	w.removeLocked(pl, s)
	delete(w.dropped, s) // its exit is this one
	pl.discarded++
	w.fillLocked(pl)
	w.changedLocked(pl)
	w.mu.Unlock()
	log.G(ctx).Warn("a pooled sandbox's init exited; dropping it")
	w.discard(ctx, s)
	return true
}

// removeLocked takes s out of pl and marks it dropped.
func (w *warmPools) removeLocked(pl *pool, s *session) {
	for i, r := range pl.ready {
		if r == s {
			pl.ready = append(pl.ready[:i:i], pl.ready[i+1:]...)
			w.waiting.Add(-1)
		}
	}
	delete(w.held, s)
	w.dropped[s] = true
}

// resume starts fillers for the pools short of their size: a place under
// the session limit came free.
func (w *warmPools) resume() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, pl := range w.pools {
		if len(pl.ready)+pl.inflight < pl.size {
			w.fillLocked(pl)
		}
	}
}

// evict tears down one ready sandbox, of the pool that holds the most, so
// that its place under the session limit goes to a session: a prepared
// sandbox is a head start, never a reason to refuse one. It reports
// whether there was one. The pool fills again when a place comes free (a
// session removed), a session takes one of its sandboxes or it is
// resized, as far as the limit leaves room.
func (w *warmPools) evict(ctx context.Context) bool {
	w.mu.Lock()
	var victim *pool
	for _, pl := range w.pools {
		if len(pl.ready) > 0 && (victim == nil || len(pl.ready) > len(victim.ready)) {
			victim = pl
		}
	}
	if victim == nil {
		w.mu.Unlock()
		return false
	}
	s := victim.ready[len(victim.ready)-1]
	w.removeLocked(victim, s)
	victim.discarded++
	victim.lastErr = "a prepared sandbox gave its place under the session limit to a session"
	w.changedLocked(victim)
	w.mu.Unlock()
	log.G(ctx).Info("prepared sandbox torn down for a session at the session limit", "pool", victim.key, "session", s.rec.ID)
	w.discard(ctx, s)
	return true
}

// trim tears down the ready sandboxes of the pool of key beyond its size
// (after a resize down).
func (w *warmPools) trim(ctx context.Context, key string) {
	w.mu.Lock()
	pl := w.pools[key]
	var extra []*session
	if pl != nil && len(pl.ready) > pl.size {
		extra = append(extra, pl.ready[pl.size:]...)
		for _, s := range extra {
			w.removeLocked(pl, s)
		}
		w.changedLocked(pl)
	}
	w.mu.Unlock()
	for _, s := range extra {
		w.discard(ctx, s)
	}
	if len(extra) > 0 {
		log.G(ctx).Info("pool resized down", "pool", key, "discarded", len(extra))
	}
}

// remove stops the pool of key and tears its ready sandboxes down.
// Sessions that already took one are not affected.
func (w *warmPools) remove(ctx context.Context, key string) error {
	w.mu.Lock()
	pl := w.pools[key]
	if pl == nil {
		w.mu.Unlock()
		return fmt.Errorf("no pool %q: %w", key, errdefs.ErrNotFound)
	}
	delete(w.pools, key)
	ready := pl.ready
	for _, s := range ready {
		w.removeLocked(pl, s)
	}
	w.tellLocked(pl.policy.Label)
	w.mu.Unlock()
	for _, s := range ready {
		w.discard(ctx, s)
	}
	log.G(ctx).Info("pool removed", "pool", key, "discarded", len(ready))
	return nil
}

// close stops every pool, tears its ready sandboxes down and waits for
// the fillers.
func (w *warmPools) close(ctx context.Context) {
	w.mu.Lock()
	w.closed = true
	var all []*session
	for _, pl := range w.pools {
		ready := pl.ready
		for _, s := range ready {
			w.removeLocked(pl, s)
		}
		all = append(all, ready...)
	}
	w.mu.Unlock()
	for _, s := range all {
		w.discard(ctx, s)
	}
	w.wg.Wait()
}

// changedLocked tells the watchers of pl's label if its ready count or
// last error changed since they were last told: what a pool's user (the
// node agent writing a SessionPool's status) sees of it. Nothing else a
// pool does (a filler started, a miss counted, a failure with the same
// error) is news, so that a watcher that acts on the pool (SetPool) when
// told does not tell itself again.
func (w *warmPools) changedLocked(pl *pool) {
	if len(pl.ready) == pl.toldReady && pl.lastErr == pl.toldErr {
		return
	}
	pl.toldReady, pl.toldErr = len(pl.ready), pl.lastErr
	w.tellLocked(pl.policy.Label)
}

// tellLocked adds label to every watcher's changed labels and wakes it.
func (w *warmPools) tellLocked(label string) {
	for pw := range w.watchers {
		pw.changed[label] = true
		select {
		case pw.wake <- struct{}{}:
		default: // already woken: label joins the labels it will read
		}
	}
}

// watch calls changed with the labels of the pools whose ready count or
// last error changed, or that were removed, until ctx ends or the pools'
// context does (the daemon stops). Its first call names every pool there
// is, if any: what changed before the watch began. A label is given once
// however many changes it had since the last call: a burst (a pool's
// sandboxes becoming ready together, a call of changed that took long)
// makes one call. changed runs on the caller's goroutine, without the
// pools' lock.
func (w *warmPools) watch(ctx context.Context, changed func(labels []string)) {
	pw := &poolWatcher{wake: make(chan struct{}, 1), changed: map[string]bool{}}
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return
	}
	if w.watchers == nil {
		w.watchers = map[*poolWatcher]struct{}{}
	}
	w.watchers[pw] = struct{}{}
	for _, pl := range w.pools {
		pw.changed[pl.policy.Label] = true
	}
	if len(pw.changed) > 0 {
		pw.wake <- struct{}{}
	}
	w.mu.Unlock()
	defer func() {
		w.mu.Lock()
		delete(w.watchers, pw)
		w.mu.Unlock()
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case <-w.ctx.Done():
			return
		case <-pw.wake:
		}
		w.mu.Lock()
		labels := slices.Sorted(maps.Keys(pw.changed))
		clear(pw.changed)
		w.mu.Unlock()
		if len(labels) > 0 {
			changed(labels)
		}
	}
}

// list reports every pool.
func (w *warmPools) list() []api.Pool {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]api.Pool, 0, len(w.pools))
	for _, pl := range w.pools {
		out = append(out, api.Pool{
			Key: pl.key, Label: pl.policy.Label, Image: pl.policy.Image, Size: pl.size,
			Ready: len(pl.ready), ReadyIDs: ids(pl.ready), Preparing: pl.fillers > 0, PreparingCount: pl.inflight,
			Hits: pl.hits, Misses: pl.misses, Discarded: pl.discarded, LastError: pl.lastErr,
		})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

func ids(ss []*session) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = s.rec.ID
	}
	return out
}

// Pools reports every warm pool.
func (d *Daemon) Pools() []api.Pool { return d.pools.list() }

// SetPool declares, resizes or (size 0) removes the warm pool of policy p
// at run time, as a `pool { size = N }` block declares one at start. p
// goes through the same validation and admission as a Create first: a
// policy the admission policy refuses prepares nothing (the node agent
// declares pools for SessionPools, which cluster users write). p's own
// pool block is ignored; size says how many, and a smaller size tears
// the ready sandboxes beyond it down. It returns the pool's key
// (see Pools) and the policy's warnings. A prepared sandbox is taken by
// a Create whose policy has the same key: the same policy but for its
// command and timeout.
func (d *Daemon) SetPool(ctx context.Context, p policies.Policy, size int) (key string, warnings []string, err error) {
	if size < 0 || size > policies.MaxPoolSize {
		return "", nil, fmt.Errorf("pool size %d: want 0 to %d: %w", size, policies.MaxPoolSize, errdefs.ErrInvalidArgument)
	}
	q := *p.Clone()
	q.Pool = &policies.Pool{Size: size}
	if warnings, err = d.admission.admit(&q); err != nil {
		return "", nil, err
	}
	key = poolKey(&q)
	if size == 0 {
		if err := d.pools.remove(ctx, key); err != nil && !errdefs.IsNotFound(err) {
			return "", nil, err
		}
		return key, warnings, nil
	}
	d.pools.ensure(&q)
	d.pools.trim(ctx, key)
	return key, warnings, nil
}

// RemovePool stops the pool of key and tears its ready sandboxes down.
// Sessions that already took one are not affected.
func (d *Daemon) RemovePool(ctx context.Context, key string) error { return d.pools.remove(ctx, key) }

// WatchPools calls changed with the labels of the warm pools whose
// number of ready sandboxes or last error (see Pools) changed, or that
// were removed: a sandbox prepared, taken by a session, torn down (its
// init died, it gave its place to a session, its pool shrank), a refill
// that failed or could not start. It runs until ctx ends or the daemon
// stops. Changes made while changed runs are gathered: the next call
// names each label they touched once, however many there were. The
// first call names every pool there is, if any, so that nothing changed
// before the watch began goes unseen. It is
// for a caller in the daemon's process (the Kubernetes node agent, which
// writes a SessionPool's status from its pool): changed is told which
// pools to look at (Pools), not what they hold.
func (d *Daemon) WatchPools(ctx context.Context, changed func(labels []string)) {
	d.pools.watch(ctx, changed)
}

// discard tears down a sandbox no session took. The exit of its init,
// which the teardown causes, is left to the pools.
func (d *Daemon) discard(ctx context.Context, s *session) {
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := d.teardown(dctx, s.rec.ID); err != nil {
		log.G(ctx).Error("remove pooled sandbox", "session", s.rec.ID, "error", err)
	}
	_ = s.audit.Close()
	d.mu.Lock()
	d.releaseCgroupParentsLocked()
	d.mu.Unlock()
}
