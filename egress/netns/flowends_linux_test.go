package netns_test

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/egress/netns"
)

// TestFlowEndsLost: when the kernel drops conntrack events because their
// reader fell behind, WatchFlowEnds says so, and MarkedFlows lists the
// connections the gateway still tracks, each with the id FlowID gives
// and its end's events carry.
func TestFlowEndsLost(t *testing.T) {
	release := make(chan struct{})
	var stall atomic.Bool
	netns.SetFlowEvents(t, 4096, func() {
		if stall.Load() {
			<-release
		}
	})
	e := newEnv(t)
	s := e.session(t, "churn", netns.SessionConfig{})
	pin(t, s, hostX, time.Minute, echoAlt)
	dst := netip.AddrPortFrom(hostX, echoAlt)

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	lost := make(chan struct{}, 1)
	var mu sync.Mutex
	ends := map[netip.AddrPort]netns.FlowEnd{}
	done := make(chan error, 1)
	go func() {
		done <- e.g.WatchFlowEnds(ctx, 0, func(end netns.FlowEnd) {
			mu.Lock()
			ends[end.Client] = end
			mu.Unlock()
		}, func() {
			select {
			case lost <- struct{}{}:
			default:
			}
		})
	}()
	defer func() { cancel(); <-done }()

	dial := netns.Dialer(s.NetnsPath())
	// Conntrack gives events of a connection made once a listener is
	// there (nf_conntrack_events=2): wait for one.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if c, err := dial(ctx, "tcp", dst.String()); err == nil {
			c.Close()
		}
		mu.Lock()
		n := len(ends)
		mu.Unlock()
		if n > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no connection's end was told")
		}
	}
	stall.Store(true)
	// One connection stays open.
	open, err := dial(ctx, "tcp", dst.String())
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	openAddr := netip.MustParseAddrPort(open.LocalAddr().String())
	// While the reader waits, far more events than its buffer holds.
	for i := 0; i < 100; i++ {
		c, err := dial(ctx, "tcp", dst.String())
		if err != nil {
			t.Fatal(err)
		}
		_, _ = c.Write([]byte("x"))
		_, _ = c.Read(make([]byte, 1))
		c.Close()
	}
	stall.Store(false)
	close(release)
	select {
	case <-lost:
	case <-time.After(5 * time.Second):
		t.Fatal("events overflowed the reader's buffer, and WatchFlowEnds did not say they were lost")
	}

	id, ok := e.g.FlowID(openAddr, dst)
	if !ok || id == 0 {
		t.Fatalf("FlowID of the open connection: %d %v", id, ok)
	}
	flows, err := e.g.MarkedFlows(0)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, f := range flows {
		if f.Client == openAddr && f.Server == dst {
			found = f.ID == id
		}
	}
	if !found {
		t.Fatalf("MarkedFlows %+v lacks the open connection %v with id %d", flows, openAddr, id)
	}
	if flows, err := e.g.MarkedFlows(0x41460002); err != nil || len(flows) != 0 {
		t.Errorf("MarkedFlows of a mark no connection has: %+v %v", flows, err)
	}

	// Events after the loss are read again: the open connection's end
	// carries its id.
	open.Close()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		mu.Lock()
		end, ok := ends[openAddr]
		mu.Unlock()
		if ok {
			if end.ID != id || end.Server != dst {
				t.Errorf("end %+v; want id %d", end, id)
			}
			return
		}
	}
	mu.Lock()
	defer mu.Unlock()
	t.Errorf("the end of a connection closed after the loss was not told; told: %d ends, e.g. %+v", len(ends), ends)
}

// TestSessionTerminateSets: Terminate adds to a session's terminate sets,
// both families, and with reset replaces what was there; the sets go
// with the session.
func TestSessionTerminateSets(t *testing.T) {
	e := newEnv(t)
	s := e.session(t, "term", netns.SessionConfig{IPv6: true, L7Ports: []uint16{80, 443}, FastPorts: []uint16{443}})
	ctx := t.Context()
	a, b := netip.MustParseAddr("10.214.0.20"), netip.MustParseAddr("fd0a:214::20")
	want := func(addrs ...netip.Addr) {
		t.Helper()
		got, err := s.Terminated(ctx)
		if err != nil {
			t.Fatal(err)
		}
		slices.SortFunc(got, netip.Addr.Compare)
		slices.SortFunc(addrs, netip.Addr.Compare)
		if !slices.Equal(got, addrs) {
			t.Errorf("terminate sets %v, want %v", got, addrs)
		}
	}
	if err := s.Terminate(ctx, []netip.Addr{a, b}, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	want(a, b)
	// Asked again, for no longer: left as it is.
	if err := s.Terminate(ctx, []netip.Addr{a}, time.Second, false); err != nil {
		t.Fatal(err)
	}
	want(a, b)
	if err := s.Terminate(ctx, []netip.Addr{b}, time.Minute, true); err != nil {
		t.Fatal(err)
	}
	want(b)
	if err := s.Terminate(ctx, nil, time.Minute, true); err != nil {
		t.Fatal(err)
	}
	want()
	// After a reset, an address asked for again is put back.
	if err := s.Terminate(ctx, []netip.Addr{a}, time.Minute, false); err != nil {
		t.Fatal(err)
	}
	want(a)
}
