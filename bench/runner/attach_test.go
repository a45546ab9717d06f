package runner

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/egress/netns"
	benchimage "github.com/airlock-sandbox/airlock/images/bench"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestAttachToRunningDaemon runs a family against a daemon the operator
// started (airlock bench --socket), whose uplink is a namespace the
// operator made: the bench serves its world there, and leaves the daemon,
// the namespace and the operator's own sessions as it found them.
func TestAttachToRunningDaemon(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	archive, err := benchArchive(t.TempDir(), env.AgentImage, benchimage.Ref)
	if err != nil {
		t.Fatal(err)
	}

	// The operator's side: a namespace and a daemon whose uplink it is.
	name := fmt.Sprintf("bat%d-world", os.Getpid()%100000)
	world, err := netns.Create(netns.DefaultDir, name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = netns.Remove(world) })
	root, err := os.MkdirTemp("/tmp", "bat-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(root) })
	sock := filepath.Join(root, "airlock.sock")
	dns := DefaultWorldNet.Addr().Next()
	daemon := exec.Command(filepath.Join(env.BinDir, "airlockd"), "--root", filepath.Join(root, "state"), "--socket", sock,
		"--bin-dir", env.BinDir, "--uplink", "netns:"+name, "--dns-upstream", dns.String(), "--allow-private", DefaultWorldNet.String(), "--stop-containerd", "--log-level", "warn")
	daemon.Stderr = os.Stderr
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	t.Cleanup(func() {
		_ = daemon.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = daemon.Process.Kill()
			<-exited
		}
	})
	client := api.NewClient(sock)
	defer client.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, err := client.Version(ctx); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("airlockd did not come up")
		}
	}
	// An operator's session that is not the bench's.
	if f, err := os.Open(env.AgentImage); err == nil {
		_, err = client.ImportImage(ctx, daemontest.AgentImage, f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
	}
	mine, err := client.CreateSession(ctx, api.CreateRequest{Policy: policies.Policy{Label: "operator",
		Image: daemontest.AgentImage, Command: []string{"sleep", "300"}}, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	// Removed before the daemon stops (cleanups run last first), also when
	// the test fails half-way: a daemon that stops leaves its sessions
	// running by design, for the next one to re-adopt.
	t.Cleanup(func() {
		c := api.NewClient(sock)
		defer c.Close()
		rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
		defer rcancel()
		_ = c.RemoveSession(rctx, mine.ID, true)
	})

	// Attaching to a daemon with another uplink is refused.
	if _, err := StartStack(ctx, StackConfig{Socket: sock, WorldNetns: "no-such-world", ImageArchive: archive}); err == nil {
		t.Error("attached with a namespace that is not the daemon's uplink")
	}

	st, err := StartStack(ctx, StackConfig{Socket: sock, WorldNetns: name, WorldDNS: dns, ImageArchive: archive, Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(ctx, st, Options{
		Families: []string{data.CancelJobs},
		Modes:    []string{ModePerimeter},
		Gates:    []Gate{allowAll{}},
		Out:      t.TempDir(),
	})
	if cerr := st.Close(ctx); cerr != nil {
		t.Errorf("close the attached stack: %v", cerr)
	}
	if err != nil {
		t.Fatal(err)
	}
	if o := outcome(t, res, "CJ-S0-B0-R0", "CJ-single-job-dev-4812-a", ModePerimeter); o != eval.OutcomeDone {
		t.Errorf("the authorized cancel: %s, want done", o)
	}
	if o := outcome(t, res, "CJ-S0-B0-R0", "CJ-single-job-dev-4812-s", ModePerimeter); o != eval.OutcomeBlocked {
		t.Errorf("sam's job: %s, want blocked", o)
	}

	// The daemon still serves, with the operator's session and no other.
	list, err := client.ListSessions(ctx)
	if err != nil {
		t.Fatalf("the daemon stopped serving after the bench: %v", err)
	}
	if len(list) != 1 || list[0].ID != mine.ID || list[0].State != api.StateRunning {
		t.Errorf("sessions after the bench: %+v, want only the operator's, running", list)
	}
	if !netns.IsNetns(world) {
		t.Error("the operator's namespace is gone")
	}
	if err := client.RemoveSession(ctx, mine.ID, true); err != nil {
		t.Error(err)
	}
}
