package clock

import (
	"context"
	"testing"
	"time"
)

func TestFake(t *testing.T) {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	f := NewFake(t0)
	if !f.Now().Equal(t0) {
		t.Fatalf("Now() = %v, want %v", f.Now(), t0)
	}
	select {
	case got := <-f.After(0):
		if !got.Equal(t0) {
			t.Fatalf("After(0) sent %v", got)
		}
	default:
		t.Fatal("After(0) did not fire at once")
	}

	c1 := f.After(10 * time.Second)
	c2 := f.After(20 * time.Second)
	if n := f.Waiters(); n != 2 {
		t.Fatalf("Waiters() = %d, want 2", n)
	}
	if d, ok := f.NextWait(); !ok || d != 10*time.Second {
		t.Fatalf("NextWait() = %v, %v; want 10s, true", d, ok)
	}
	f.Advance(9 * time.Second)
	select {
	case <-c1:
		t.Fatal("waiter fired early")
	default:
	}
	f.Advance(time.Second)
	if got := <-c1; !got.Equal(t0.Add(10 * time.Second)) {
		t.Fatalf("c1 got %v", got)
	}
	select {
	case <-c2:
		t.Fatal("c2 fired early")
	default:
	}
	f.Set(t0.Add(time.Hour))
	<-c2
	if n := f.Waiters(); n != 0 {
		t.Fatalf("Waiters() = %d after firing all", n)
	}
	if _, ok := f.NextWait(); ok {
		t.Fatal("NextWait() reports a waiter")
	}
}

func TestFakeWaitForWaiters(t *testing.T) {
	f := NewFake(time.Unix(0, 0))
	done := make(chan error, 1)
	go func() { done <- f.WaitForWaiters(t.Context(), 1) }()
	f.After(time.Second)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if err := f.WaitForWaiters(ctx, 5); err == nil {
		t.Fatal("WaitForWaiters returned nil with a cancelled context")
	}
}

func TestReal(t *testing.T) {
	before := time.Now()
	if Real.Now().Before(before) {
		t.Fatal("Real.Now() is before time.Now()")
	}
	<-Real.After(time.Millisecond)
}
