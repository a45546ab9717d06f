package main

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// install puts an executable named name into dir.
func install(t *testing.T, dir, name string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestBenchExec: `airlock bench` runs airlock-bench from beside airlock,
// else from $PATH, with every argument as typed.
func TestBenchExec(t *testing.T) {
	bin, other := t.TempDir(), t.TempDir()
	airlock := install(t, bin, "airlock")
	beside := install(t, bin, benchProgram)
	onPath := install(t, other, benchProgram)
	link := filepath.Join(t.TempDir(), "airlock")
	if err := os.Symlink(airlock, link); err != nil {
		t.Fatal(err)
	}
	noBench := install(t, t.TempDir(), "airlock")

	for _, tc := range []struct {
		name     string
		self     string
		path     []string
		args     []string
		wantArgv []string
	}{
		{"beside airlock", airlock, nil, []string{"bench"}, []string{beside}},
		{"beside airlock first", airlock, []string{other}, []string{"bench", "--json"}, []string{beside, "--json"}},
		{"beside the symlink's target", link, []string{other}, []string{"bench"}, []string{beside}},
		{"on PATH", noBench, []string{other}, []string{"bench", "--out", "x"}, []string{onPath, "--out", "x"}},
		{"arguments as typed", noBench, []string{other},
			[]string{"bench", "--family", "cancel-jobs", "-var", "x", "--mode=perimeter", "extra", "--", "-z"},
			[]string{onPath, "--family", "cancel-jobs", "-var", "x", "--mode=perimeter", "extra", "--", "-z"}},
		{"global flag before bench", noBench, []string{other}, []string{"--socket", "/s.sock", "bench", "--json"}, []string{onPath, "--socket", "/s.sock", "--json"}},
		{"--help", noBench, []string{other}, []string{"bench", "--help"}, []string{onPath, "--help"}},
		{"-h", noBench, []string{other}, []string{"bench", "-h"}, []string{onPath, "-h"}},
		{"help bench", noBench, []string{other}, []string{"help", "bench"}, []string{onPath, "--help"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t)
			h.self, h.path = tc.self, tc.path
			r := h.run("", tc.args...)
			r.check(t, 0, "", "")
			if len(h.execs) != 1 || !reflect.DeepEqual(h.execs[0], tc.wantArgv) {
				t.Errorf("exec calls %q, want one with argv %q", h.execs, tc.wantArgv)
			}
		})
	}
}

func TestBenchMissing(t *testing.T) {
	bin := t.TempDir()
	h := newHarness(t)
	h.self = install(t, bin, "airlock")
	h.path = []string{t.TempDir()}
	want := "airlock: airlock bench needs the airlock-bench binary next to airlock (make build puts it in _output/bin): none in " + bin + " or on $PATH\n"
	h.run("", "bench", "--family", "x").check(t, exitNoBench, "", want)

	// Help without airlock-bench is this command's own, and says what is
	// missing.
	r := h.run("", "help", "bench")
	if r.code != 0 || !strings.Contains(r.stdout, "Bench runs AmPermBench's task families") ||
		!strings.Contains(r.stdout, "  airlock bench --family cancel-jobs --mode gate-only --mode perimeter") || r.stderr != want {
		t.Errorf("help bench: exit %d\nstdout %q\nstderr %q", r.code, r.stdout, r.stderr)
	}

	h.self = ""
	h.run("", "bench").check(t, exitNoBench, "", "airlock: airlock bench needs the airlock-bench binary next to airlock (make build puts it in _output/bin): none on $PATH\n")
	if len(h.execs) != 0 {
		t.Errorf("exec calls %q without airlock-bench", h.execs)
	}

	// Found but not runnable.
	h.self = filepath.Join(bin, "airlock")
	p := install(t, bin, benchProgram)
	h.execErr = syscall.EACCES
	h.run("", "bench").check(t, exitNoBench, "", "airlock: airlock bench: exec "+p+": permission denied\n")
}

// TestBenchListed: bench is listed with its description, and the root's
// own flag parsing does not reach it.
func TestBenchListed(t *testing.T) {
	h := newHarness(t)
	r := h.run("", "--help")
	if !strings.Contains(r.stdout, "  bench       Run the permission benchmark against real sandboxes\n") {
		t.Errorf("airlock --help does not list bench:\n%s", r.stdout)
	}
}

// TestMain runs airlock itself when TestBenchReplacesProcess starts this
// binary as airlock.
func TestMain(m *testing.M) {
	if os.Getenv("AIRLOCK_TEST_AS_AIRLOCK") == "1" {
		main()
	}
	os.Exit(m.Run())
}

// TestBenchReplacesProcess runs a copy of this test binary as airlock and a
// script as airlock-bench: the script runs in airlock's own process, with
// airlock's arguments, and its exit status is airlock's.
func TestBenchReplacesProcess(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin, pathDir := t.TempDir(), t.TempDir()
	airlock := filepath.Join(bin, "airlock")
	copyFile(t, self, airlock)
	script := "#!/bin/sh\necho \"$$\"\nfor a in \"$@\"; do echo \"[$a]\"; done\nexit 7\n"

	run := func(path string, args ...string) (stdout, stderr string, pid, code int) {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), airlock, args...)
		cmd.Env = []string{"AIRLOCK_TEST_AS_AIRLOCK=1", "PATH=" + path}
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		err := cmd.Run()
		var ee *exec.ExitError
		if err != nil && !errors.As(err, &ee) {
			t.Fatal(err)
		}
		return out.String(), errb.String(), cmd.Process.Pid, cmd.ProcessState.ExitCode()
	}

	for _, dir := range []string{bin, pathDir} {
		if err := os.WriteFile(filepath.Join(dir, benchProgram), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
		stdout, stderr, pid, code := run(pathDir, "bench", "--gate", "allow-all", "-var", "a b", "--help")
		want := strconv.Itoa(pid) + "\n[--gate]\n[allow-all]\n[-var]\n[a b]\n[--help]\n"
		if code != 7 || stdout != want || stderr != "" {
			t.Errorf("airlock-bench in %s: exit %d\nstdout %q\nstderr %q\nwant exit 7, stdout %q", dir, code, stdout, stderr, want)
		}
		if err := os.Remove(filepath.Join(dir, benchProgram)); err != nil {
			t.Fatal(err)
		}
	}

	stdout, stderr, _, code := run(pathDir, "bench")
	want := "airlock: airlock bench needs the airlock-bench binary next to airlock (make build puts it in _output/bin): none in " + bin + " or on $PATH\n"
	if code != exitNoBench || stdout != "" || stderr != want {
		t.Errorf("without airlock-bench: exit %d\nstdout %q\nstderr %q\nwant exit %d, stderr %q", code, stdout, stderr, exitNoBench, want)
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
