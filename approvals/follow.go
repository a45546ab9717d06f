package approvals

import (
	"context"
	"io"
	"sync"

	"github.com/airlock-sandbox/airlock/api"
)

// Follower receives the holds and decisions published after it was made,
// in order. It buffers at most a bounded number of events: once full,
// newer events are dropped and counted, and Next reports the count (an
// api.ApprovalDropped event) where they would have been. Publishing never
// waits for a follower.
type Follower struct {
	s       *Store
	session string
	wake    chan struct{} // holds a token when there is news

	mu      sync.Mutex
	queue   []api.ApprovalEvent // +checklocks:mu
	dropped uint64              // +checklocks:mu
	closed  bool                // +checklocks:mu
}

// Follow returns a follower of the holds and decisions of session (all
// sessions when empty) and the requests pending when it was made: every
// hold is either in pending or among the follower's events, and every
// decision of a pending request is among its events. Close it when done.
func (s *Store) Follow(session string) (*Follower, []api.Approval) {
	f := &Follower{s: s, session: session, wake: make(chan struct{}, 1)}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		f.closed = true
	} else {
		s.followers[f] = struct{}{}
	}
	return f, s.listLocked(session)
}

// publishLocked hands e's hold or decision to every follower of its
// session.
func (s *Store) publishLocked(typ string, e *entry) {
	if len(s.followers) == 0 {
		return
	}
	a := e.a
	ev := api.ApprovalEvent{Type: typ, Approval: &a}
	for f := range s.followers {
		if f.session == "" || f.session == a.Session {
			f.push(ev)
		}
	}
}

func (f *Follower) push(ev api.ApprovalEvent) {
	f.mu.Lock()
	switch {
	case f.closed:
	case len(f.queue) < followBuffer:
		f.queue = append(f.queue, ev)
	default:
		f.dropped++
	}
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}

// Next returns the next event, waiting for one. It returns io.EOF once
// the follower or its store is closed and every event before is read, and
// ctx's error when ctx is done first.
func (f *Follower) Next(ctx context.Context) (api.ApprovalEvent, error) {
	for {
		f.mu.Lock()
		switch {
		case len(f.queue) > 0:
			ev := f.queue[0]
			f.queue[0] = api.ApprovalEvent{}
			f.queue = f.queue[1:]
			f.mu.Unlock()
			return ev, nil
		case f.dropped > 0:
			n := f.dropped
			f.dropped = 0
			f.mu.Unlock()
			return api.ApprovalEvent{Type: api.ApprovalDropped, Dropped: n}, nil
		case f.closed:
			f.mu.Unlock()
			return api.ApprovalEvent{}, io.EOF
		}
		f.mu.Unlock()
		select {
		case <-f.wake:
		case <-ctx.Done():
			return api.ApprovalEvent{}, ctx.Err()
		}
	}
}

// Close stops the follower: nothing more is queued, and Next returns
// io.EOF once the events already queued are read.
func (f *Follower) Close() {
	f.s.mu.Lock()
	delete(f.s.followers, f)
	f.s.mu.Unlock()
	f.mu.Lock()
	f.closed = true
	f.mu.Unlock()
	select {
	case f.wake <- struct{}{}:
	default:
	}
}
