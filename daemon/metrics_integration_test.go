package daemon_test

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// freeLoopbackAddr returns 127.0.0.1:PORT with a port free a moment ago.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// scrape is one parse of a daemon's /metrics.
type scrape map[string]*dto.MetricFamily

func scrapeMetrics(t *testing.T, addr string) scrape {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		t.Fatalf("scrape: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("scrape: parse: %v", err)
	}
	return fams
}

// sum adds the values of family name's series whose labels include the
// given name=value pairs (a histogram's value is its count); ok is false
// when no series matches.
func (s scrape) sum(name string, labels ...string) (total float64, ok bool) {
	f := s[name]
	if f == nil {
		return 0, false
	}
next:
	for _, m := range f.GetMetric() {
		have := map[string]string{}
		for _, l := range m.GetLabel() {
			have[l.GetName()] = l.GetValue()
		}
		for i := 0; i+1 < len(labels); i += 2 {
			if v, found := have[labels[i]]; !found || v != labels[i+1] {
				continue next
			}
		}
		ok = true
		switch {
		case m.Counter != nil:
			total += m.Counter.GetValue()
		case m.Gauge != nil:
			total += m.Gauge.GetValue()
		case m.Histogram != nil:
			total += float64(m.Histogram.GetSampleCount())
		}
	}
	return total, ok
}

func (s scrape) value(name string, labels ...string) float64 {
	v, _ := s.sum(name, labels...)
	return v
}

