package httpapi

import (
	"context"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestServeDebug: the debug socket is mode 0600, serves the heap profile
// with the runtime's memory statistics, and frees memory on POST only.
func TestServeDebug(t *testing.T) {
	dir, err := os.MkdirTemp("", "dbg-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	sock := filepath.Join(dir, "debug.sock")
	ctx, cancel := context.WithCancel(t.Context())
	if _, err := ServeDebug(ctx, sock); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("debug socket mode %v, want 0600", fi.Mode().Perm())
	}
	c := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	resp, err := c.Get("http://d/debug/pprof/heap?debug=1")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(b), "# HeapAlloc = ") {
		t.Errorf("heap profile: %s, no HeapAlloc in %.200q", resp.Status, b)
	}
	for method, want := range map[string]int{"POST": http.StatusNoContent, "GET": http.StatusMethodNotAllowed} {
		req, _ := http.NewRequest(method, "http://d/debug/free-os-memory", nil)
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s /debug/free-os-memory: %s, want %d", method, resp.Status, want)
		}
	}
	cancel()
	c.CloseIdleConnections()
}
