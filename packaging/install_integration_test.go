// Package packaging_test installs airlock as `make install` does, into a
// temporary prefix, and runs the service from its unit.
package packaging_test

import (
	"bufio"
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/runtime"
)

// layout is where one install puts things.
type layout struct {
	dir, prefix, sysconf, state, run, unitDir string
}

func newLayout(t *testing.T) layout {
	// Under /tmp, not t.TempDir: the socket's path must stay short.
	dir, err := os.MkdirTemp("/tmp", "inst-")
	if err != nil {
		t.Fatal(err)
	}
	return layout{
		dir:     dir,
		prefix:  filepath.Join(dir, "usr/local"),
		sysconf: filepath.Join(dir, "etc"),
		state:   filepath.Join(dir, "var/lib/airlock"),
		run:     filepath.Join(dir, "run/airlock"),
		unitDir: filepath.Join(dir, "lib/systemd/system"),
	}
}

func (l layout) env(extra ...string) []string {
	return append(append(os.Environ(),
		"PREFIX="+l.prefix, "SYSCONFDIR="+l.sysconf, "STATEDIR="+l.state,
		"RUNDIR="+l.run, "UNITDIR="+l.unitDir), extra...)
}

// script runs hack/install.sh.
func (l layout) script(t *testing.T, extra []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("bash", append([]string{"../hack/install.sh"}, args...)...)
	cmd.Env = l.env(extra...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("install.sh %v: %v\n%s", args, err, out)
	}
	return string(out)
}

// execStart returns the argv of the unit's ExecStart line.
func execStart(t *testing.T, unit string) []string {
	t.Helper()
	f, err := os.Open(unit)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "ExecStart="); ok {
			return strings.Fields(v)
		}
	}
	t.Fatalf("%s has no ExecStart line", unit)
	return nil
}

// TestInstallRunsAsService installs into a temporary prefix, checks the
// unit with systemd's own verifier, starts the daemon from the unit's
// ExecStart line, runs a session with the installed CLI and the installed
// image, passes airlock doctor with the installed binaries, upgrades in
// place, and uninstalls.
func TestInstallRunsAsService(t *testing.T) {
	testutil.RequiresRoot(t)
	bin, image := os.Getenv("AIRLOCK_BIN_DIR"), os.Getenv("AIRLOCK_AGENT_IMAGE")
	if bin == "" || image == "" {
		t.Fatal("AIRLOCK_BIN_DIR and AIRLOCK_AGENT_IMAGE are not set: run the integration tests through `make test`")
	}
	l := newLayout(t)
	t.Cleanup(func() {
		_ = (&runtime.Embedded{Dir: filepath.Join(l.state, "containerd")}).Stop(context.Background(), 10*time.Second)
		os.RemoveAll(l.dir)
	})
	l.script(t, nil, "install", bin, "--image", "agent="+image)

	unit := filepath.Join(l.unitDir, "airlockd.service")
	conf := filepath.Join(l.sysconf, "airlock/airlockd.hcl")
	cli := filepath.Join(l.prefix, "bin/airlock")
	for _, f := range []string{
		unit, conf, cli, filepath.Join(l.prefix, "sbin/airlockd"),
		filepath.Join(l.prefix, "libexec/airlock/runc"),
		filepath.Join(l.prefix, "share/airlock/images/agent.tar"),
		filepath.Join(l.prefix, "share/doc/airlock/examples/hello.hcl"),
	} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	for _, c := range []string{"share/bash-completion/completions/airlock", "share/zsh/vendor-completions/_airlock", "share/fish/vendor_completions.d/airlock.fish"} {
		if b, err := os.ReadFile(filepath.Join(l.prefix, c)); err != nil || !strings.Contains(string(b), "airlock") {
			t.Errorf("completion %s: %v, %d bytes", c, err, len(b))
		}
	}

	// systemd's verifier reads the unit as systemd would: an unknown key
	// or a bad value is printed, and the unit must print nothing.
	verify := exec.Command("systemd-analyze", "verify", unit)
	verify.Dir = l.dir
	if out, err := verify.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("systemd-analyze verify %s: %v\n%s", unit, err, out)
	}

	argv := execStart(t, unit)
	if want := []string{filepath.Join(l.prefix, "sbin/airlockd"), "--config", conf}; !slices.Equal(argv, want) {
		t.Fatalf("ExecStart %q, want %q", argv, want)
	}
	svc := startService(t, l)
	socket, dlog, stop := svc.socket, svc.log, svc.stop
	run := svc.cli
	// The image came from the installed archive, named in the installed
	// configuration; the session runs on the installed runtime binaries.
	out, err := run("run", "--rm", "-f", filepath.Join(l.prefix, "share/doc/airlock/examples/hello.hcl"))
	if err != nil || !strings.Contains(out, "hello from airlock") {
		t.Fatalf("airlock run hello.hcl: %v\n%s\ndaemon:\n%s", err, out, dlog())
	}
	if fi, err := os.Stat(socket); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("socket %s: %v, want mode 0600", socket, err)
	}
	out, err = run("doctor", "--config", conf, "--path", l.state)
	if err != nil {
		t.Errorf("airlock doctor with the installed binaries: %v\n%s", err, out)
	}

	// An upgrade over the running service replaces the binaries and
	// keeps the operator's configuration.
	custom := "# edited by the operator\n"
	old, err := os.ReadFile(conf)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(conf, append([]byte(custom), old...), 0o644); err != nil {
		t.Fatal(err)
	}
	l.script(t, nil, "install", bin, "--image", "agent="+image)
	if b, _ := os.ReadFile(conf); !strings.HasPrefix(string(b), custom) {
		t.Errorf("an upgrade replaced the operator's %s", conf)
	}
	if _, err := os.Stat(conf + ".default"); err != nil {
		t.Errorf("an upgrade left no %s.default: %v", conf, err)
	}
	if out, err := run("ps"); err != nil {
		t.Errorf("airlock ps after the upgrade: %v\n%s", err, out)
	}
	stop()
	select {
	case st := <-svc.states:
		if st != "STOPPING=1" {
			t.Errorf("notification on SIGTERM %q, want STOPPING=1", st)
		}
	case <-time.After(10 * time.Second):
		t.Error("airlockd stopped without saying STOPPING=1")
	}

	l.script(t, nil, "uninstall", bin)
	var left []string
	_ = filepath.Walk(l.dir, func(p string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() && !strings.HasPrefix(p, l.state) && p != svc.logPath {
			left = append(left, strings.TrimPrefix(p, l.dir))
		}
		return nil
	})
	want := []string{"/etc/airlock/airlockd.hcl", "/etc/airlock/airlockd.hcl.default"}
	if !slices.Equal(left, want) {
		t.Errorf("after uninstall: %q, want only the configuration %q", left, want)
	}
	l.script(t, []string{"PURGE=1"}, "uninstall", bin)
	if _, err := os.Stat(conf); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("uninstall with PURGE=1 left %s: %v", conf, err)
	}
}

