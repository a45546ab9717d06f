package agent_test

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// TestExecAndStopThroughContext: `airlock --context` exec and stop reach a
// Session's node endpoint. carol, whose Role grants sessions/exec
// (create) and sessions/stop (update), runs a command in the sandbox (its
// output and exit code hers, stdin streamed with -i) and stops the
// Session; dave, who may read Sessions and their logs, is refused both,
// 403 naming the right, and the Session runs on. The session's audit
// records each exec and the stop with the Kubernetes user who asked.
func TestExecAndStopThroughContext(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	k := startCluster(t)
	ctx := t.Context()
	n := startNode(t, env, k.kubeconfig, "node-x", 14, "--node-capacity", "2", "--kubernetes-advertise-address", "localhost")

	roles := map[string][]rbacv1.PolicyRule{
		"carol": {
			{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessions"}, Verbs: []string{"get", "list", "create", "delete"}},
			{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessions/exec", "sessions/attach"}, Verbs: []string{"create"}},
			{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessions/stop"}, Verbs: []string{"update"}},
			{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessions/audit"}, Verbs: []string{"get"}},
		},
		"dave": {
			{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessions"}, Verbs: []string{"get", "list"}},
			{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessions/log"}, Verbs: []string{"get"}},
		},
	}
	kubeconfig, _ := userContexts(t, k, "default", roles)
	airlock := airlockAs(t, env, kubeconfig)

	k.create("target", sleep("300"))
	s := k.waitState("target", v1alpha1.SessionRunning, 60*time.Second)

	out, errOut, code := airlock("carol", "", "exec", "target", "--", "sh", "-c", "echo in the sandbox; echo to stderr >&2; exit 5")
	if out != "in the sandbox\n" || !strings.Contains(errOut, "to stderr") || code != 5 {
		t.Errorf("carol's exec: exit %d, stdout %q, stderr %q; want exit 5 and the command's lines", code, out, errOut)
	}
	if out, errOut, code := airlock("carol", "piped through\n", "exec", "-i", "target", "--", "cat"); out != "piped through\n" || code != 0 {
		t.Errorf("carol's exec -i: exit %d, stdout %q, stderr %q; want stdin back", code, out, errOut)
	}
	for _, args := range [][]string{{"exec", "target", "--", "true"}, {"stop", "target"}} {
		_, errOut, code := airlock("dave", "", args...)
		want := map[string]string{"exec": "may not create sessions/exec", "stop": "may not update sessions/stop"}[args[0]]
		if code == 0 || !strings.Contains(errOut, want) {
			t.Errorf("dave's %s: exit %d, stderr %q; want a refusal saying %q", args[0], code, errOut, want)
		}
	}
	if got := k.get("target"); got.Status.State != v1alpha1.SessionRunning {
		t.Fatalf("after dave's refused stop: %s", got.Status.State)
	}

	// run -it: the Session's terminal, through the node endpoint, on a
	// real pseudo-terminal here. Keys typed reach the sandbox's terminal
	// once attached (those typed before wait in this terminal); its exit
	// code is airlock's.
	manifest := filepath.Join(t.TempDir(), "tty.hcl")
	if err := os.WriteFile(manifest, fmt.Appendf(nil, "session \"tty\" {\n  image = %q\n  command = [\"sh\", \"-c\", \"read line; echo got:$line; exit 4\"]\n}\n", daemontest.AgentImage), 0o644); err != nil {
		t.Fatal(err)
	}
	tty := exec.CommandContext(ctx, filepath.Join(env.BinDir, "airlock"), "--kubeconfig", kubeconfig, "--context", "carol", "run", "--rm", "-it", "-f", manifest)
	tty.Env = []string{"HOME=/nonexistent", "PATH=/usr/bin:/bin", "TERM=xterm"}
	ptmx, err := pty.StartWithSize(tty, &pty.Winsize{Rows: 24, Cols: 80})
	if err != nil {
		t.Fatal(err)
	}
	var screen daemontest.SyncBuffer
	go io.Copy(&screen, ptmx)
	exited := make(chan int, 1)
	go func() {
		err := tty.Wait()
		var ee *exec.ExitError
		switch {
		case err == nil:
			exited <- 0
		case errors.As(err, &ee):
			exited <- ee.ExitCode()
		default:
			exited <- -1
		}
	}()
	code = -2
	for deadline := time.Now().Add(60 * time.Second); code == -2; {
		if time.Now().After(deadline) {
			tty.Process.Kill()
			t.Fatalf("airlock run -it through --context: no exit after 60 s; terminal:\n%q", screen.String())
		}
		io.WriteString(ptmx, "hello\r")
		select {
		case code = <-exited:
		case <-time.After(time.Second):
		}
	}
	ptmx.Close()
	if code != 4 || !strings.Contains(screen.String(), "got:hello") {
		t.Errorf("carol's run -it: exit %d, terminal %q; want exit 4 and got:hello", code, screen.String())
	}

	if out, errOut, code := airlock("carol", "", "stop", "--time", "0", "target"); code != 0 || strings.TrimSpace(out) != "target" {
		t.Errorf("carol's stop: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if got := k.waitState("target", v1alpha1.SessionExited, 30*time.Second); got.Status.Reason != "stopped" {
		t.Errorf("stopped Session: reason %q, want stopped", got.Status.Reason)
	}
	events, err := n.API.Audit(ctx, s.Status.ID)
	if err != nil {
		t.Fatal(err)
	}
	var saw []string
	for _, ev := range events {
		if ev.Layer == "session" && (ev.Action == "exec" || ev.Action == "stop_requested") {
			saw = append(saw, ev.Action+" "+ev.Subject+" by "+ev.Fields["by"].(string))
		}
	}
	want := []string{
		`exec sh -c echo in the sandbox; echo to stderr >&2; exit 5 by kubernetes user system:serviceaccount:default:carol`,
		`exec cat by kubernetes user system:serviceaccount:default:carol`,
		`stop_requested  by kubernetes user system:serviceaccount:default:carol`,
	}
	if strings.Join(saw, "\n") != strings.Join(want, "\n") {
		t.Errorf("the session's audit:\n%s\nwant:\n%s", strings.Join(saw, "\n"), strings.Join(want, "\n"))
	}
	k.deleteAll(60 * time.Second)
}
