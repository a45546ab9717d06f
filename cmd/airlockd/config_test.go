package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestMain lets a test run airlockd's main in a child process: the test
// binary with AIRLOCKD_TEST_MAIN=1 is airlockd.
func TestMain(m *testing.M) {
	if os.Getenv("AIRLOCKD_TEST_MAIN") == "1" {
		os.Exit(run())
	}
	os.Exit(m.Run())
}

// airlockd runs airlockd's main with args and returns its output and
// exit code.
func airlockd(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), "AIRLOCKD_TEST_MAIN=1")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// The shipped example is the file `make install` puts in place: it must
// be one airlockd accepts.
func TestExampleConfig(t *testing.T) {
	out, code := airlockd(t, "--config", "../../examples/airlockd/airlockd.hcl", "--check-config")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		`root = "/var/lib/airlock"`,
		`socket = "/run/airlock/airlock.sock"`,
		`bin_dir = "/usr/local/libexec/airlock"`,
		`image = ["/usr/local/share/airlock/images/agent.tar"]`,
		"# admission policy: the built-in admission policy",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("settings lack %s:\n%s", want, out)
		}
	}
}

func TestConfigFile(t *testing.T) {
	dir := t.TempDir()
	conf := filepath.Join(dir, "airlockd.hcl")
	src := `
root          = "state"
log_level     = "warn"
dns_upstream  = ["10.0.0.53", "10.0.0.54"]
allow_private = "10.20.0.0/16"
dns_rate      = 7.5
stop_containerd = true
issuer = ["vault=/usr/local/bin/vault-issuer --role agents"]
admission {
  host_paths = ["/srv/agents"]
}
`
	if err := os.WriteFile(conf, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	// A flag on the command line wins over the file, also for a list.
	out, code := airlockd(t, "--config", conf, "--check-config", "--log-level", "debug", "--dns-upstream", "10.1.1.1")
	if code != 0 {
		t.Fatalf("exit %d:\n%s", code, out)
	}
	for _, want := range []string{
		`root = "` + filepath.Join(dir, "state") + `"`, // relative to the file
		`log_level = "debug"`,
		`dns_upstream = ["10.1.1.1"]`,
		`allow_private = ["10.20.0.0/16"]`,
		`dns_rate = 7.5`,
		`stop_containerd = true`,
		`issuer = ["vault=/usr/local/bin/vault-issuer --role agents"]`,
		"# admission policy: " + conf + ": host paths /srv/agents,",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("settings lack %s:\n%s", want, out)
		}
	}
	// --admission on the command line replaces the file's block.
	adm := filepath.Join(dir, "admission.hcl")
	if err := os.WriteFile(adm, []byte("admission {\n  host_paths = [\"/srv/other\"]\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = airlockd(t, "--config", conf, "--check-config", "--admission", adm)
	if code != 0 || !strings.Contains(out, "# admission policy: "+adm+": host paths /srv/other,") {
		t.Errorf("exit %d, want the --admission policy:\n%s", code, out)
	}
}

func TestConfigFileRefused(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"unknown", "log_level = \"info\"\nuplnk = \"host\"\n", []string{"line 2:", `Did you mean "uplink"?`}},
		{"flag refuses", "\nallow_private = [\"8.8.8.0/24\"]\n", []string{"line 2:", "Invalid allow_private", "8.8.8.0/24"}},
		{"relative issuer", "issuer = [\"v=vault-issuer\"]\n", []string{"line 1:", "must be an absolute path"}},
		{"unknown runtime", "log_level = \"info\"\nruntime = \"kata\"\n", []string{"line 2:", `"kata": want runc or crun`}},
		{"not a flag", "config = \"other.hcl\"\n", []string{"line 1:", `An argument named "config" is not expected here`}},
		{"group without policy", "socket_group = \"airlock\"\n", []string{"give an explicit policy with --admission FILE (see examples/airlockd/admission.hcl) or an admission block"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conf := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".hcl")
			if err := os.WriteFile(conf, []byte(tc.src), 0o644); err != nil {
				t.Fatal(err)
			}
			out, code := airlockd(t, "--config", conf, "--check-config")
			if code != 2 {
				t.Errorf("exit %d, want 2", code)
			}
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("output lacks %q:\n%s", w, out)
				}
			}
		})
	}
	if _, code := airlockd(t, "--config", filepath.Join(dir, "missing.hcl"), "--check-config"); code != 2 {
		t.Errorf("a missing --config file: exit %d, want 2", code)
	}
}
