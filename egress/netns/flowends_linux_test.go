package netns_test

import (
	"context"
	"io"
	"net"
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

// TestCutFlow: CutFlow deletes the conntrack entry of one of the
// gateway's connections, found by its tuple, and leaves another's to the
// same server alone; cut again, it finds none; the connection's next
// packet is tracked anew. Both families.
func TestCutFlow(t *testing.T) {
	e := newEnv(t)
	s := e.session(t, "cut", netns.SessionConfig{IPv6: true})
	ctx := t.Context()
	dial := netns.Dialer(s.NetnsPath())
	echo := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.Write([]byte("x")); err != nil {
			return err
		}
		_, err := io.ReadFull(c, make([]byte, 1))
		return err
	}
	for _, host := range []netip.Addr{hostX, hostX6} {
		pin(t, s, host, time.Minute, echoAlt)
		dst := netip.AddrPortFrom(host, echoAlt)
		var addrs [2]netip.AddrPort
		var conns [2]net.Conn
		for i := range conns {
			c, err := dial(ctx, "tcp", dst.String())
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if err := echo(c); err != nil {
				t.Fatalf("%v: %v", dst, err)
			}
			conns[i], addrs[i] = c, netip.MustParseAddrPort(c.LocalAddr().String())
		}
		if _, ok := e.g.FlowID(addrs[0], dst); !ok {
			t.Fatalf("%v -> %v: not tracked", addrs[0], dst)
		}
		kept, ok := e.g.FlowID(addrs[1], dst)
		if !ok {
			t.Fatalf("%v -> %v: not tracked", addrs[1], dst)
		}
		if n, err := e.g.CutFlow(addrs[0], dst); n != 1 || err != nil {
			t.Fatalf("CutFlow(%v, %v) = %d, %v; want 1", addrs[0], dst, n, err)
		}
		if id, ok := e.g.FlowID(addrs[0], dst); ok {
			t.Errorf("%v -> %v: still tracked (id %d) after it was cut", addrs[0], dst, id)
		}
		if id, ok := e.g.FlowID(addrs[1], dst); !ok || id != kept {
			t.Errorf("the other connection %v -> %v: id %d %v, want %d", addrs[1], dst, id, ok, kept)
		}
		if n, err := e.g.CutFlow(addrs[0], dst); n != 0 || err != nil {
			t.Errorf("CutFlow of an entry gone: %d, %v; want 0, nil", n, err)
		}
		if err := echo(conns[1]); err != nil {
			t.Errorf("the other connection after the cut: %v", err)
		}
		// The cut connection's next packet meets the rules as a new
		// one: pinned, it passes, as another entry. (Closed without it,
		// its FIN alone would be dropped as invalid.)
		if err := echo(conns[0]); err != nil {
			t.Errorf("the cut connection, still pinned: %v", err)
		}
		if _, ok := e.g.FlowID(addrs[0], dst); !ok {
			t.Errorf("the cut connection after its next packet: not tracked")
		}
	}
}
