package netns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/egress/nft"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// Cleanup removes every kernel object a gateway with this prefix may have
// left in DefaultDir and in the daemon's namespace: the gateway namespace
// (its links and table first, so nothing survives in a namespace something
// still holds open), session namespaces, the host-mode uplink peer and host
// table. It is for a daemon that found a dead predecessor's gateway and
// does not adopt it; it must not run while a gateway with the prefix is in
// use.
func Cleanup(ctx context.Context, prefix string) error {
	return CleanupDir(ctx, DefaultDir, prefix)
}

// CleanupDir is Cleanup for namespaces mounted in dir.
func CleanupDir(ctx context.Context, dir, prefix string) error {
	if err := ValidatePrefix(prefix); err != nil {
		return err
	}
	var errs []error
	gw := filepath.Join(dir, gatewayNetnsName(prefix))
	if IsNetns(gw) {
		errs = append(errs, emptyGateway(gw, prefix))
	}
	if _, err := os.Lstat(gw); err == nil {
		errs = append(errs, Remove(gw))
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		errs = append(errs, err)
	}
	for _, e := range entries {
		if _, ok := keyFromNetnsName(prefix, e.Name()); ok {
			errs = append(errs, Remove(filepath.Join(dir, e.Name())))
		}
	}
	errs = append(errs, removeHostObjects(prefix))
	err = errors.Join(errs...)
	if err != nil {
		return fmt.Errorf("cleanup %s: %w", prefix, err)
	}
	log.G(ctx).Info("gateway leftovers removed", "prefix", prefix)
	return nil
}

// emptyGateway deletes the links and the table inside a gateway namespace.
func emptyGateway(path, prefix string) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	h, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
	if err != nil {
		return err
	}
	defer h.Close()
	var errs []error
	links, err := linkList(h)
	if err != nil {
		errs = append(errs, err)
	}
	for _, l := range links {
		if l.Attrs().Name == "lo" {
			continue
		}
		if err := h.LinkDel(l); err != nil && !isNotFound(err) {
			errs = append(errs, fmt.Errorf("delete %s: %w", l.Attrs().Name, err))
		}
	}
	c, err := nftables.New(nftables.WithNetNSFd(int(f.Fd())))
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	if err := nft.DeleteTable(c, prefix); err != nil {
		errs = append(errs, err)
	} else if err := c.Flush(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Leftovers lists the kernel objects with this prefix visible from the
// daemon: namespaces in dir, interfaces and nftables tables in the
// daemon's namespace, and the uplink peer in the namespace at uplinkNetns
// if that is not empty. After Close or Cleanup it is empty; tests use it to
// prove nothing leaked.
func Leftovers(dir, prefix, uplinkNetns string) ([]string, error) {
	var out []string
	entries, err := os.ReadDir(dir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	for _, e := range entries {
		if n := e.Name(); n == gatewayNetnsName(prefix) || strings.HasPrefix(n, prefix+"-s-") {
			out = append(out, "netns "+filepath.Join(dir, n))
		}
	}
	links, err := netlink.LinkList()
	if err != nil && !errors.Is(err, netlink.ErrDumpInterrupted) {
		return nil, err
	}
	for _, l := range links {
		if strings.HasPrefix(l.Attrs().Name, prefix+"-") {
			out = append(out, "link "+l.Attrs().Name)
		}
	}
	c, err := nftables.New()
	if err != nil {
		return nil, err
	}
	tables, err := nft.TablesWithPrefix(c, prefix)
	if err != nil {
		return nil, err
	}
	for _, t := range tables {
		out = append(out, "table inet "+t)
	}
	if uplinkNetns != "" {
		f, err := os.Open(uplinkNetns)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		h, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
		if err != nil {
			return nil, err
		}
		defer h.Close()
		if _, err := h.LinkByName(uplinkPeerName(prefix)); err == nil {
			out = append(out, "link "+uplinkPeerName(prefix)+" in "+uplinkNetns)
		}
	}
	return out, nil
}
