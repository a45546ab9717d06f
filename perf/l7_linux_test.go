package perf

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestMeasureL7 runs the L7 section with small bounds: every path works,
// each is what it is called (the certificate the client saw, the audit
// events the gateway wrote), and nothing is left behind.
func TestMeasureL7(t *testing.T) {
	testutil.RequiresRoot(t)
	if _, err := exec.LookPath("nsenter"); err != nil {
		t.Fatal("nsenter is required (util-linux)")
	}
	perfload := filepath.Join(t.TempDir(), "perfload")
	build := exec.Command("go", "build", "-o", perfload, "./cmd/perfload")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build perfload: %v: %s", err, out)
	}
	cfg := L7Config{Perfload: perfload, Rounds: 1, Requests: 20, DownloadBytes: 1 << 20, HandshakeTime: 300 * time.Millisecond, HandshakeConc: 2, IdleConns: 10,
		ProfileDir: t.TempDir(), Logf: t.Logf}
	l, err := MeasureL7(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(l.Latency) != 10 || len(l.Download) != 4 || len(l.Handshakes) != 4 || len(l.Idle) != 4 || len(l.Profiles) != 3 {
		t.Fatalf("rows: %d latency, %d download, %d handshakes, %d idle, %d profiles", len(l.Latency), len(l.Download), len(l.Handshakes), len(l.Idle), len(l.Profiles))
	}
	for _, r := range l.Latency {
		if r.Error != "" || r.LatencyUS.N != 20 || r.Conns != 1 {
			t.Errorf("latency %s %s: %+v", r.Protocol, r.Path, r)
		}
		if want := r.Path == L7PathTerminated; (r.Issuer == sessionCAName) != want {
			t.Errorf("latency %s %s: certificate from %q", r.Protocol, r.Path, r.Issuer)
		}
	}
	for _, d := range l.Download {
		if d.Error != "" || d.Gbps.N != 1 || d.Bytes != 1<<20 || d.ClientCPU.N != 1 {
			t.Errorf("download %s: %+v", d.Path, d)
		}
	}
	if d := l.download(L7PathL3); d.Ratio != 1 || d.Target != 0 {
		t.Errorf("L3 download: ratio %v, target %v", d.Ratio, d.Target)
	}
	for _, h := range l.Handshakes {
		if h.Error != "" || h.PerSecond.N != 1 || h.PerSecond.Median <= 0 {
			t.Errorf("handshakes %s: %+v", h.Path, h)
		}
	}
	for _, id := range l.Idle {
		if id.Error != "" || id.Conns != 10 || id.Goroutines < 1 {
			t.Errorf("idle %s %s: %+v", id.Path, id.Proto, id)
		}
	}
	// A small load may leave a profile without samples.
	for _, p := range l.Profiles {
		if p.Error != "" {
			t.Errorf("profile %s: %+v", p.Name, p)
		} else if _, err := os.Stat(filepath.Join(cfg.ProfileDir, p.Name+".txt")); err != nil {
			t.Error(err)
		}
	}
	// The L3 session never reached the gateway; the pass-through one left
	// a connection event per HTTPS connection and a request event per
	// plain HTTP request; the terminated one only terminated requests.
	if len(l.Audit["perf-l3"]) != 0 {
		t.Errorf("L3 session audited by the gateway: %v", l.Audit["perf-l3"])
	}
	if a := l.Audit["perf-pass"]; a["l7 connection allowed"] == 0 || a["l7 request allowed"] < 2*cfg.Requests {
		t.Errorf("pass-through session's audit: %v", a)
	}
	// The fast path's session: a decision per HTTPS connection, the
	// kernel's, and its end (those of the last connections may come after
	// the section read the log).
	if a := l.Audit["perf-fast"]; a["l7 connection allowed, kernel fast path"] == 0 || len(a) != 2 ||
		a["l7 connection closed, kernel fast path"] == 0 || a["l7 connection closed, kernel fast path"] > a["l7 connection allowed, kernel fast path"] {
		t.Errorf("fast path session's audit: %v", a)
	}
	for k, n := range l.Audit["perf-term"] {
		if k != "l7 request allowed, terminated" || n < 2*cfg.Requests {
			t.Errorf("terminated session's audit: %s ×%d", k, n)
		}
	}
	if len(l.Leftovers) != 0 {
		t.Errorf("left behind: %v", l.Leftovers)
	}
	md := (&Report{L7: l}).Markdown()
	if !strings.Contains(md, "## 8. L7 gateway") || !strings.Contains(md, `l7 = "check", inspect = "all" }`) {
		t.Errorf("report:\n%s", md)
	}
}
