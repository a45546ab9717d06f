package daemon

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sort"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// pool keeps sandboxes of one policy prepared ahead of time. A prepared
// sandbox is fresh: its own session directory, workspace overlay, network
// namespace, allow set and credential tmpfs, and a task whose init waits
// for a command. A session takes it out of the pool; it is never returned.
type pool struct {
	key    string
	policy policies.Policy // template: command and timeout unset
	size   int
	ready  []*session
	// preparing is set while a filler goroutine runs.
	preparing bool
	hits      uint64
	misses    uint64
	discarded uint64
	failures  int
	lastErr   string
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

// ensurePool declares (or resizes) the pool of policy p and starts
// filling it.
func (d *Daemon) ensurePool(p *policies.Policy) {
	size := 0
	if p.Pool != nil {
		size = min(p.Pool.Size, policies.MaxPoolSize)
	}
	key := poolKey(p)
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return
	}
	pl := d.pools[key]
	if pl == nil {
		if size == 0 {
			return
		}
		tmpl := *p.Clone()
		tmpl.Command, tmpl.Timeout = nil, 0
		pl = &pool{key: key, policy: tmpl}
		d.pools[key] = pl
	}
	pl.size = size
	d.fillLocked(pl)
}

// takePooled removes a ready sandbox from the pool of key, or returns nil.
func (d *Daemon) takePooled(key string) *session {
	d.mu.Lock()
	defer d.mu.Unlock()
	pl := d.pools[key]
	if pl == nil {
		return nil
	}
	defer d.fillLocked(pl)
	if len(pl.ready) == 0 {
		pl.misses++
		return nil
	}
	s := pl.ready[0]
	pl.ready = pl.ready[1:]
	s.inPool = false
	// It keeps its place under the session limit until claim counts it
	// as a session (or abandons it): the filler started below must not
	// take that place.
	s.reserved = true
	d.reserved++
	pl.hits++
	return s
}

// fillLocked starts the pool's filler unless it runs or the pool is full.
func (d *Daemon) fillLocked(pl *pool) {
	if pl.preparing || d.closed || len(pl.ready) >= pl.size {
		return
	}
	pl.preparing = true
	d.wg.Add(1)
	go d.fill(pl)
}

// fill prepares sandboxes one at a time until the pool is full. Failures
// back off, up to 30 s, and are reported by Pools.
func (d *Daemon) fill(pl *pool) {
	defer d.wg.Done()
	ctx := log.With(d.stopCtx, "pool", pl.key, "label", pl.policy.Label)
	for {
		d.mu.Lock()
		if d.closed || len(pl.ready) >= pl.size || d.pools[pl.key] != pl {
			pl.preparing = false
			d.mu.Unlock()
			return
		}
		// A pool fills only while the session limit leaves room; it
		// resumes when a session takes one of its sandboxes.
		if err := d.admission.admitSessions(d.countLocked()); err != nil {
			pl.preparing = false
			pl.lastErr = err.Error()
			d.mu.Unlock()
			log.G(ctx).Warn("pool not filled", "reason", err)
			return
		}
		d.reserved++
		d.mu.Unlock()
		s, err := d.prepare(ctx, pl.policy, true)
		d.mu.Lock()
		d.reserved--
		if err != nil {
			pl.failures++
			pl.lastErr = err.Error()
			wait := min(time.Duration(pl.failures)*time.Second, 30*time.Second)
			d.mu.Unlock()
			log.G(ctx).Warn("prepare a pooled sandbox", "error", err, "retry_in", wait)
			select {
			case <-time.After(wait):
			case <-d.stopCtx.Done():
			}
			continue
		}
		pl.failures = 0
		pl.lastErr = ""
		if d.closed || d.pools[pl.key] != pl {
			d.mu.Unlock()
			d.discard(ctx, s)
			continue
		}
		s.inPool = true
		pl.ready = append(pl.ready, s)
		d.mu.Unlock()
		log.G(ctx).Debug("pooled sandbox ready", "session", s.rec.ID)
	}
}

// dropDead handles the exit of a sandbox's init: one waiting in a pool is
// removed from it and torn down, and dropDead reports true.
func (d *Daemon) dropDead(ctx context.Context, s *session) bool {
	d.mu.Lock()
	if s.dropped {
		d.mu.Unlock()
		return true // torn down by whoever dropped it
	}
	if !s.inPool {
		d.mu.Unlock()
		return false
	}
	s.inPool = false
	s.dropped = true
	for _, pl := range d.pools {
		for i, r := range pl.ready {
			if r == s {
				pl.ready = append(pl.ready[:i:i], pl.ready[i+1:]...)
				pl.discarded++
				d.fillLocked(pl)
			}
		}
	}
	d.mu.Unlock()
	log.G(ctx).Warn("a pooled sandbox's init exited; dropping it")
	d.discard(ctx, s)
	return true
}

// discard tears down a sandbox no session took. The exit of its init,
// which the teardown causes, is left to it.
func (d *Daemon) discard(ctx context.Context, s *session) {
	d.mu.Lock()
	s.dropped = true
	d.mu.Unlock()
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

// drainPools stops every pool and tears its ready sandboxes down.
func (d *Daemon) drainPools(ctx context.Context) {
	d.mu.Lock()
	d.closed = true
	var all []*session
	for _, pl := range d.pools {
		for _, s := range pl.ready {
			s.inPool, s.dropped = false, true
			all = append(all, s)
		}
		pl.ready = nil
	}
	d.mu.Unlock()
	for _, s := range all {
		d.discard(ctx, s)
	}
}

// RemovePool stops the pool of key and tears its ready sandboxes down.
// Sessions that already took one are not affected.
func (d *Daemon) RemovePool(ctx context.Context, key string) error {
	d.mu.Lock()
	pl := d.pools[key]
	if pl == nil {
		d.mu.Unlock()
		return fmt.Errorf("no pool %q: %w", key, errdefs.ErrNotFound)
	}
	delete(d.pools, key)
	ready := pl.ready
	pl.ready = nil
	for _, s := range ready {
		s.inPool, s.dropped = false, true
	}
	d.mu.Unlock()
	for _, s := range ready {
		d.discard(ctx, s)
	}
	log.G(ctx).Info("pool removed", "pool", key, "discarded", len(ready))
	return nil
}

// pooledLocked counts sandboxes waiting in pools.
func (d *Daemon) pooledLocked() int {
	n := 0
	for _, pl := range d.pools {
		n += len(pl.ready)
	}
	return n
}

// Pools reports every warm pool.
func (d *Daemon) Pools() []api.Pool {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := make([]api.Pool, 0, len(d.pools))
	for _, pl := range d.pools {
		out = append(out, api.Pool{
			Key: pl.key, Label: pl.policy.Label, Image: pl.policy.Image, Size: pl.size,
			Ready: len(pl.ready), ReadyIDs: ids(pl.ready), Preparing: pl.preparing,
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
