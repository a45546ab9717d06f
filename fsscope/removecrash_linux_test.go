package fsscope

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// errCut stands for the daemon's death in the middle of a removal.
var errCut = errors.New("cut short")

// TestRemovalCutShortLoadsWholeOrNot: a daemon killed while it removes a
// session's state (a commit or discard reviewed, the session removed)
// leaves the next daemon either the whole session or none. Cut after
// every unlink of the removal in turn, Load returns a session whose
// changes can still be reviewed and committed, or says there is none;
// Cleanup then removes the rest. (Before, the quota image could go before
// the state file: the next daemon loaded a session whose every commit and
// diff failed with "disk.img: no such file or directory".)
func TestRemovalCutShortLoadsWholeOrNot(t *testing.T) {
	testutil.RequiresRoot(t)
	run := func(t *testing.T, cut int) (unlinks int, loaded bool) {
		host := hostTree(t, hostOwner, map[string]string{"a": "a"})
		dir := filepath.Join(t.TempDir(), "fs")
		s, err := Setup(t.Context(), dir, policyWith(overlayWS(host)), sandboxer)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { Cleanup(context.Background(), dir) })
		if err := os.WriteFile(filepath.Join(merged(s, 0), "new"), []byte("n"), 0o644); err != nil {
			t.Fatal(err)
		}
		stop(t, s)
		n := 0
		testHookUnlink = func(string) error {
			if n == cut {
				return errCut
			}
			n++
			return nil
		}
		err = s.Teardown(t.Context(), false)
		testHookUnlink = nil
		if cut < 0 {
			if err != nil {
				t.Fatal(err)
			}
			return n, false
		}
		if !errors.Is(err, errCut) {
			t.Fatalf("removal cut at unlink %d: %v", cut, err)
		}
		s2, err := Load(dir)
		switch {
		case errdefs.IsNotFound(err):
		case err != nil:
			t.Fatalf("cut at unlink %d: Load: %v", cut, err)
		default:
			loaded = true
			cs, err := s2.Diff(t.Context())
			if err != nil {
				t.Fatalf("cut at unlink %d: the session loads, but its Diff: %v", cut, err)
			}
			if cs.Len() != 1 {
				t.Fatalf("cut at unlink %d: the session loads, but its Diff = %v", cut, changeKinds(cs))
			}
			if _, err := s2.Commit(t.Context(), CommitOptions{}); err != nil {
				t.Fatalf("cut at unlink %d: the session loads, but its Commit: %v", cut, err)
			}
			if got := readFile(t, filepath.Join(host, "new")); got != "n" {
				t.Fatalf("cut at unlink %d: committed %q", cut, got)
			}
		}
		if err := Cleanup(t.Context(), dir); err != nil {
			t.Fatalf("cut at unlink %d: Cleanup: %v", cut, err)
		}
		if exists(dir) {
			t.Fatalf("cut at unlink %d: %s still exists after Cleanup", cut, dir)
		}
		return 0, loaded
	}
	total, _ := run(t, -1)
	if total < 3 {
		t.Fatalf("a removal made %d unlinks", total)
	}
	var whole, none int
	for cut := range total {
		if _, loaded := run(t, cut); loaded {
			whole++
		} else {
			none++
		}
	}
	t.Logf("a removal of %d unlinks, cut after each: %d loaded whole, %d gone", total, whole, none)
	if whole == 0 {
		t.Error("cut before its first unlink, the session no longer loads")
	}
}
