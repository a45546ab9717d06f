package metrics

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/airlock-sandbox/airlock/api"
)

// gather returns the metrics' families by name.
func gather(t *testing.T, m *Metrics) map[string]*dto.MetricFamily {
	t.Helper()
	fams, err := m.Gatherer().Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// value returns the value of the series of family name whose labels are
// labels (name=value pairs), and whether it exists.
func value(fams map[string]*dto.MetricFamily, name string, labels ...string) (float64, bool) {
	f := fams[name]
	if f == nil {
		return 0, false
	}
next:
	for _, mt := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range mt.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		if len(have) != len(labels)/2 {
			continue
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if have[labels[i]] != labels[i+1] {
				continue next
			}
		}
		switch {
		case mt.Counter != nil:
			return mt.Counter.GetValue(), true
		case mt.Gauge != nil:
			return mt.Gauge.GetValue(), true
		case mt.Histogram != nil:
			return float64(mt.Histogram.GetSampleCount()), true
		}
	}
	return 0, false
}

func TestNilMetricsDoNothing(t *testing.T) {
	var m *Metrics
	m.AuditEvent(&api.AuditEvent{Layer: "dns", Action: "refused"})
	m.ObserveStart(time.Second, true, true)
	m.ObserveTeardown(PhaseExit, time.Second)
	m.Credential("minted", "builtin", "")
	m.SessionRemoved("s1")
	m.SetSource(func(context.Context) State { return State{} })
	rec := &recorder{}
	m.Handler().ServeHTTP(rec, nil)
	if rec.code != http.StatusNotFound {
		t.Errorf("nil metrics' handler answered %d, want 404", rec.code)
	}
}

type recorder struct {
	code int
	h    http.Header
}

func (r *recorder) Header() http.Header {
	if r.h == nil {
		r.h = http.Header{}
	}
	return r.h
}
func (r *recorder) Write(b []byte) (int, error) { return len(b), nil }
func (r *recorder) WriteHeader(code int)        { r.code = code }

