package daemon_test

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// dnsFlood is a python3 program for the sandbox: for argv[1] seconds it
// sends A queries for random names under blocked.test to the session's
// resolver as fast as it can, without waiting for answers, and prints how
// many it sent.
const dnsFlood = `
import random, socket, struct, sys, time
ns = [l.split()[1] for l in open('/etc/resolv.conf') if l.startswith('nameserver')][0]
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setblocking(False)
end, sent = time.time() + float(sys.argv[1]), 0
while time.time() < end:
    name = 'r%x-%d.blocked.test' % (random.getrandbits(48), sent)
    q = struct.pack('>HHHHHH', random.getrandbits(16), 0x0100, 1, 0, 0, 0)
    q += b''.join(bytes([len(l)]) + l.encode() for l in name.split('.')) + b'\0' + struct.pack('>HH', 1, 1)
    try:
        s.sendto(q, (ns, 53))
        sent += 1
    except BlockingIOError:
        time.sleep(0.001)
    try:
        while True:
            s.recv(4096)
    except BlockingIOError:
        pass
print(sent)
`

// diskUsage sums the allocated size of the files under root on root's
// file system (container root file systems mounted below are skipped).
func diskUsage(t *testing.T, root string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(root, &st); err != nil {
		t.Fatal(err)
	}
	dev := st.Dev
	var total int64
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		var s syscall.Stat_t
		if err := syscall.Lstat(path, &s); err != nil {
			if os.IsNotExist(err) {
				return nil
			}
			return err
		}
		if s.Dev != dev {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		total += s.Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return total
}

// TestDiskFloodBounded runs the two reproductions of "the host's disk is
// the sandbox's to fill" side by side for a few seconds: `yes` as a
// session's command, and a session flooding its resolver with queries for
// random blocked names. --root must grow by less than the configured caps,
// both truncations must be visible (a marker in the output, events in the
// audit), and a session started meanwhile must run normally.
func TestDiskFloodBounded(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	worldHost(t, "api.corp.test", "10.214.0.10")
	const (
		logCap   = 1 << 20
		auditCap = 256 << 10
		flood    = 6 * time.Second
		// slack covers what any session adds under --root besides its
		// output and audit: state files, containerd's metadata, the
		// rootfs snapshots' upper directories.
		slack = 8 << 20
	)
	before := diskUsage(t, h.Root)

	yes := policy("yes")
	yes.Timeout = policies.Duration(flood)
	setCaps(&yes, logCap, auditCap)
	yesID := startSession(ctx, t, yes)

	dns := policy("python3", "-c", dnsFlood, strconv.Itoa(int(flood.Seconds())))
	dns.Egress = &policies.Egress{Allow: []string{"api.corp.test:80"}}
	setCaps(&dns, logCap, auditCap)
	dnsID := startSession(ctx, t, dns)

	// Another session, started while both flood: its output, exit code and
	// name resolution are what they would be on an idle daemon.
	time.Sleep(flood / 3)
	other := policy("sh", "-c", "getent hosts api.corp.test; echo hello; exit 3")
	other.Egress = &policies.Egress{Allow: []string{"api.corp.test:80"}}
	t0 := time.Now()
	r := runSession(t, other)
	if r.exit != 3 || !strings.Contains(r.stdout, "10.214.0.10") || !strings.HasSuffix(r.stdout, "hello\n") {
		t.Errorf("session beside the floods: exit %d, stdout %q, stderr %q; want exit 3, the address of api.corp.test, then hello", r.exit, r.stdout, r.stderr)
	}
	t.Logf("session beside the floods ran in %v", time.Since(t0).Round(time.Millisecond))
	assertDaemonServes(t)

	for _, id := range []string{yesID, dnsID} {
		if _, err := h.Daemon.Wait(ctx, id); err != nil {
			t.Fatalf("wait %s: %v", id, err)
		}
	}
	after := diskUsage(t, h.Root)
	grown := after - before
	t.Logf("--root grew by %d bytes (caps: output %d, audit %d per session)", grown, logCap, auditCap)
	if limit := int64(2*logCap + 2*auditCap + slack); grown > limit {
		t.Errorf("--root grew by %d bytes in %v, more than the caps allow (%d)", grown, flood, limit)
	}
	for _, id := range []string{yesID, dnsID} {
		for _, name := range []string{"stdout.log", "stderr.log", "audit.jsonl"} {
			matches, _ := filepath.Glob(filepath.Join(h.Root, "sessions", id, "*", name))
			matches2, _ := filepath.Glob(filepath.Join(h.Root, "sessions", id, name))
			for _, m := range append(matches, matches2...) {
				if st, err := os.Stat(m); err == nil {
					t.Logf("%s %s: %d bytes", id, name, st.Size())
				}
			}
		}
	}

	// The output says where it was cut and how much was dropped.
	var out bytes.Buffer
	if err := h.Daemon.Logs(ctx, yesID, runtime.LogsOptions{Stdout: &out, Stderr: &out}); err != nil {
		t.Fatal(err)
	}
	if out.Len() > logCap+4096 {
		t.Errorf("yes: %d bytes of output kept, cap %d", out.Len(), logCap)
	}
	if !strings.Contains(out.String(), "[airlock: output truncated") || !strings.Contains(out.String(), "bytes of stdout dropped]") {
		tail := out.String()[max(0, out.Len()-400):]
		t.Errorf("yes: the output has no truncation marker; it ends with %q", tail)
	}
	evs, err := h.Daemon.Audit(ctx, yesID)
	if err != nil {
		t.Fatal(err)
	}
	if ev := findEvent(evs, "session", "output_truncated"); ev == nil {
		t.Errorf("yes: the audit has no output_truncated event: %v", summarize(evs))
	} else if d, _ := ev.Fields["dropped_bytes"].(float64); d <= 0 {
		t.Errorf("yes: output_truncated does not say how much was dropped: %+v", ev)
	}

	var sent bytes.Buffer
	_ = h.Daemon.Logs(ctx, dnsID, runtime.LogsOptions{Stdout: &sent})
	t.Logf("dns flood: %s queries sent in %v", strings.TrimSpace(sent.String()), flood)

	// The audit of the DNS flood stays under its cap and says so.
	st, err := os.Stat(filepath.Join(h.Root, "sessions", dnsID, "audit.jsonl"))
	if err != nil {
		t.Fatal(err)
	}
	if st.Size() > auditCap {
		t.Errorf("dns flood: audit log is %d bytes, cap %d", st.Size(), auditCap)
	}
	evs, err = h.Daemon.Audit(ctx, dnsID)
	if err != nil {
		t.Fatal(err)
	}
	if findEvent(evs, "audit", "truncated") == nil || findEvent(evs, "audit", "dropped") == nil {
		t.Errorf("dns flood: the audit does not say it was truncated: %v", summarize(evs))
	}
	t.Logf("dns flood: audit %v", summarize(evs))
	// The daemon's own log (not under --root, but on the host's disk too)
	// gets a bounded number of lines from the flood.
	lines := 0
	for _, l := range strings.Split(h.Log.String(), "\n") {
		if strings.Contains(l, dnsID) && strings.Contains(l, "dns quer") {
			lines++
		}
	}
	t.Logf("dns flood: %d lines in the daemon's log", lines)
	if lines > 50 {
		t.Errorf("dns flood: %d lines in the daemon's log", lines)
	}
	if findEvent(evs, "session", "ended") == nil {
		t.Errorf("dns flood: the session's end is missing from its capped audit")
	}
}

func findEvent(evs []api.AuditEvent, layer, action string) *api.AuditEvent {
	for i := range evs {
		if evs[i].Layer == layer && evs[i].Action == action {
			return &evs[i]
		}
	}
	return nil
}

// summarize counts events by layer and action.
func summarize(evs []api.AuditEvent) map[string]int {
	m := map[string]int{}
	for _, ev := range evs {
		m[ev.Layer+" "+ev.Action]++
	}
	return m
}
