package daemon

import (
	"context"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/log"
)

// teardownSteps runs the steps of a session's teardown, some of them side
// by side, and times each one for the debug log line "session teardown
// steps".
type teardownSteps struct {
	start time.Time
	wg    sync.WaitGroup

	mu    sync.Mutex
	attrs []any // name, duration pairs in the order the steps ended
}

func newTeardownSteps() *teardownSteps { return &teardownSteps{start: time.Now()} }

// run runs step name and records how long it took.
func (t *teardownSteps) run(name string, fn func()) {
	start := time.Now()
	fn()
	d := time.Since(start)
	t.mu.Lock()
	t.attrs = append(t.attrs, name, d)
	t.mu.Unlock()
}

// spawn runs step name in its own goroutine; wait waits for every step
// spawned.
func (t *teardownSteps) spawn(name string, fn func()) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.run(name, fn)
	}()
}

func (t *teardownSteps) wait() { t.wg.Wait() }

// log writes the steps' durations; phase tells which teardown ("exit" or
// "remove") they belong to.
func (t *teardownSteps) log(ctx context.Context, phase string) {
	t.mu.Lock()
	attrs := append([]any{"phase", phase, "total", time.Since(t.start)}, t.attrs...)
	t.mu.Unlock()
	log.G(ctx).Debug("session teardown steps", attrs...)
}
