package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// readAudit returns the events in dir's audit log.
func readAudit(t *testing.T, dir string) []api.AuditEvent {
	t.Helper()
	f, err := os.Open(filepath.Join(dir, File))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var evs []api.AuditEvent
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var ev api.AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		evs = append(evs, ev)
	}
	return evs
}

// fakeClock is a settable clock for the audit log.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestAuditMergesIdenticalDecisions(t *testing.T) {
	dir := t.TempDir()
	clk := &fakeClock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)}
	a := New(dir, 1<<20)
	a.now = clk.now
	a.window = 10 * time.Second
	t.Cleanup(func() { _ = a.Close() })
	ctx := discardCtx()
	refused := func(name string, at time.Time) api.AuditEvent {
		return api.AuditEvent{Time: at, Session: "s1", Layer: "dns", Action: "refused", Subject: name,
			Reason: "airlock: " + name + " is not in the egress allowlist", Fields: map[string]any{"type": "A", "rcode": "REFUSED"}}
	}
	t0 := clk.t
	// 100 identical refusals in 5s, interleaved with another name and with
	// a record event, which is never merged.
	for i := range 100 {
		at := t0.Add(time.Duration(i) * 50 * time.Millisecond)
		a.EmitDecision(ctx, refused("evil.test", at))
		if i%50 == 0 {
			a.EmitDecision(ctx, refused("other.test", at))
			a.Emit(ctx, api.AuditEvent{Time: at, Session: "s1", Layer: "http", Action: "request", Subject: "GET /"})
			a.Emit(ctx, api.AuditEvent{Time: at, Session: "s1", Layer: "http", Action: "request", Subject: "GET /"})
		}
	}
	// A different field is a different decision.
	ev := refused("evil.test", t0.Add(time.Second))
	ev.Fields["type"] = "AAAA"
	a.EmitDecision(ctx, ev)

	evs := readAudit(t, dir)
	count := map[string]int{}
	for _, ev := range evs {
		count[ev.Layer+" "+ev.Subject]++
	}
	if count["dns evil.test"] != 2 || count["dns other.test"] != 1 || count["http GET /"] != 4 {
		t.Fatalf("before the window ends: %v; want evil.test twice (A, AAAA), other.test once, every request", count)
	}

	// The window ends: one event stands for the 99 merged repeats.
	clk.t = t0.Add(11 * time.Second)
	a.tick()
	evs = readAudit(t, dir)
	merged := map[string]api.AuditEvent{}
	for _, ev := range evs {
		if ev.Fields["repeated"] != nil {
			merged[ev.Subject+" "+ev.Fields["type"].(string)] = ev
		}
	}
	if len(merged) != 2 || merged["other.test A"].Fields["repeated"] != float64(1) {
		t.Fatalf("merged events %v, want evil.test A and other.test A (repeated once)", merged)
	}
	last := merged["evil.test A"]
	if last.Fields["repeated"] != float64(99) {
		t.Fatalf("merged event %+v, want evil.test with repeated 99", last)
	}
	first, _ := time.Parse(time.RFC3339Nano, last.Fields["first"].(string))
	lastAt, _ := time.Parse(time.RFC3339Nano, last.Fields["last"].(string))
	if !first.Equal(t0.Add(50*time.Millisecond)) || !lastAt.Equal(t0.Add(99*50*time.Millisecond)) || !last.Time.Equal(lastAt) {
		t.Errorf("merged event times: first %v last %v time %v", first, lastAt, last.Time)
	}

	// After the window, the next one is written in full again.
	n := len(evs)
	a.EmitDecision(ctx, refused("evil.test", clk.t))
	if evs = readAudit(t, dir); len(evs) != n+1 || evs[n].Fields["repeated"] != nil {
		t.Fatalf("first event of a new window not written: %d events", len(evs))
	}
	// Close writes what is pending.
	a.EmitDecision(ctx, refused("evil.test", clk.t.Add(time.Second)))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if evs = readAudit(t, dir); evs[len(evs)-1].Fields["repeated"] != float64(1) {
		t.Errorf("close did not write the pending count: %+v", evs[len(evs)-1])
	}
}

