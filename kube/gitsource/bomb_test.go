package gitsource

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/kube/gitsource/gittest"
)

// TestFetchBoundedBeforeTheCheckout: a repository whose pack is small but
// whose files are large (one blob of one byte repeated under many names: a few
// kilobytes fetched, hundreds of megabytes checked out) is refused before
// its checkout writes them. Measured every CheckEvery, the checkout
// overshot the bound by whatever it wrote meanwhile: many times the
// session's disk, on the node's root.
func TestFetchBoundedBeforeTheCheckout(t *testing.T) {
	srv := gittest.NewServer(t)
	same := strings.Repeat("x", 1<<20)
	files := map[string]string{}
	for i := range 256 {
		files[fmt.Sprintf("d%d/f%d", i%16, i)] = same
	}
	url := srv.Create("bomb", files)
	const max = 8 << 20
	dir := filepath.Join(t.TempDir(), "src")

	var peak atomic.Int64
	done := make(chan struct{})
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			select {
			case <-done:
				return
			case <-time.After(5 * time.Millisecond):
			}
			if n := size(dir); n > peak.Load() {
				peak.Store(n)
			}
		}
	}()
	_, err := Fetch(context.Background(), dir, Source{URL: url, Depth: 1, MaxBytes: max})
	close(done)
	<-sampled
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "its files take more") {
		t.Fatalf("fetch of 256 MiB of files bounded at 8 MiB: %v, want ErrTooLarge before the checkout", err)
	}
	if p := peak.Load(); p > 2*max {
		t.Fatalf("the fetch took %d bytes on disk before it was stopped; its bound is %d", p, max)
	}
	if _, serr := os.Stat(dir); !os.IsNotExist(serr) {
		t.Fatalf("%s left behind", dir)
	}
}
