package daemon_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// worldHosts adds hosts to the test world once per test run.
func worldHost(t testing.TB, name, ip string) netip.Addr {
	t.Helper()
	a := netip.MustParseAddr(ip)
	if err := h.World.AddHost(name, a); err != nil && !strings.Contains(err.Error(), "exists") {
		t.Fatalf("world host %s: %v", name, err)
	}
	return a
}

func TestEgressPerimeter(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	worldHost(t, "api.corp.test", "10.214.0.10")
	other := worldHost(t, "db.other.test", "10.214.0.11")
	worldHost(t, "a.corp.test", "10.214.0.12")
	worldHost(t, "evilcorp.test", "10.214.0.13")
	if err := h.World.AddCNAME("alias.corp.test", "db.other.test"); err != nil && !strings.Contains(err.Error(), "exists") {
		t.Fatal(err)
	}

	p := policy("sleep", "300")
	p.Egress = &policies.Egress{Allow: []string{"api.corp.test:80", "*.corp.test:80"}}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })

	curl := func(url string) (string, int) {
		return execOut(t, s.ID, "curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", url)
	}
	if out, code := curl("http://api.corp.test/"); code != 0 || out != "200" {
		t.Errorf("allowed name: curl exit %d %q, want HTTP 200", code, out)
	}
	if out, code := curl("http://a.corp.test/"); code != 0 || out != "200" {
		t.Errorf("wildcard name: curl exit %d %q, want HTTP 200", code, out)
	}
	start := time.Now()
	if out, code := curl("http://api.corp.test:8080/"); code == 0 {
		t.Errorf("allowed name on another port reached: %q", out)
	}
	if d := time.Since(start); d > 3*time.Second {
		t.Errorf("blocked connection took %v to fail; it should be rejected fast", d)
	}
	if out, code := curl("http://" + other.String() + "/"); code == 0 {
		t.Errorf("direct IP of an unlisted host reached: %q", out)
	}
	if out, code := curl("http://169.254.169.254/"); code == 0 {
		t.Errorf("metadata address reached: %q", out)
	}
	for _, name := range []string{"evilcorp.test", "corp.test", "alias.corp.test", "s3cr3t-data.exfil.test"} {
		out, _ := execOut(t, s.ID, "dig", "+time=2", "+tries=1", name)
		if !strings.Contains(out, "status: REFUSED") {
			t.Errorf("dig %s: want REFUSED, got\n%s", name, out)
		}
	}
	if h.World.Queried("s3cr3t-data.exfil.test.") || h.World.Queried("s3cr3t-data.exfil.test") {
		t.Error("a refused name reached the world's DNS server")
	}
	// Other resolvers and DoT are out of reach.
	for _, args := range [][]string{
		{"dig", "+time=2", "+tries=1", "@" + h.World.DNSAddr().String(), "api.corp.test"},
		{"dig", "+tcp", "+time=2", "+tries=1", "@" + h.World.DNSAddr().String(), "api.corp.test"},
		{"nc", "-z", "-w", "2", h.World.DNSAddr().String(), "853"},
	} {
		if out, code := execOut(t, s.ID, args...); code == 0 && !strings.Contains(out, "timed out") {
			t.Errorf("%v reached the world's resolver: %s", args, out)
		}
	}
	// The resolver cannot be repointed.
	if out, code := execOut(t, s.ID, "sh", "-c", "echo nameserver 1.1.1.1 > /etc/resolv.conf"); code == 0 {
		t.Errorf("resolv.conf is writable: %q", out)
	}
	// The sandbox's own name is answered in the sandbox (git looks it up
	// for its default identity), not refused and audited by the proxy;
	// and /etc/hosts cannot point an allowed name elsewhere.
	hostname, _ := execOut(t, s.ID, "hostname")
	hostname = strings.TrimSpace(hostname)
	if out, code := execOut(t, s.ID, "getent", "ahosts", hostname); code != 0 || !strings.Contains(out, "127.0.1.1") {
		t.Errorf("getent ahosts %s: exit %d %q", hostname, code, out)
	}
	if out, code := execOut(t, s.ID, "sh", "-c", "echo 10.0.0.1 api.corp.test >> /etc/hosts"); code == 0 {
		t.Errorf("/etc/hosts is writable: %q", out)
	}

	evs, err := h.Daemon.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ev := range evs {
		seen[ev.Layer+" "+ev.Action+" "+ev.Subject] = true
	}
	if hostname == "" || seen["dns refused "+hostname] {
		t.Errorf("the sandbox's hostname %q went to the DNS proxy", hostname)
	}
	for _, want := range []string{
		"dns allowed api.corp.test", "dns refused s3cr3t-data.exfil.test",
		"net dropped " + other.String() + ":80", "net dropped 169.254.169.254:80",
	} {
		if !seen[want] {
			t.Errorf("audit lacks %q; have %v", want, keys(seen))
		}
	}

	// Stopping removes the session's network.
	if _, err := h.Daemon.Stop(ctx, s.ID, 0); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir("/run/netns")
	for _, e := range entries {
		if strings.Contains(e.Name(), s.ID) {
			t.Errorf("network namespace %s left after stop", e.Name())
		}
	}
}

