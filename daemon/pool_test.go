package daemon

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// countingPools are pools with nothing around them, whose sandboxes are
// named by counting prepares in n.
func countingPools(ctx context.Context, n *atomic.Int64) *warmPools {
	return &warmPools{
		prepare: func(ctx context.Context, p policies.Policy) (*session, error) {
			return &session{rec: record{ID: fmt.Sprint(n.Add(1))}}, nil
		},
		discard: func(context.Context, *session) {},
		reserve: func() error { return nil },
		release: func() {},
		ctx:     ctx,
		pools:   map[string]*pool{}, held: map[*session]*pool{}, dropped: map[*session]bool{},
	}
}

// A take that lands while the filler is deciding to stop still gets its
// sandbox replaced: the filler's decision and the end of "preparing" are
// one step, so the take either sees the filler running or starts one.
func TestPoolRefillNotLost(t *testing.T) {
	var n atomic.Int64
	iterations := 3000
	if testing.Short() {
		iterations = 300
	}
	for iter := 0; iter < iterations; iter++ {
		ctx, cancel := context.WithCancel(context.Background())
		w := countingPools(ctx, &n)
		p := policies.Policy{Label: "x", Pool: &policies.Pool{Size: 1}}
		w.ensure(&p)
		key := poolKey(&p)
		for w.Waiting() == 0 {
			runtime.Gosched()
		}
		for i := 0; i < iter%200; i++ {
			_ = i * i
		}
		if s := w.take(key, func(*session) {}); s == nil {
			t.Fatal("nothing to take")
		}
		w.replenish(key) // the claim is done
		w.wg.Wait()      // every filler has returned
		w.mu.Lock()
		pl := w.pools[key]
		ready, preparing := len(pl.ready), pl.fillers
		w.mu.Unlock()
		cancel()
		if ready != pl.size {
			t.Fatalf("iteration %d: pool of size %d has %d ready and no filler (fillers=%d): a take's refill was lost", iter, pl.size, ready, preparing)
		}
	}
}

// A take does not start preparing the taken sandbox's replacement: the
// claim comes first, and replenish, called after it, starts the filler. A
// take that finds the pool empty starts it at once.
func TestPoolReplacesAfterClaim(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var prepared atomic.Int64
	w := countingPools(ctx, &prepared)
	p := policies.Policy{Label: "x", Pool: &policies.Pool{Size: 1}}
	key := poolKey(&p)
	w.ensure(&p)
	for w.Waiting() == 0 {
		runtime.Gosched()
	}
	w.wg.Wait()
	fillers := func() int {
		w.mu.Lock()
		defer w.mu.Unlock()
		return w.pools[key].fillers
	}
	if s := w.take(key, func(*session) {}); s == nil {
		t.Fatal("nothing to take")
	}
	if n := fillers(); n != 0 {
		t.Fatalf("the take started %d fillers before its claim", n)
	}
	if got := prepared.Load(); got != 1 {
		t.Fatalf("%d sandboxes prepared before the claim, want only the one taken", got)
	}
	w.replenish(key)
	w.wg.Wait()
	if got, ready := prepared.Load(), w.Waiting(); got != 2 || ready != 1 {
		t.Fatalf("after replenish: %d prepared, %d ready; want 2 and 1", got, ready)
	}
	// A miss starts the filler itself: nobody claims anything.
	if s := w.take(key, func(*session) {}); s == nil {
		t.Fatal("nothing to take")
	}
	if s := w.take(key, func(*session) {}); s != nil {
		t.Fatal("took a second sandbox from a pool of one")
	}
	if n := fillers(); n != 1 {
		t.Fatalf("a take that found the pool empty started %d fillers, want 1", n)
	}
	w.wg.Wait()
	if ready := w.Waiting(); ready != 1 {
		t.Fatalf("after a miss: %d ready, want 1", ready)
	}
}

