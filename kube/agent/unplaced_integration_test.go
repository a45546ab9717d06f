package agent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// TestRunUnplacedSaysWhy: with no node agent standing for placement (a
// fleet whose nodes no one labelled airlock.dev/placement=true), airlock
// --context run does not wait in silence: after 10 s without a status it
// says no placement controller looked at the Session and how to find
// out, keeps waiting, and on an interrupt leaves the Session, saying so.
func TestRunUnplacedSaysWhy(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	cp, _ := kubetest.StartWithCRDs(t)
	kubeconfig := cp.Kubeconfig(t)
	manifest := filepath.Join(t.TempDir(), "waits.hcl")
	if err := os.WriteFile(manifest, fmt.Appendf(nil, "session \"waits\" {\n  image = %q\n  command = [\"true\"]\n}\n", daemontest.AgentImage), 0o644); err != nil {
		t.Fatal(err)
	}
	run := exec.CommandContext(t.Context(), filepath.Join(env.BinDir, "airlock"), "--kubeconfig", kubeconfig, "run", "-f", manifest)
	run.Env = []string{"HOME=/nonexistent"}
	var stderr daemontest.SyncBuffer
	run.Stderr = &stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	kubetest.Eventually(t, 40*time.Second, "airlock run says the Session is unplaced", func() (bool, string) {
		return strings.Contains(stderr.String(), "has not been looked at by a placement controller"), stderr.String()
	})
	if waited := time.Since(began); waited < 9*time.Second {
		t.Errorf("said it after %s, want after 10 s without a status", waited)
	}
	msg := stderr.String()
	for _, want := range []string{"airlock.dev/placement=true", "kubectl get lease -n airlock-system airlock-placement", "still waiting"} {
		if !strings.Contains(msg, want) {
			t.Errorf("the message does not say %q:\n%s", want, msg)
		}
	}
	if err := run.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err = run.Wait()
	if err == nil || !strings.Contains(stderr.String(), "runs on") {
		t.Errorf("interrupted: %v, stderr:\n%s\nwant an error saying the Session runs on", err, stderr.String())
	}
	if n := strings.Count(stderr.String(), "has not been looked at"); n != 1 {
		t.Errorf("said it %d times, want once", n)
	}
}
