package perf

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/perf/load"
)

func TestVethPath(t *testing.T) {
	testutil.RequiresRoot(t)
	b := make([]byte, 3)
	rand.Read(b)
	prefix := "pt" + hex.EncodeToString(b)
	v, err := NewVethPath(netns.DefaultDir, prefix)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { v.Close() })

	l, err := netns.Listen(v.Server, "tcp", netip.AddrPortFrom(v.ServerAddr, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	sink := load.NewSink(l)
	defer sink.Close()
	var res *load.StreamResult
	if err := netns.Do(v.Client, func() error {
		var err error
		res, err = load.Stream(context.Background(), l.Addr().String(), 10*time.Second, 4<<20)
		return err
	}); err != nil {
		t.Fatalf("stream from the client namespace: %v", err)
	}
	got := sink.Take()
	if res.Bytes != 4<<20 || len(got) != 1 || got[0].Bytes != 4<<20 {
		t.Fatalf("sent %+v, sink got %+v", res, got)
	}
	// The server's address is not on the client's link: the transfer was
	// forwarded by the router namespace.
	if vethClient.Contains(v.ServerAddr) {
		t.Fatalf("server %v is on the client's subnet %v", v.ServerAddr, vethClient)
	}

	if err := v.Close(); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"-a", "-g", "-w"} {
		if _, err := os.Stat(filepath.Join(netns.DefaultDir, prefix+n)); !os.IsNotExist(err) {
			t.Errorf("namespace %s%s left after Close: %v", prefix, n, err)
		}
	}
	if err := v.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func TestNewVethPathRejectsBadPrefix(t *testing.T) {
	if _, err := NewVethPath(t.TempDir(), "Bad-Prefix"); err == nil {
		t.Fatal("bad prefix accepted")
	}
}
