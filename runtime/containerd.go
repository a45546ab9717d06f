package runtime

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	containerd "github.com/containerd/containerd/v2/client"

	"github.com/airlock-sandbox/airlock/internal/hostcgroup"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// Embedded describes a containerd that airlockd runs itself: its binaries,
// root, state and socket all live under Dir. Its lifetime is independent of
// airlockd's: it is started when its socket is dead and re-used otherwise.
type Embedded struct {
	// Dir holds config.toml, root/, state/, the socket, pidfile and log.
	Dir string
	// BinDir holds containerd, containerd-shim-runc-v2 and runc.
	BinDir string
	// Cgroup, if set, is the cgroup (from the hierarchies' roots) a
	// started containerd is moved into, in every hierarchy, before it
	// is asked for anything: the shims it starts are born there. Empty
	// leaves it in airlockd's.
	Cgroup string
}

// Address is the embedded containerd's gRPC socket.
func (e Embedded) Address() string { return filepath.Join(e.Dir, "containerd.sock") }

// PidFile records the embedded containerd's pid.
func (e Embedded) PidFile() string { return filepath.Join(e.Dir, "containerd.pid") }

// disabledPlugins are containerd plugins a sandbox daemon has no use for;
// disabling them keeps start-up fast and the attack surface small.
var disabledPlugins = []string{
	"io.containerd.grpc.v1.cri",
	"io.containerd.cri.v1.images",
	"io.containerd.cri.v1.runtime",
	"io.containerd.podsandbox.controller.v1.podsandbox",
	"io.containerd.nri.v1.nri",
	"io.containerd.tracing.processor.v1.otlp",
	"io.containerd.internal.v1.tracing",
	"io.containerd.snapshotter.v1.btrfs",
	"io.containerd.snapshotter.v1.zfs",
	"io.containerd.snapshotter.v1.devmapper",
	"io.containerd.snapshotter.v1.blockfile",
	"io.containerd.snapshotter.v1.erofs",
}

func (e Embedded) config() string {
	quoted := make([]string, len(disabledPlugins))
	for i, p := range disabledPlugins {
		quoted[i] = strconv.Quote(p)
	}
	return fmt.Sprintf(`# Written by airlockd; changes are overwritten at start.
version = 3
root = %q
state = %q
disabled_plugins = [%s]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  level = "info"

# A session's root is its image's snapshot: mounted nodev, a device node
# shipped in an image's files cannot be opened, whatever the OCI
# runtime's devices cgroup allows (crun's always admits /dev/console).
[plugins."io.containerd.snapshotter.v1.overlayfs"]
  mount_options = ["nodev"]
`, filepath.Join(e.Dir, "root"), filepath.Join(e.Dir, "state"), strings.Join(quoted, ", "),
		e.Address(), e.Address()+".ttrpc")
}

// Ensure makes sure the embedded containerd is serving on Address: it
// re-attaches to a running one, or starts a new process (in its own session,
// so it outlives airlockd) and waits until it answers.
func (e Embedded) Ensure(ctx context.Context) error {
	_, err := e.EnsureStarted(ctx)
	return err
}

