package credentials

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/credentials/clock"
	"github.com/airlock-sandbox/airlock/credentials/token"
)

func TestRefreshAfter(t *testing.T) {
	tests := []struct {
		left    time.Duration
		minWait time.Duration
		want    time.Duration
	}{
		{10 * time.Minute, time.Second, 5 * time.Minute},
		{15 * time.Minute, time.Second, 7*time.Minute + 30*time.Second},
		{time.Second, time.Second, time.Second},
		{0, time.Second, time.Second},
		{-time.Minute, 2 * time.Second, 2 * time.Second},
	}
	for _, tt := range tests {
		if got := RefreshAfter(t0, t0.Add(tt.left), tt.minWait); got != tt.want {
			t.Errorf("RefreshAfter(left %s, min %s) = %s, want %s", tt.left, tt.minWait, got, tt.want)
		}
	}
}

// fakeMint hands out credentials that live ttl from the fake clock's now,
// failing while fail is set.
type fakeMint struct {
	clock *clock.Fake
	ttl   time.Duration

	mu      sync.Mutex
	fail    error
	n       int
	written []string
}

func (f *fakeMint) refresh(context.Context) (*Credential, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return nil, f.fail
	}
	f.n++
	now := f.clock.Now()
	return &Credential{Name: "git", ID: fmt.Sprint(f.n), Token: token.Secret(fmt.Sprint("tok-", f.n)), IssuedAt: now, Expiry: now.Add(f.ttl)}, nil
}

func (f *fakeMint) write(_ context.Context, c *Credential) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.written = append(f.written, c.ID)
	return nil
}

func (f *fakeMint) setFail(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail = err
}

func (f *fakeMint) writes() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.written)
}

// step waits for the refresher to block on the clock and returns how long
// it waits.
func step(t *testing.T, fc *clock.Fake) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := fc.WaitForWaiters(ctx, 1); err != nil {
		t.Fatal("refresher did not wait on the clock")
	}
	d, _ := fc.NextWait()
	return d
}

func TestRefresherRun(t *testing.T) {
	fc := clock.NewFake(t0)
	fm := &fakeMint{clock: fc, ttl: 10 * time.Minute}
	r := &Refresher{Refresh: fm.refresh, Write: fm.write, Clock: fc, MaxBackoff: 8 * time.Second}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- r.Run(ctx, &Credential{Name: "git", Expiry: t0.Add(10 * time.Minute)})
	}()

	// Refresh at half the remaining life, and again for the successor.
	if d := step(t, fc); d != 5*time.Minute {
		t.Fatalf("first wait %s, want 5m", d)
	}
	fc.Advance(5 * time.Minute)
	if d := step(t, fc); d != 5*time.Minute {
		t.Fatalf("wait after refresh %s, want 5m", d)
	}
	if w := fm.writes(); !slices.Equal(w, []string{"1"}) {
		t.Fatalf("writes %v", w)
	}

	// Failures back off exponentially up to MaxBackoff.
	fm.setFail(errors.New("issuer down"))
	fc.Advance(5 * time.Minute)
	var waits []time.Duration
	for range 5 {
		d := step(t, fc)
		waits = append(waits, d)
		fc.Advance(d)
	}
	d := step(t, fc)
	waits = append(waits, d)
	if want := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second, 8 * time.Second}; !slices.Equal(waits, want) {
		t.Fatalf("backoff %v, want %v", waits, want)
	}

	// Recovery: the next attempt succeeds and the schedule resumes.
	fm.setFail(nil)
	fc.Advance(d)
	if d := step(t, fc); d != 5*time.Minute {
		t.Fatalf("wait after recovery %s, want 5m", d)
	}
	if w := fm.writes(); !slices.Equal(w, []string{"1", "2"}) {
		t.Fatalf("writes %v", w)
	}

	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Run = %v, want context.Canceled", err)
	}
}

