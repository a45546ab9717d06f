package netns

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"

	"github.com/airlock-sandbox/airlock/internal/log"
)

// uplinkRetry is how often WatchUplink checks the uplink, and tries to
// rebuild it while it is down. Losing it is also noticed at once from the
// gateway's link events.
const uplinkRetry = time.Second

// uplinkFault is why the uplink is down.
type uplinkFault struct{ err error }

// ErrUplinkDown is wrapped by UplinkDown's errors.
var ErrUplinkDown = errors.New("uplink down")

// UplinkDown says why the gateway's uplink is down (wrapping
// ErrUplinkDown), or nil while it is up. Sessions' connections and the DNS
// proxy's upstream queries have no way out meanwhile.
func (g *Gateway) UplinkDown() error {
	if f := g.uplinkDown.Load(); f != nil {
		return f.err
	}
	return nil
}

// WatchUplink keeps the uplink up until ctx ends: when its veth goes (the
// uplink namespace was removed, or a peer deleted) UplinkDown says so at
// once, and the uplink is rebuilt, with the same addresses and routes, as
// soon as the namespace it leads to exists again (a namespace made anew
// under the same name counts). onChange, if not nil, is called after each
// change with UplinkDown's new value. Call it at most once per Gateway,
// and end it before Close.
func (g *Gateway) WatchUplink(ctx context.Context, onChange func(down error)) {
	events := make(chan netlink.LinkUpdate, 16)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.LinkSubscribeAt(vnetns.NsHandle(int(g.ns.Fd())), events, done); err != nil {
		// Polling alone still finds the fault, a little later.
		log.G(ctx).Warn("gateway link events", "error", err)
		events = nil
	}
	tick := time.NewTicker(uplinkRetry)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case u, ok := <-events:
			if !ok {
				events = nil
				continue
			}
			if u.Attrs() == nil || u.Attrs().Name != uplinkIface {
				continue
			}
		case <-tick.C:
		}
		before := g.UplinkDown()
		err := g.uplinkProblem()
		if err != nil {
			err = g.repairUplink(ctx, err)
		}
		if (before == nil) != (err == nil) {
			if err != nil {
				log.G(ctx).Warn("gateway uplink down", "prefix", g.cfg.Prefix, "error", err)
			} else {
				log.G(ctx).Info("gateway uplink rebuilt", "prefix", g.cfg.Prefix, "uplink", g.cfg.Uplink.String())
			}
			if onChange != nil {
				onChange(err)
			}
		}
	}
}

// uplinkProblem checks that the uplink veth is there and that its peer is
// in the namespace the uplink names (not in one that was removed, with a
// new one made under its name).
func (g *Gateway) uplinkProblem() error {
	if err := g.checkUplink(); err != nil {
		return err
	}
	f, err := g.uplinkNetnsFile()
	if err != nil {
		return fmt.Errorf("uplink namespace: %w", err)
	}
	defer f.Close()
	ph, err := netlink.NewHandleAt(vnetns.NsHandle(int(f.Fd())))
	if err != nil {
		return fmt.Errorf("netlink in uplink netns: %w", err)
	}
	defer ph.Close()
	if _, err := ph.LinkByName(uplinkPeerName(g.cfg.Prefix)); err != nil {
		return fmt.Errorf("the uplink's peer %s is not in the uplink namespace (made anew?): %w", uplinkPeerName(g.cfg.Prefix), err)
	}
	return nil
}

// repairUplink rebuilds the uplink that problem says is broken, if the
// namespace it leads to exists, and records the outcome for UplinkDown:
// nil once the uplink is up again.
func (g *Gateway) repairUplink(ctx context.Context, problem error) error {
	fail := func(err error) error {
		err = fmt.Errorf("%w: %s: %w", ErrUplinkDown, g.cfg.Uplink.String(), err)
		g.uplinkDown.Store(&uplinkFault{err})
		return err
	}
	if !g.cfg.Uplink.Host && !IsNetns(g.cfg.uplinkNetnsPath()) {
		return fail(fmt.Errorf("namespace %s is gone; waiting for it to return", g.cfg.uplinkNetnsPath()))
	}
	// What is left of the old uplink goes first: the gateway's end (its
	// peer goes with it) and, in host mode, a peer made anew under its
	// name. The host table stays: it filters by the peer's name, and
	// addUplink replaces it in one transaction before the new peer exists.
	clear := g.removeUplinkLink()
	if g.cfg.Uplink.Host {
		if l, err := netlink.LinkByName(uplinkPeerName(g.cfg.Prefix)); err == nil {
			clear = errors.Join(clear, netlink.LinkDel(l))
		}
	}
	if clear != nil {
		return fail(errors.Join(problem, clear))
	}
	if err := g.addUplink(ctx); err != nil {
		if rerr := g.removeUplink(ctx); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return fail(errors.Join(problem, fmt.Errorf("rebuild: %w", err)))
	}
	g.uplinkDown.Store(nil)
	return nil
}
