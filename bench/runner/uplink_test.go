package runner

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/egress/netns"
	"github.com/airlock-sandbox/airlock/internal/testutil"
)

func uniqueName(prefix string) string {
	return fmt.Sprintf("%s%04x", prefix, os.Getpid()&0xffff)
}

func TestCheckUplink(t *testing.T) {
	testutil.RequiresRoot(t)
	path, err := netns.Create(netns.DefaultDir, uniqueName("bu"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netns.Remove(path) })
	const prefix = "alfeed"
	if err := checkUplink(path, prefix); err == nil || !strings.Contains(err.Error(), "not the namespace") {
		t.Errorf("empty namespace: %v", err)
	}
	if err := checkUplink(t.TempDir(), prefix); err == nil {
		t.Error("a directory passed for a namespace")
	}
	f, _ := os.Open(path)
	defer f.Close()
	h, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: prefix + "-up"}, PeerName: prefix + "-pe"}); err != nil {
		t.Fatal(err)
	}
	if err := checkUplink(path, prefix); err != nil {
		t.Errorf("with the uplink peer: %v", err)
	}
}
