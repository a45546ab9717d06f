package runner

import (
	"context"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/bench/catalog"
)

// TestAgentAttackPacerHang: an agent that drops its pending model call
// (a client-side timeout) and asks again does not hold the runner past its
// timeout: each call has its own answer, which never waits for a pace
// that is gone.
func TestAgentAttackPacerHang(t *testing.T) {
	p := &agentProc{actions: []catalog.Action{{ID: "a0"}, {ID: "a1"}}, arrive: make(chan arrival),
		quit: make(chan struct{}), done: make(chan struct{})}
	defer close(p.done) // the "agent" ends with the test
	// The agent's first model call arrives, and is dropped before the
	// runner answers it.
	rctx, rcancel := context.WithCancel(t.Context())
	paced := make(chan bool)
	go func() { paced <- p.pace(rctx, 0, nil) }()
	a, err := p.await(t.Context(), time.Second)
	if err != nil {
		t.Fatal(err)
	}
	p.pending = &a
	rcancel()
	<-paced
	// The agent retries the same step, and keeps its request open.
	go p.pace(t.Context(), 0, nil)

	ret := make(chan error, 1)
	go func() {
		_, err := p.run(t.Context(), p.actions[0], time.Second)
		ret <- err
	}()
	select {
	case err := <-ret:
		if err == nil {
			t.Logf("run returned after the retry")
		}
	case <-time.After(5 * time.Second):
		t.Errorf("run with a 1s timeout has not returned after 5s (it waits for a pace that is gone)")
	}
	close(p.quit) // lets the retry's pace go
}
