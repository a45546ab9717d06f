//go:build !linux

package dnsproxy

import (
	"net"

	"github.com/miekg/dns"
)

// pktinfo is miekg/dns's session of a query: its client and control
// messages.
type pktinfo struct {
	sess *dns.SessionUDP
}

const oobSize = 0

func readUDP(c *net.UDPConn, p *packet) error {
	n, sess, err := dns.ReadFromSessionUDP(c, p.buf)
	if err != nil {
		return err
	}
	p.n, p.pi = n, pktinfo{sess: sess}
	if a, ok := sess.RemoteAddr().(*net.UDPAddr); ok {
		p.src = a.AddrPort()
	}
	return nil
}

func writeUDP(c *net.UDPConn, w *udpWriter, b []byte) (int, error) {
	return dns.WriteToSessionUDP(c, b, w.pi.sess)
}

// batchReader reads one query at a time: recvmmsg(2) is Linux's.
type batchReader struct{ c *net.UDPConn }

func newBatchReader(c *net.UDPConn) (*batchReader, error) { return &batchReader{c: c}, nil }

func (r *batchReader) read() (*packet, error) {
	p := packets.Get().(*packet)
	if err := readUDP(r.c, p); err != nil {
		putPacket(p)
		return nil, err
	}
	return p, nil
}

func (r *batchReader) close() {}
