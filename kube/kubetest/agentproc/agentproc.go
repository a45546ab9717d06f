// Package agentproc runs airlockd-kube, airlock's Kubernetes node agent
// (airlockd --kubernetes), as a child process of a test, against a
// kubetest control plane: each agent on a root, socket and containerd of
// its own under /tmp, waited for until its API answers, and whatever the
// test leaves of it (local sessions, the daemon, its containerd, the
// root) removed after the test. kube/agent's tests run agents with the
// arguments they choose, kube/deploytest's with the DaemonSet's.
//
// It is a package of its own, not part of kubetest, because it needs the
// daemon's API and test harness (internal/testutil/daemontest) and
// kube/agent's labels: kubetest stays a control plane alone, which
// kube/agent's own tests import without an import cycle.
package agentproc

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/agent"
	airlockruntime "github.com/airlock-sandbox/airlock/runtime"
)

// upTimeout bounds the wait for a started agent's API: airlockd serves it
// once the agent image is in its store and the agent started, which takes
// 5 to 15 s on a loaded machine.
const upTimeout = 90 * time.Second

// Options says how to run an agent.
type Options struct {
	// Node is the node's name, for the test's messages; Args names it
	// to airlockd-kube.
	Node string
	// BinDir holds airlockd-kube and the binaries it runs
	// (daemontest.Env's BinDir).
	BinDir string
	// Args returns airlockd-kube's arguments for the root and socket
	// made for the agent; they must include --root root and --socket
	// socket.
	Args func(root, socket string) []string
	// CheckConfig has Start run the same arguments with --check-config
	// first, and fail the test if they do not pass.
	CheckConfig bool
}

// Proc is one node agent run by Start.
type Proc struct {
	// Node is the node's name.
	Node string
	// Root is the daemon's root, removed after the test.
	Root string
	// API is a client of the daemon's own API (its socket, on Root).
	API *api.Client
	// Log collects airlockd-kube's stderr, for the test's messages; the
	// last lines are logged when the test failed.
	Log *daemontest.SyncBuffer

	t      *testing.T
	bin    string
	args   []string
	cmd    *exec.Cmd
	exited chan struct{} // closed when cmd has been waited for
}

// Start starts a node agent on a fresh root under /tmp and waits for its
// API. After the test, whatever the test left of it is cleaned up: its
// local sessions removed, the agent stopped (started again first if the
// test left it killed, so that it stops its containerd and sessions
// itself), its containerd stopped and the root removed.
func Start(t *testing.T, o Options) *Proc {
	t.Helper()
	root, err := os.MkdirTemp("/tmp", "alk-")
	if err != nil {
		t.Fatal(err)
	}
	socket := filepath.Join(root, "airlock.sock")
	p := &Proc{
		Node: o.Node, Root: root, API: api.NewClient(socket), Log: &daemontest.SyncBuffer{},
		t: t, bin: filepath.Join(o.BinDir, "airlockd-kube"),
	}
	ctrd := &airlockruntime.Embedded{Dir: filepath.Join(root, "containerd")}
	t.Cleanup(func() {
		if t.Failed() {
			lines := strings.Split(strings.TrimSpace(p.Log.String()), "\n")
			t.Logf("node %s: airlockd's log, last lines:\n%s", p.Node, strings.Join(lines[max(0, len(lines)-60):], "\n"))
		}
		p.cleanup()
		p.API.Close()
		daemontest.RemoveAnchor(context.Background(), ctrd.Address())
		_ = ctrd.Stop(context.Background(), 10*time.Second)
		os.RemoveAll(root)
	})
	// After the cleanup is in place: Args may fail the test.
	p.args = o.Args(root, socket)
	if o.CheckConfig {
		check := exec.Command(p.bin, append(slices.Clone(p.args), "--check-config")...)
		if out, err := check.CombinedOutput(); err != nil {
			t.Fatalf("airlockd-kube %s --check-config: %v\n%s", strings.Join(p.args, " "), err, out)
		}
	}
	began := time.Now()
	p.Restart()
	t.Logf("node %s: airlockd-kube up in %s", p.Node, time.Since(began).Round(time.Millisecond))
	return p
}

