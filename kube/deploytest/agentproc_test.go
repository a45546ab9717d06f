package deploytest

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/agent"
	airlockruntime "github.com/airlock-sandbox/airlock/runtime"
)

// checkedAgentArgs are a DaemonSet's airlockd-kube arguments for node,
// with the test's own root, socket, admission file (the ConfigMap's
// policy) and session image archive for the container's paths; then the
// test's kubeconfig (in a pod: the in-cluster configuration), binaries,
// runtime and session pool. It fails the test unless airlockd-kube
// --check-config takes them.
func checkedAgentArgs(t *testing.T, env daemontest.Env, dsArgs []string, admission, kubeconfig, node, pool, root string) []string {
	t.Helper()
	admFile := filepath.Join(t.TempDir(), "admission.hcl")
	if err := os.WriteFile(admFile, []byte(admission), 0o644); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(dsArgs)
	for i, a := range args {
		args[i] = strings.NewReplacer("$(NODE_NAME)", node, "$(POD_IP)", "127.0.0.1").Replace(a)
	}
	// Two agents on one host: each its own endpoint port.
	args = setArg(t, args, "--kubernetes-listen", "127.0.0.1:0")
	args = setArg(t, args, "--admission", admFile)
	args = setArg(t, args, "--root", root)
	args = setArg(t, args, "--socket", filepath.Join(root, "airlock.sock"))
	args = setArg(t, args, "--image", env.AgentImage)
	args = append(args, "--kubeconfig", kubeconfig, "--bin-dir", env.BinDir, "--runtime", env.Runtime,
		"--session-pool", pool, "--stop-containerd", "--log-level", "info",
		"--node-labels", "airlock.test/node="+node)
	check := exec.Command(filepath.Join(env.BinDir, "airlockd-kube"), append(args, "--check-config")...)
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("airlockd-kube %s --check-config: %v\n%s", strings.Join(args, " "), err, out)
	}
	return args
}

// agentProc is airlockd-kube run as a node agent.
type agentProc struct {
	t      *testing.T
	root   string
	cmd    *exec.Cmd
	exited chan struct{}
	api    *api.Client
	log    *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startAgent runs airlockd-kube with the DaemonSet's args: the node name
// the downward API gives, and the test's own root, socket, admission file
// (the ConfigMap's policy) and session image archive for the container's
// paths; then the test's kubeconfig (in a pod: the in-cluster
// configuration), binaries, runtime and session pool. It first checks the
// same arguments with --check-config. Whatever the test leaves is cleaned
// up after it.
func startAgent(t *testing.T, env daemontest.Env, dsArgs []string, admission, kubeconfig, node, pool string) *agentProc {
	t.Helper()
	root, err := os.MkdirTemp("/tmp", "alk-")
	if err != nil {
		t.Fatal(err)
	}
	args := checkedAgentArgs(t, env, dsArgs, admission, kubeconfig, node, pool, root)
	bin := filepath.Join(env.BinDir, "airlockd-kube")

	n := &agentProc{t: t, root: root, log: &syncBuffer{}, api: api.NewClient(filepath.Join(root, "airlock.sock"))}
	ctrd := &airlockruntime.Embedded{Dir: filepath.Join(root, "containerd")}
	t.Cleanup(func() {
		if t.Failed() {
			lines := strings.Split(strings.TrimSpace(n.log.String()), "\n")
			t.Logf("node %s: airlockd's log, last lines:\n%s", node, strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
		if n.running() {
			cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			if list, err := n.api.ListSessions(cctx); err == nil {
				for _, s := range list {
					_ = n.api.RemoveSession(cctx, s.ID, true)
				}
			}
			cancel()
			_ = n.stop()
		}
		n.api.Close()
		daemontest.RemoveAnchor(context.Background(), ctrd.Address())
		_ = ctrd.Stop(context.Background(), 10*time.Second)
		os.RemoveAll(root)
	})
	n.cmd = exec.Command(bin, args...)
	n.cmd.Stderr = n.log
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.exited = make(chan struct{})
	cmd, exited := n.cmd, n.exited
	go func() { cmd.Wait(); close(exited) }()
	for deadline := time.Now().Add(90 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		cctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := n.api.Version(cctx)
		cancel()
		if err == nil {
			return n
		}
		if !n.running() {
			t.Fatalf("node %s: airlockd exited (%v):\n%s", node, cmd.ProcessState, n.log.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s: airlockd did not come up:\n%s", node, n.log.String())
		}
	}
}

func (n *agentProc) running() bool {
	select {
	case <-n.exited:
		return false
	default:
		return true
	}
}

// stop SIGTERMs airlockd (which stops its containerd) and waits for it.
func (n *agentProc) stop() error {
	_ = n.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(60 * time.Second):
		n.cmd.Process.Kill()
		<-n.exited
		return fmt.Errorf("airlockd did not exit within 60s of SIGTERM")
	}
	if !n.cmd.ProcessState.Success() {
		return fmt.Errorf("airlockd exited %v", n.cmd.ProcessState)
	}
	return nil
}

// labelled returns the node's local sessions run for Sessions.
func (n *agentProc) labelled(t *testing.T) []api.Session {
	t.Helper()
	list, err := n.api.ListSessions(t.Context())
	if err != nil {
		t.Fatalf("list local sessions: %v", err)
	}
	var out []api.Session
	for _, s := range list {
		if s.Labels[agent.LabelSessionUID] != "" {
			out = append(out, s)
		}
	}
	return out
}

// wantNothingLeft waits up to 10 s for the census of the stopped daemon on
// root to come out empty, and reports what is left.
func wantNothingLeft(t *testing.T, root string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(250 * time.Millisecond) {
		c := daemontest.TakeCensus(root, "")
		if c.Total() == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("left behind on %s after airlockd stopped: %s", root, c)
			return
		}
	}
}
