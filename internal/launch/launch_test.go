package launch

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// buildInit builds airlock-init once per test binary run.
func buildInit(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), Binary)
	cmd := exec.Command(filepath.Join(goruntime.GOROOT(), "bin", "go"), "build", "-o", bin, "../../cmd/airlock-init")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build airlock-init: %v\n%s", err, out)
	}
	return bin
}

// startInit prepares a launch directory and runs airlock-init on it as a
// plain child process, the way runc would run it in a sandbox.
func startInit(t *testing.T, bin string) (*Dir, *exec.Cmd, *strings.Builder) {
	t.Helper()
	d, err := Prepare(filepath.Join(t.TempDir(), "init"), bin, uint32(os.Getuid()), uint32(os.Getgid()))
	if err != nil {
		t.Fatal(err)
	}
	out := &strings.Builder{}
	cmd := exec.Command(filepath.Join(d.Path(), Binary), d.Path())
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	return d, cmd, out
}

func TestLaunchRunsCommandInPlace(t *testing.T) {
	bin := buildInit(t)
	d, cmd, out := startInit(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	// A shell that reports its own pid proves the command replaced init.
	err := d.Launch(ctx, Message{Args: []string{"sh", "-c", `echo "$$ $GREETING"`}, Env: []string{"PATH=/usr/bin:/bin", "GREETING=hello"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	want := strconv.Itoa(cmd.Process.Pid) + " hello"
	if got := strings.TrimSpace(out.String()); got != want {
		t.Fatalf("output %q, want %q (same pid as airlock-init, env from the message)", got, want)
	}
	if err := d.Clean(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(d.Path())
	if len(entries) != 0 {
		t.Fatalf("launch directory not empty after Clean: %v", entries)
	}
}

func TestLaunchReportsMissingProgram(t *testing.T) {
	bin := buildInit(t)
	d, cmd, _ := startInit(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err := d.Launch(ctx, Message{Args: []string{"no-such-program-xyz"}, Env: []string{"PATH=/usr/bin:/bin"}})
	var ee *ExecError
	if !errors.As(err, &ee) || !ee.Failure.NotFound || !errdefs.IsInvalidArgument(err) {
		t.Fatalf("Launch of a missing program: %v, want an invalid-argument ExecError with NotFound", err)
	}
	if !strings.Contains(err.Error(), "no-such-program-xyz") {
		t.Errorf("error %q does not name the program", err)
	}
	var xe *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &xe) || xe.ExitCode() != 127 {
		t.Fatalf("airlock-init exit: %v, want status 127", err)
	}
}

func TestLaunchNotExecutable(t *testing.T) {
	bin := buildInit(t)
	d, cmd, _ := startInit(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	plain := filepath.Join(t.TempDir(), "plain")
	if err := os.WriteFile(plain, []byte("data"), 0o644); err != nil {
		t.Fatal(err)
	}
	err := d.Launch(ctx, Message{Args: []string{plain}})
	var ee *ExecError
	if !errors.As(err, &ee) || ee.Failure.NotFound {
		t.Fatalf("Launch of a non-executable file: %v, want an ExecError without NotFound", err)
	}
	var xe *exec.ExitError
	if err := cmd.Wait(); !errors.As(err, &xe) || xe.ExitCode() != 126 {
		t.Fatalf("airlock-init exit: %v, want status 126", err)
	}
}

// A writer that goes away without a command (a daemon restart) leaves
// airlock-init waiting for the next one.
func TestInitSurvivesWriterWithoutCommand(t *testing.T) {
	bin := buildInit(t)
	d, cmd, out := startInit(t, bin)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := d.Ready(ctx); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d2 := Open(d.Path())
	if err := d2.Launch(ctx, Message{Args: []string{"/bin/echo", "second"}}); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(out.String()); got != "second" {
		t.Fatalf("output %q, want second", got)
	}
}

func TestReadyTimesOutWithoutInit(t *testing.T) {
	bin := buildInit(t)
	d, err := Prepare(filepath.Join(t.TempDir(), "init"), bin, uint32(os.Getuid()), uint32(os.Getgid()))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := d.Ready(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Ready without an init: %v, want deadline exceeded", err)
	}
}

func TestLaunchRejectsOversizedMessage(t *testing.T) {
	d := Open(t.TempDir())
	err := d.Launch(context.Background(), Message{Args: []string{"x", strings.Repeat("a", MaxMessage)}})
	if !errdefs.IsInvalidArgument(err) {
		t.Fatalf("oversized message: %v, want invalid argument", err)
	}
}