// TestMetricsEndpoint runs airlockd with --metrics-listen on a loopback
// port and a test world as its uplink, runs real sessions through it
// (DNS allowed and refused, a connection the gateway blocks, a request
// through the L7 gateway, a minted credential and two reported
// rejections, a commit the protect rule refuses, a warm pool filled and
// taken from) and checks each reaches its metric in a scrape parsed as
// Prometheus's text format; a removed session's audit-size series goes
// with it, and the dropped-packet counter never goes down.
func TestMetricsEndpoint(t *testing.T) {
	ctx := t.Context()
	tag := "m" + runtime.Prefix(t.Name())[2:]
	w, err := world.Start(ctx, world.Config{Prefix: tag})
	if err != nil {
		t.Fatal(err)
	}
	// Registered first, so it runs after the daemon's cleanup.
	t.Cleanup(func() { _ = w.Close() })
	web := netip.MustParseAddr("10.214.0.62")
	unlisted := netip.MustParseAddr("10.214.0.63")
	for name, ip := range map[string]netip.Addr{"web.metrics.test": web, "db.metrics.test": unlisted} {
		if err := w.AddHost(name, ip); err != nil {
			t.Fatal(err)
		}
	}
	// A warm pool of one sandbox, filled from the start.
	poolFile := filepath.Join(t.TempDir(), "pool.hcl")
	if err := os.WriteFile(poolFile, []byte(`session "warm" {
  image   = "`+daemontest.AgentImage+`"
  command = ["true"]
  pool {
    size = 1
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	metricsAddr, credAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
	d, _, _ := startFaultDaemon(t, "--uplink", "netns:"+w.NetnsName(),
		"--dns-upstream", w.DNSAddr().String(), "--allow-private", w.Net().String(),
		"--metrics-listen", metricsAddr, "--credentials-listen", credAddr, "--pool", poolFile)
	client := api.NewClient(d.socket)
	defer func() { client.Close() }()

	// Before any session: the state series are there, at zero.
	m := scrapeMetrics(t, metricsAddr)
	if v, ok := m.sum("airlock_sessions", "state", "running"); !ok || v != 0 {
		t.Errorf("airlock_sessions{state=running} before any session: %v (present %v), want 0", v, ok)
	}

	create := func(p policies.Policy) *api.Session {
		t.Helper()
		s, err := client.CreateSession(ctx, api.CreateRequest{Policy: p, Start: true})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	exec := func(id string, args ...string) (string, int) {
		t.Helper()
		var out bytes.Buffer
		code, err := client.Exec(ctx, id, api.ExecRequest{Command: args}, nil, &out, &out)
		if err != nil {
			t.Fatalf("exec %v: %v", args, err)
		}
		return out.String(), code
	}
	curl := func(id, url string) (string, int) {
		return exec(id, "curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", url)
	}

	// s1: egress to one name, and a credential minted at start.
	p1 := credPolicy("sleep", "300")
	p1.Egress = &policies.Egress{Allow: []string{"web.metrics.test:80"}}
	s1 := create(p1)
	// s2: the same name through the L7 gateway.
	p2 := policy("sleep", "300")
	p2.Egress = &policies.Egress{Allow: []string{"web.metrics.test:80"}, L7: policies.L7Check}
	s2 := create(p2)

	if out, code := curl(s1.ID, "http://web.metrics.test/"); code != 0 || out != "200" {
		t.Fatalf("s1: allowed name: curl exit %d %q", code, out)
	}
	if out, code := curl(s1.ID, "http://db.metrics.test/"); code == 0 {
		t.Errorf("s1: a name not in the allowlist was reached: %q", out)
	}
	if out, code := curl(s1.ID, "http://"+unlisted.String()+"/"); code == 0 {
		t.Errorf("s1: an address no answer pinned was reached: %q", out)
	}
	if out, code := curl(s2.ID, "http://web.metrics.test/"); code != 0 || out != "200" {
		t.Fatalf("s2: allowed name through the L7 gateway: curl exit %d %q", code, out)
	}

	// Two rejections reported by a service: one with a reason the
	// verifier knows, one with a reason it does not.
	for _, reason := range []string{"expired", "no-such-reason"} {
		body := fmt.Sprintf(`{"reason": %q, "audience": "jobs.world.test"}`, reason)
		resp, err := http.Post("http://"+credAddr+"/v1/report", "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode >= 300 {
			t.Fatalf("report rejection %q: %s", reason, resp.Status)
		}
	}

	// s3: a workspace session whose change the protect rule refuses.
	host := t.TempDir()
	if err := os.MkdirAll(filepath.Join(host, "deploy"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(host, "deploy", "prod.yaml"), []byte("replicas: 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p3 := policy("sh", "-c", "echo 'replicas: 0' > /w/deploy/prod.yaml")
	p3.Workspaces = []policies.Workspace{{HostPath: host, Target: "/w", Mode: policies.ModeOverlay,
		Protect: []string{"deploy/**"}, OnExit: policies.OnExitReview}}
	s3 := create(p3)
	if wr, err := client.WaitSession(ctx, s3.ID); err != nil || wr.ExitCode != 0 {
		t.Fatalf("s3: wait: %+v, %v", wr, err)
	}
	res, err := client.Commit(ctx, s3.ID, api.CommitRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Committed || len(res.Rejected) == 0 {
		t.Fatalf("s3: commit of a protected change: %+v, want a rejection", res)
	}

	// The gateway's drop counters are read at each scrape; the rest is
	// counted as it happens. Poll for what the kernel may count late.
	deadline := time.Now().Add(60 * time.Second)
	for {
		m = scrapeMetrics(t, metricsAddr)
		if m.value("airlock_flows_dropped_packets_total") >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("airlock_flows_dropped_packets_total stayed at %v while s1 runs", m.value("airlock_flows_dropped_packets_total"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, c := range []struct {
		name    string
		labels  []string
		want    float64
		atLeast bool
	}{
		{"airlock_sessions", []string{"state", "running"}, 2, false},
		{"airlock_sessions", []string{"state", "stopped"}, 1, false},
		{"airlock_sessions_awaiting_review", nil, 1, false},
		{"airlock_session_start_duration_seconds", []string{"warm", "false", "started", "true"}, 3, false},
		{"airlock_session_teardown_duration_seconds", []string{"phase", "exit"}, 1, false},
		{"airlock_sessions_ended_total", []string{"reason", "exited"}, 1, false},
		{"airlock_dns_queries_total", []string{"action", "allowed"}, 2, true},
		{"airlock_dns_queries_total", []string{"action", "refused"}, 1, true},
		{"airlock_dns_refusals_total", []string{"reason", "blocked"}, 1, true},
		{"airlock_audit_events_total", []string{"layer", "dns", "action", "refused"}, 1, true},
		{"airlock_l7_requests_total", []string{"decision", "allowed"}, 1, false},
		{"airlock_commit_rejections_total", []string{"rule", "protect"}, 1, false},
		{"airlock_credential_events_total", []string{"event", "minted"}, 1, false},
		{"airlock_credential_events_total", []string{"event", "rejected"}, 2, false},
		{"airlock_credential_rejections_total", []string{"reason", "expired"}, 1, false},
		{"airlock_credential_rejections_total", []string{"reason", "other"}, 1, false},
		{"airlock_approvals_pending", nil, 0, false},
		{"airlock_audit_bytes", []string{"session", s1.ID}, 1, true},
		{"airlock_audit_bytes", []string{"session", s3.ID}, 1, true},
	} {
		got, ok := m.sum(c.name, c.labels...)
		switch {
		case !ok:
			t.Errorf("%s%v: no such series", c.name, c.labels)
		case c.atLeast && got < c.want:
			t.Errorf("%s%v = %v, want at least %v", c.name, c.labels, got, c.want)
		case !c.atLeast && got != c.want:
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	if _, ok := m.sum("airlock_credential_rejections_total", "reason", "no-such-reason"); ok {
		t.Error("a reason a service made up became a label value")
	}
	dropped := m.value("airlock_flows_dropped_packets_total")

	// s3 removed: its audit-size series goes; s1 removed: the packets its
	// network blocked stay counted.
	if err := client.RemoveSession(ctx, s3.ID, true); err != nil {
		t.Fatal(err)
	}
	if err := client.RemoveSession(ctx, s1.ID, true); err != nil {
		t.Fatal(err)
	}
	m = scrapeMetrics(t, metricsAddr)
	for _, id := range []string{s1.ID, s3.ID} {
		if _, ok := m.sum("airlock_audit_bytes", "session", id); ok {
			t.Errorf("airlock_audit_bytes of removed session %s is still served", id)
		}
	}
	if _, ok := m.sum("airlock_audit_bytes", "session", s2.ID); !ok {
		t.Errorf("airlock_audit_bytes of running session %s is missing", s2.ID)
	}
	if got := m.value("airlock_session_teardown_duration_seconds", "phase", "remove"); got != 2 {
		t.Errorf("teardowns of phase remove: %v, want 2", got)
	}
	if got := m.value("airlock_sessions", "state", "running"); got != 1 {
		t.Errorf("running sessions after two removals: %v, want 1", got)
	}
	if got := m.value("airlock_flows_dropped_packets_total"); got < dropped {
		t.Errorf("airlock_flows_dropped_packets_total went down from %v to %v when s1 was removed", dropped, got)
	}
	if got := m.value("airlock_sessions_ended_total", "reason", "stopped"); got != 1 {
		t.Errorf("sessions ended by a stop: %v, want 1 (s1)", got)
	}

	// The pool's depth, then a create that takes its sandbox.
	for deadline := time.Now().Add(90 * time.Second); ; {
		m = scrapeMetrics(t, metricsAddr)
		if m.value("airlock_pool_ready", "label", "warm") == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("airlock_pool_ready{label=warm} did not reach 1: %v", m.value("airlock_pool_ready", "label", "warm"))
		}
		time.Sleep(200 * time.Millisecond)
	}
	if got := m.value("airlock_pool_size", "label", "warm"); got != 1 {
		t.Errorf("airlock_pool_size{label=warm} = %v, want 1", got)
	}
	pp, err := policies.LoadFile(poolFile, nil)
	if err != nil {
		t.Fatal(err)
	}
	pp.Command = []string{"sleep", "300"}
	s4 := create(*pp)
	if !s4.Warm {
		t.Fatalf("the create with the pool's policy did not take its sandbox: %+v", s4)
	}
	m = scrapeMetrics(t, metricsAddr)
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"airlock_pool_takes_total", []string{"label", "warm", "result", "hit"}, 1},
		{"airlock_session_start_duration_seconds", []string{"warm", "true", "started", "true"}, 1},
		{"airlock_sessions", []string{"state", "running"}, 2},
	} {
		if got, ok := m.sum(c.name, c.labels...); !ok || got != c.want {
			t.Errorf("%s%v = %v (present %v), want %v", c.name, c.labels, got, ok, c.want)
		}
	}
}
