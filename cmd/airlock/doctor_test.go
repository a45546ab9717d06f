package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/hostcheck"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestDoctorJSON runs airlock doctor --json on this machine, which has all
// airlock needs: every check is ok and it exits 0; with /proc as a
// workspace path the idmap check fails and it exits 1.
func TestDoctorJSON(t *testing.T) {
	testutil.RequiresRoot(t)
	h := newHarness(t)
	bin := testutil.RuntimeBinDir(t)

	r := h.run("", "doctor", "--json", "--bin-dir", bin, "--path", t.TempDir())
	out := decodeDoctor(t, r)
	if r.code != exitOK || r.stderr != "" || !out.OK {
		t.Errorf("doctor --json: exit %d, ok %v, stderr %q; want 0, true, nothing", r.code, out.OK, r.stderr)
	}
	names := map[string]bool{}
	for _, c := range out.Checks {
		names[c.Name] = true
		if c.Status != hostcheck.StatusOK || c.Detail == "" || c.Fix != "" {
			t.Errorf("check %+v, want ok with a detail and no fix", c)
		}
	}
	for _, n := range []string{"kernel", "cgroup", "overlayfs", "tmpfs-xattr", "idmap", "userns", "netns",
		"nftables", "fanotify", "loop", "seccomp", "containerd", "runc"} {
		if !names[n] {
			t.Errorf("no %s check in %s", n, r.stdout)
		}
	}

	r = h.run("", "doctor", "--json", "--bin-dir", bin, "--path", "/proc")
	out = decodeDoctor(t, r)
	if r.code != exitFailure || r.stderr != "" || out.OK {
		t.Errorf("doctor --json --path /proc: exit %d, ok %v, stderr %q; want 1, false, nothing", r.code, out.OK, r.stderr)
	}
	for _, c := range out.Checks {
		if (c.Status == hostcheck.StatusFail) != (c.Name == "idmap") {
			t.Errorf("check %+v: only the idmap check of /proc should fail", c)
		}
		if c.Status == hostcheck.StatusFail && (!strings.HasPrefix(c.Detail, "/proc ") || c.Fix == "") {
			t.Errorf("failed check %+v: want the path in the detail and a fix", c)
		}
	}
}

