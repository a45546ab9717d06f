package world

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/egress/netns"
)

// maxRelayConns bounds the connections a relay carries at once.
const maxRelayConns = 64

// AddRelay publishes name with address ip and relays every TCP connection
// made to ip:port to a connection dial returns: a way out of the world for
// that one name, to a real host. name may lie outside the zone (a real
// host's name, such as api.anthropic.com): the world's DNS then answers
// for that exact name alone, and still refuses everything else outside the
// zone. The relay reads nothing of what it carries (TLS passes end to
// end), carries at most 64 connections at once, and gives up on a dial
// after 15 seconds. dial decides where the connection goes; the world
// never dials anything else.
func (w *World) AddRelay(name string, ip netip.Addr, port uint16, dial func(context.Context) (net.Conn, error)) error {
	n := dns.Fqdn(strings.ToLower(name))
	if _, ok := dns.IsDomainName(n); !ok || n == "." || strings.Count(n, ".") < 2 {
		return fmt.Errorf("world: relay name %q is not a host name: %w", name, errdefs.ErrInvalidArgument)
	}
	ip = ip.Unmap()
	if !ip.IsValid() || port == 0 || dial == nil {
		return fmt.Errorf("world: relay %s: an address, a port and a dialer are required: %w", name, errdefs.ErrInvalidArgument)
	}
	if err := w.ensureAddr(ip); err != nil {
		return err
	}
	l, err := netns.Listen(w.path, "tcp", netip.AddrPortFrom(ip, port).String())
	if err != nil {
		return err
	}
	r := &relay{l: l, dial: dial, conns: map[net.Conn]bool{}, slots: make(chan struct{}, maxRelayConns)}
	if err := w.track(r); err != nil {
		return err
	}
	w.mu.Lock()
	if w.foreign == nil {
		w.foreign = map[string]bool{}
	}
	if !dns.IsSubDomain(w.zone, n) {
		w.foreign[n] = true
	}
	w.records[n] = append(w.records[n], w.addressRR(n, ip))
	w.mu.Unlock()
	w.goServe(r.serve)
	return nil
}

// relay carries connections from a world listener to what dial returns.
type relay struct {
	l     net.Listener
	dial  func(context.Context) (net.Conn, error)
	slots chan struct{}
	wg    sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]bool // +checklocks:mu
	closed bool              // +checklocks:mu
}

func (r *relay) serve() {
	for {
		c, err := r.l.Accept()
		if err != nil {
			return
		}
		select {
		case r.slots <- struct{}{}:
		default:
			c.Close() // too many at once
			continue
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			defer func() { <-r.slots }()
			r.carry(c)
		}()
	}
}

// carry relays c to a new upstream connection until either side ends.
func (r *relay) carry(c net.Conn) {
	if !r.add(c) {
		c.Close()
		return
	}
	defer r.remove(c)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	up, err := r.dial(ctx)
	cancel()
	if err != nil {
		return
	}
	if !r.add(up) {
		up.Close()
		return
	}
	defer r.remove(up)
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		if tc, ok := dst.(interface{ CloseWrite() error }); ok {
			_ = tc.CloseWrite()
		}
		done <- struct{}{}
	}
	go pipe(up, c)
	go pipe(c, up)
	<-done
	// One side has ended: the other gets a little time to finish, then
	// both are closed (the deferred removes).
	select {
	case <-done:
	case <-time.After(10 * time.Second):
	}
}

func (r *relay) add(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = true
	return true
}

func (r *relay) remove(c net.Conn) {
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
	c.Close()
}

// Close stops the relay and ends every connection it carries.
func (r *relay) Close() error {
	r.mu.Lock()
	r.closed = true
	for c := range r.conns {
		c.Close()
	}
	r.mu.Unlock()
	err := r.l.Close()
	r.wg.Wait()
	return err
}
