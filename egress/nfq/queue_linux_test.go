package nfq

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"runtime"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/google/nftables/binaryutil"
	"github.com/google/nftables/expr"
	"github.com/vishvananda/netlink"
	vnetns "github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

const (
	testPort = 4433
	passMark = 1
)

// testNS is a new network namespace with loopback up and, on its output
// hook, the rules the gateway's fast path takes: connections marked as
// passed go on in the kernel; a packet given back with the mark marks
// its connection; the packets of an unmarked connection to testPort are
// queued to queue 0. Sockets made by inNS live in it.
type testNS struct {
	fd vnetns.NsHandle
}

func newTestNS(t *testing.T) *testNS {
	t.Helper()
	testutil.RequiresRoot(t)
	ns := &testNS{}
	ns.do(t, func() error {
		h, err := vnetns.New()
		if err != nil {
			return err
		}
		ns.fd = h
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
	t.Cleanup(func() { ns.fd.Close() })

	c, err := nftables.New(nftables.WithNetNSFd(int(ns.fd)))
	if err != nil {
		t.Fatal(err)
	}
	tab := c.AddTable(&nftables.Table{Family: nftables.TableFamilyINet, Name: "nfqtest"})
	ch := c.AddChain(&nftables.Chain{Name: "out", Table: tab, Type: nftables.ChainTypeFilter,
		Hooknum: nftables.ChainHookOutput, Priority: nftables.ChainPriorityFilter})
	mark := binaryutil.NativeEndian.PutUint32(passMark)
	accept := &expr.Verdict{Kind: expr.VerdictAccept}
	c.AddRule(&nftables.Rule{Table: tab, Chain: ch, Exprs: []expr.Any{
		&expr.Ct{Key: expr.CtKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: mark},
		accept,
	}})
	c.AddRule(&nftables.Rule{Table: tab, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyMARK, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: mark},
		&expr.Ct{Key: expr.CtKeyMARK, Register: 1, SourceRegister: true},
		accept,
	}})
	c.AddRule(&nftables.Rule{Table: tab, Chain: ch, Exprs: []expr.Any{
		&expr.Meta{Key: expr.MetaKeyL4PROTO, Register: 1},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: []byte{unix.IPPROTO_TCP}},
		&expr.Payload{DestRegister: 1, Base: expr.PayloadBaseTransportHeader, Offset: 2, Len: 2},
		&expr.Cmp{Op: expr.CmpOpEq, Register: 1, Data: binaryutil.BigEndian.PutUint16(testPort)},
		Target(0),
	}})
	if err := c.Flush(); err != nil {
		t.Fatalf("nftables rules with the NFQUEUE target: %v", err)
	}
	return ns
}

// do runs fn on a thread in the namespace (the first call makes it).
func (ns *testNS) do(t *testing.T, fn func() error) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		// The thread is left to end with its goroutine: it may be in
		// another namespace.
		if ns.fd != 0 {
			if err := vnetns.Set(ns.fd); err != nil {
				errc <- err
				return
			}
		}
		errc <- fn()
	}()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// held runs a queue handler that lets packets without data go and holds
// those with data until hold decides on the bytes a connection sent so
// far: true gives them back marked (its connection then never comes back
// to the queue), false drops them; until it returns either, they wait.
type held struct {
	q  *Queue
	mu sync.Mutex
	// queued counts the packets with data the queue saw per client port.
	queued map[uint16]int
	wait   map[uint16][]Packet
	data   map[uint16][]byte
	// done says, once a connection is decided, whether it passed.
	done map[uint16]bool
}

func runHeld(t *testing.T, q *Queue, decide func(data []byte) (pass, decided bool)) *held {
	h := &held{q: q, queued: map[uint16]int{}, wait: map[uint16][]Packet{}, data: map[uint16][]byte{}, done: map[uint16]bool{}}
	go func() {
		for {
			pkts, err := q.Receive()
			if err != nil {
				return
			}
			for _, p := range pkts {
				seg, err := ParseTCP(p.Payload)
				if err != nil {
					t.Errorf("a queued packet: %v", err)
					_ = q.SetVerdict(p.ID, Drop, nil)
					continue
				}
				if len(seg.Payload) == 0 {
					_ = q.SetVerdict(p.ID, Accept, nil)
					continue
				}
				port := seg.Src.Port()
				h.mu.Lock()
				if passed, ok := h.done[port]; ok {
					// A refused connection's client sends its bytes again
					// (they are dropped again); a passed one's never come
					// back, but for a copy of held bytes its client sent
					// again while they were held (on a loaded host), queued
					// before the connection's mark was set: it gets the
					// same verdict.
					resent := passed && bytes.Contains(h.data[port], seg.Payload)
					if !resent {
						h.queued[port]++
					}
					h.mu.Unlock()
					if passed && !resent {
						t.Errorf("a packet of passed connection :%d came back to the queue (%d bytes, flags %#x)", port, len(seg.Payload), seg.Flags)
					}
					if resent {
						mark := uint32(passMark)
						_ = q.SetVerdict(p.ID, Repeat, &mark)
					} else {
						_ = q.SetVerdict(p.ID, Drop, nil)
					}
					continue
				}
				h.queued[port]++
				h.wait[port] = append(h.wait[port], p)
				h.data[port] = append(h.data[port], seg.Payload...)
				pass, decided := decide(h.data[port])
				if decided {
					h.done[port] = pass
					mark := uint32(passMark)
					for _, w := range h.wait[port] {
						if pass {
							_ = q.SetVerdict(w.ID, Repeat, &mark)
						} else {
							_ = q.SetVerdict(w.ID, Drop, nil)
						}
					}
					h.wait[port] = nil
				}
				h.mu.Unlock()
			}
		}
	}()
	return h
}

