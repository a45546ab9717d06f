package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func TestWarmPoolFromTheCLI(t *testing.T) {
	testutil.RequiresRoot(t)
	m := filepath.Join(t.TempDir(), "pooled.hcl")
	if err := os.WriteFile(m, []byte(`session "e2e-pooled" {
  image   = "airlock/agent:bookworm"
  command = ["true"]
  pool {
    size = 1
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := airlock(t, "", "run", "--rm", "-f", m, "--", "echo", "cold"); r.code != 0 || r.stdout != "cold\n" {
		t.Fatalf("first run: %+v", r)
	}
	var pool api.Pool
	for deadline := time.Now().Add(60 * time.Second); ; {
		r := airlock(t, "", "pool", "ls", "--json")
		var pools []api.Pool
		if err := json.Unmarshal([]byte(r.stdout), &pools); err != nil {
			t.Fatalf("pool ls --json: %v: %+v", err, r)
		}
		for _, p := range pools {
			if p.Label == "e2e-pooled" {
				pool = p
			}
		}
		if pool.Ready == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pool never ready: %+v", pools)
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Cleanup(func() { airlock(t, "", "pool", "rm", pool.Key) })
	if r := airlock(t, "", "pool", "ls"); !strings.Contains(r.stdout, pool.Key) || !strings.Contains(r.stdout, "e2e-pooled") {
		t.Errorf("pool ls table: %+v", r)
	}

	r := airlock(t, "", "run", "-d", "-f", m, "--", "sh", "-c", "echo warm; sleep 300")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id != pool.ReadyIDs[0] {
		t.Fatalf("run -d: %+v, want the prepared sandbox %s", r, pool.ReadyIDs[0])
	}
	t.Cleanup(func() { airlock(t, "", "rm", "-f", id) })
	r = airlock(t, "", "inspect", id)
	var s api.Session
	if err := json.Unmarshal([]byte(r.stdout), &s); err != nil || !s.Warm || s.State != api.StateRunning {
		t.Errorf("inspect of a warm session: %v %+v", err, r)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if r := airlock(t, "", "logs", id); r.stdout == "warm\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no output from the warm session: %+v", airlock(t, "", "logs", id))
		}
		time.Sleep(20 * time.Millisecond)
	}
	if r := airlock(t, "", "rm", "-f", id); r.code != 0 {
		t.Errorf("rm: %+v", r)
	}
	if r := airlock(t, "", "pool", "rm", pool.Key); r.code != 0 {
		t.Errorf("pool rm: %+v", r)
	}
	if r := airlock(t, "", "pool", "rm", pool.Key); r.code == 0 || !strings.Contains(r.stderr, "no pool") {
		t.Errorf("pool rm of a removed pool: %+v, want an error naming it", r)
	}
	if r := airlock(t, "", "ps", "-a", "-q"); strings.TrimSpace(r.stdout) != "" {
		t.Errorf("sessions left: %q", r.stdout)
	}
}
