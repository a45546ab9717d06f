package packaging_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestDebianPackage builds the package `make deb` builds and takes it
// through dpkg's life cycle in a throwaway root (dpkg --root): install,
// the installed airlockd accepting the installed configuration, remove
// (the edited conffile stays), purge (nothing stays).
func TestDebianPackage(t *testing.T) {
	testutil.RequiresRoot(t)
	bin, image := os.Getenv("AIRLOCK_BIN_DIR"), os.Getenv("AIRLOCK_AGENT_IMAGE")
	if bin == "" || image == "" {
		t.Fatal("AIRLOCK_BIN_DIR and AIRLOCK_AGENT_IMAGE are not set: run the integration tests through `make test`")
	}
	dir, err := os.MkdirTemp("/tmp", "deb-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	build := exec.Command("bash", "../hack/deb.sh", bin, filepath.Join(dir, "out"), "--image", "agent="+image)
	build.Env = append(os.Environ(), "DEB_COMPRESS=none")
	out, err := build.Output()
	if err != nil {
		var ee *exec.ExitError
		errors.As(err, &ee)
		t.Fatalf("deb.sh: %v\n%s", err, ee.Stderr)
	}
	deb := strings.TrimSpace(string(out))

	field := func(name string) string {
		b, err := exec.Command("dpkg-deb", "--field", deb, name).Output()
		if err != nil {
			t.Fatalf("dpkg-deb --field %s: %v", name, err)
		}
		return strings.TrimSpace(string(b))
	}
	if got := field("Package"); got != "airlock" {
		t.Errorf("Package %q", got)
	}
	if v := field("Version"); !regexp.MustCompile(`^\d+\.\d+\.\d+(~[a-z0-9]+)?(\+git[0-9a-f]{12})?$`).MatchString(v) {
		t.Errorf("Version %q", v)
	}
	if d := field("Depends"); !strings.Contains(d, "libseccomp2") {
		t.Errorf("Depends %q lacks libseccomp2 (runc's)", d)
	}

	root := filepath.Join(dir, "root")
	for _, d := range []string{"var/lib/dpkg/updates", "var/lib/dpkg/info"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	// The throwaway root has no libc6 package to depend on, nor a shell
	// to run the maintainer scripts in (they run outside it, DPKG_ROOT set).
	dpkg := func(args ...string) {
		t.Helper()
		cmd := exec.Command("dpkg", append([]string{"--root=" + root, "--force-script-chrootless", "--force-depends", "--log=/dev/null"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("dpkg %v: %v\n%s", args, err, out)
		}
	}
	dpkg("-i", deb)
	for _, f := range []string{"usr/bin/airlock", "usr/sbin/airlockd", "usr/libexec/airlock/runc", "usr/libexec/airlock/containerd",
		"usr/share/airlock/images/agent.tar", "usr/share/bash-completion/completions/airlock", "usr/share/doc/airlock/docs/operator-guide.md"} {
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Errorf("not installed: %v", err)
		}
	}
	if _, err := os.Stat(filepath.Join(root, "usr/share/airlock/installed-files")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the package carries make install's file list: %v", err)
	}
	unit := filepath.Join(root, "lib/systemd/system/airlockd.service")
	if argv := execStart(t, unit); strings.Join(argv, " ") != "/usr/sbin/airlockd --config /etc/airlock/airlockd.hcl" {
		t.Errorf("the unit's ExecStart is %q", argv)
	}
	conf := filepath.Join(root, "etc/airlock/airlockd.hcl")
	check, err := exec.Command(filepath.Join(root, "usr/sbin/airlockd"), "--config", conf, "--check-config").CombinedOutput()
	if err != nil {
		t.Fatalf("the installed airlockd refuses the installed configuration: %v\n%s", err, check)
	}
	for _, want := range []string{`bin_dir = "/usr/libexec/airlock"`, `root = "/var/lib/airlock"`, `image = ["/usr/share/airlock/images/agent.tar"]`} {
		if !strings.Contains(string(check), want) {
			t.Errorf("the installed configuration's settings lack %s:\n%s", want, check)
		}
	}

	// The operator edits the configuration; removing keeps it, purging
	// takes it, and then nothing of the package is left.
	if err := os.WriteFile(conf, []byte("# edited\nlog_level = \"debug\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	dpkg("-r", "airlock")
	left := func() []string {
		var files []string
		_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() && !strings.HasPrefix(p, filepath.Join(root, "var/lib/dpkg")) {
				files = append(files, strings.TrimPrefix(p, root))
			}
			return nil
		})
		return files
	}
	if got := left(); len(got) != 1 || got[0] != "/etc/airlock/airlockd.hcl" {
		t.Errorf("after dpkg -r: %q, want the edited configuration alone", got)
	}
	dpkg("-P", "airlock")
	if got := left(); len(got) != 0 {
		t.Errorf("after dpkg -P: %q left", got)
	}
}