// EnsureStarted is Ensure, and reports whether it started containerd
// (false when one already answered).
func (e Embedded) EnsureStarted(ctx context.Context) (started bool, err error) {
	if len(e.Address()) >= 108 {
		return false, fmt.Errorf("containerd socket path %q is too long for a unix socket; use a shorter --root", e.Address())
	}
	if alive(ctx, e.Address()) {
		log.G(ctx).Debug("re-using running containerd", "address", e.Address())
		if pid, err := e.pid(); e.Cgroup != "" && err == nil && e.isOurs(pid) {
			// Where it already is unless an earlier airlockd had
			// another parent; the shims it started stay where they
			// are (their cgroup is tidied once they have ended).
			if err := hostcgroup.Move("", pid, e.Cgroup); err != nil {
				log.G(ctx).Warn("moving the running containerd into its cgroup", "pid", pid, "cgroup", e.Cgroup, "error", err)
			}
		}
		return false, nil
	}
	bin := filepath.Join(e.BinDir, "containerd")
	if _, err := os.Stat(bin); err != nil {
		return false, fmt.Errorf("containerd binary: %w (run `make deps` or pass --bin-dir)", err)
	}
	if err := os.MkdirAll(e.Dir, 0o711); err != nil {
		return false, err
	}
	// A stale pid whose process still lives but does not answer is ours to end.
	e.killStale(ctx)
	_ = os.Remove(e.Address())
	cfg := filepath.Join(e.Dir, "config.toml")
	if err := os.WriteFile(cfg, []byte(e.config()), 0o600); err != nil {
		return false, err
	}
	logf, err := os.OpenFile(filepath.Join(e.Dir, "containerd.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return false, err
	}
	defer logf.Close()
	cmd := exec.Command(bin, "--config", cfg)
	cmd.Env = append(os.Environ(), "PATH="+e.BinDir+":"+os.Getenv("PATH"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = e.Dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return false, fmt.Errorf("start containerd: %w", err)
	}
	pid := cmd.Process.Pid
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	if err := os.WriteFile(e.PidFile(), []byte(strconv.Itoa(pid)), 0o600); err != nil {
		_ = cmd.Process.Kill()
		return false, err
	}
	if e.Cgroup != "" {
		// Before airlockd connects: containerd starts no shim until it
		// is asked to create a task (it reconnects to running ones).
		if err := hostcgroup.Move("", pid, e.Cgroup); err != nil {
			_ = cmd.Process.Kill()
			return false, fmt.Errorf("containerd's cgroup: %w", err)
		}
	}
	log.G(ctx).Info("started containerd", "pid", pid, "address", e.Address())
	deadline := time.Now().Add(60 * time.Second)
	for {
		if alive(ctx, e.Address()) {
			return true, nil
		}
		select {
		case err := <-exited:
			return false, fmt.Errorf("containerd exited during start-up (%v); see %s", err, filepath.Join(e.Dir, "containerd.log"))
		case <-ctx.Done():
			_ = cmd.Process.Kill()
			return false, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			_ = cmd.Process.Kill()
			return false, fmt.Errorf("containerd did not answer on %s within 60s", e.Address())
		}
	}
}

// Supervise keeps the embedded containerd serving until ctx is done. It
// checks it every interval: a containerd whose process is gone (killed,
// crashed) is started again at once with Ensure; one whose process lives
// but has not answered for unresponsive (a loaded host can stall it for
// seconds) is ended and started again. A failed start is retried with a
// backoff up to 10s. Shims of running tasks outlive containerd, and a new
// containerd on the same root reconnects to them, so sessions keep running
// across the restart. beforeRestart, when set, is called before each
// restart, while containerd is down (the daemon reads from the shims the
// exits a restarted containerd would clean up unreported).
func (e Embedded) Supervise(ctx context.Context, interval, unresponsive time.Duration, beforeRestart func(context.Context)) {
	backoff := interval
	var silentSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		if alive(ctx, e.Address()) {
			backoff, silentSince = interval, time.Time{}
			continue
		}
		if ctx.Err() != nil {
			return
		}
		if pid, err := e.pid(); err == nil && e.isOurs(pid) && processAlive(pid) {
			if silentSince.IsZero() {
				silentSince = time.Now()
			}
			if time.Since(silentSince) < unresponsive {
				log.G(ctx).Warn("containerd is not answering", "pid", pid, "for", time.Since(silentSince).Round(time.Millisecond).String())
				continue
			}
		}
		log.G(ctx).Warn("containerd is gone or has stopped answering; restarting it", "address", e.Address())
		if beforeRestart != nil {
			beforeRestart(ctx)
		}
		if err := e.Ensure(ctx); err != nil {
			backoff = min(2*backoff, 10*time.Second)
			log.G(ctx).Error("restart containerd", "error", err, "retry_in", backoff.String())
			continue
		}
		log.G(ctx).Info("containerd restarted", "address", e.Address())
		backoff, silentSince = interval, time.Time{}
	}
}

// Alive reports whether a containerd answers on the embedded address.
func (e Embedded) Alive(ctx context.Context) bool { return alive(ctx, e.Address()) }

// Stop ends the embedded containerd recorded in the pidfile (SIGTERM, then
// SIGKILL after grace) and waits for it to go. Shims of live tasks survive a
// containerd stop by design; callers remove sessions first.
func (e Embedded) Stop(ctx context.Context, grace time.Duration) error {
	pid, err := e.pid()
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	if !e.isOurs(pid) {
		_ = os.Remove(e.PidFile())
		return nil
	}
	_ = syscall.Kill(pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for processAlive(pid) {
		if time.Now().After(deadline) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
	_ = os.Remove(e.PidFile())
	_ = os.Remove(e.Address())
	if e.Cgroup != "" {
		// Empty unless shims of running sessions outlive it.
		hostcgroup.Remove("", e.Cgroup)
	}
	return nil
}

func (e Embedded) pid() (int, error) {
	b, err := os.ReadFile(e.PidFile())
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(string(b)))
}

// isOurs reports whether pid is a containerd started with our config, so a
// recycled pid never gets a signal from us.
func (e Embedded) isOurs(pid int) bool {
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	return strings.Contains(string(cmdline), filepath.Join(e.Dir, "config.toml"))
}

func (e Embedded) killStale(ctx context.Context) {
	pid, err := e.pid()
	if err != nil || !e.isOurs(pid) {
		return
	}
	log.G(ctx).Warn("containerd pid is alive but not answering; restarting it", "pid", pid)
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 200 && processAlive(pid); i++ {
		time.Sleep(10 * time.Millisecond)
	}
}

func processAlive(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return false
	}
	// A zombie still answers kill(0); treat it as gone.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// alive reports whether a containerd answers on address.
func alive(ctx context.Context, address string) bool {
	if _, err := os.Stat(address); err != nil {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	c, err := containerd.New(address, containerd.WithTimeout(time.Second))
	if err != nil {
		return false
	}
	defer c.Close()
	ok, err := c.IsServing(ctx)
	return err == nil && ok
}
