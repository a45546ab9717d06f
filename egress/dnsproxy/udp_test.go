package dnsproxy

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/internal/log"
)

// serveUDPOn serves s on a packet socket listening on network/address until
// the test ends.
func serveUDPOn(t *testing.T, s *Server, network, address string) net.PacketConn {
	t.Helper()
	pc, err := net.ListenPacket(network, address)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(log.WithLogger(context.Background(), slog.New(slog.NewTextHandler(t.Output(), nil))))
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.ServePacketConn(ctx, pc); err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return pc
}

// TestUDPAnswersFromQueryAddress checks that on a wildcard socket an answer
// leaves from the address its query was sent to: a connected client socket
// takes nothing else.
func TestUDPAnswersFromQueryAddress(t *testing.T) {
	cases := []struct {
		network, listen string
		dests           []string
	}{
		{"udp4", "0.0.0.0:0", []string{"127.0.0.1", "127.0.0.2", "127.0.0.3"}},
		// Dual-stack: IPv4 queries arrive as IPv4-mapped addresses.
		{"udp", "0.0.0.0:0", []string{"127.0.0.2", "127.0.0.3", "::1"}},
	}
	for _, tc := range cases {
		t.Run(tc.network, func(t *testing.T) {
			s, err := New(&SessionMap{}, WithUpstreams("192.0.2.1"))
			if err != nil {
				t.Fatal(err)
			}
			pc := serveUDPOn(t, s, tc.network, tc.listen)
			port := pc.LocalAddr().(*net.UDPAddr).Port
			for i, dst := range tc.dests {
				addr := net.JoinHostPort(dst, fmt.Sprint(port))
				c, err := net.Dial("udp", addr)
				if err != nil {
					if dst == "::1" {
						t.Logf("no IPv6 loopback: %v", err)
						continue
					}
					t.Fatal(err)
				}
				id := uint16(0x100 + i)
				rcode, err := exchangeRaw(c, packQuery("a.test.", id), id)
				c.Close()
				if err != nil {
					t.Fatalf("query to %s: %v", addr, err)
				}
				if rcode != dns.RcodeRefused {
					t.Errorf("query to %s: rcode %s, want REFUSED (unknown source)", addr, dns.RcodeToString[rcode])
				}
			}
		})
	}
}