// TestDoctorText checks the human output: a line per check, the fix
// indented under a failure.
func TestDoctorText(t *testing.T) {
	testutil.RequiresRoot(t)
	h := newHarness(t)
	r := h.run("", "doctor", "--bin-dir", testutil.RuntimeBinDir(t), "--path", "/proc")
	if r.code != exitFailure || r.stderr != "" {
		t.Fatalf("doctor --path /proc: exit %d, stderr %q; want 1 and nothing", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	if !strings.HasPrefix(lines[0], "OK    kernel       Linux ") {
		t.Errorf("first line %q, want the kernel's", lines[0])
	}
	found := false
	for i, l := range lines {
		if strings.HasPrefix(l, "FAIL  idmap        /proc (proc): ") {
			found = i+1 < len(lines) && strings.HasPrefix(lines[i+1], "      fix: ")
		} else if !strings.HasPrefix(l, "OK    ") && (i == 0 || !strings.HasPrefix(lines[i-1], "FAIL  idmap")) {
			t.Errorf("line %q: want OK", l)
		}
	}
	if !found {
		t.Errorf("no failed idmap line with its fix below in:\n%s", r.stdout)
	}
}

// TestDoctorBinDirDefault checks that containerd and runc are looked for
// next to the airlock binary, and skipped with a warning when it cannot
// be found.
func TestDoctorBinDirDefault(t *testing.T) {
	testutil.RequiresRoot(t)
	h := newHarness(t)
	dir, bin := t.TempDir(), testutil.RuntimeBinDir(t)
	for _, f := range []string{"containerd", "runc"} {
		if err := os.Symlink(filepath.Join(bin, f), filepath.Join(dir, f)); err != nil {
			t.Fatal(err)
		}
	}
	h.self = filepath.Join(dir, "airlock")
	if err := os.WriteFile(h.self, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	r := h.run("", "doctor", "--json")
	found := 0
	for _, c := range decodeDoctor(t, r).Checks {
		if c.Name == "containerd" || c.Name == "runc" {
			found++
			if c.Status != hostcheck.StatusOK || !strings.Contains(c.Detail, filepath.Join(dir, c.Name)) {
				t.Errorf("check %+v, want ok in %s", c, dir)
			}
		}
	}
	if r.code != exitOK || found != 2 {
		t.Errorf("doctor --json next to containerd and runc: exit %d, %d of their checks; want 0, 2", r.code, found)
	}

	h.self = ""
	r = h.run("", "doctor", "--json")
	for _, c := range decodeDoctor(t, r).Checks {
		if c.Name == "containerd" || c.Name == "runc" {
			t.Errorf("check %+v without a binary directory", c)
		}
	}
	want := "airlock: cannot find the airlock binary's directory: containerd and runc not checked (use --bin-dir)\n"
	if r.code != exitOK || r.stderr != want {
		t.Errorf("doctor --json with no executable: exit %d, stderr %q; want 0, %q", r.code, r.stderr, want)
	}
}

func decodeDoctor(t *testing.T, r result) doctorOutput {
	t.Helper()
	var out doctorOutput
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("doctor --json printed %q: %v", r.stdout, err)
	}
	if len(out.Checks) == 0 {
		t.Fatalf("doctor --json printed no checks: %s", r.stdout)
	}
	return out
}

// TestDoctorConfig checks that --config takes bin_dir and the admission
// policy's host_paths from airlockd's configuration file, that flags win,
// and that a bad file is a usage error with its line.
func TestDoctorConfig(t *testing.T) {
	testutil.RequiresRoot(t)
	h := newHarness(t)
	dir := t.TempDir()
	conf := filepath.Join(dir, "airlockd.hcl")
	src := "root = \"/var/lib/airlock\"\nbin_dir = \"" + testutil.RuntimeBinDir(t) + "\"\nuplink = \"host\"\n" +
		"admission {\n  host_paths = [\"" + dir + "\"]\n}\n"
	if err := os.WriteFile(conf, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	h.self = ""
	check := func(args ...string) (code int, bins int, idmap map[string]string) {
		r := h.run("", append([]string{"doctor", "--json", "--config", conf}, args...)...)
		idmap = map[string]string{}
		for _, c := range decodeDoctor(t, r).Checks {
			switch c.Name {
			case "idmap":
				idmap[strings.Fields(c.Detail)[0]] = c.Status
			case "containerd", "runc":
				if c.Status == hostcheck.StatusOK && strings.Contains(c.Detail, testutil.RuntimeBinDir(t)) {
					bins++
				}
			}
		}
		return r.code, bins, idmap
	}
	if code, bins, idmap := check(); code != exitOK || bins != 2 || len(idmap) != 1 || idmap[dir] != hostcheck.StatusOK {
		t.Errorf("doctor --config: exit %d, binaries found in bin_dir %d, idmap %v; want 0, 2, %s ok", code, bins, idmap, dir)
	}
	// --path replaces the policy's paths.
	if code, _, idmap := check("--path", "/proc"); code != exitFailure || len(idmap) != 1 || idmap["/proc"] != hostcheck.StatusFail {
		t.Errorf("doctor --config --path /proc: exit %d, idmap %v; want 1, /proc failed alone", code, idmap)
	}

	bad := filepath.Join(dir, "bad.hcl")
	if err := os.WriteFile(bad, []byte("bin_dir = \"/x\"\nadmission {\n  host_paths = [\"relative\"]\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := h.run("", "doctor", "--config", bad)
	if r.code != exitUsage || !strings.Contains(r.stderr, "bad.hcl line 3") || r.stdout != "" {
		t.Errorf("doctor --config with a bad policy: exit %d, stdout %q, stderr %q; want %d and the line", r.code, r.stdout, r.stderr, exitUsage)
	}
}
