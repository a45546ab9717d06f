package dnsproxy

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"
)

type ctxKey string

func closedWithin(ch <-chan struct{}, d time.Duration) bool {
	select {
	case <-ch:
		return true
	case <-time.After(d):
		return false
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func TestQueryContextErrOnly(t *testing.T) {
	parent := context.WithValue(t.Context(), ctxKey("k"), "v")
	req := &request{proto: "udp"}
	deadline := time.Now().Add(50 * time.Millisecond)
	q := newQueryContext(parent, deadline, req)
	if d, ok := q.Deadline(); !ok || !d.Equal(deadline) {
		t.Errorf("Deadline() = %v, %v; want %v", d, ok, deadline)
	}
	if requestFrom(q) != req || q.Value(ctxKey("k")) != "v" {
		t.Error("values of the query or of its parent are lost")
	}
	if err := q.Err(); err != nil {
		t.Fatalf("Err() before the deadline = %v", err)
	}
	time.Sleep(time.Until(deadline) + 5*time.Millisecond)
	if err := q.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Err() after the deadline = %v", err)
	}
	q.mu.Lock()
	started := q.done != nil || q.timer != nil || q.stopParent != nil
	q.mu.Unlock()
	if started {
		t.Error("Err alone started a timer or registered with the parent")
	}
	// Done, asked after Err reported the end, is closed at once.
	if !isClosed(q.Done()) {
		t.Error("Done() open after Err() reported DeadlineExceeded")
	}
	q.release()
	if err := q.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("release changed Err() to %v", err)
	}
}

func TestQueryContextDoneAtDeadline(t *testing.T) {
	q := newQueryContext(t.Context(), time.Now().Add(30*time.Millisecond), nil)
	defer q.release()
	done := q.Done()
	if isClosed(done) || q.Err() != nil {
		t.Fatal("done before the deadline")
	}
	if !closedWithin(done, 5*time.Second) {
		t.Fatal("Done() not closed after the deadline")
	}
	if err := q.Err(); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Err() = %v", err)
	}
	if !errors.Is(context.Cause(q), context.DeadlineExceeded) {
		t.Errorf("context.Cause = %v", context.Cause(q))
	}
}

func TestQueryContextParent(t *testing.T) {
	for _, waitOnDone := range []bool{true, false} {
		parent, cancel := context.WithCancel(t.Context())
		q := newQueryContext(parent, time.Now().Add(time.Hour), nil)
		var done <-chan struct{}
		if waitOnDone {
			done = q.Done()
		}
		cancel()
		if waitOnDone && !closedWithin(done, 5*time.Second) {
			t.Fatal("Done() not closed when the parent was canceled")
		}
		if err := q.Err(); !errors.Is(err, context.Canceled) {
			t.Errorf("waitOnDone=%v: Err() = %v, want Canceled", waitOnDone, err)
		}
		if !isClosed(q.Done()) {
			t.Errorf("waitOnDone=%v: Done() open after the parent was canceled", waitOnDone)
		}
		q.release()
	}

	// A parent's earlier deadline is the query's.
	parent, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	pd, _ := parent.Deadline()
	q := newQueryContext(parent, time.Now().Add(time.Hour), nil)
	if d, _ := q.Deadline(); !d.Equal(pd) {
		t.Errorf("Deadline() = %v, want the parent's %v", d, pd)
	}
}

func TestQueryContextReleaseEndsChildren(t *testing.T) {
	q := newQueryContext(t.Context(), time.Now().Add(time.Hour), nil)
	child, cancel := context.WithTimeout(q, time.Minute)
	defer cancel()
	var ran sync.WaitGroup
	ran.Add(1)
	context.AfterFunc(q, ran.Done)
	stopped := context.AfterFunc(q, func() { t.Error("a stopped AfterFunc ran") })
	if !stopped() {
		t.Fatal("stop of a pending AfterFunc returned false")
	}
	if child.Err() != nil || isClosed(child.Done()) {
		t.Fatal("child done before its parent")
	}
	q.release()
	if err := q.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("Err() after release = %v", err)
	}
	if !closedWithin(child.Done(), 5*time.Second) {
		t.Fatal("a child of the query outlived it")
	}
	if err := child.Err(); !errors.Is(err, context.Canceled) {
		t.Errorf("child Err() = %v", err)
	}
	ran.Wait()
	q.mu.Lock()
	timerRuns := q.timer != nil && q.timer.Stop()
	q.mu.Unlock()
	if timerRuns {
		t.Error("the deadline timer still runs after release")
	}
	// An AfterFunc registered after the end runs at once.
	ch := make(chan struct{})
	if stop := q.AfterFunc(func() { close(ch) }); stop() {
		t.Error("stop after the end returned true")
	}
	if !closedWithin(ch, 5*time.Second) {
		t.Error("AfterFunc after the end did not run")
	}
}

func TestQueryContextConcurrent(t *testing.T) {
	for range 50 {
		parent, cancel := context.WithCancel(t.Context())
		q := newQueryContext(parent, time.Now().Add(time.Millisecond), nil)
		var wg sync.WaitGroup
		for i := range 4 {
			wg.Go(func() {
				switch i {
				case 0:
					<-q.Done()
				case 1:
					for q.Err() == nil {
						time.Sleep(100 * time.Microsecond)
					}
				case 2:
					c, cc := context.WithCancel(q)
					<-c.Done()
					cc()
				case 3:
					cancel()
				}
			})
		}
		wg.Wait()
		cancel()
		if !isClosed(q.Done()) || q.Err() == nil {
			t.Fatal("query not done")
		}
		q.release()
	}
}