func TestAuditMergeKeysAreBounded(t *testing.T) {
	dir := t.TempDir()
	a := New(dir, 64<<20)
	t.Cleanup(func() { _ = a.Close() })
	ctx := discardCtx()
	at := time.Now().UTC()
	for i := range maxAggregates + 10 {
		a.EmitDecision(ctx, api.AuditEvent{Time: at, Session: "s1", Layer: "dns", Action: "refused", Subject: fmt.Sprintf("n%d.test", i)})
	}
	a.mu.Lock()
	n := len(a.aggs)
	a.mu.Unlock()
	if n > maxAggregates {
		t.Errorf("%d pending decisions, bound %d", n, maxAggregates)
	}
}

func TestAuditCap(t *testing.T) {
	const limit = 128 << 10
	dir := t.TempDir()
	a := New(dir, limit)
	ctx := discardCtx()
	a.EmitControl(ctx, api.AuditEvent{Session: "s1", Layer: "session", Action: "started"})
	for i := range 5000 {
		// Distinct names, as a flood of random blocked names has.
		a.EmitDecision(ctx, api.AuditEvent{Session: "s1", Layer: "dns", Action: "refused", Subject: fmt.Sprintf("r%d.blocked.test", i),
			Reason: "airlock: not in the egress allowlist"})
		if i%10 == 0 {
			a.Emit(ctx, api.AuditEvent{Session: "s1", Layer: "http", Action: "request", Subject: fmt.Sprintf("GET /%d", i)})
		}
	}
	a.Flush(ctx)
	a.EmitControl(ctx, api.AuditEvent{Session: "s1", Layer: "session", Action: "ended"})
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, File))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > limit {
		t.Errorf("audit log is %d bytes, cap %d", st.Size(), limit)
	}
	evs := readAudit(t, dir)
	var truncated, dropped *api.AuditEvent
	requests := 0
	for i, ev := range evs {
		switch {
		case ev.Layer == "audit" && ev.Action == "truncated":
			truncated = &evs[i]
		case ev.Layer == "audit" && ev.Action == "dropped":
			dropped = &evs[i]
		case ev.Layer == "http":
			requests++
		}
	}
	if truncated == nil || dropped == nil {
		t.Fatalf("no truncated or dropped event among %d events", len(evs))
	}
	if truncated.Session != "s1" && truncated.Session != filepath.Base(dir) {
		t.Errorf("truncated event session %q", truncated.Session)
	}
	layers, _ := dropped.Fields["layers"].(map[string]any)
	events, _ := dropped.Fields["events"].(float64)
	if events == 0 || layers["dns"] == nil || layers["http"] == nil {
		t.Errorf("dropped event %+v: want counts by layer, dns and http", dropped)
	}
	// Every event is either in the log or counted as dropped.
	if got := float64(len(evs)-4) + events; got != 5000+500 {
		t.Errorf("%v events written or dropped, want 5500", got)
	}
	if evs[0].Action != "started" || evs[len(evs)-1].Action != "ended" {
		t.Errorf("lifecycle events missing from a full log: first %+v, last %+v", evs[0], evs[len(evs)-1])
	}
	if requests == 0 {
		t.Error("no request written before the cap")
	}

	// Reopened (a restarted daemon), the log knows its size.
	b := New(dir, limit)
	b.Emit(ctx, api.AuditEvent{Session: "s1", Layer: "http", Action: "request", Subject: "GET /after"})
	_ = b.Close()
	if st, _ := os.Stat(filepath.Join(dir, File)); st.Size() > limit {
		t.Errorf("reopened: audit log is %d bytes, cap %d", st.Size(), limit)
	}
}

// discardCtx carries a logger that drops everything.
func discardCtx() context.Context {
	return log.WithLogger(context.Background(), slog.New(slog.DiscardHandler))
}

