package daemon

import (
	"context"
	"sync"
	"time"
)

// startQueue bounds how many sandboxes are prepared at once. Preparing one
// is the container runtime's work (runc and its init: about 200 ms of CPU
// each on runc), so on a machine of few cores a burst of creates all
// prepared at once shares the CPU among all of them: a hundred started
// together each took 9 s (median), every one finishing near the end of
// the burst. Queued, they start in the order they came, most of them much
// sooner, the rate no lower, and each create knows how long it waited.
//
// Creates go before pool refills: a refill waits while a create does, so
// that a burst that drained the pools is not held up by their refilling.
type startQueue struct {
	mu      sync.Mutex
	limit   int             // places; 0: no bound
	running int             // +checklocks:mu
	creates []chan struct{} // +checklocks:mu: waiting creates, oldest first
	refills []chan struct{} // +checklocks:mu: waiting refills, oldest first
}

func newStartQueue(limit int) *startQueue {
	return &startQueue{limit: max(limit, 0)}
}

// acquire waits for a place, creates before refills and each in the order
// they came, and returns how long it waited and the function that gives
// the place back (once). It fails only when ctx ends first.
func (q *startQueue) acquire(ctx context.Context, refill bool) (time.Duration, func(), error) {
	q.mu.Lock()
	if q.limit == 0 || q.running < q.limit && len(q.creates) == 0 && (refill && len(q.refills) == 0 || !refill) {
		q.running++
		q.mu.Unlock()
		return 0, q.releaser(), nil
	}
	began := time.Now()
	ready := make(chan struct{})
	if refill {
		q.refills = append(q.refills, ready)
	} else {
		q.creates = append(q.creates, ready)
	}
	q.mu.Unlock()
	select {
	case <-ready:
		return time.Since(began), q.releaser(), nil
	case <-ctx.Done():
		q.mu.Lock()
		defer q.mu.Unlock()
		if q.remove(ready, refill) {
			return time.Since(began), nil, ctx.Err()
		}
		// Handed a place as ctx ended: give it on.
		q.running--
		q.handOnLocked()
		return time.Since(began), nil, ctx.Err()
	}
}

// remove takes a waiter out of its line; false if it was handed a place.
func (q *startQueue) remove(ready chan struct{}, refill bool) bool {
	line := &q.creates
	if refill {
		line = &q.refills
	}
	for i, c := range *line {
		if c == ready {
			*line = append((*line)[:i], (*line)[i+1:]...)
			return true
		}
	}
	return false
}

func (q *startQueue) releaser() func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			q.mu.Lock()
			defer q.mu.Unlock()
			q.running--
			q.handOnLocked()
		})
	}
}

// handOnLocked gives free places to the waiters, creates first.
func (q *startQueue) handOnLocked() {
	for q.limit > 0 && q.running < q.limit {
		var next chan struct{}
		switch {
		case len(q.creates) > 0:
			next, q.creates = q.creates[0], q.creates[1:]
		case len(q.refills) > 0:
			next, q.refills = q.refills[0], q.refills[1:]
		default:
			return
		}
		q.running++
		close(next)
	}
}

// waiting reports the creates and refills waiting for a place.
func (q *startQueue) waiting() (creates, refills int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.creates), len(q.refills)
}