// TestAuditEventsCounted: each kind of audit event reaches its counter,
// with bounded labels.
func TestAuditEventsCounted(t *testing.T) {
	m := New()
	evs := []api.AuditEvent{
		{Session: "s1", Layer: "dns", Action: "refused", Subject: "evil.test"},
		{Session: "s1", Layer: "dns", Action: "refused", Subject: "evil.test"},
		{Session: "s1", Layer: "l7", Action: "denied", Fields: map[string]any{"kind": "request"}},
		{Session: "s1", Layer: "l7", Action: "allowed", Fields: map[string]any{"kind": "request"}},
		{Session: "s1", Layer: "l7", Action: "refused", Fields: map[string]any{"kind": "connection"}},
		{Session: "s1", Layer: "approval", Action: "held"},
		{Session: "s1", Layer: "approval", Action: "allowed", Fields: map[string]any{"by": "alice@example"}},
		{Session: "s1", Layer: "approval", Action: "denied", Fields: map[string]any{"by": "timeout"}},
		{Session: "s1", Layer: "approval", Action: "denied", Fields: map[string]any{"by": "session ended"}},
		{Session: "s1", Layer: "fs", Action: "rejected", Fields: map[string]any{"rule": "protect"}},
		{Session: "s1", Layer: "fs", Action: "rejected", Fields: map[string]any{"rule": "protect"}},
		{Session: "s1", Layer: "fs", Action: "applied", Fields: map[string]any{}},
		{Session: "s1", Layer: "session", Action: "ended", Reason: "timeout"},
	}
	for i := range evs {
		m.AuditEvent(&evs[i])
	}
	m.Credential("minted", "builtin", "")
	m.Credential("rejected", "builtin", "expired")
	fams := gather(t, m)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"airlock_audit_events_total", []string{"layer", "dns", "action", "refused"}, 2},
		{"airlock_audit_events_total", []string{"layer", "fs", "action", "applied"}, 1},
		{"airlock_l7_requests_total", []string{"decision", "denied"}, 1},
		{"airlock_l7_requests_total", []string{"decision", "allowed"}, 1},
		{"airlock_l7_connections_total", []string{"decision", "refused"}, 1},
		{"airlock_approvals_held_total", nil, 1},
		{"airlock_approvals_decided_total", []string{"decision", "allowed", "by", "person"}, 1},
		{"airlock_approvals_decided_total", []string{"decision", "denied", "by", "timeout"}, 1},
		{"airlock_approvals_decided_total", []string{"decision", "denied", "by", "session_ended"}, 1},
		{"airlock_commit_rejections_total", []string{"rule", "protect"}, 2},
		{"airlock_sessions_ended_total", []string{"reason", "timeout"}, 1},
		{"airlock_credential_events_total", []string{"event", "minted", "issuer", "builtin"}, 1},
		{"airlock_credential_events_total", []string{"event", "rejected", "issuer", "builtin"}, 1},
		{"airlock_credential_rejections_total", []string{"reason", "expired"}, 1},
	} {
		if got, ok := value(fams, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	if _, ok := value(fams, "airlock_approvals_decided_total", "decision", "allowed", "by", "alice@example"); ok {
		t.Error("a person's name became a label value")
	}
}

// TestCappedSeries: label combinations past the cap count under "other".
func TestCappedSeries(t *testing.T) {
	m := New()
	for i := range maxSeries + 10 {
		m.AuditEvent(&api.AuditEvent{Layer: "fs", Action: "rejected", Fields: map[string]any{"rule": fmt.Sprintf("r%d", i)}})
	}
	if n := testutil.CollectAndCount(m.commitRejects.CounterVec); n != maxSeries+1 {
		t.Errorf("%d series, want %d (the cap and \"other\")", n, maxSeries+1)
	}
	if got := testutil.ToFloat64(m.commitRejects.WithLabelValues("other")); got != 10 {
		t.Errorf("other = %v, want 10", got)
	}
	// A value seen before the cap keeps its own series.
	m.AuditEvent(&api.AuditEvent{Layer: "fs", Action: "rejected", Fields: map[string]any{"rule": "r3"}})
	if got := testutil.ToFloat64(m.commitRejects.WithLabelValues("r3")); got != 2 {
		t.Errorf("r3 = %v, want 2", got)
	}
}

// TestStateAtScrape: sessions, pools, approvals and DNS come from the
// source at each scrape; a removed session's series goes with it.
func TestStateAtScrape(t *testing.T) {
	m := New()
	st := State{
		Sessions: []Session{
			{ID: "s1", State: "running", AuditBytes: 100},
			{ID: "s2", State: "running", AuditBytes: 50},
			{ID: "s3", State: "stopped", Review: true, AuditBytes: 10},
		},
		Pools:            []Pool{{Key: "k1", Label: "warm", Size: 2, Ready: 1, Hits: 3, Misses: 1}},
		ApprovalsPending: 2,
		DNS:              &DNS{Allowed: 5, Refused: 3, Blocked: 2, RateLimited: 1},
	}
	m.SetSource(func(context.Context) State { return st })
	fams := gather(t, m)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"airlock_sessions", []string{"state", "running"}, 2},
		{"airlock_sessions", []string{"state", "stopped"}, 1},
		{"airlock_sessions", []string{"state", "created"}, 0},
		{"airlock_sessions_awaiting_review", nil, 1},
		{"airlock_audit_bytes", []string{"session", "s1"}, 100},
		{"airlock_audit_bytes", []string{"session", "s3"}, 10},
		{"airlock_pool_ready", []string{"pool", "k1", "label", "warm"}, 1},
		{"airlock_pool_size", []string{"pool", "k1", "label", "warm"}, 2},
		{"airlock_pool_takes_total", []string{"pool", "k1", "label", "warm", "result", "hit"}, 3},
		{"airlock_pool_takes_total", []string{"pool", "k1", "label", "warm", "result", "miss"}, 1},
		{"airlock_approvals_pending", nil, 2},
		{"airlock_dns_queries_total", []string{"action", "allowed"}, 5},
		{"airlock_dns_queries_total", []string{"action", "refused"}, 3},
		{"airlock_dns_refusals_total", []string{"reason", "blocked"}, 2},
		{"airlock_dns_refusals_total", []string{"reason", "rate_limited"}, 1},
	} {
		if got, ok := value(fams, c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
	st.Sessions = st.Sessions[:2]
	fams = gather(t, m)
	if _, ok := value(fams, "airlock_audit_bytes", "session", "s3"); ok {
		t.Error("a removed session's audit bytes are still reported")
	}
}

// TestDropsNeverGoDown: the dropped-flow counters take the larger of a
// session's live counters and its audited drops, and keep a removed
// session's count.
func TestDropsNeverGoDown(t *testing.T) {
	m := New()
	var st State
	m.SetSource(func(context.Context) State { return st })
	drops := func() float64 {
		t.Helper()
		v, ok := value(gather(t, m), "airlock_flows_dropped_packets_total")
		if !ok {
			t.Fatal("no airlock_flows_dropped_packets_total")
		}
		return v
	}
	last := 0.0
	step := func(what string, want float64) {
		t.Helper()
		got := drops()
		if got != want {
			t.Errorf("%s: %v packets, want %v", what, got, want)
		}
		if got < last {
			t.Errorf("%s: the counter went down from %v to %v", what, last, got)
		}
		last = got
	}
	st.Drops = []Drops{{Session: "s1", Packets: 3, Bytes: 180}, {Session: "s2", Packets: 1, Bytes: 60}}
	step("live", 4)
	st.Drops = []Drops{{Session: "s1", Packets: 5, Bytes: 300}}
	step("s1 grew, s2's network gone", 6)
	// s1's network removed: its audit itemises 4 of the 6 it blocked
	// since (the rest went to destinations past the itemised ones).
	st.Drops = nil
	for _, p := range []uint64{2, 2} {
		m.AuditEvent(&api.AuditEvent{Session: "s1", Layer: "net", Action: "dropped", Fields: map[string]any{"packets": p, "bytes": uint64(60 * p)}})
	}
	step("s1 audited below its live count", 6)
	m.AuditEvent(&api.AuditEvent{Session: "s2", Layer: "net", Action: "dropped", Fields: map[string]any{"packets": float64(4), "bytes": float64(240)}})
	step("s2 audited above its live count", 9)
	m.SessionRemoved("s1")
	m.SessionRemoved("s2")
	step("both removed", 9)
	m.SessionRemoved("s2")
	step("removed again", 9)
}

func TestCheckAddr(t *testing.T) {
	pool := netip.MustParsePrefix("10.213.0.0/16")
	for _, c := range []struct {
		addr   string
		remote bool
		ok     bool
	}{
		{"127.0.0.1:9464", false, true},
		{"[::1]:9464", false, true},
		{"127.0.0.2:0", false, true},
		{"192.0.2.10:9464", false, false},
		{"192.0.2.10:9464", true, true},
		{"[2001:db8::1]:9464", true, true},
		{":9464", true, false},
		{"0.0.0.0:9464", true, false},
		{"[::]:9464", true, false},
		{"10.213.0.1:9464", true, false},
		{"localhost:9464", false, false},
		{"127.0.0.1", false, false},
		{"127.0.0.1:notaport", false, false},
	} {
		err := CheckAddr(c.addr, c.remote, pool)
		if (err == nil) != c.ok {
			t.Errorf("CheckAddr(%q, remote %v) = %v, want ok %v", c.addr, c.remote, err, c.ok)
		}
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("CheckAddr(%q): %v is not an InvalidArgument error", c.addr, err)
		}
	}
}

// TestServe: the listener serves the text format on Path and nothing
// else, and stops with its context.
func TestServe(t *testing.T) {
	m := New()
	m.ObserveStart(30*time.Millisecond, false, true)
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	srv, addr, err := m.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	resp, err := http.Get("http://" + addr + Path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	f := fams["airlock_session_start_duration_seconds"]
	if f == nil || len(f.GetMetric()) != 1 || f.GetMetric()[0].GetHistogram().GetSampleCount() != 1 {
		t.Errorf("start histogram: %v", f)
	}
	if fams["go_goroutines"] == nil || fams["airlock_sessions"] == nil {
		t.Errorf("scrape lacks go_goroutines or airlock_sessions: %d families", len(fams))
	}
	other, err := http.Get("http://" + addr + "/debug/pprof/")
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, other.Body)
	other.Body.Close()
	if other.StatusCode != http.StatusNotFound {
		t.Errorf("GET /debug/pprof/: %s, want 404", other.Status)
	}
	cancel()
	for deadline := time.Now().Add(10 * time.Second); ; {
		_, err := http.Get("http://" + addr + Path)
		if err != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the listener still answers after its context ended")
		}
		time.Sleep(20 * time.Millisecond)
	}
}
