package daemon_test

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// TestSessionCannotReachHostListeners probes, from inside a session
// with egress, the host's own services where the console and the metrics
// could listen: 127.0.0.1, the sandbox's default gateway, and every
// address of the host, on the ports of airlockd's loopback console and
// metrics and of a listener on the unspecified address (what
// --console-allow-remote --console-listen 0.0.0.0:PORT gives). It fails
// when the sandbox reaches any of them.
func TestSessionCannotReachHostListeners(t *testing.T) {
	ctx := t.Context()
	tag := "r" + runtime.Prefix(t.Name())[2:]
	w, err := world.Start(ctx, world.Config{Prefix: tag})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = w.Close() })
	web := netip.MustParseAddr("10.214.0.62")
	if err := w.AddHost("web.reach.test", web); err != nil {
		t.Fatal(err)
	}
	// A host service on every interface.
	all, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer all.Close()
	go http.Serve(all, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "host-service") }))
	allPort := all.Addr().(*net.TCPAddr).Port

	metricsAddr, consoleAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
	d, _, _ := startFaultDaemon(t, "--uplink", "netns:"+w.NetnsName(),
		"--dns-upstream", w.DNSAddr().String(), "--allow-private", w.Net().String(),
		"--metrics-listen", metricsAddr, "--console-listen", consoleAddr)
	client := api.NewClient(d.socket)
	defer client.Close()

	p := policy("sleep", "300")
	p.Egress = &policies.Egress{Allow: []string{"web.reach.test:80"}}
	s, err := client.CreateSession(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	exec := func(args ...string) (string, int) {
		var out bytes.Buffer
		code, err := client.Exec(ctx, s.ID, api.ExecRequest{Command: args}, nil, &out, &out)
		if err != nil {
			t.Fatalf("exec %v: %v", args, err)
		}
		return out.String(), code
	}
	routes, _ := exec("cat", "/proc/net/route")
	var gw string
	for _, l := range strings.Split(routes, "\n") {
		f := strings.Fields(l)
		if len(f) > 2 && f[1] == "00000000" {
			b, err := hex.DecodeString(f[2])
			if err == nil && len(b) == 4 {
				gw = fmt.Sprintf("%d.%d.%d.%d", b[3], b[2], b[1], b[0])
			}
		}
	}
	t.Logf("sandbox default gateway %q", gw)
	targets := []string{"127.0.0.1"}
	if gw != "" {
		targets = append(targets, gw)
	}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if pfx, err := netip.ParsePrefix(a.String()); err == nil && pfx.Addr().Is4() && !pfx.Addr().IsLoopback() {
			targets = append(targets, pfx.Addr().String())
		}
	}
	_, mport, _ := net.SplitHostPort(metricsAddr)
	_, cport, _ := net.SplitHostPort(consoleAddr)
	reached := 0
	for _, host := range targets {
		for _, port := range []string{mport, cport, fmt.Sprint(allPort)} {
			u := "http://" + net.JoinHostPort(host, port) + "/"
			out, code := exec("curl", "-sS", "--max-time", "3", "-o", "/dev/null", "-w", "%{http_code}", u)
			t.Logf("sandbox -> %s: curl exit %d %q", u, code, strings.TrimSpace(out))
			if code == 0 {
				reached++
			}
		}
	}
	if reached > 0 {
		t.Errorf("ATTACK SUCCEEDED: the sandbox reached %d host listeners", reached)
	}
}
