package kubetest

import (
	"testing"
	"time"
)

// Eventually polls cond every 100 ms until it holds or timeout passes,
// then fails the test with what, the timeout and what cond last said. The
// control plane stores and watches but acts on nothing: what a test waits
// for (a status written, an object gone) is the code under test's doing,
// done when its watches catch up, so the tests ask until it is there.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() (ok bool, state string)) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("%s: not within %s: %s", what, timeout, state)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
