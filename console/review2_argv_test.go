package console

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestReview2TokenInArgvReadable: README.md and docs/console.md tell the
// operator to open the console with
//
//	xdg-open "http://127.0.0.1:8443/?token=$(cat /var/lib/airlock/console.token)"
//
// which puts the token in the argv of xdg-open and of the browser it
// starts (for the browser's whole life when it was not running yet), and
// /proc/PID/cmdline is readable by every local user: here an unprivileged
// user (nobody) reads the token off a process started as the README says
// (sh stands in for xdg-open, with the same argv).
func TestReview2TokenInArgvReadable(t *testing.T) {
	testutil.RequiresRoot(t)
	root := t.TempDir()
	tok := "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	file := filepath.Join(root, TokenFileName)
	if err := os.WriteFile(file, []byte(tok+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	opener := exec.Command("sh", "-c", `exec sh -c 'sleep 5' xdg-open "http://127.0.0.1:8443/?token=$(cat `+file+`)"`)
	opener.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := opener.Start(); err != nil {
		t.Fatal(err)
	}
	// The opener and its sleep: their own process group, ended together.
	t.Cleanup(func() { _ = syscall.Kill(-opener.Process.Pid, syscall.SIGKILL); _ = opener.Wait() })
	time.Sleep(300 * time.Millisecond)
	// The local user: any uid but root's or the operator's.
	spy := exec.Command("sh", "-c", `for f in /proc/[0-9]*/cmdline; do tr '\0' ' ' < "$f"; echo; done 2>/dev/null | grep -o 'token=[0-9a-f]*' | head -1`)
	spy.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	var out bytes.Buffer
	spy.Stdout = &out
	if err := spy.Run(); err != nil {
		t.Fatal(err)
	}
	got := strings.TrimSpace(out.String())
	if got != "token="+tok {
		t.Fatalf("uid 65534 read %q: the attack failed", got)
	}
	t.Logf("uid 65534 read the console token from /proc: %s", got)
}
