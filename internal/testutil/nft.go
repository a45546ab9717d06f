package testutil

import (
	"os"
	"testing"

	"github.com/google/nftables"
)

// NftConn is a connection to nftables in the network namespace at path
// (a /run/netns file), closed when the test ends.
func NftConn(t testing.TB, path string) *nftables.Conn {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
