package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/daemon/httpapi"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/dnsproxy"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// discardCtx carries a logger that drops everything.
func discardCtx() context.Context {
	return log.WithLogger(context.Background(), slog.New(slog.DiscardHandler))
}

// auditDaemon is a daemon holding one session "s1" whose directory is
// dir, without a runtime, served without a credentials broker.
type auditDaemon struct{ *Daemon }

func (auditDaemon) CredentialsHandler() http.Handler { return http.NotFoundHandler() }

func newAuditDaemon(dir string) auditDaemon {
	return auditDaemon{&Daemon{sessions: map[string]*session{"s1": {dir: dir, audit: audit.New(dir, 0)}}}}
}

// auditServer serves the API of a daemon holding one session "s1" whose
// directory is dir, and returns a client for it.
func auditServer(t *testing.T, dir string) (*Daemon, *api.Client) {
	t.Helper()
	ad := newAuditDaemon(dir)
	d := ad.Daemon
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
	srv := httptest.NewUnstartedServer(httpapi.New(ad))
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
	raw, err := os.ReadFile(filepath.Join(dir, audit.File))
	if err != nil {
		t.Fatal(err)
	}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/sessions/s1/audit", nil)
	httpapi.New(newAuditDaemon(dir)).ServeHTTP(rec, req.WithContext(discardCtx()))
	wantBody := "[\n" + strings.ReplaceAll(strings.TrimSuffix(string(raw), "\n"), "\n", ",\n") + "\n]\n"
	if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != "application/json" || rec.Body.String() != wantBody {
		t.Errorf("response %d %q, body of %d bytes, want %d bytes", rec.Code, rec.Header().Get("Content-Type"), rec.Body.Len(), len(wantBody))
	}

	// A line still being written (no newline yet) is left out.
	f, err := os.OpenFile(filepath.Join(dir, audit.File), os.O_WRONLY|os.O_APPEND, 0)
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

// BenchmarkAuditRead measures the API handler of GET /v1/sessions/ID/audit on
// a log of 50000 DNS events.
func BenchmarkAuditRead(b *testing.B) {
	dir := b.TempDir()
	f, err := os.Create(filepath.Join(dir, audit.File))
	if err != nil {
		b.Fatal(err)
	}
	const n = 50000
	for i := range n {
		line, _ := json.Marshal(testEvent(i))
		_, _ = f.Write(append(line, '\n'))
	}
	f.Close()
	h := httpapi.New(newAuditDaemon(dir))
	req := httptest.NewRequest(http.MethodGet, "/v1/sessions/s1/audit", nil).WithContext(discardCtx())
	b.ReportAllocs()
	for b.Loop() {
		w := &discardResponse{h: http.Header{}}
		h.ServeHTTP(w, req)
		if w.n < n*100 {
			b.Fatalf("%d bytes written", w.n)
		}
	}
}

// TestEgressAuditL7NotMerged emits the same refusal of the L7 gateway
// twice and the same DNS refusal twice: the gateway's events are written
// one by one, as the requests they record happened; the DNS decision is
// merged within the window, and carries its repair.
func TestEgressAuditL7NotMerged(t *testing.T) {
	dir := t.TempDir()
	a := audit.New(dir, 0)
	p := policies.Policy{Label: "t", Image: "img", Command: []string{"true"}, Egress: &policies.Egress{Allow: []string{"git.test:443"}}}
	p.ApplyDefaults()
	s := &session{audit: a, rec: record{Policy: p}}
	emit := egressAudit(s)
	ctx := discardCtx()
	refused := api.AuditEvent{Session: "s1", Layer: "l7", Action: "refused", Subject: "jobs-admin.test",
		Reason: "airlock: Host jobs-admin.test is not in the egress allowlist", Fields: map[string]any{"dst": "10.0.0.5:80"}}
	dns := api.AuditEvent{Session: "s1", Layer: "dns", Action: "refused", Subject: "paste.test", Fields: map[string]any{"rcode": "REFUSED"}}
	for range 2 {
		emit(ctx, refused)
		emit(ctx, dns)
	}
	layers := map[string]int{}
	if err := audit.Each(ctx, filepath.Join(dir, audit.File), func(raw json.RawMessage) error {
		var ev api.AuditEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return err
		}
		layers[ev.Layer]++
		if ev.Layer == "dns" {
			var r policies.Repair
			if b, err := json.Marshal(ev.Fields["repair"]); err != nil || json.Unmarshal(b, &r) != nil {
				t.Fatalf("repair %v", ev.Fields["repair"])
			}
			if want := (policies.RepairChange{Field: "egress.allow", Op: "add", Value: "paste.test:443"}); len(r.Changes) != 1 || r.Changes[0] != want || !r.Revisable {
				t.Errorf("the refusal's repair %+v, want %+v", r, want)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if layers["l7"] != 2 || layers["dns"] != 1 {
		t.Errorf("events per layer in the log: %v, want 2 l7 and 1 dns (merged)", layers)
	}
	a.Close()
}