// TestUDPBusyWorkersDoNotHoldUpQueries fills every core worker, and some
// more the pool adds, with queries waiting for an upstream; other queries
// are still answered at once, and the waiting ones when the upstream
// answers.
func TestUDPBusyWorkersDoNotHoldUpQueries(t *testing.T) {
	release := make(chan struct{})
	var waiting atomic.Int64
	exchange := func(ctx context.Context, _, _ string, q *dns.Msg) (*dns.Msg, error) {
		waiting.Add(1)
		select {
		case <-release:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		m := new(dns.Msg)
		m.SetRcode(q, dns.RcodeNameError)
		return m, nil
	}
	sess := newSession(t, "s1", false, []string{"*.slow.test"}, nil)
	var sessions SessionMap
	sessions.Set(netip.MustParseAddr("127.0.0.1"), sess.policy)
	p := startProxy(t, &sessions, withExchange(exchange), WithUpstreams("192.0.2.1"), WithCacheSize(0),
		WithTimeouts(30*time.Second, 30*time.Second))

	const slow = coreUDPWorkers + 16
	var wg sync.WaitGroup
	errs := make(chan error, slow)
	for i := range slow {
		wg.Go(func() {
			m := new(dns.Msg)
			m.SetQuestion(fmt.Sprintf("q%d.slow.test.", i), dns.TypeA)
			resp, err := p.tryExchange(t.Context(), "udp", "", m)
			switch {
			case err != nil:
				errs <- err
			case resp.Rcode != dns.RcodeNameError:
				errs <- fmt.Errorf("slow query %d: rcode %s", i, dns.RcodeToString[resp.Rcode])
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for waiting.Load() < slow && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := waiting.Load(); n < slow {
		t.Fatalf("%d of %d queries reached the upstream", n, slow)
	}

	// Every worker is busy: a refused query is still answered promptly.
	m := new(dns.Msg)
	m.SetQuestion("blocked.test.", dns.TypeA)
	start := time.Now()
	resp, err := p.tryExchange(t.Context(), "udp", "", m)
	if err != nil || resp.Rcode != dns.RcodeRefused {
		t.Fatalf("query while the workers are busy: %v, %v", resp, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("query while the workers are busy took %v", d)
	}

	close(release)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if st := p.Stats(); st.Queries != slow+1 || st.Allowed != slow || st.Refused != 1 {
		t.Errorf("stats %+v", st)
	}
}

// TestExchangeOnUDP asks a raw UDP server that sends a short packet and a
// reply with another id before the reply to the query: the exchange skips
// both and returns the reply; a server that never answers ends the
// exchange at the attempt's deadline; a closed port fails at once. Both
// ways of exchanging are checked: over the net.Conn (exchangeOn) and
// over its descriptor (exchangeFD, what the upstream pool uses).
func TestExchangeOnUDP(t *testing.T) {
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	go func() {
		buf := make([]byte, 512)
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			q := new(dns.Msg)
			if q.Unpack(buf[:n]) != nil || q.Question[0].Name == "silent.test." {
				continue
			}
			r := new(dns.Msg)
			r.SetRcode(q, dns.RcodeNameError)
			r.Id = q.Id + 1
			other, _ := r.Pack()
			r.Id = q.Id
			reply, _ := r.Pack()
			for _, b := range [][]byte{{1, 2, 3}, other, reply} {
				_, _ = pc.WriteTo(b, from)
			}
		}
	}()
	for _, fd := range []bool{false, true} {
		t.Run(map[bool]string{false: "conn", true: "fd"}[fd], func(t *testing.T) {
			exchange := func(ctx context.Context, conn net.Conn, q *dns.Msg) (*dns.Msg, error) {
				if !fd {
					return exchangeOn(ctx, conn, "udp", q)
				}
				pooled := newPooledConn(conn, "udp")
				if pooled.raw == nil {
					t.Fatal("no descriptor for a UDP conn")
				}
				return exchangeFD(ctx, pooled, q)
			}
			conn, err := net.Dial("udp", pc.LocalAddr().String())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()

			q := new(dns.Msg)
			for i := range 50 { // the reply often comes before the wait for it starts
				q.SetQuestion(fmt.Sprintf("x%d.test.", i), dns.TypeA)
				ctx := newAttemptContext(t.Context(), 2*time.Second)
				resp, err := exchange(ctx, conn, q)
				ctx.release()
				if err != nil || resp.Id != q.Id || resp.Rcode != dns.RcodeNameError || resp.Question[0].Name != q.Question[0].Name {
					t.Fatalf("exchange %d: %v, %v", i, resp, err)
				}
			}

			q.SetQuestion("silent.test.", dns.TypeA)
			ctx := newAttemptContext(t.Context(), 100*time.Millisecond)
			start := time.Now()
			_, err = exchange(ctx, conn, q)
			ctx.release()
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("unanswered exchange: %v, want the deadline exceeded", err)
			}
			if d := time.Since(start); d > time.Second {
				t.Errorf("unanswered exchange took %v, attempt timeout 100ms", d)
			}
			// The late replies to the silent query's predecessors are
			// skipped by the next exchange.
			q.SetQuestion("after.test.", dns.TypeA)
			ctx = newAttemptContext(t.Context(), 2*time.Second)
			if resp, err := exchange(ctx, conn, q); err != nil || resp.Id != q.Id {
				t.Errorf("exchange after a timeout: %v, %v", resp, err)
			}
			ctx.release()

			// Nobody listens: the port unreachable error ends the
			// exchange before its deadline.
			closed, err := net.ListenPacket("udp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			addr := closed.LocalAddr().String()
			closed.Close()
			dead, err := net.Dial("udp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer dead.Close()
			ctx = newAttemptContext(t.Context(), 5*time.Second)
			start = time.Now()
			_, err = exchange(ctx, dead, q)
			ctx.release()
			if err == nil || errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 2*time.Second {
				t.Errorf("exchange with a closed port: %v after %v, want an error at once", err, time.Since(start))
			}
		})
	}
}

// TestAttemptContext: the attempt's deadline is the earlier of its own and
// its query's; Done closes at it; Err says so; Done after release is
// closed.
func TestAttemptContext(t *testing.T) {
	parent, cancel := context.WithTimeout(t.Context(), time.Hour)
	defer cancel()
	c := newAttemptContext(parent, 50*time.Millisecond)
	if d, _ := c.Deadline(); time.Until(d) > 50*time.Millisecond {
		t.Errorf("deadline in %v, want at most 50ms", time.Until(d))
	}
	if c.Err() != nil {
		t.Errorf("Err before the deadline: %v", c.Err())
	}
	select {
	case <-c.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed at the attempt's deadline")
	}
	if !errors.Is(c.Err(), context.DeadlineExceeded) {
		t.Errorf("Err after the deadline: %v", c.Err())
	}
	c.release()

	short, cancel2 := context.WithTimeout(t.Context(), 10*time.Millisecond)
	defer cancel2()
	c = newAttemptContext(short, time.Hour)
	if d, _ := c.Deadline(); time.Until(d) > 10*time.Millisecond {
		t.Errorf("deadline in %v, want the query's (10ms)", time.Until(d))
	}
	c.release()
	select {
	case <-c.Done():
	default:
		t.Error("Done after release is not closed")
	}
	if !errors.Is(c.Err(), context.Canceled) {
		t.Errorf("Err after release: %v, want canceled", c.Err())
	}

	// A context derived from an attempt (as a dial's is) ends with it,
	// with the attempt's error: Err is never nil once Done is closed
	// (context's propagation panics on that).
	for _, doneFirst := range []bool{false, true} {
		c = newAttemptContext(t.Context(), time.Hour)
		if doneFirst {
			_ = c.Done()
		}
		child, cancel := context.WithTimeout(c, time.Hour)
		c.release()
		select {
		case <-child.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("derived context not done after release")
		}
		if !errors.Is(child.Err(), context.Canceled) || !errors.Is(c.Err(), context.Canceled) {
			t.Errorf("after release: derived %v, attempt %v; want canceled", child.Err(), c.Err())
		}
		cancel()
	}
}