// The pools forget a sandbox they tore down once its init's exit has been
// handled, whether they removed it (pool removal) or its init died while
// it waited: nothing of it stays in memory for the daemon's life.
func TestPoolForgetsDroppedSandboxes(t *testing.T) {
	var n atomic.Int64
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := countingPools(ctx, &n)
	for round := 0; round < 10; round++ {
		p := policies.Policy{Label: "x", Pool: &policies.Pool{Size: 4}}
		w.ensure(&p)
		for w.Waiting() < 4 {
			runtime.Gosched()
		}
		w.wg.Wait()
		w.mu.Lock()
		ready := append([]*session(nil), w.pools[poolKey(&p)].ready...)
		w.mu.Unlock()
		if err := w.remove(ctx, poolKey(&p)); err != nil {
			t.Fatal(err)
		}
		for _, s := range ready {
			if !w.drop(ctx, s) { // the exit of its init, caused by the teardown
				t.Fatal("drop did not recognise a discarded sandbox")
			}
		}
	}
	// A waiting sandbox whose init dies: its exit is the one handled.
	p := policies.Policy{Label: "y", Pool: &policies.Pool{Size: 1}}
	w.ensure(&p)
	for w.Waiting() < 1 {
		runtime.Gosched()
	}
	w.mu.Lock()
	dead := w.pools[poolKey(&p)].ready[0]
	w.mu.Unlock()
	if !w.drop(ctx, dead) {
		t.Fatal("drop did not take a waiting sandbox whose init died")
	}
	// Its replacement, torn down when the pools close, then exits.
	for w.Waiting() < 1 {
		runtime.Gosched()
	}
	w.mu.Lock()
	replacement := w.pools[poolKey(&p)].ready[0]
	w.mu.Unlock()
	w.close(ctx)
	if !w.drop(ctx, replacement) {
		t.Fatal("drop did not recognise a sandbox the pools tore down at close")
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.dropped) != 0 {
		t.Fatalf("%d torn-down sandboxes still held in w.dropped after their exits were handled", len(w.dropped))
	}
}

// A pool prepares up to its refill's sandboxes at once, never more, and
// never more than it lacks.
func TestPoolRefillsInParallel(t *testing.T) {
	for _, tc := range []struct{ size, refill, want int }{
		{4, 1, 1}, {4, 2, 2}, {4, 3, 3}, {2, 8, 2},
	} {
		t.Run(fmt.Sprintf("size=%d,refill=%d", tc.size, tc.refill), func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			var n, inflight, peak atomic.Int64
			gate := make(chan struct{})
			w := &warmPools{
				prepare: func(ctx context.Context, p policies.Policy) (*session, error) {
					now := inflight.Add(1)
					for {
						old := peak.Load()
						if now <= old || peak.CompareAndSwap(old, now) {
							break
						}
					}
					<-gate
					inflight.Add(-1)
					return &session{rec: record{ID: fmt.Sprint(n.Add(1))}}, nil
				},
				discard: func(context.Context, *session) {},
				reserve: func() error { return nil },
				release: func() {},
				refill:  tc.refill,
				ctx:     ctx,
				pools:   map[string]*pool{}, held: map[*session]*pool{}, dropped: map[*session]bool{},
			}
			p := policies.Policy{Label: "x", Pool: &policies.Pool{Size: tc.size}}
			w.ensure(&p)
			// Wait until the fillers are all blocked in prepare.
			for inflight.Load() < int64(tc.want) {
				runtime.Gosched()
			}
			for range 100 {
				runtime.Gosched()
			}
			if got := w.list()[0].PreparingCount; got != tc.want {
				t.Errorf("preparing %d at once, want %d", got, tc.want)
			}
			close(gate)
			for w.Waiting() < tc.size {
				runtime.Gosched()
			}
			w.wg.Wait()
			if got := peak.Load(); got != int64(tc.want) {
				t.Errorf("at most %d prepared at once, want %d", got, tc.want)
			}
			if got := n.Load(); got != int64(tc.size) {
				t.Errorf("%d prepared for a pool of %d", got, tc.size)
			}
		})
	}
}

// whyCold says why a create that names a pool's label found nothing:
// none ready, or the policy differs (in which fields, as the API names
// them); nothing when no pool has the label.
func TestPoolWhyCold(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	block := make(chan struct{})
	w := &warmPools{
		prepare: func(ctx context.Context, p policies.Policy) (*session, error) {
			<-block // never ready
			return nil, fmt.Errorf("stopped")
		},
		discard: func(context.Context, *session) {},
		reserve: func() error { return nil },
		release: func() {},
		ctx:     ctx,
		pools:   map[string]*pool{}, held: map[*session]*pool{}, dropped: map[*session]bool{},
	}
	pooled := policies.Policy{Label: "builds", Image: "img", Pool: &policies.Pool{Size: 1}}
	w.ensure(&pooled)
	same := policies.Policy{Label: "builds", Image: "img", Command: []string{"make"}}
	if why := w.whyCold(poolKey(&same), &same); !strings.Contains(why, `pool "builds" had no sandbox ready`) {
		t.Errorf("same policy, none ready: %q", why)
	}
	other := policies.Policy{Label: "builds", Image: "img2", Env: map[string]string{"X": "1"}, Command: []string{"make"}}
	if why := w.whyCold(poolKey(&other), &other); !strings.Contains(why, `differs from pool "builds"'s in env, image (`) {
		t.Errorf("another policy: %q", why)
	}
	unpooled := policies.Policy{Label: "elsewhere", Image: "img"}
	if why := w.whyCold(poolKey(&unpooled), &unpooled); why != "" {
		t.Errorf("no pool of its label: %q", why)
	}
	// The daemon stops: its filler's prepare fails and it tries no more.
	cancel()
	close(block)
	w.wg.Wait()
}
