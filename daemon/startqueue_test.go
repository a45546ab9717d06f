package daemon

import (
	"context"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/metrics"
)

// waitQueued waits until q has creates and refills waiting.
func waitQueued(t *testing.T, q *startQueue, creates, refills int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, r := q.waiting()
		if c == creates && r == refills {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting: %d creates, %d refills; want %d and %d", c, r, creates, refills)
		}
		time.Sleep(time.Millisecond)
	}
}

// Creates get their places in the order they came, before any refill;
// refills then in theirs.
func TestStartQueueOrder(t *testing.T) {
	q := newStartQueue(1)
	ctx := context.Background()
	_, hold, err := q.acquire(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var order []string
	var wg sync.WaitGroup
	enqueue := func(name string, refill bool, creates, refills int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			waited, release, err := q.acquire(ctx, refill)
			if err != nil {
				t.Error(err)
				return
			}
			if waited <= 0 {
				t.Errorf("%s: waited %v for a place that was taken", name, waited)
			}
			mu.Lock()
			order = append(order, name)
			mu.Unlock()
			release()
		}()
		waitQueued(t, q, creates, refills)
	}
	enqueue("refill1", true, 0, 1)
	enqueue("create1", false, 1, 1)
	enqueue("refill2", true, 1, 2)
	enqueue("create2", false, 2, 2)
	enqueue("create3", false, 3, 2)
	hold()
	hold() // a second release gives nothing back
	wg.Wait()
	want := []string{"create1", "create2", "create3", "refill1", "refill2"}
	if len(order) != len(want) {
		t.Fatalf("order %v, want %v", order, want)
	}
	for i := range want {
		if order[i] != want[i] {
			t.Fatalf("order %v, want %v", order, want)
		}
	}
	if q.running != 0 {
		t.Fatalf("%d places still taken", q.running)
	}
}

// Under a storm of acquires, some given up by their callers while they
// wait, no more than the bound hold a place at once, and every place
// comes back: the ones handed to a caller that had just given up
// included.
func TestStartQueueBoundAndCancel(t *testing.T) {
	const limit = 3
	q := newStartQueue(limit)
	var holding, most atomic.Int32
	var wg sync.WaitGroup
	for i := range 400 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if i%3 == 0 {
				time.AfterFunc(time.Duration(rand.IntN(200))*time.Microsecond, cancel)
			}
			_, release, err := q.acquire(ctx, i%5 == 0)
			if err != nil {
				if release != nil {
					t.Error("a failed acquire returned a release")
				}
				return
			}
			n := holding.Add(1)
			for {
				m := most.Load()
				if n <= m || most.CompareAndSwap(m, n) {
					break
				}
			}
			time.Sleep(time.Duration(rand.IntN(100)) * time.Microsecond)
			holding.Add(-1)
			release()
		}()
	}
	wg.Wait()
	if m := most.Load(); m > limit {
		t.Fatalf("%d held a place at once, bound %d", m, limit)
	}
	if c, r := q.waiting(); q.running != 0 || c != 0 || r != 0 {
		t.Fatalf("after the storm: %d places taken, %d creates and %d refills waiting", q.running, c, r)
	}
	// Every place is there to take.
	for range limit {
		if _, _, err := q.acquire(context.Background(), false); err != nil {
			t.Fatal(err)
		}
	}
}

// A daemon with one place: a second cold create waits while the first
// is prepared, says so in its response, in the metrics while it waits and
// after; a create given up while it waits leaves nothing behind.
func TestCreateWaitsForAPlace(t *testing.T) {
	rt := newFakeRuntime()
	rt.entered, rt.gate = make(chan string, 4), make(chan struct{})
	m := metrics.New()
	d := openFakeConfig(t, t.TempDir(), rt, Config{MaxPreparing: 1, Metrics: m})
	type result struct {
		v   *api.Session
		err error
	}
	first, second := make(chan result, 1), make(chan result, 1)
	go func() {
		v, err := d.Create(context.Background(), api.CreateRequest{Policy: fakePolicy("true")})
		first <- result{v, err}
	}()
	<-rt.entered // the first is being prepared
	go func() {
		v, err := d.Create(context.Background(), api.CreateRequest{Policy: fakePolicy("true")})
		second <- result{v, err}
	}()
	waitQueued(t, d.starts, 1, 0)
	if got := metricOf(t, m, "airlock_session_start_queue_length", metrics.QueueCreate); got != 1 {
		t.Errorf("airlock_session_start_queue_length{kind=create} = %v while one waits", got)
	}
	// A third, given up while it waits.
	ctx, cancel := context.WithCancel(context.Background())
	third := make(chan error, 1)
	go func() {
		_, err := d.Create(ctx, api.CreateRequest{Policy: fakePolicy("true")})
		third <- err
	}()
	waitQueued(t, d.starts, 2, 0)
	cancel()
	if err := <-third; err == nil {
		t.Fatal("a create given up while it waited succeeded")
	}
	waitQueued(t, d.starts, 1, 0)
	time.Sleep(20 * time.Millisecond) // the second's wait is measurable
	rt.gate <- struct{}{}
	r1 := <-first
	if r1.err != nil {
		t.Fatal(r1.err)
	}
	<-rt.entered // the second's turn
	rt.gate <- struct{}{}
	r2 := <-second
	if r2.err != nil {
		t.Fatal(r2.err)
	}
	if r1.v.Queued != 0 || r2.v.Queued.Std() < 20*time.Millisecond {
		t.Errorf("queued: first %v, second %v; want 0 and at least 20ms", r1.v.Queued, r2.v.Queued)
	}
	if got := metricOf(t, m, "airlock_session_start_queue_length", metrics.QueueCreate); got != 0 {
		t.Errorf("airlock_session_start_queue_length{kind=create} = %v after the creates", got)
	}
	// The three waits: none, the second's, the one given up.
	if got := metricOf(t, m, "airlock_session_start_queue_seconds", metrics.QueueCreate); got != 3 {
		t.Errorf("airlock_session_start_queue_seconds{kind=create} counted %v waits, want 3", got)
	}
	if list := d.List(context.Background()); len(list) != 2 {
		t.Errorf("%d sessions after two creates and one given up, want 2", len(list))
	}
	if entries, err := os.ReadDir(filepath.Join(d.cfg.Root, "sessions")); err != nil || len(entries) != 2 {
		t.Errorf("session directories: %d (%v), want 2", len(entries), err)
	}
}

// metricOf reads the series of family name with label kind: a gauge's
// value, or a histogram's count.
func metricOf(t *testing.T, m *metrics.Metrics, name, kind string) float64 {
	t.Helper()
	families, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, mt := range f.GetMetric() {
			if labelOf(mt, "kind") != kind {
				continue
			}
			if h := mt.GetHistogram(); h != nil {
				return float64(h.GetSampleCount())
			}
			return mt.GetGauge().GetValue()
		}
	}
	t.Fatalf("no series %s{kind=%q}", name, kind)
	return 0
}

func labelOf(m *dto.Metric, name string) string {
	for _, l := range m.GetLabel() {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}
