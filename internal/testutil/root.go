// Package testutil holds helpers shared by airlock's tests.
package testutil

import (
	"fmt"
	"os"
	"testing"
)

// RequiresRoot gates a test that needs root (network namespaces, nftables,
// mounts, containerd). Under -short it skips; otherwise it fails when the
// test does not run as root, so that a full run never passes by skipping
// the real thing.
func RequiresRoot(tb testing.TB) {
	tb.Helper()
	if testing.Short() {
		tb.Skip("root test skipped in -short mode")
	}
	if os.Geteuid() != 0 {
		tb.Fatal("this test must run as root (or with -short to skip it)")
	}
}

// RequiresRootM is RequiresRoot for TestMain, after flag.Parse: it reports
// whether a root-only suite should set up its fixtures. It returns false
// under -short, and false with a message on stderr when not root; the
// suite's tests then skip or fail through RequiresRoot.
func RequiresRootM() bool {
	if testing.Short() {
		return false
	}
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "root-only suite: not running as root; its tests will fail (use -short to skip them)")
		return false
	}
	return true
}
