package dnsproxy

import (
	"context"
	"slices"
	"sync"
	"time"
)

// queryContext is a query's context: its parent with the query's deadline
// and the query's request state. It behaves as context.WithDeadline and
// context.WithValue but costs nothing for a query that never waits on
// Done: most queries (cache hits) only check Err, and context.WithDeadline
// would start a timer and register with the parent for each. The timer
// and the registration start on the first Done or AfterFunc.
type queryContext struct {
	context.Context // the parent: other values, and cancellation

	deadline time.Time
	req      *request

	mu   sync.Mutex
	err  error         // +checklocks:mu
	done chan struct{} // +checklocks:mu; made by the first Done
	// timer and stopParent end the query at its deadline or with its
	// parent, once started.
	timer      *time.Timer       // +checklocks:mu
	stopParent func() bool       // +checklocks:mu
	afterFuncs []*queryAfterFunc // +checklocks:mu
}

type queryAfterFunc struct{ f func() }

func newQueryContext(parent context.Context, deadline time.Time, req *request) *queryContext {
	c := new(queryContext)
	c.init(parent, deadline, req)
	return c
}

// init sets up a zero queryContext, as newQueryContext returns it.
func (c *queryContext) init(parent context.Context, deadline time.Time, req *request) {
	if d, ok := parent.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	c.Context, c.deadline, c.req = parent, deadline, req
}

// query is a query's state, allocated at once: its context and the
// request state the context carries.
type query struct {
	ctx queryContext
	req request
}

// Deadline implements context.Context.
func (c *queryContext) Deadline() (time.Time, bool) { return c.deadline, true }

// Value implements context.Context: the request state for requestKey.
func (c *queryContext) Value(key any) any {
	if key == (requestKey{}) {
		return c.req
	}
	return c.Context.Value(key)
}

// Err implements context.Context: the parent's error once it is done,
// DeadlineExceeded once the deadline has passed, Canceled after release.
func (c *queryContext) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		if err := c.Context.Err(); err != nil {
			c.endLocked(err)
		} else if !time.Now().Before(c.deadline) {
			c.endLocked(context.DeadlineExceeded)
		}
	}
	return c.err
}

// Done implements context.Context.
func (c *queryContext) Done() <-chan struct{} {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.startLocked()
	return c.done
}

// AfterFunc arranges for f to run in its own goroutine once c is done, as
// context.AfterFunc does; contexts derived from c use it to learn of c's
// end without a goroutine of their own.
func (c *queryContext) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.startLocked()
	a := &queryAfterFunc{f: f}
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	c.afterFuncs = append(c.afterFuncs, a)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.afterFuncs, a)
		if i < 0 {
			return false
		}
		c.afterFuncs = slices.Delete(c.afterFuncs, i, i+1)
		return true
	}
}

// release ends the query: c is canceled if it was not done yet, and its
// timer and its registration with the parent, if any, are dropped.
func (c *queryContext) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.endLocked(context.Canceled)
	}
}

// startLocked makes the done channel and, unless c has ended already,
// the timer and the parent registration that will close it.
func (c *queryContext) startLocked() {
	if c.done != nil {
		return
	}
	c.done = make(chan struct{})
	if c.err == nil {
		// Find out first whether c has ended by now.
		if err := c.Context.Err(); err != nil {
			c.err = err
		} else if !time.Now().Before(c.deadline) {
			c.err = context.DeadlineExceeded
		}
	}
	if c.err != nil {
		close(c.done)
		return
	}
	c.timer = time.AfterFunc(time.Until(c.deadline), func() { c.end(context.DeadlineExceeded) })
	c.stopParent = context.AfterFunc(c.Context, func() { c.end(c.Context.Err()) })
}

func (c *queryContext) end(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.endLocked(err)
	}
}

// endLocked records why c ended and, if anyone may be waiting, tells
// them. Preconditions: c.err is nil.
func (c *queryContext) endLocked(err error) {
	c.err = err
	if c.done == nil {
		return
	}
	close(c.done)
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.stopParent != nil {
		c.stopParent()
	}
	for _, a := range c.afterFuncs {
		go a.f()
	}
	c.afterFuncs = nil
}
