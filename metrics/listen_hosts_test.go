package metrics

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/httpserve"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestMetricsRefuseForeignHosts: a web page whose name is rebound to
// 127.0.0.1 (DNS rebinding) makes the browser send its own name as Host;
// a loopback listener answers 421 to it, and serves its own names.
func TestMetricsRefuseForeignHosts(t *testing.T) {
	m := New()
	m.SetSource(func(context.Context) State {
		return State{Sessions: []Session{{ID: "secret-session-0042", State: "running", AuditBytes: 1}},
			Pools: []Pool{{Key: "k1", Label: "customer-acme-deploy", Size: 1}}}
	})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	srv, addr, err := m.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	_, port, _ := strings.Cut(addr, ":")
	for _, tc := range []struct {
		host string
		want int
	}{
		{"rebind.attacker.example:" + port, http.StatusMisdirectedRequest},
		{"127.0.0.1:1", http.StatusMisdirectedRequest},
		{"127.0.0.1:" + port, http.StatusOK},
		{"LOCALHOST:" + port, http.StatusOK},
		{"[::1]:" + port, http.StatusOK},
	} {
		req, _ := http.NewRequest("GET", "http://"+addr+Path, nil)
		req.Host = tc.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		leaked := strings.Contains(string(b), "secret-session-0042")
		if resp.StatusCode != tc.want || leaked != (tc.want == http.StatusOK) {
			t.Errorf("Host %s: %s (session named: %v), want %d", tc.host, resp.Status, leaked, tc.want)
		}
	}
}

// TestMetricsConnectionsEnd: connections that idle, or announce a body
// they never send, are closed by the server after its limits.
func TestMetricsConnectionsEnd(t *testing.T) {
	saved := limits
	limits = httpserve.Limits{ReadTimeout: time.Second, WriteTimeout: time.Second, IdleTimeout: time.Second, MaxHeaderBytes: 4096, MaxConns: 64}
	t.Cleanup(func() { limits = saved })
	m := New()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	srv, addr, err := m.Serve(ctx, "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if left := testutil.HeldConnections(t, addr, Path, 50, time.Minute); left != 0 {
		t.Errorf("%d of 50 held connections still open a minute after the server's 1 s limits", left)
	}
}
