// Package clock is the time source of the credentials packages. Expiry,
// rotation and refresh all read time through a Clock, so tests drive them
// with a Fake instead of sleeping.
package clock

import (
	"context"
	"sync"
	"time"
)

// Clock tells the time and waits.
type Clock interface {
	Now() time.Time
	// After waits for d to elapse and then sends the current time on the
	// returned channel, like time.After.
	After(d time.Duration) <-chan time.Time
}

// Real is the system clock.
var Real Clock = realClock{}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Fake is a Clock that moves only when told to. It is safe for concurrent use.
type Fake struct {
	mu sync.Mutex
	// +checklocks:mu
	now time.Time
	// +checklocks:mu
	waiters []waiter
	// +checklocks:mu
	changed chan struct{} // closed and replaced when waiters change
}

type waiter struct {
	at time.Time
	c  chan time.Time
}

// NewFake returns a Fake set to t.
func NewFake(t time.Time) *Fake {
	return &Fake{now: t, changed: make(chan struct{})}
}

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// After returns a channel that receives the fake time once Advance or Set has
// moved it d or more past the time of the call. A d <= 0 fires at once.
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	c := make(chan time.Time, 1)
	if d <= 0 {
		c <- f.now
		return c
	}
	f.waiters = append(f.waiters, waiter{at: f.now.Add(d), c: c})
	f.notifyLocked()
	return c
}

// Advance moves the clock forward by d and fires the waiters that are due.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(f.now.Add(d))
}

// Set moves the clock to t (which may be in the past) and fires the waiters
// that are due.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(t)
}

// +checklocks:f.mu
func (f *Fake) setLocked(t time.Time) {
	f.now = t
	kept := f.waiters[:0]
	for _, w := range f.waiters {
		if !w.at.After(t) {
			w.c <- t
			continue
		}
		kept = append(kept, w)
	}
	clear(f.waiters[len(kept):])
	f.waiters = kept
	f.notifyLocked()
}

// +checklocks:f.mu
func (f *Fake) notifyLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Waiters returns the number of pending After calls.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// NextWait returns how far the earliest pending waiter is from now, and
// false if there is none.
func (f *Fake) NextWait() (time.Duration, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.waiters) == 0 {
		return 0, false
	}
	first := f.waiters[0].at
	for _, w := range f.waiters[1:] {
		if w.at.Before(first) {
			first = w.at
		}
	}
	return first.Sub(f.now), true
}

// WaitForWaiters blocks until at least n After calls are pending or ctx is
// done.
func (f *Fake) WaitForWaiters(ctx context.Context, n int) error {
	for {
		f.mu.Lock()
		ok, ch := len(f.waiters) >= n, f.changed
		f.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
