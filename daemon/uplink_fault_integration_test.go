package daemon_test

import (
	"bytes"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// TestUplinkNamespaceRemoved: the namespace a daemon's `--uplink
// netns:NAME` points at is removed under a running egress session, then
// made again under the same name. While it is gone the session's requests
// fail at once with an error that says the uplink is down (the L7
// gateway's 502, its audit, and the session's inspect warnings), and the
// session keeps running, also through an airlockd kill and restart; when
// the namespace is back the gateway's uplink is rebuilt into it and the
// same session reaches the world again. At the end nothing of the daemon
// is left.
func TestUplinkNamespaceRemoved(t *testing.T) {
	ctx := t.Context()
	tag := "u" + runtime.Prefix(t.Name())[2:]
	web := netip.MustParseAddr("10.214.0.60")
	newWorld := func() *world.World {
		t.Helper()
		w, err := world.Start(ctx, world.Config{Prefix: tag})
		if err != nil {
			t.Fatal(err)
		}
		if err := w.AddHost("web.uplink.test", web); err != nil {
			t.Fatal(err)
		}
		return w
	}
	w1 := newWorld()
	closed := false
	t.Cleanup(func() {
		if !closed {
			_ = w1.Close()
		}
	})
	uplinkArgs := []string{"--uplink", "netns:" + w1.NetnsName(),
		"--dns-upstream", w1.DNSAddr().String(), "--allow-private", w1.Net().String()}
	args := append([]string{"--stop-containerd"}, uplinkArgs...)
	d, root, _ := startFaultDaemon(t, uplinkArgs...)
	client := api.NewClient(d.socket)
	defer func() { client.Close() }()

	p := policy("sleep", "300")
	p.Egress = &policies.Egress{Allow: []string{"web.uplink.test:80"}, L7: policies.L7Check}
	s, err := client.CreateSession(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	// curl returns the body and, on its last line, the status.
	curl := func() (body, status string, exit int) {
		t.Helper()
		var out bytes.Buffer
		code, err := client.Exec(ctx, s.ID, api.ExecRequest{Command: []string{
			"curl", "-sS", "--max-time", "5", "-w", "\n%{http_code}", "http://web.uplink.test/"}}, nil, &out, &out)
		if err != nil {
			t.Fatalf("exec curl: %v", err)
		}
		o := strings.TrimSpace(out.String())
		i := strings.LastIndexByte(o, '\n')
		return o[:max(i, 0)], o[i+1:], code
	}
	if _, status, code := curl(); code != 0 || status != "200" {
		t.Fatalf("before the uplink namespace is removed: curl exit %d, status %s", code, status)
	}

	// The namespace goes, and with it the uplink veth.
	if err := w1.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	removed := time.Now()
	for {
		body, status, _ := curl()
		if status == "502" && strings.Contains(body, "uplink") {
			break
		}
		if time.Since(removed) > 10*time.Second {
			t.Fatalf("with the uplink namespace removed: status %s %q, want a 502 saying the uplink is down", status, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if took := time.Since(removed); took > 8*time.Second {
		t.Errorf("the first clear error came %v after the uplink went", took)
	}
	if st := d.inspect(s.ID); st.State != api.StateRunning || !strings.Contains(strings.Join(st.Warnings, "\n"), "uplink") {
		t.Errorf("inspect with the uplink down: %s, warnings %q; want running, with a warning about the uplink", st.State, st.Warnings)
	}
	evs, err := client.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	var audited bool
	for _, ev := range evs {
		if ev.Layer == "l7" && strings.Contains(ev.Reason, "uplink") {
			audited = true
		}
	}
	if !audited {
		t.Errorf("no l7 audit event says the uplink is down: %+v", evs)
	}

	// airlockd killed and started again while the uplink is down: it
	// adopts the gateway with its uplink down, and says so.
	if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = d.cmd.Wait()
	d = startProcDaemon(t, root, args...)
	t.Cleanup(d.cleanup)
	client.Close()
	client = api.NewClient(d.socket)
	if st := d.inspect(s.ID); st.State != api.StateRunning || !strings.Contains(strings.Join(st.Warnings, "\n"), "uplink") {
		t.Errorf("inspect after a restart with the uplink down: %s, warnings %q; want running, with a warning about the uplink", st.State, st.Warnings)
	}
	// The new daemon's DNS proxy has no cached answer: the name does not
	// resolve, and the audit says why.
	if body, status, code := curl(); code != 6 {
		t.Errorf("after a restart with the uplink down: curl exit %d, status %s %q; want 6 (name not resolved)", code, status, body)
	}
	evs, err = client.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	audited = false
	for _, ev := range evs {
		if ev.Layer == "dns" && strings.Contains(ev.Reason, "uplink down") {
			audited = true
		}
	}
	if !audited {
		t.Errorf("no dns audit event says the uplink is down: %+v", evs)
	}

	// The namespace comes back under the same name: the gateway's uplink
	// is rebuilt into it and the session reaches the world again.
	w2 := newWorld()
	t.Cleanup(func() { _ = w2.Close() })
	back := time.Now()
	for {
		body, status, code := curl()
		if code == 0 && status == "200" {
			break
		}
		if time.Since(back) > 20*time.Second {
			t.Fatalf("the uplink namespace is back for %v: curl exit %d, status %s %q; want 200", time.Since(back).Round(time.Second), code, status, body)
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Logf("uplink rebuilt %v after its namespace returned", time.Since(back).Round(time.Millisecond))
	if st := d.inspect(s.ID); strings.Contains(strings.Join(st.Warnings, "\n"), "uplink") {
		t.Errorf("inspect after the uplink was rebuilt: warnings %q", st.Warnings)
	}

	if code := d.do("DELETE", "/v1/sessions/"+s.ID+"?force=true", nil, nil); code != 204 {
		t.Errorf("remove: %d", code)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("airlockd exit after SIGTERM: %v", err)
	}
	// Nothing of the daemon is left: not the old uplink's pieces, not the
	// rebuilt one's peer in the new namespace.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		c := daemontest.TakeCensus(root, w2.NetnsPath())
		if c.Total() == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("left behind after airlockd stopped: %s", c)
			break
		}
	}
}