// Restart starts airlockd-kube with the agent's arguments, as Start did,
// after Kill or Stop, and waits for its API.
func (p *Proc) Restart() {
	p.t.Helper()
	p.cmd = exec.Command(p.bin, p.args...)
	p.cmd.Stderr = p.Log
	if err := p.cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	exited := make(chan struct{})
	cmd := p.cmd
	go func() { cmd.Wait(); close(exited) }()
	p.exited = exited
	for deadline := time.Now().Add(upTimeout); ; time.Sleep(50 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := p.API.Version(ctx)
		cancel()
		if err == nil {
			return
		}
		select {
		case <-exited:
			p.t.Fatalf("node %s: airlockd exited (%v):\n%s", p.Node, cmd.ProcessState, p.Log.String())
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			p.t.Fatalf("node %s: airlockd did not come up:\n%s", p.Node, p.Log.String())
		}
	}
}

// Running reports whether airlockd-kube runs.
func (p *Proc) Running() bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Bin is the airlockd-kube binary the agent runs.
func (p *Proc) Bin() string { return p.bin }

// Arg returns the value the agent's arguments give flag, or "".
func (p *Proc) Arg(flag string) string {
	if i := slices.Index(p.args, flag); i >= 0 && i+1 < len(p.args) {
		return p.args[i+1]
	}
	return ""
}

// Signal sends sig to airlockd-kube (SIGSTOP and SIGCONT freeze it and
// let it go on: what happens in the cluster meanwhile it learns after).
func (p *Proc) Signal(sig os.Signal) {
	p.t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		p.t.Fatal(err)
	}
}

// Kill SIGKILLs airlockd-kube: its containerd and sessions run on.
func (p *Proc) Kill() {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		p.t.Fatal(err)
	}
	<-p.exited
}

// Stop SIGTERMs airlockd-kube, which stops its containerd when its
// arguments say --stop-containerd, and waits for it to exit (SIGKILL
// after 60 s); it reports how it exited.
func (p *Proc) Stop() error {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		<-p.exited
		return fmt.Errorf("node %s: airlockd did not exit within 60s of SIGTERM", p.Node)
	}
	if !p.cmd.ProcessState.Success() {
		return fmt.Errorf("node %s: airlockd exited %v", p.Node, p.cmd.ProcessState)
	}
	return nil
}

// cleanup removes every local session a failed test left and stops
// airlockd (started again if the test left it killed, to stop its
// containerd and sessions).
func (p *Proc) cleanup() {
	if p.cmd == nil {
		return
	}
	if !p.Running() {
		if p.cmd.ProcessState != nil && p.cmd.ProcessState.Success() {
			return // stopped by the test
		}
		p.cmd = exec.Command(p.bin, p.args...)
		p.cmd.Stderr = p.Log
		if err := p.cmd.Start(); err != nil {
			return
		}
		exited := make(chan struct{})
		cmd := p.cmd
		go func() { cmd.Wait(); close(exited) }()
		p.exited = exited
		for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if _, err := p.API.Version(context.Background()); err == nil {
				break
			}
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if list, err := p.API.ListSessions(ctx); err == nil {
		for _, s := range list {
			_ = p.API.RemoveSession(ctx, s.ID, true)
		}
	}
	_ = p.Stop()
}

// Labelled returns the node's local sessions run for Sessions: those
// labelled with a Session's uid.
func (p *Proc) Labelled(t *testing.T) []api.Session {
	t.Helper()
	list, err := p.API.ListSessions(t.Context())
	if err != nil {
		t.Fatalf("node %s: list sessions: %v", p.Node, err)
	}
	return slices.DeleteFunc(list, func(s api.Session) bool { return s.Labels[agent.LabelSessionUID] == "" })
}

// WantNothingLeft waits up to 10 s for the census of the stopped daemon
// on root to come out empty (no containers, mounts, namespaces or
// processes of it), and reports what is left.
func WantNothingLeft(t *testing.T, root string) {
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
