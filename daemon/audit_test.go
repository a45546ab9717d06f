package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/dnsproxy"
	"github.com/airlock-sandbox/airlock/internal/log"
)

type namedString string

func TestAuditEncodingMatchesJSON(t *testing.T) {
	// appendAuditEvent writes each field of api.AuditEvent by hand: a new
	// field must be added there too.
	if n := reflect.TypeFor[api.AuditEvent]().NumField(); n != 7 {
		t.Fatalf("api.AuditEvent has %d fields; appendAuditEvent encodes 7", n)
	}
	at := time.Date(2026, 3, 1, 12, 30, 45, 123456789, time.UTC)
	tricky := "a\"b\\c\n\r\t\b\f\x00\x1f<tag>&amp; \u2028\u2029 é 日本 \xff\xfe bad \xed\xa0\x80 end"
	cases := []struct {
		name string
		ev   api.AuditEvent
	}{
		{"zero", api.AuditEvent{}},
		{"minimal", api.AuditEvent{Time: at, Session: "s1", Layer: "session", Action: "started"}},
		{"dns", egress.DNSAuditEvent("s1", dnsproxy.Event{
			Time: at, Name: "api.example.com.", Type: "A", Action: dnsproxy.ActionAllowed, Rcode: "NOERROR", Proto: "udp",
			Rule: "*.example.com:443", CNAMEs: []string{"edge.cdn.test."}, Answers: []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")},
			Ports: []uint16{443, 8443}, PinTTL: 60, Cached: true,
		})},
		{"dns refused", egress.DNSAuditEvent("s1", dnsproxy.Event{Time: at, Name: "evil.test.", Type: "AAAA", Action: dnsproxy.ActionRefused, Rcode: "REFUSED",
			Proto: "tcp", Reason: "airlock: evil.test is not in the egress allowlist"})},
		{"tricky strings", api.AuditEvent{Time: at, Session: tricky, Layer: tricky, Action: tricky, Subject: tricky, Reason: tricky,
			Fields: map[string]any{tricky: tricky, "": "", "<": []string{tricky, ""}}}},
		{"time zones", api.AuditEvent{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", -(9*3600+30*60))), Session: "s",
			Fields: map[string]any{"expires": time.Date(1, 1, 1, 0, 0, 0, 1, time.FixedZone("y", 5*3600)), "now": time.Now()}}},
		{"numbers", api.AuditEvent{Time: at, Fields: map[string]any{
			"int": -3, "int32": int32(math.MinInt32), "int64": int64(math.MaxInt64), "uint": uint(7), "uint16": uint16(65535),
			"uint32": uint32(math.MaxUint32), "uint64": uint64(math.MaxUint64), "int8": int8(-8), "uint8": uint8(8),
			"float": 1.5, "float_big": 1e21, "float_small": 1e-7, "float32": float32(0.1),
		}}},
		{"nil and empty", api.AuditEvent{Time: at, Fields: map[string]any{
			"nil": nil, "nil_strings": []string(nil), "no_strings": []string{}, "nil_addrs": []netip.Addr(nil), "no_addrs": []netip.Addr{},
			"nil_ports": []uint16(nil), "no_ports": []uint16{}, "zero_addr": netip.Addr{}, "zero_addrs": []netip.Addr{{}},
		}}},
		{"empty fields map", api.AuditEvent{Time: at, Session: "s", Fields: map[string]any{}}},
		{"addresses", api.AuditEvent{Time: at, Fields: map[string]any{
			"v4": netip.MustParseAddr("10.0.0.1"), "v6": netip.MustParseAddr("fe80::1%eth0"), "mapped": netip.MustParseAddr("::ffff:10.0.0.1"),
			"zoned": []netip.Addr{netip.MustParseAddr("fe80::2%<b>")},
		}}},
		{"other types", api.AuditEvent{Time: at, Fields: map[string]any{
			"named": namedString("x<y"), "bytes": []byte("hi"), "ints": []int{1, 2}, "map": map[string]any{"b": 1, "a": "<"},
			"struct": struct {
				A string `json:"a"`
				B int    `json:"b,omitempty"`
			}{A: "&"}, "duration": 3 * time.Second, "ptr": new(int), "bool": false,
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal(tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			got, err := appendAuditEvent([]byte("prefix"), &tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Errorf("appendAuditEvent:\n got %s\nwant prefix%s", got, want)
			}
		})
	}
}

func TestAuditEncodingErrors(t *testing.T) {
	for name, ev := range map[string]api.AuditEvent{
		"year 10000":        {Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"field year -1":     {Time: time.Now(), Fields: map[string]any{"t": time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}},
		"unencodable field": {Time: time.Now(), Fields: map[string]any{"c": make(chan int)}},
		"NaN":               {Time: time.Now(), Fields: map[string]any{"f": math.NaN()}},
	} {
		if _, err := json.Marshal(ev); err == nil {
			t.Fatalf("%s: json.Marshal succeeded", name)
		}
		if b, err := appendAuditEvent(nil, &ev); err == nil {
			t.Errorf("%s: appendAuditEvent = %s, want an error as json.Marshal gives", name, b)
		}
	}
}

// TestAuditEncodingRandom compares with json.Marshal on random events:
// strings of arbitrary bytes, any time zone, the field types events carry.
// (A fuzz target here would start the package's root-only TestMain.)
func TestAuditEncodingRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "Z", "0", " ", "\"", "\\", "<", ">", "&", "\n", "\x00", "\x1f", "\x7f", "é", "日", "\u2028", "\u2029",
		"\U0001F600", "\xff", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "%", "."}
	str := func() string {
		var sb strings.Builder
		for range rng.IntN(12) {
			if rng.IntN(4) == 0 {
				sb.WriteByte(byte(rng.IntN(256)))
				continue
			}
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return sb.String()
	}
	for i := range 5000 {
		ev := api.AuditEvent{
			Time:    time.Unix(rng.Int64N(1<<36)-1<<35, rng.Int64N(1e9)).In(time.FixedZone("z", rng.IntN(2*86400)-86400)),
			Session: str(), Layer: str(), Action: str(), Subject: str(), Reason: str(),
		}
		if rng.IntN(4) > 0 {
			ev.Fields = map[string]any{}
			for range rng.IntN(6) {
				var v any
				switch rng.IntN(8) {
				case 0:
					v = str()
				case 1:
					v = []string{str(), str()}
				case 2:
					v = rng.Int64() - rng.Int64()
				case 3:
					v = uint32(rng.Uint32())
				case 4:
					v = []netip.Addr{netip.AddrFrom4([4]byte{byte(i), 2, 3, 4}), netip.AddrFrom16([16]byte{15: byte(i)})}
				case 5:
					v = []uint16{uint16(rng.Uint32()), 53}
				case 6:
					v = rng.IntN(2) == 0
				case 7:
					v = rng.Float64() * 1e6
				}
				ev.Fields[str()] = v
			}
		}
		want, werr := json.Marshal(ev)
		got, gerr := appendAuditEvent(nil, &ev)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("event %#v: json.Marshal error %v, appendAuditEvent error %v", ev, werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("appendAuditEvent:\n got %s\nwant %s", got, want)
		}
	}
}

// discardCtx carries a logger that drops everything.
func discardCtx() context.Context {
	return log.WithLogger(context.Background(), slog.New(slog.DiscardHandler))
}

func TestAuditEmitIsWrittenOnReturn(t *testing.T) {
	dir := t.TempDir()
	a := newAuditLog(dir, 0)
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
				b, err := os.ReadFile(filepath.Join(dir, auditFile))
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
	b, err := os.ReadFile(filepath.Join(dir, auditFile))
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
	b, _ = os.ReadFile(filepath.Join(dir, auditFile))
	if n := bytes.Count(b, []byte("\n")); n != writers*each+1 {
		t.Errorf("%d lines after reopening, want %d", n, writers*each+1)
	}
}

// auditServer serves the audit handler of a daemon holding one session
// "s1" whose directory is dir, and returns a client for it.
func auditServer(t *testing.T, dir string) (*Daemon, *api.Client) {
	t.Helper()
	d := &Daemon{sessions: map[string]*session{"s1": {dir: dir, audit: newAuditLog(dir, 0)}}}
	sockDir, err := os.MkdirTemp("", "airlock-audit-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	sock := filepath.Join(sockDir, "s.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/sessions/{id}/audit", d.handleAudit)
	srv := httptest.NewUnstartedServer(mux)
	srv.Listener = l
	srv.Config.BaseContext = func(net.Listener) context.Context { return discardCtx() }
	srv.Start()
	t.Cleanup(srv.Close)
	return d, api.NewClient(sock)
}

func testEvent(i int) api.AuditEvent {
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	switch i % 3 {
	case 0:
		return egress.DNSAuditEvent("s1", dnsproxy.Event{Time: base.Add(time.Duration(i) * time.Millisecond), Name: fmt.Sprintf("d%d.example.test.", i),
			Type: "A", Action: dnsproxy.ActionAllowed, Rcode: "NOERROR", Proto: "udp", Rule: "*.example.test",
			Answers: []netip.Addr{netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})}, PinTTL: 60, Cached: i%2 == 0})
	case 1:
		return egress.DNSAuditEvent("s1", dnsproxy.Event{Time: base.Add(time.Duration(i) * time.Millisecond), Name: "evil.test.", Type: "A",
			Action: dnsproxy.ActionRefused, Rcode: "REFUSED", Proto: "udp", Reason: fmt.Sprintf("refusal <%d>", i)})
	default:
		return api.AuditEvent{Time: base.Add(time.Duration(i) * time.Millisecond), Session: "s1", Layer: "credentials", Action: "minted",
			Subject: "jobs", Fields: map[string]any{"jti": fmt.Sprint("j", i), "scopes": []string{"read", "write"}}}
	}
}

// roundTrip is ev as a reader decodes it.
func roundTrip(t *testing.T, ev api.AuditEvent) api.AuditEvent {
	t.Helper()
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	var out api.AuditEvent
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestAuditStream(t *testing.T) {
	dir := t.TempDir()
	d, c := auditServer(t, dir)
	ctx := t.Context()

	// A session without a log has no events; an unknown one is not found.
	if evs, err := c.Audit(ctx, "s1"); err != nil || evs == nil || len(evs) != 0 {
		t.Fatalf("empty log: %v, %v; want an empty list", evs, err)
	}
	if _, err := c.Audit(ctx, "nosuch"); !api.IsNotFound(err) {
		t.Fatalf("unknown session: %v, want not found", err)
	}

	const n = 5000
	want := make([]api.AuditEvent, n)
	a := d.sessions["s1"].audit
	for i := range n {
		ev := testEvent(i)
		a.Emit(discardCtx(), ev)
		want[i] = roundTrip(t, ev)
	}
	got, err := c.Audit(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != n {
		t.Fatalf("client read %d events, want %d", len(got), n)
	}
	for i := range got {
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Fatalf("event %d:\n got %+v\nwant %+v", i, got[i], want[i])
		}
	}
	// The client's streaming read sees the same events and stops when
	// told to.
	i := 0
	if err := c.AuditEach(ctx, "s1", func(ev api.AuditEvent) error {
		if !reflect.DeepEqual(ev, want[i]) {
			return fmt.Errorf("event %d: %+v, want %+v", i, ev, want[i])
		}
		i++
		return nil
	}); err != nil || i != n {
		t.Fatalf("AuditEach: %d events, %v", i, err)
	}
	stop := errors.New("stop")
	if err := c.AuditEach(ctx, "s1", func(api.AuditEvent) error { return stop }); err != stop {
		t.Fatalf("AuditEach returned %v, want the callback's error", err)
	}
	direct, err := d.Audit(ctx, "s1")
	if err != nil || !reflect.DeepEqual(direct, got) {
		t.Fatalf("Daemon.Audit: %d events, %v; want the client's %d", len(direct), err, len(got))
	}

	// The response is a JSON array, one event per line, each line exactly
	// as the log holds it.
	raw, err := os.ReadFile(filepath.Join(dir, auditFile))
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/sessions/s1/audit", nil)
	req.SetPathValue("id", "s1")
	d.handleAudit(rec, req)
	wantBody := "[\n" + strings.ReplaceAll(strings.TrimSuffix(string(raw), "\n"), "\n", ",\n") + "\n]\n"
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" || rec.Body.String() != wantBody {
		t.Errorf("response %d %q, body of %d bytes, want %d bytes", rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len(), len(wantBody))
	}

	// A line still being written (no newline yet) is left out.
	f, err := os.OpenFile(filepath.Join(dir, auditFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString(`{"time":"2026-03-01T12:00:00Z","session":"s1","la`); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Audit(ctx, "s1"); err != nil || len(got) != n {
		t.Fatalf("with a partial last line: %d events, %v; want %d", len(got), err, n)
	}
	// A line that is not JSON fails the read: an aborted response, not a
	// shorter list.
	if _, err := f.WriteString("\n"); err != nil {
		t.Fatal(err)
	}
	if got, err := c.Audit(ctx, "s1"); err == nil {
		t.Fatalf("a corrupt line: %d events and no error", len(got))
	}
	if _, err := d.Audit(ctx, "s1"); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("line %d", n+1)) {
		t.Fatalf("Daemon.Audit of a corrupt line: %v", err)
	}
}

func TestAuditEachStopsAtCallbackError(t *testing.T) {
	dir := t.TempDir()
	d, _ := auditServer(t, dir)
	a := d.sessions["s1"].audit
	for i := range 10 {
		a.Emit(discardCtx(), testEvent(i))
	}
	stop := errors.New("enough")
	calls := 0
	err := d.AuditEach(t.Context(), "s1", func(json.RawMessage) error {
		calls++
		if calls == 3 {
			return stop
		}
		return nil
	})
	if err != stop || calls != 3 {
		t.Errorf("AuditEach: %v after %d calls, want %v after 3", err, calls, stop)
	}
}

// BenchmarkAuditEmit measures recording a DNS query's event, from one
// goroutine and from many at once (as the proxy does under load).
func BenchmarkAuditEmit(b *testing.B) {
	ev := egress.DNSAuditEvent("s1", dnsproxy.Event{
		Time: time.Now(), Name: "d7.dns.perf.test.", Type: "A", Action: dnsproxy.ActionAllowed, Rcode: "NOERROR", Proto: "udp",
		Rule: "*.dns.perf.test", Answers: []netip.Addr{netip.MustParseAddr("10.214.0.11")}, PinTTL: 60, Cached: true,
	})
	ctx := discardCtx()
	b.Run("serial", func(b *testing.B) {
		a := newAuditLog(b.TempDir(), 0)
		b.Cleanup(func() { _ = a.Close() })
		b.ReportAllocs()
		for b.Loop() {
			a.Emit(ctx, ev)
		}
	})
	b.Run("parallel", func(b *testing.B) {
		a := newAuditLog(b.TempDir(), 0)
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

// discardResponse is an http.ResponseWriter that keeps nothing, so that a
// benchmark sees the handler's own memory.
type discardResponse struct {
	h http.Header
	n int64
}

func (w *discardResponse) Header() http.Header { return w.h }
func (w *discardResponse) WriteHeader(int)     {}
func (w *discardResponse) Write(b []byte) (int, error) {
	w.n += int64(len(b))
	return len(b), nil
}

// BenchmarkAuditRead measures the handler of GET /v1/sessions/ID/audit on
// a log of 50000 DNS events.
func BenchmarkAuditRead(b *testing.B) {
	dir := b.TempDir()
	f, err := os.Create(filepath.Join(dir, auditFile))
	if err != nil {
		b.Fatal(err)
	}
	const n = 50000
	for i := range n {
		line, _ := json.Marshal(testEvent(i))
		_, _ = f.Write(append(line, '\n'))
	}
	f.Close()
	d := &Daemon{sessions: map[string]*session{"s1": {dir: dir, audit: newAuditLog(dir, 0)}}}
	req := httptest.NewRequest(http.MethodGet, "/v1/sessions/s1/audit", nil).WithContext(discardCtx())
	req.SetPathValue("id", "s1")
	b.ReportAllocs()
	for b.Loop() {
		w := &discardResponse{h: http.Header{}}
		d.handleAudit(w, req)
		if w.n < n*100 {
			b.Fatalf("%d bytes written", w.n)
		}
	}
}
