package daemon

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// watchCalls starts w.watch until the test ends and returns the labels of
// each of its calls, once it is registered.
func watchCalls(t *testing.T, w *warmPools) <-chan []string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan []string, 1024)
	done := make(chan struct{})
	go func() {
		defer close(done)
		w.watch(ctx, func(labels []string) { calls <- labels })
	}()
	t.Cleanup(func() { cancel(); <-done })
	for {
		w.mu.Lock()
		n := len(w.watchers)
		w.mu.Unlock()
		if n == 1 {
			return calls
		}
		time.Sleep(time.Millisecond)
	}
}

// The pools tell a watcher of every change of a pool's ready count or last
// error, and of its removal: a sandbox prepared, taken, torn down because
// its init died, given up to a session or beyond a smaller size, a refill
// that failed or could not reserve its place. A declaration that changes
// none of these, or the same failure again, tells nothing: the node agent
// acts on the pool (SetPool) when told, and would otherwise tell itself
// again for ever.
func TestPoolWatchTells(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int64
	var limited atomic.Bool
	next := make(chan error) // each prepare's outcome
	w := countingPools(ctx, &n)
	w.prepare = func(ctx context.Context, _ policies.Policy) (*session, error) {
		select {
		case err := <-next:
			if err != nil {
				return nil, err
			}
			return &session{rec: record{ID: fmt.Sprint(n.Add(1))}}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	w.reserve = func() error {
		if limited.Load() {
			return errors.New("session limit reached")
		}
		return nil
	}
	calls := watchCalls(t, w)
	told := func(what string) {
		t.Helper()
		select {
		case got := <-calls:
			if !slices.Equal(got, []string{"x"}) {
				t.Fatalf("%s: told of %q, want [x]", what, got)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the watcher was not told", what)
		}
	}
	notTold := func(what string) {
		t.Helper()
		select {
		case got := <-calls:
			t.Fatalf("%s: told of %q, want nothing", what, got)
		case <-time.After(200 * time.Millisecond):
		}
	}
	ready := func() []*session {
		w.mu.Lock()
		defer w.mu.Unlock()
		return slices.Clone(w.pools[poolKey(&policies.Policy{Label: "x"})].ready)
	}

	p := policies.Policy{Label: "x", Pool: &policies.Pool{Size: 2}}
	key := poolKey(&p)
	w.ensure(&p)
	notTold("a pool declared, nothing ready yet")
	next <- nil
	told("a sandbox prepared")
	next <- errors.New("image pull failed")
	told("a refill failed")
	next <- errors.New("image pull failed") // after its back-off
	notTold("the same failure again")
	next <- nil
	told("a sandbox prepared, the failure over")
	w.wg.Wait()
	w.ensure(&p)
	notTold("the full pool declared again")

	if s := w.take(key, func(*session) {}); s == nil {
		t.Fatal("nothing to take")
	}
	told("a sandbox taken")
	w.replenish(key)
	next <- nil
	told("its replacement prepared")
	w.wg.Wait()

	p.Pool.Size = 1
	w.ensure(&p)
	w.trim(ctx, key)
	told("a sandbox torn down beyond a smaller size")

	if !w.drop(ctx, ready()[0]) {
		t.Fatal("drop did not take a waiting sandbox")
	}
	told("a sandbox whose init died dropped")
	next <- nil
	told("its replacement prepared")
	w.wg.Wait()

	if !w.evict(ctx) {
		t.Fatal("nothing to evict")
	}
	told("a sandbox given up to a session")
	limited.Store(true)
	w.resume()
	told("a refill that could not reserve its place")
	w.wg.Wait()
	w.resume()
	w.wg.Wait()
	notTold("the same reservation refused again")

	if err := w.remove(ctx, key); err != nil {
		t.Fatal(err)
	}
	told("the pool removed")
	notTold("nothing more")
}

// Changes made while the watcher's call runs are gathered: a pool whose
// sandboxes all become ready meanwhile makes one more call, naming each
// changed pool once.
func TestPoolWatchGathersBursts(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int64
	w := countingPools(ctx, &n)
	gate := make(chan struct{})
	var calls atomic.Int64
	var got atomic.Pointer[[]string]
	done := make(chan struct{})
	wctx, wcancel := context.WithCancel(ctx)
	go func() {
		defer close(done)
		w.watch(wctx, func(labels []string) {
			if calls.Add(1) == 1 {
				<-gate // the first call takes long
				return
			}
			got.Store(&labels)
		})
	}()
	defer func() { wcancel(); <-done }()
	for {
		w.mu.Lock()
		registered := len(w.watchers) == 1
		w.mu.Unlock()
		if registered {
			break
		}
		time.Sleep(time.Millisecond)
	}
	// One sandbox makes the first call; the rest of x's, and y's, are
	// prepared during it.
	const size = 32
	x := policies.Policy{Label: "x", Pool: &policies.Pool{Size: 1}}
	w.ensure(&x)
	for calls.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	x.Pool.Size = size
	w.ensure(&x)
	y := policies.Policy{Label: "y", Pool: &policies.Pool{Size: size}}
	w.ensure(&y)
	for w.Waiting() < 2*size {
		time.Sleep(time.Millisecond)
	}
	w.wg.Wait()
	close(gate)
	deadline := time.Now().Add(10 * time.Second)
	for got.Load() == nil && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	if c := calls.Load(); c != 2 {
		t.Fatalf("%d sandboxes became ready in two pools, %d of them during a call: %d calls, want 2", 2*size, 2*size-1, c)
	}
	if l := got.Load(); l == nil || !slices.Equal(*l, []string{"x", "y"}) {
		t.Fatalf("the gathered call named %v, want [x y]", l)
	}
}

// A watch begun after pools changed starts by naming every pool: its
// caller, which may have acted on them before it watched (the node agent
// declares pools as it starts), misses nothing.
func TestPoolWatchNamesPoolsAtStart(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int64
	w := countingPools(ctx, &n)
	for _, l := range []string{"y", "x"} {
		p := policies.Policy{Label: l, Pool: &policies.Pool{Size: 1}}
		w.ensure(&p)
	}
	for w.Waiting() < 2 {
		time.Sleep(time.Millisecond)
	}
	w.wg.Wait()
	calls := watchCalls(t, w)
	select {
	case got := <-calls:
		if !slices.Equal(got, []string{"x", "y"}) {
			t.Fatalf("first call named %q, want [x y]", got)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a watch begun after two pools filled was not told of them")
	}
	select {
	case got := <-calls:
		t.Fatalf("then told of %q, with nothing changed", got)
	case <-time.After(200 * time.Millisecond):
	}
}
