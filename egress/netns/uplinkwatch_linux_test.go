package netns_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress/netns"
)

// TestWatchUplinkRebuilds removes the uplink's namespace under a gateway
// with a session, then makes it again under the same name: UplinkDown
// says so within a second, the session's connections fail meanwhile, and
// the uplink is rebuilt into the new namespace, where the session reaches
// the world again. Closing leaves nothing, in the new namespace either.
func TestWatchUplinkRebuilds(t *testing.T) {
	p := testPrefix()
	w1 := newWorld(t, p)
	g, err := netns.NewGateway(t.Context(), netns.Config{Prefix: p, Uplink: netns.Uplink{Netns: w1.NetnsPath()}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	changes := make(chan error, 8)
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		g.WatchUplink(ctx, func(down error) { changes <- down })
	}()
	defer func() {
		cancel()
		<-watched
		if err := g.Close(context.Background()); err != nil {
			t.Errorf("close gateway: %v", err)
		}
	}()
	s, err := g.AddSession(t.Context(), "s1", netns.SessionConfig{})
	if err != nil {
		t.Fatal(err)
	}
	pin(t, s, hostX, time.Hour, 80)
	wantGet(t, s, url(hostX, "/"), "x.test")
	if err := g.UplinkDown(); err != nil {
		t.Fatalf("UplinkDown with the uplink up: %v", err)
	}

	if err := w1.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case down := <-changes:
		if !errors.Is(down, netns.ErrUplinkDown) || !strings.Contains(down.Error(), "is gone") {
			t.Errorf("the change reported: %v, want the uplink down, its namespace gone", down)
		}
	case <-time.After(3 * time.Second):
		t.Fatal("the uplink's namespace was removed; no change reported within 3s")
	}
	if err := g.UplinkDown(); !errors.Is(err, netns.ErrUplinkDown) {
		t.Errorf("UplinkDown with the namespace gone: %v", err)
	}
	if _, err := get(t.Context(), netns.Dialer(s.NetnsPath()), url(hostX, "/")); err == nil {
		t.Error("the session reached the world with the uplink's namespace gone")
	}

	w2 := newWorld(t, p)
	select {
	case down := <-changes:
		if down != nil {
			t.Fatalf("the change reported after the namespace returned: %v, want the uplink up", down)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("the uplink's namespace is back; not rebuilt within 5s (%v)", g.UplinkDown())
	}
	wantGet(t, s, url(hostX, "/"), "x.test")
	if err := g.RemoveSession(t.Context(), "s1"); err != nil {
		t.Fatal(err)
	}
	cancel()
	<-watched
	if err := g.Close(context.Background()); err != nil {
		t.Errorf("close gateway: %v", err)
	}
	wantNoLeftovers(t, p, w2)
}
