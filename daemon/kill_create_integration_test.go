package daemon_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestKill9DuringCreate: airlockd killed while sessions with a workspace
// and a network are being created, at several points of the create. The
// next airlockd keeps each session whose create finished and removes what
// the others left half-made; once every session is removed and airlockd
// stopped, the census finds nothing of it: no cgroup, mount, process,
// namespace or directory.
func TestKill9DuringCreate(t *testing.T) {
	d, root, ctrd := startFaultDaemon(t)
	for _, delay := range []time.Duration{150 * time.Millisecond, 400 * time.Millisecond, 700 * time.Millisecond, time.Second} {
		p := policy("sleep", "300")
		p.Workspaces = []policies.Workspace{{HostPath: t.TempDir(), Target: "/w", Mode: policies.ModeOverlay,
			DefaultDenyRead: true, OnExit: policies.OnExitDiscard}}
		body, _ := json.Marshal(api.CreateRequest{Policy: p, Start: true})
		for range 3 {
			go func() {
				req, _ := http.NewRequest("POST", "http://airlock/v1/sessions", bytes.NewReader(body))
				if resp, err := d.http.Do(req); err == nil {
					resp.Body.Close()
				}
			}()
		}
		time.Sleep(delay)
		if err := d.cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = d.cmd.Wait()
		d = startProcDaemon(t, root, "--stop-containerd")
		t.Cleanup(d.cleanup)
		var list []api.Session
		d.do("GET", "/v1/sessions", nil, &list)
		t.Logf("killed %v into three creates: %d sessions kept", delay, len(list))
		for _, s := range list {
			d.do("DELETE", "/v1/sessions/"+s.ID+"?force=true", nil, nil)
		}
	}
	if ctrs, ls := sessionObjects(t, ctrd.Address()); ctrs != 0 || ls != 0 {
		t.Errorf("left in containerd: %d containers, %d leases", ctrs, ls)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Wait(); err != nil {
		t.Errorf("airlockd exit after SIGTERM: %v", err)
	}
	wantNothingLeft(t, root)
}
