package perf

import (
	"context"
	"crypto/rand"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/dnsproxy"
	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/perf/load"
	"github.com/airlock-sandbox/airlock/policies"
)

// BenchmarkPerimeterDNS is the DNS section's loads (hack/perf.sh -only
// dns) on the real path, in one process: the perimeter as airlockd opens
// it (egress.Open: the gateway namespace, its nftables rules, the DNS
// proxy), a world namespace as its uplink whose DNS server
// (internal/world) answers, a session's network namespace for the
// clients, and the session's audit log written as the daemon writes it
// (the perimeter's DNS events through audit.Log.EmitDecision). "direct"
// asks the world's server from the gateway namespace, as the harness's
// baseline does. Clients, proxy and the world's server share the process
// (the harness runs them in three), so a CPU profile (go test
// -cpuprofile) shows all three: the proxy's goroutines are the ones under
// dnsproxy.(*udpServer). Loads: cache hits over 50 names and unique
// names (every query forwarded, NXDOMAIN upstream), from 16 clients and
// (for latency) from one.
func BenchmarkPerimeterDNS(b *testing.B) {
	testutil.RequiresRoot(b)
	ctx := context.Background()
	prefix := "pd" + strings.ToLower(rand.Text()[:4])
	w, err := world.Start(ctx, world.Config{Prefix: "pw" + prefix[2:]})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		if err := w.Close(); err != nil {
			b.Errorf("close world: %v", err)
		}
	})
	for i := range DNSNameCount {
		if err := w.AddHost(fmt.Sprintf("d%d.%s", i, DNSZone), netip.MustParseAddr("10.214.0.20")); err != nil {
			b.Fatal(err)
		}
	}
	perim, err := egress.Open(ctx, prefix, egress.Config{
		Uplink:       "netns:" + w.NetnsName(),
		DNSUpstreams: []string{w.DNSAddr().String()},
		AllowPrivate: []netip.Prefix{w.Net()},
		DNSLimits:    dnsproxy.Limits{Rate: 1e6}, // as the harness runs airlockd
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := perim.Close(cctx); err != nil {
			b.Errorf("close perimeter: %v", err)
		}
		if err := netns.CleanupDir(cctx, netns.DefaultDir, prefix); err != nil {
			b.Errorf("clean up: %v", err)
		}
		if left, err := netns.Leftovers(netns.DefaultDir, prefix, w.NetnsPath()); err != nil || len(left) > 0 {
			b.Errorf("left behind: %v %v", left, err)
		}
	})
	dir := b.TempDir()
	log := audit.Open(filepath.Join(dir, audit.File))
	b.Cleanup(func() { _ = log.Close() })
	s, err := perim.AddSession(ctx, "perf-dns", egress.SessionConfig{
		Egress: &policies.Egress{Allow: []string{"*." + DNSZone, "*." + MissZone}}, Dir: dir, Audit: log.EmitDecision})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = perim.Remove(context.Background(), "perf-dns", nil) })
	resolver, err := load.ResolvConfServer(s.ResolvConf())
	if err != nil {
		b.Fatal(err)
	}
	sandbox := netns.Dialer(s.NetnsPath())
	gw := netns.Dialer(filepath.Join(netns.DefaultDir, prefix+"-gw"))
	upstream := w.DNSAddr().String() + ":53"
	names, _ := load.ExpandNames([]string{"d%d." + DNSZone}, DNSNameCount)

	round := 0
	for _, l := range []struct {
		name    string
		unique  bool
		clients int
	}{{"hit", false, 16}, {"miss", true, 16}, {"hit-latency", false, 1}, {"miss-latency", true, 1}} {
		for _, side := range []string{"direct", "proxy"} {
			b.Run(l.name+"/"+side, func(b *testing.B) {
				cfg := load.DNSConfig{Server: resolver, Dial: sandbox, Concurrency: l.clients, Timeout: 2 * time.Second}
				if side == "direct" {
					cfg.Server, cfg.Dial = upstream, gw
				}
				if l.unique {
					round++
					cfg.Unique = fmt.Sprintf("r%d.%s", round, MissZone)
				} else {
					cfg.Names = names
					warm := cfg
					warm.Count, warm.Concurrency = len(names), 1
					if _, err := load.RunDNS(ctx, warm); err != nil {
						b.Fatal(err)
					}
				}
				cfg.Count = b.N
				b.ResetTimer()
				res, err := load.RunDNS(ctx, cfg)
				if err != nil {
					b.Fatal(err)
				}
				if res.Answered < res.Sent*99/100 {
					b.Fatalf("%d of %d answered", res.Answered, res.Sent)
				}
				reportDNS(b, res)
			})
		}
	}
}