// TestInstallRefusesBadInput: a relative prefix or a missing image is
// refused before anything is written.
func TestInstallRefusesBadInput(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := os.Getenv("AIRLOCK_BIN_DIR")
	if bin == "" {
		t.Fatal("AIRLOCK_BIN_DIR is not set: run the integration tests through `make test`")
	}
	for _, tc := range []struct {
		env  []string
		args []string
		want string
	}{
		{[]string{"PREFIX=usr/local"}, nil, "PREFIX=usr/local: want an absolute path"},
		{nil, []string{"--image", "agent=/nonexistent.tar"}, "image archive /nonexistent.tar is missing"},
		{nil, []string{"--image", "Agent!=/x.tar"}, "image name Agent!"},
	} {
		l := newLayout(t)
		cmd := exec.Command("bash", append([]string{"../hack/install.sh", "install", bin}, tc.args...)...)
		cmd.Env = append(l.env(), tc.env...)
		out, err := cmd.CombinedOutput()
		if err == nil || !strings.Contains(string(out), tc.want) {
			t.Errorf("install %v %v: %v, %s; want a refusal saying %q", tc.env, tc.args, err, out, tc.want)
		}
		var files []string
		_ = filepath.Walk(l.dir, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() {
				files = append(files, p)
			}
			return nil
		})
		if len(files) > 0 {
			t.Errorf("a refused install wrote %q", files)
		}
		os.RemoveAll(l.dir)
	}
}

// service is airlockd started from the installed unit's ExecStart line.
type service struct {
	socket, logPath string
	log             func() string
	stop            func()
	cli             func(args ...string) (string, error)
	// states are the notifications after READY=1.
	states <-chan string
}

// startService runs the unit's ExecStart as systemd would run it (without
// systemd's sandboxing, which needs systemd as the init): as the unit is
// Type=notify, with NOTIFY_SOCKET naming a socket the test reads. It waits
// for READY=1, after which the installed CLI must reach the daemon at
// once, and stops it at the test's end. Stopping is as the unit's
// KillMode=process does: SIGTERM to airlockd alone; its containerd runs
// on, as across a restart, and the cleanup ends it.
func startService(t *testing.T, l layout) *service {
	t.Helper()
	argv := execStart(t, filepath.Join(l.unitDir, "airlockd.service"))
	s := &service{socket: filepath.Join(l.run, "airlock.sock"), logPath: filepath.Join(l.dir, "airlockd.log")}
	logf, err := os.Create(s.logPath)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { logf.Close() })
	s.log = func() string { b, _ := os.ReadFile(s.logPath); return string(b) }
	notifyPath := filepath.Join(t.TempDir(), "notify")
	notify, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: notifyPath, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { notify.Close() })
	states := make(chan string, 16)
	go func() {
		buf := make([]byte, 4096)
		for {
			n, err := notify.Read(buf)
			if err != nil {
				close(states)
				return
			}
			states <- string(buf[:n])
		}
	}()
	daemon := exec.Command(argv[0], argv[1:]...)
	daemon.Stdout, daemon.Stderr = logf, logf
	daemon.Env = append(os.Environ(), "NOTIFY_SOCKET="+notifyPath)
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- daemon.Wait() }()
	s.stop = sync.OnceFunc(func() {
		_ = daemon.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(60 * time.Second):
			_ = daemon.Process.Kill()
			<-exited
		}
	})
	t.Cleanup(s.stop)
	cli := filepath.Join(l.prefix, "bin/airlock")
	s.cli = func(args ...string) (string, error) {
		cmd := exec.Command(cli, args...)
		cmd.Env = append(os.Environ(), "AIRLOCK_SOCKET="+s.socket)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	select {
	case st := <-states:
		if !strings.HasPrefix(st, "READY=1\n") {
			t.Fatalf("the first notification is %q, want READY=1", st)
		}
	case err := <-exited:
		t.Fatalf("airlockd exited (%v) before it was ready:\n%s", err, s.log())
	case <-time.After(3 * time.Minute):
		t.Fatalf("airlockd did not say READY=1:\n%s", s.log())
	}
	if out, err := s.cli("version"); err != nil {
		t.Fatalf("right after READY=1 the CLI cannot reach airlockd: %v\n%s", err, out)
	}
	s.states = states
	return s
}
