package daemon

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policies"
)

// A pool refill that waits for its turn among the sandboxes being
// prepared holds no place under the session limit: it reserved one
// before it waited, and a create that came meanwhile was refused at the
// limit, although the refill prepared nothing and waited precisely for
// creates to go first (evict frees only ready sandboxes' places).
func TestQueuedRefillHoldsNoSessionPlace(t *testing.T) {
	rt := newFakeRuntime()
	rt.entered, rt.gate = make(chan string, 16), make(chan struct{})
	d := openFakeConfig(t, t.TempDir(), rt, Config{MaxPreparing: 1, PoolRefill: 1})
	pol, _ := d.admission.current()
	lim := *pol
	lim.Limits.Sessions = 3
	d.admission.swap(&lim)
	ctx := context.Background()

	pa := fakePolicy("true")
	pa.Label, pa.Pool = "pooled", &policies.Pool{Size: 1}
	resA := make(chan error, 1)
	go func() { _, err := d.Create(ctx, api.CreateRequest{Policy: pa}); resA <- err }()
	<-rt.entered // A is prepared; it holds the only place

	pb := fakePolicy("true")
	pb.Label = "b"
	resB := make(chan error, 1)
	go func() { _, err := d.Create(ctx, api.CreateRequest{Policy: pb}); resB <- err }()
	resC := make(chan error, 1)
	cStarted := false
	// Let everything held in prepare go at the end, and wait for the
	// creates: one still writing its record under the daemon's root when
	// the test returns fails the removal of the test's directory.
	defer func() {
		close(rt.gate)
		<-resB
		if cStarted {
			<-resC
		}
	}()
	waitQueued(t, d.starts, 1, 0)

	rt.gate <- struct{}{} // A done: B gets the place, A's pool starts its filler
	if err := <-resA; err != nil {
		t.Fatal(err)
	}
	<-rt.entered                  // B is prepared
	waitQueued(t, d.starts, 0, 1) // the refill waits behind, holding a session place

	pc := fakePolicy("true")
	pc.Label = "c"
	cStarted = true
	go func() { _, err := d.Create(ctx, api.CreateRequest{Policy: pc}); resC <- err }()
	deadline := time.Now().Add(5 * time.Second)
	for {
		select {
		case err := <-resC:
			cStarted = false // done
			if err != nil {
				t.Fatalf("create refused while a place under the limit is held by a refill that only waits for creates to go first: %v", err)
			}
			return
		default:
		}
		if c, _ := d.starts.waiting(); c == 1 {
			return // C was admitted and waits its turn: fixed
		}
		if time.Now().After(deadline) {
			t.Fatal("create neither refused nor queued")
		}
		time.Sleep(time.Millisecond)
	}
}
