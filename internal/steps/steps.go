// Package steps times the steps of a multi-step operation (a sandbox's
// preparation, a session's teardown), some of them run side by side, for
// one debug log line that names every step with its duration.
package steps

import (
	"context"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/internal/log"
)

// Timer records how long each step took. Its methods may be called from
// several goroutines.
type Timer struct {
	start time.Time
	wg    sync.WaitGroup

	mu    sync.Mutex
	last  time.Time // +checklocks:mu
	attrs []any     // +checklocks:mu
}

// New starts a Timer.
func New() *Timer {
	now := time.Now()
	return &Timer{start: now, last: now}
}

func (t *Timer) record(name string, d time.Duration) {
	t.mu.Lock()
	t.attrs = append(t.attrs, name, d.Round(10*time.Microsecond))
	t.mu.Unlock()
}

// Run runs step name and records how long it took.
func (t *Timer) Run(name string, fn func()) {
	begin := time.Now()
	fn()
	t.record(name, time.Since(begin))
}

// Go runs step name in its own goroutine; Wait waits for every step
// started by Go.
func (t *Timer) Go(name string, fn func()) {
	t.wg.Add(1)
	go func() {
		defer t.wg.Done()
		t.Run(name, fn)
	}()
}

// Wait waits for the steps started by Go.
func (t *Timer) Wait() { t.wg.Wait() }

// Track starts timing a step that runs beside others; calling the
// returned function records it.
func (t *Timer) Track(name string) func() {
	begin := time.Now()
	return func() { t.record(name, time.Since(begin)) }
}

// Mark records the time since the previous Mark (or the start) as step
// name, for steps run one after another.
func (t *Timer) Mark(name string) {
	t.mu.Lock()
	now := time.Now()
	t.attrs = append(t.attrs, name, now.Sub(t.last).Round(10*time.Microsecond))
	t.last = now
	t.mu.Unlock()
}

// Log writes one debug line: msg, then attrs, the total time and every
// step's duration in the order the steps ended.
func (t *Timer) Log(ctx context.Context, msg string, attrs ...any) {
	t.mu.Lock()
	all := append(append(append([]any{}, attrs...), "total", time.Since(t.start).Round(10*time.Microsecond)), t.attrs...)
	t.mu.Unlock()
	log.G(ctx).Debug(msg, all...)
}
