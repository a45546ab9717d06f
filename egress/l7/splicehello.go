package l7

import (
	"errors"
	"fmt"
	"io"
	"net"
	"time"
)

// helloGate carries a spliced TLS connection through the server's answer
// to its ClientHello (see retry.go): the client's bytes after the
// ClientHello's records are held until the server has answered; a
// HelloRetryRequest is passed to the client, and the client's second
// ClientHello checked against the first before the server reads it.
type helloGate struct {
	client, server net.Conn
	// timeout bounds each wait for the server's answer and for the
	// client's second ClientHello.
	timeout time.Duration
	first   Hello
	// kept are the client's bytes read and not yet sent on; srv the
	// server's (at most flightPeek).
	kept, srv []byte
	// up and dn count the bytes sent on to the server and to the client.
	up, dn int64
}

// errRefused wraps why a connection is refused while its handshake is
// judged; other errors of run end it as an upstream failure does.
type errRefused struct{ reason string }

func (e errRefused) Error() string { return e.reason }

// run judges the server's answers until the handshake goes on past the
// ClientHellos. On nil, g.srv holds the server's bytes read and not yet
// sent on to the client, g.kept the client's; the caller sends them on,
// then splices. An errRefused says why the connection is refused; any
// other error is the server's or the client's connection failing, with
// g.srv the server's bytes read and not yet sent on.
func (g *helloGate) run() error {
	for retried := false; ; retried = true {
		f, n, err := g.answer()
		if err != nil {
			return err
		}
		if f == flightHello {
			return nil
		}
		if retried {
			// RFC 8446, 4.1.4: a client that receives a second retry
			// request aborts. Its third ClientHello would not be checked.
			return errRefused{"airlock: a second HelloRetryRequest from the server (TLS 1.3 allows one per connection)"}
		}
		if err := g.passRetry(n); err != nil {
			return err
		}
		end, err := g.secondHello()
		if err != nil {
			return err
		}
		if err := g.send(g.kept[:end]); err != nil {
			return err
		}
		g.kept = g.kept[end:]
	}
}

// answer reads the server's bytes until serverFlight can tell what they
// are.
func (g *helloGate) answer() (flight, int, error) {
	_ = g.server.SetReadDeadline(time.Now().Add(g.timeout))
	defer g.server.SetReadDeadline(time.Time{})
	if cap(g.srv) < flightPeek {
		g.srv = append(make([]byte, 0, flightPeek), g.srv...)
	}
	for {
		if f, n := serverFlight(g.srv); f != flightMore {
			return f, n, nil
		}
		if len(g.srv) >= flightPeek {
			// Change cipher spec records filling the bound: not a
			// server whose answer the gateway can read; fail closed.
			return 0, 0, errRefused{fmt.Sprintf("airlock: the server's first %d bytes after the ClientHello do not say whether it asks for another", flightPeek)}
		}
		n, err := g.server.Read(g.srv[len(g.srv):flightPeek])
		g.srv = g.srv[:len(g.srv)+n]
		if err != nil && n == 0 {
			return 0, 0, err
		}
	}
}

// passRetry sends the server's retry request, its first n bytes, on to
// the client; g.srv keeps any bytes read past them, the start of the
// server's next answer.
func (g *helloGate) passRetry(n int) error {
	head := g.srv[:min(n, len(g.srv))]
	if err := g.reply(head); err != nil {
		return err
	}
	g.srv = g.srv[:copy(g.srv, g.srv[len(head):])]
	if rest := int64(n - len(head)); rest > 0 {
		// A retry request longer than the bytes read (a cookie).
		_ = g.server.SetReadDeadline(time.Now().Add(g.timeout))
		defer g.server.SetReadDeadline(time.Time{})
		m, err := io.CopyN(g.client, g.server, rest)
		g.dn += m
		if err != nil {
			return err
		}
	}
	return nil
}

// secondHello reads the client's bytes (those kept first) until they
// hold a second ClientHello that asks for the first's name; end is the
// length of g.kept up to its end.
func (g *helloGate) secondHello() (end int, err error) {
	_ = g.client.SetReadDeadline(time.Now().Add(g.timeout))
	defer g.client.SetReadDeadline(time.Time{})
	buf := make([]byte, 16<<10)
	for {
		end, err := secondHello(g.kept, g.first)
		if err != nil {
			return 0, errRefused{"airlock: " + err.Error()}
		}
		if end > 0 {
			return end, nil
		}
		if len(g.kept) >= MaxPeek {
			return 0, errRefused{"airlock: the second ClientHello (after the server's HelloRetryRequest): " + ErrPeekTooLong.Error()}
		}
		n, rerr := g.client.Read(buf[:min(len(buf), MaxPeek-len(g.kept))])
		g.kept = append(g.kept, buf[:n]...)
		if rerr != nil && n == 0 {
			if errors.Is(rerr, io.EOF) || errors.Is(rerr, net.ErrClosed) {
				return 0, errRefused{"airlock: the client closed before its second ClientHello (after the server's HelloRetryRequest) was whole"}
			}
			return 0, errRefused{fmt.Sprintf("airlock: no whole second ClientHello within %v of the server's HelloRetryRequest: %v", g.timeout, rerr)}
		}
	}
}

// send writes b to the server, reply to the client, counting them.
func (g *helloGate) send(b []byte) error {
	n, err := g.server.Write(b)
	g.up += int64(n)
	return err
}

func (g *helloGate) reply(b []byte) error {
	n, err := g.client.Write(b)
	g.dn += int64(n)
	return err
}
