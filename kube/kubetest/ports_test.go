package kubetest

import (
	"errors"
	"net"
	"os"
	"testing"
)

// TestPortTakenIsErrPortTaken gives etcd, then the apiserver, a port
// another listener holds:
// New fails with ErrPortTaken, which Start retries with fresh ports.
func TestPortTakenIsErrPortTaken(t *testing.T) {
	if testing.Short() {
		t.Skip("control-plane test skipped in -short mode")
	}
	bin, err := BinDir()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		index int // in New's ports: etcd's client, its peer, the apiserver's
	}{{"etcd", 0}, {"kube-apiserver", 2}} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			drawPorts = func(n int) ([]int, error) {
				ports, err := freePorts(n)
				if err != nil {
					return nil, err
				}
				ports[tc.index] = l.Addr().(*net.TCPAddr).Port
				return ports, nil
			}
			t.Cleanup(func() { drawPorts = freePorts })
			dir := t.TempDir()
			cp, err := New(t.Context(), bin, dir)
			if err == nil {
				cp.Close()
				t.Fatalf("New succeeded with %s's port taken", tc.name)
			}
			if !errors.Is(err, ErrPortTaken) {
				t.Fatalf("New: %v, want ErrPortTaken", err)
			}
			if _, err := os.Stat(dir); err != nil {
				t.Fatalf("New removed the caller's directory: %v", err)
			}
		})
	}
}
