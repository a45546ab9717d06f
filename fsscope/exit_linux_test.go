package fsscope

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestExit runs on_exit through Exit for each on_exit value, with and
// without changes, on both quota backends: what is kept must be exactly
// what Teardown(true) + Finish leave, and what is not kept must be gone
// (mounts, loop device, state directory).
func TestExit(t *testing.T) {
	testutil.RequiresRoot(t)
	tests := []struct {
		onExit     string
		write      bool
		wantReview bool
		wantHost   string
	}{
		{policies.OnExitReview, false, false, "old\n"},
		{policies.OnExitReview, true, true, "old\n"},
		{policies.OnExitDiscard, true, false, "old\n"},
		{policies.OnExitCommit, true, false, "new\n"},
		{policies.OnExitCommit, false, false, "old\n"},
	}
	for _, backend := range []QuotaBackend{QuotaImage, QuotaTmpfs} {
		for _, tt := range tests {
			t.Run(fmt.Sprintf("%s/%s/write=%v", backend, tt.onExit, tt.write), func(t *testing.T) {
				host := hostTree(t, hostOwner, map[string]string{"f": "old\n", "src/a.go": "package a\n"})
				w := overlayWS(host)
				w.OnExit = tt.onExit
				s := setup(t, policyWith(w), hostOwner, WithQuotaBackend(backend))
				dir := s.Dir()
				if tt.write {
					mustProbe(t, s, hostOwner, probeAction{Op: "write", Path: "/workspace/f", Arg: "new\n"})
				}
				var events []Event
				res, review, err := s.Exit(t.Context(), func(ev Event) { events = append(events, ev) })
				if err != nil || review != tt.wantReview {
					t.Fatalf("Exit = %+v, review %v, %v; want review %v", res, review, err, tt.wantReview)
				}
				if got := readFile(t, filepath.Join(host, "f")); got != tt.wantHost {
					t.Errorf("host f = %q, want %q", got, tt.wantHost)
				}
				if tt.onExit == policies.OnExitCommit && tt.write {
					if res == nil || !slices.Equal(res.Applied, []string{"/workspace/f"}) {
						t.Errorf("commit result %+v", res)
					}
					if !slices.ContainsFunc(events, func(ev Event) bool { return ev.Type == EventApplied }) {
						t.Errorf("no applied event among %+v", events)
					}
				}
				if !review {
					assertRemoved(t, dir)
					return
				}
				// Kept for review: as Teardown(true) leaves it, and as
				// a restarted daemon finds it.
				if m, _ := mountsUnder(dir); backend == QuotaImage && len(m) != 0 {
					t.Errorf("mounts while kept for review: %v", m)
				}
				s2, err := Load(dir)
				if err != nil {
					t.Fatal(err)
				}
				if s2.Live() {
					t.Error("a session kept for review loads as live")
				}
				cs, err := s2.Diff(t.Context())
				if err != nil || !slices.Equal(changeKinds(cs), []string{"f modified"}) {
					t.Fatalf("Diff of the kept changes = %v, %v", changeKinds(cs), err)
				}
				if err := s2.Teardown(t.Context(), false); err != nil {
					t.Fatal(err)
				}
				assertRemoved(t, dir)
			})
		}
	}
}

// TestExitAfterCrash: a daemon that dies inside Exit, after the sandbox's
// mounts are gone but before on_exit ran, leaves a state that a restarted
// daemon loads and finishes with Exit (on_exit runs), or removes with
// Cleanup (the host is left alone).
func TestExitAfterCrash(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, then := range []string{"exit", "cleanup"} {
		t.Run(then, func(t *testing.T) {
			host := hostTree(t, hostOwner, map[string]string{"f": "old\n"})
			w := overlayWS(host)
			w.OnExit = policies.OnExitCommit
			s := setup(t, policyWith(w), hostOwner)
			dir := s.Dir()
			mustProbe(t, s, hostOwner, probeAction{Op: "write", Path: "/workspace/f", Arg: "new\n"})
			if err := s.unmountSandbox(t.Context()); err != nil {
				t.Fatal(err)
			}
			s2, err := Load(dir)
			if err != nil {
				t.Fatal(err)
			}
			switch then {
			case "exit":
				if _, review, err := s2.Exit(t.Context(), nil); err != nil || review {
					t.Fatalf("Exit after restart: review %v, %v", review, err)
				}
				if got := readFile(t, filepath.Join(host, "f")); got != "new\n" {
					t.Errorf("host f = %q after on_exit commit", got)
				}
			case "cleanup":
				if err := Cleanup(t.Context(), dir); err != nil {
					t.Fatal(err)
				}
				if got := readFile(t, filepath.Join(host, "f")); got != "old\n" {
					t.Errorf("cleanup changed the host: f = %q", got)
				}
			}
			assertRemoved(t, dir)
		})
	}
}

// assertRemoved checks that nothing of the session's state is left: no
// mount beneath dir, no directory, and no loop device on its image once the
// kernel has released it (it clears an autoclear device asynchronously when
// the last reference goes from another context, such as a probe's mount
// namespace).
func assertRemoved(t *testing.T, dir string) {
	t.Helper()
	if m, err := mountsUnder(dir); err != nil || len(m) != 0 {
		t.Errorf("mounts under %s remain: %v %v", dir, m, err)
	}
	if exists(dir) {
		t.Errorf("%s still exists", dir)
	}
	if attached, err := waitDetached(filepath.Join(dir, imageFile), detachWait); err != nil || attached {
		out, _ := exec.Command("losetup", "-a").CombinedOutput()
		t.Errorf("loop device still attached to %s: %v\n%s", dir, err, out)
	}
}

// BenchmarkExit measures the end of a session with a 12-file overlay
// workspace whose on_exit has nothing to do (review, no changes): the
// three steps the daemon used to run in turn, against Exit.
func BenchmarkExit(b *testing.B) {
	testutil.RequiresRoot(b)
	host := hostDirB(b)
	for i := range 11 {
		p := filepath.Join(host, "src", fmt.Sprintf("f%d.go", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(strings.Repeat("x", 100)), 0o644)
	}
	os.WriteFile(filepath.Join(host, "README.md"), []byte("# r\n"), 0o644)
	chownTreeB(b, host)
	for _, backend := range []QuotaBackend{QuotaImage, QuotaTmpfs} {
		newSession := func(b *testing.B) *Session {
			w := policies.Workspace{HostPath: host, Target: "/workspace", Mode: policies.ModeOverlay, DefaultDenyRead: true, OnExit: policies.OnExitReview}
			p := &policies.Policy{Workspaces: []policies.Workspace{w}, Resources: policies.Resources{Disk: 1 << 30}}
			dir := filepath.Join(b.TempDir(), "fs")
			s, err := Setup(context.Background(), dir, p, sandboxer, WithQuotaBackend(backend))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { Cleanup(context.Background(), dir) })
			return s
		}
		b.Run(string(backend)+"/steps", func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				s := newSession(b)
				b.StartTimer()
				ctx := context.Background()
				if err := s.Teardown(ctx, true); err != nil {
					b.Fatal(err)
				}
				if _, review, err := s.Finish(ctx, nil); err != nil || review {
					b.Fatal(review, err)
				}
				if err := s.Teardown(ctx, false); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(string(backend)+"/exit", func(b *testing.B) {
			for b.Loop() {
				b.StopTimer()
				s := newSession(b)
				b.StartTimer()
				if _, review, err := s.Exit(context.Background(), nil); err != nil || review {
					b.Fatal(review, err)
				}
			}
		})
	}
}