func TestAuditEmitIsWrittenOnReturn(t *testing.T) {
	dir := t.TempDir()
	a := New(dir, 0)
	t.Cleanup(func() { _ = a.Close() })
	const writers, each = 8, 200
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Go(func() {
			for i := range each {
				subject := fmt.Sprintf("w%d-%d", w, i)
				a.Emit(discardCtx(), api.AuditEvent{Session: "s1", Layer: "dns", Action: "allowed", Subject: subject,
					Fields: map[string]any{"writer": w, "seq": i}})
				if i%20 != 0 {
					continue
				}
				// A read after Emit returns sees the event.
				b, err := os.ReadFile(filepath.Join(dir, File))
				if err != nil {
					errs <- err
					return
				}
				if !bytes.Contains(b, []byte(`"subject":"`+subject+`"`)) {
					errs <- fmt.Errorf("event %s not in the file after Emit returned", subject)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// Every event is one line, and each writer's events are in its order.
	b, err := os.ReadFile(filepath.Join(dir, File))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if len(lines) != writers*each {
		t.Fatalf("%d lines, want %d", len(lines), writers*each)
	}
	next := make([]int, writers)
	for i, l := range lines {
		var ev api.AuditEvent
		if err := json.Unmarshal([]byte(l), &ev); err != nil {
			t.Fatalf("line %d %q: %v", i+1, l, err)
		}
		w, seq := int(ev.Fields["writer"].(float64)), int(ev.Fields["seq"].(float64))
		if seq != next[w] || ev.Subject != fmt.Sprintf("w%d-%d", w, seq) || ev.Time.IsZero() {
			t.Fatalf("line %d: %+v, want writer %d's event %d", i+1, ev, w, next[w])
		}
		next[w]++
	}
	// Emit after Close reopens the file and appends.
	a.Emit(discardCtx(), api.AuditEvent{Session: "s1", Layer: "session", Action: "ended"})
	b, _ = os.ReadFile(filepath.Join(dir, File))
	if n := bytes.Count(b, []byte("\n")); n != writers*each+1 {
		t.Errorf("%d lines after reopening, want %d", n, writers*each+1)
	}
}

// BenchmarkAuditEmit measures recording a DNS query's event, from one
// goroutine and from many at once (as the proxy does under load).
func BenchmarkAuditEmit(b *testing.B) {
	ev := api.AuditEvent{Time: time.Now(), Session: "s1", Layer: "dns", Action: "allowed", Subject: "d7.dns.perf.test", Fields: map[string]any{
		"type": "A", "rcode": "NOERROR", "proto": "udp", "rule": "*.dns.perf.test",
		"answers": []netip.Addr{netip.MustParseAddr("10.214.0.11")}, "pin_ttl": uint32(60), "cached": true,
	}}
	ctx := discardCtx()
	b.Run("serial", func(b *testing.B) {
		a := New(b.TempDir(), 0)
		b.Cleanup(func() { _ = a.Close() })
		b.ReportAllocs()
		for b.Loop() {
			a.Emit(ctx, ev)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		a := New(b.TempDir(), 0)
		b.Cleanup(func() { _ = a.Close() })
		b.ReportAllocs()
		b.SetParallelism(8)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				a.Emit(ctx, ev)
			}
		})
	})
}

// TestAuditObserverSeesEveryEmit: the observer sees each event once as it
// is emitted, merged decisions and events over the cap included, and the
// log's own notices; the merged counts written later are not seen again.
func TestAuditObserverSeesEveryEmit(t *testing.T) {
	dir := t.TempDir()
	seen := map[string]int{}
	var mu sync.Mutex
	a := New(dir, 4<<10, WithObserver(func(ev *api.AuditEvent) {
		mu.Lock()
		seen[ev.Layer+" "+ev.Action]++
		mu.Unlock()
	}))
	t.Cleanup(func() { _ = a.Close() })
	ctx := discardCtx()
	for range 10 {
		a.EmitDecision(ctx, api.AuditEvent{Session: "s1", Layer: "dns", Action: "refused", Subject: "evil.test"})
	}
	// Past the cap (4 KiB, half of it reserved): dropped, but seen.
	big := strings.Repeat("x", 512)
	for range 10 {
		a.Emit(ctx, api.AuditEvent{Session: "s1", Layer: "l7", Action: "allowed", Subject: big})
	}
	a.Flush(ctx)
	want := map[string]int{"dns refused": 10, "l7 allowed": 10, "audit truncated": 1, "audit dropped": 1}
	mu.Lock()
	defer mu.Unlock()
	for k, n := range want {
		if seen[k] != n {
			t.Errorf("observer saw %q %d times, want %d (all: %v)", k, seen[k], n, seen)
		}
	}
	var written int
	for _, ev := range readAudit(t, dir) {
		if ev.Layer == "l7" {
			written++
		}
	}
	if written == 0 || written == 10 {
		t.Errorf("%d of 10 large events written: the test wants some over the cap", written)
	}
	if got, st := a.Size(), mustStat(t, filepath.Join(dir, File)); got != st.Size() {
		t.Errorf("Size() = %d, the file has %d bytes", got, st.Size())
	}
}

func mustStat(t *testing.T, p string) os.FileInfo {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st
}