func TestRefresherBackoffBeforeExpiry(t *testing.T) {
	fc := clock.NewFake(t0)
	fm := &fakeMint{clock: fc, ttl: time.Minute}
	fm.setFail(errors.New("down"))
	r := &Refresher{Refresh: fm.refresh, Write: fm.write, Clock: fc, MaxBackoff: time.Hour}
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	defer func() { cancel(); <-done }()
	go func() { done <- r.Run(ctx, &Credential{Name: "git", Expiry: t0.Add(40 * time.Second)}) }()

	var waits []time.Duration
	for range 12 {
		d := step(t, fc)
		waits = append(waits, d)
		fc.Advance(d)
	}
	// Half of the 40s, then backoff 1s, 2s, 4s; then half of the remaining
	// life caps it (13s left: 6.5s, 3.25s, 1.625s) down to MinWait; after
	// expiry the backoff doubles again from the last wait.
	want := []time.Duration{
		20 * time.Second, time.Second, 2 * time.Second, 4 * time.Second,
		6500 * time.Millisecond, 3250 * time.Millisecond, 1625 * time.Millisecond, time.Second,
		time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second,
	}
	if !slices.Equal(waits, want) {
		t.Fatalf("waits %v, want %v", waits, want)
	}
}

func TestRefresherStopsWhenRevoked(t *testing.T) {
	fc := clock.NewFake(t0)
	fm := &fakeMint{clock: fc, ttl: time.Minute}
	fm.setFail(fmt.Errorf("session s: %w", errdefs.ErrNotFound))
	r := &Refresher{Refresh: fm.refresh, Write: fm.write, Clock: fc}
	done := make(chan error, 1)
	go func() { done <- r.Run(t.Context(), &Credential{Expiry: t0.Add(time.Minute)}) }()
	fc.Advance(step(t, fc))
	if err := <-done; !errdefs.IsNotFound(err) {
		t.Fatalf("Run = %v, want NotFound", err)
	}
}

// TestBrokerRefresherDelivers runs the broker's refresher with FileWriter:
// the file is replaced with each new token, stays 0400, and the refresher
// stops after the session is revoked.
func TestBrokerRefresherDelivers(t *testing.T) {
	h := newHarness(t)
	dir := t.TempDir()
	cred := h.mint(t, "s-1", gitReq)[0]
	write := FileWriter(dir, os.Getuid(), os.Getgid())
	if err := write(h.ctx, cred); err != nil {
		t.Fatal(err)
	}
	r := h.broker.Refresher("s-1", "git", write)
	done := make(chan error, 1)
	go func() { done <- r.Run(h.ctx, cred) }()

	path := filepath.Join(dir, "git")
	for i := range 2 {
		d := step(t, h.clock)
		if want := 7*time.Minute + 30*time.Second; d != want {
			t.Fatalf("refresh %d: wait %s, want %s", i, d, want)
		}
		before, _ := os.ReadFile(path)
		h.clock.Advance(d)
		step(t, h.clock)
		after, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if string(after) == string(before) {
			t.Fatalf("refresh %d did not replace the file", i)
		}
		if res := h.broker.Introspect(h.ctx, string(after)); !res.Active {
			t.Fatalf("delivered token inactive: %+v", res)
		}
		fi, _ := os.Stat(path)
		if fi.Mode().Perm() != 0o400 {
			t.Fatalf("mode %#o", fi.Mode().Perm())
		}
	}

	h.broker.Revoke(h.ctx, "s-1")
	h.clock.Advance(step(t, h.clock))
	if err := <-done; !errdefs.IsNotFound(err) {
		t.Fatalf("Run after revoke = %v, want NotFound", err)
	}
}

func TestEnviron(t *testing.T) {
	c := &Credential{Token: "tok", Env: map[string]token.Secret{"B": "2", "A": "1"}}
	if got, want := Environ(c, "GIT_TOKEN"), []string{"GIT_TOKEN=tok", "A=1", "B=2"}; !slices.Equal(got, want) {
		t.Fatalf("Environ = %q, want %q", got, want)
	}
	if got := Environ(c, ""); !slices.Equal(got, []string{"A=1", "B=2"}) {
		t.Fatalf("Environ without var = %q", got)
	}
}
