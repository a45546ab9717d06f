package daemon_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/daemon/httpapi"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// TestServeToGroupNeedsAdmissionPolicy checks that the daemon refuses to
// serve the API to a group under the built-in admission policy.
func TestServeToGroupNeedsAdmissionPolicy(t *testing.T) {
	testutil.RequiresRoot(t)
	sock := filepath.Join(t.TempDir(), "group.sock")
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	err := httpapi.Serve(ctx, h.Daemon, sock, "0")
	if !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "--admission") {
		t.Fatalf("Serve to a group without an admission policy: %v", err)
	}
	if _, err := os.Lstat(sock); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("refused Serve left %s", sock)
	}
}