func TestEgressNeedsDeclaration(t *testing.T) {
	testutil.RequiresRoot(t)
	// No egress block: loopback only, no resolver, nothing reachable.
	r := runSession(t, policy("sh", "-c", "ls /sys/class/net; curl -sS --max-time 3 http://10.214.0.10/ || echo unreachable"))
	if !strings.Contains(r.stdout, "unreachable") || strings.Contains(r.stdout, "eth0") {
		t.Errorf("session without egress: %q %q", r.stdout, r.stderr)
	}
}

func keys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestEgressNeverRangesWinOverManifest gives world hosts cloud metadata
// addresses and has a manifest allow them by address and by name: the
// gateway and the DNS proxy refuse both.
func TestEgressNeverRangesWinOverManifest(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	addrs := []netip.Addr{
		worldHost(t, "wireserver.test", "168.63.129.16"),
		worldHost(t, "alibaba-metadata.test", "100.100.100.200"),
		worldHost(t, "metadata.test", "169.254.169.254"),
	}
	ok := worldHost(t, "plain.test", "10.214.0.31")
	p := policy("sleep", "300")
	p.Egress = &policies.Egress{Allow: []string{"168.63.129.16", "100.100.100.200", "169.254.169.254", "*.test:80"}}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	curl := func(url string) (string, int) {
		return execOut(t, s.ID, "curl", "-sS", "--max-time", "3", "-o", "/dev/null", "-w", "%{http_code}", url)
	}
	if out, code := curl("http://plain.test/"); code != 0 || out != "200" {
		t.Fatalf("world host %v: curl exit %d %q", ok, code, out)
	}
	for _, a := range addrs {
		if out, code := curl("http://" + a.String() + "/"); code == 0 {
			t.Errorf("%v, allowed by the manifest, was reached: %q", a, out)
		}
	}
	for _, name := range []string{"wireserver.test", "alibaba-metadata.test", "metadata.test"} {
		out, _ := execOut(t, s.ID, "dig", "+time=2", "+tries=1", name)
		if !strings.Contains(out, "status: REFUSED") || !strings.Contains(out, "no session may reach it") {
			t.Errorf("dig %s: want REFUSED, got\n%s", name, out)
		}
	}
	evs, err := h.Daemon.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, ev := range evs {
		seen[ev.Layer+" "+ev.Action+" "+ev.Subject] = true
	}
	for _, want := range []string{"net dropped 168.63.129.16:80", "net dropped 100.100.100.200:80", "dns refused wireserver.test"} {
		if !seen[want] {
			t.Errorf("audit lacks %q; have %v", want, keys(seen))
		}
	}
}

// TestEgressAllowPrivate resolves an allowed name to a private address
// outside the range the daemon allows (the world's): a session pins it
// only when its manifest lists the range in allow_private.
func TestEgressAllowPrivate(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	internal := worldHost(t, "intranet.corp.test", "10.99.0.5")
	start := func(allowPrivate ...string) string {
		p := policy("sleep", "300")
		p.Egress = &policies.Egress{Allow: []string{"intranet.corp.test:80"}, AllowPrivate: allowPrivate}
		s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
		return s.ID
	}
	without, with := start(), start("10.99.0.0/16")

	out, _ := execOut(t, without, "dig", "+time=2", "+tries=1", "intranet.corp.test")
	if !strings.Contains(out, "status: REFUSED") || !strings.Contains(out, "10.99.0.5 is in private range 10.0.0.0/8") {
		t.Errorf("without allow_private: want REFUSED naming the range, got\n%s", out)
	}
	if out, code := execOut(t, without, "curl", "-sS", "--max-time", "3", "http://"+internal.String()+"/"); code == 0 {
		t.Errorf("without allow_private, %v was reached: %q", internal, out)
	}
	if out, code := execOut(t, with, "curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", "http://intranet.corp.test/"); code != 0 || out != "200" {
		t.Errorf("with allow_private: curl exit %d %q, want HTTP 200", code, out)
	}

	evs, err := h.Daemon.Audit(ctx, without)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		if ev.Layer == "dns" && ev.Action == "refused" && ev.Subject == "intranet.corp.test" {
			d := fmt.Sprint(ev.Fields["dropped"])
			found = found || strings.Contains(d, internal.String()) && strings.Contains(d, "allow_private")
		}
	}
	if !found {
		t.Errorf("no audit event names the dropped address and why; have %+v", evs)
	}
}

// A session created before a daemon restart and started after it keeps
// its network: its allowed names resolve and connect. (The restarted
// daemon re-adopts it; its namespace and DNS registration must survive.)
func TestEgressCreatedSessionKeepsNetworkAcrossRestart(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	worldHost(t, "restart.corp.test", "10.214.0.14")
	p := policy("sleep", "300")
	p.Egress = &policies.Egress{Allow: []string{"restart.corp.test:80"}}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	if err := h.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := h.Daemon.Start(ctx, s.ID); err != nil {
		t.Fatal(err)
	}
	out, code := execOut(t, s.ID, "curl", "-sS", "--max-time", "5", "-o", "/dev/null", "-w", "%{http_code}", "http://restart.corp.test/")
	if code != 0 || out != "200" {
		t.Errorf("allowed name from a session created before the restart: curl exit %d %q, want HTTP 200", code, out)
	}
	evs, err := h.Daemon.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	allowed := false
	for _, ev := range evs {
		allowed = allowed || (ev.Layer == "dns" && ev.Action == "allowed" && ev.Subject == "restart.corp.test")
	}
	if !allowed {
		t.Error("its DNS decision after the restart is not in its audit")
	}
}