func (h *held) count(port uint16) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.queued[port]
}

// TestHoldTheFirstBytesThenTheKernel: the first bytes of a connection,
// sent in small segments, are held until the handler has seen enough of
// them, then reach the server in order; everything after goes in the
// kernel without the queue. A connection refused at its first bytes
// delivers none. With no program on the queue, nothing gets through.
func TestHoldTheFirstBytesThenTheKernel(t *testing.T) {
	ns := newTestNS(t)
	var l net.Listener
	var q *Queue
	ns.do(t, func() (err error) {
		l, err = net.Listen("tcp4", "127.0.0.1:4433")
		return err
	})
	defer l.Close()
	dial := func() (net.Conn, error) {
		var c net.Conn
		var err error
		ns.do(t, func() error {
			d := net.Dialer{Timeout: time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
				var serr error
				// Small segments: the first bytes come in several packets.
				if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_MAXSEG, 500) }); err != nil {
					return err
				}
				return serr
			}}
			c, err = d.Dial("tcp4", l.Addr().String())
			return nil
		})
		return c, err
	}

	// Fail closed: nothing is bound to the queue, the SYN is dropped.
	if c, err := dial(); err == nil {
		c.Close()
		t.Fatal("a connection opened with no program on its queue")
	}

	q, err := Open(0, Config{NetNS: int(ns.fd)})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := Open(0, Config{NetNS: int(ns.fd)}); err == nil {
		t.Error("a second program bound the same queue")
	}
	const first = 3000
	h := runHeld(t, q, func(data []byte) (bool, bool) {
		if len(data) < first {
			return false, false
		}
		return !bytes.HasPrefix(data, []byte("refuse")), true
	})

	accepted := make(chan net.Conn, 2)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()

	// Passed: the first 3000 bytes (six segments) held, then let go.
	c, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	port := uint16(c.LocalAddr().(*net.TCPAddr).Port)
	sc := <-accepted
	defer sc.Close()
	hello := bytes.Repeat([]byte("0123456789"), first/10)
	if _, err := c.Write(hello); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, first)
	_ = sc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(sc, got); err != nil || !bytes.Equal(got, hello) {
		t.Fatalf("the server read %d bytes of the first ones (%v)", len(got), err)
	}
	held := h.count(port)
	if held < 2 {
		t.Errorf("the first %d bytes came in %d queued packets, want several (held until complete)", first, held)
	}
	// The rest never leaves the kernel.
	const bulk = 16 << 20
	go func() {
		buf := make([]byte, 64<<10)
		for n := 0; n < bulk; n += len(buf) {
			if _, err := c.Write(buf); err != nil {
				return
			}
		}
	}()
	if n, err := io.CopyN(io.Discard, sc, bulk); err != nil {
		t.Fatalf("the server read %d of %d bytes after the decision: %v", n, bulk, err)
	}
	if after := h.count(port); after != held {
		t.Errorf("%d packets of a passed connection were queued after its decision", after-held)
	}

	// Refused: its first bytes never reach the server.
	r, err := dial()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	rs := <-accepted
	defer rs.Close()
	if _, err := r.Write(append([]byte("refuse"), hello[6:]...)); err != nil {
		t.Fatal(err)
	}
	_ = rs.SetReadDeadline(time.Now().Add(time.Second))
	if n, err := rs.Read(make([]byte, 10)); n > 0 || !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the server read %d bytes of a refused connection (%v)", n, err)
	}
}

func TestParseTCP(t *testing.T) {
	v4 := []byte{
		0x45, 0, 0, 44, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
		0x30, 0x39, 0x01, 0xbb, 0, 0, 0, 7, 0, 0, 0x01, 0x02, 0x50, PSH | ACK, 0, 0, 0, 0, 0, 0,
		'a', 'b', 'c', 'd',
	}
	seg, err := ParseTCP(v4)
	if err != nil {
		t.Fatal(err)
	}
	if seg.Src.String() != "10.0.0.1:12345" || seg.Dst.String() != "10.0.0.2:443" || seg.Seq != 7 || seg.Ack != 0x102 || seg.Flags != PSH|ACK || string(seg.Payload) != "abcd" {
		t.Errorf("ParseTCP = %+v", seg)
	}
	udp := append([]byte(nil), v4...)
	udp[9] = 17
	if _, err := ParseTCP(udp); !errors.Is(err, ErrNotTCP) {
		t.Errorf("UDP: %v", err)
	}
	for _, bad := range [][]byte{nil, v4[:10], append([]byte{0x4f}, v4[1:]...), append(append([]byte(nil), v4[:32]...), 0xf0)} {
		if _, err := ParseTCP(bad); err == nil {
			t.Errorf("ParseTCP(%x) took a broken packet", bad)
		}
	}
}
