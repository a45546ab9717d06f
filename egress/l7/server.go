// Package l7 is airlock's L7 egress gateway: connections the gateway
// namespace's rules redirect to it (see package nft, <s>-l7) are checked
// on their first message, then either served as HTTP (plain HTTP, and
// TLS the gateway terminates) or passed through unterminated.
//
// For each accepted connection:
//
//	session   the client address is a session's (Config.Sessions), or the
//	          connection is closed
//	origin    the destination before the redirect (Config.OriginalDst)
//	peek      the TLS ClientHello's SNI or the HTTP/1.x request's Host is
//	          read, within Config.PeekTimeout and MaxPeek bytes, and kept
//	check     the session decides (Session.Check): the name must be one
//	          its DNS answers pinned the destination for, or the
//	          destination allowed by address
//	refuse    HTTP: 403 with a JSON reason; TLS: an access_denied alert;
//	          then the connection is closed
//	serve     plain HTTP, and TLS whose SNI the session terminates
//	          (Session.Terminate: hosts with HTTP rules or a bound secret,
//	          or every host with inspect = "all"), are served by net/http
//	          (HTTP/1.1, and HTTP/2 where TLS negotiates it) with a
//	          certificate of the session's CA (Session.Certificate); see
//	          proxy.go
//	splice    other TLS: the upstream is dialled (Config.Dial) and sent
//	          the ClientHello's records; the client's bytes after them
//	          are held until the server has answered (within
//	          Config.PeekTimeout). A HelloRetryRequest goes to the
//	          client, and its second ClientHello must ask for the same
//	          name before the server gets it (a server that does not
//	          compare the two would serve another); a second retry
//	          request is refused. Then both directions are copied
//
// Every request the gateway serves is checked on its own: its Host must
// be the SNI (terminated TLS) or pass the session's check at the time of
// the request (plain HTTP); only GET may upgrade, and only to websocket;
// its path is cleaned (httprule.NormalizePath) and decided by the host's
// HTTP rules, an ask held until Session.Ask decides. A held request
// shows whoever decides the start of its body (Ask.Body: at most
// MaxHeldBody bytes, as the client sent it, with its Content-Type and
// Content-Encoding), read before the hold and put back, so the request
// goes on byte for byte; the rest of the body stays in the connection
// until the decision. That read, and a git push's commands, must come
// within Session.AskTimeout, or the request is refused with 408; a
// session has at most 64 such reads under way at once, and a request
// beyond them is refused with 429 before its body is read. The
// body is the sandbox's own bytes: the gateway injects secrets into
// headers only, so no secret value is in it. A secret's
// placeholder in the target, a header or the body is refused unless it
// is the bound header of a request over TLS to the bound host, where the
// value replaces it; so is the value itself (at least MinGuardedValue
// bytes: a copy the sandbox found), also as Basic credentials, and a
// secret with no bound host is only guarded so (secrets.go). The request then goes to the original
// destination through the session's own transport, verified against
// Config.UpstreamRoots, and its response streams back unbuffered;
// protocol upgrades (websockets) pass once the server answers 101, a
// websocket's client frames read and scanned as a body is, on a session
// with secrets (wsscan.go). Each
// request yields one Event (Kind KindRequest): method, host, cleaned path
// (never the query), status, bytes each way, decision, rule, duration.
// A connection passed through yields one Event (KindConnection) when it
// ends.
//
// What it does not see: inside TLS it does not terminate, so there a
// Host header that differs from the SNI on a shared address passes (also
// to a host with rules that shares the address, unless inspect = "all"),
// and a placeholder leaves unseen (it is worthless without the gateway);
// a placeholder that is not written out (encoded other than by
// percent-escapes, compressed) — the placeholder check is a tripwire, not
// a barrier;
// after an upgrade, a websocket's messages but for the placeholder and
// value scan (no rule applies to them, and a value split across messages
// sent more than wsHoldAtMessageEnd apart is not seen whole); other
// ports and protocols
// (QUIC is blocked by the perimeter's rules instead); a client that pins
// its server's certificate refuses the session CA, so hosts it talks to
// must not be terminated.
package l7

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/egress/httprule"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// Defaults for Config.
const (
	DefaultPeekTimeout = 10 * time.Second
	DefaultDialTimeout = 10 * time.Second
	DefaultMaxConns    = 4096
	// DefaultMaxSessionConns bounds one session's connections at once, so
	// that one session cannot take every connection of the gateway.
	DefaultMaxSessionConns = 512
	// DefaultSpliceIdleTimeout closes a spliced connection (TLS passed
	// through) when no byte has moved either way for this long, as the
	// idle timeout does for terminated ones: an idle connection would
	// otherwise hold one of its session's MaxSessionConns forever.
	DefaultSpliceIdleTimeout = 10 * time.Minute
)

// Decision is a session's verdict on a connection.
type Decision struct {
	Allow bool
	// Reason says why, for the client and the audit.
	Reason string
	// Rule is the allowlist entry that decided, if one did.
	Rule string
}

// Session is what the gateway needs of one session.
type Session struct {
	ID string
	// Check decides on a connection to dst whose first message said h,
	// accepted at time at.
	Check func(dst netip.AddrPort, h Hello, at time.Time) Decision
	// Audit receives the session's Events; it must not block.
	Audit func(Event)
	// Terminate reports whether the gateway terminates TLS whose SNI is
	// name (lower-case, no trailing dot), so that it sees the requests;
	// nil terminates none. Certificate returns the certificate it shows
	// the client for name, signed by the session's CA.
	Terminate   func(name string) bool
	Certificate func(name string) (*tls.Certificate, error)
	// Rules returns the HTTP rules of host, nil if it has none.
	Rules func(host string) *httprule.Host
	// Ask holds a request an HTTP rule asks about until it is decided;
	// nil denies every ask.
	Ask func(ctx context.Context, a Ask) AskDecision
	// AskTimeout is how long a request waits for a decision; it also
	// bounds how long the gateway waits for the start of the body it
	// reads before deciding (zero: policies.DefaultApprovalTimeout).
	AskTimeout time.Duration
	// Version is the version of the session's policy this registration
	// is of: a held request a revision decides names it.
	Version int
	// Secrets returns the secrets, substituted for their placeholders on
	// TLS to the hosts they are bound to, and blocked elsewhere; it is
	// called for each request, so a value read again reaches the next
	// one. Nil: none.
	Secrets func() []Secret
}

// Actions of an Event.
const (
	ActionAllowed = "allowed"
	ActionRefused = "refused"
	ActionFailed  = "failed" // allowed, but the upstream could not be reached
	// ActionDenied: a request an HTTP rule denied, or an ask that was
	// not approved.
	ActionDenied = "denied"
	// ActionApproved: a request an HTTP rule asked about, approved.
	ActionApproved = "approved"
	// ActionExfiltration: a request that carried a secret's placeholder
	// where it may not go.
	ActionExfiltration = "exfiltration"
	// ActionClosed: the end of a connection the kernel's fast path
	// forwarded once the gateway allowed it (Kernel), with the bytes the
	// kernel counted; its decision was audited when it was made.
	ActionClosed = "closed"
)

// Event is the audit record of one connection passed through unseen
// (Kind KindConnection), or of one request on a connection the gateway
// serves as HTTP (KindRequest).
type Event struct {
	Time    time.Time
	Kind    string
	Session string
	Client  netip.AddrPort
	Dst     netip.AddrPort
	Proto   string
	SNI     string
	Host    string
	Method  string
	// Path is a request's path, cleaned; its query is never recorded,
	// Query says whether it had one.
	Path       string
	Query      bool
	Status     int
	Terminated bool     // TLS the gateway terminated
	Refs       []string // the refs a git push updates
	// Held is how long an ask waited; Approval and ApprovedBy name the
	// approval and who decided it.
	Held       time.Duration
	Approval   string
	ApprovedBy string
	Action     string
	Reason     string
	Rule       string
	BytesUp    int64 // client to server (a connection's: the peeked bytes included)
	BytesDn    int64 // server to client
	// Kernel: a connection the kernel's fast path forwards once decided
	// (Server.ServeQueue). Its decision's event counts its ClientHello in
	// BytesUp; one it allowed is audited again when it ends
	// (ActionClosed), with its bytes each way. Conntrack is its conntrack
	// entry's id (0: not known), the same in both.
	Kernel    bool
	Conntrack uint32
	Duration  time.Duration
}

// Config configures a Server.
type Config struct {
	// Sessions finds the session of a client address.
	Sessions func(netip.Addr) (*Session, bool)
	// OriginalDst returns a redirected connection's destination.
	OriginalDst func(*net.TCPConn) (netip.AddrPort, error)
	// Dial opens the upstream connection (from the gateway namespace).
	Dial func(ctx context.Context, network, address string) (net.Conn, error)
	// UpstreamRoots verify the upstream of TLS the gateway terminates;
	// nil means the host's system roots.
	UpstreamRoots *x509.CertPool
	// PeekTimeout bounds the wait for the first message; DialTimeout the
	// upstream dial. MaxConns bounds the connections handled at once,
	// MaxSessionConns those of one session; more are closed as they come.
	PeekTimeout, DialTimeout  time.Duration
	MaxConns, MaxSessionConns int
	// SpliceIdleTimeout closes a spliced connection idle both ways this
	// long (DefaultSpliceIdleTimeout when zero).
	SpliceIdleTimeout time.Duration
}

// Server handles redirected connections.
type Server struct {
	cfg Config
	sem chan struct{}

	mu sync.Mutex
	// +checklocks:mu
	conns map[*conn]struct{}
	// +checklocks:mu
	perSession map[string]int
	// +checklocks:mu
	flows map[flowKey]flow // an upstream connection's two ends -> its flow
	// +checklocks:mu
	transports map[transportKey]*http.Transport
	// +checklocks:mu
	upstreams map[string]int // a session's upstream connections the gateway holds open
	// +checklocks:mu
	bodyReads map[string]int // a session's reads of bodies before a decision (maxSessionBodyReads)
	// +checklocks:mu
	digests map[string]int // a session's bodies kept for body_sha256 rules (maxSessionDigests)
	// +checklocks:mu
	held map[*heldAsk]struct{} // requests held for a person, decided again by a revision
	wg   sync.WaitGroup
	// fastPackets counts the packets ServeQueue was given.
	fastPackets atomic.Uint64
	// fast is ServeQueue's state while it runs (FastKeep).
	fast atomic.Pointer[fastPath]
}

// flowKey names an upstream connection by both its ends: the kernel
// gives one local port to connections to different servers.
type flowKey struct{ local, server netip.AddrPort }

type flow struct {
	session string
	server  netip.AddrPort
	// conn is the upstream connection, closed by CloseSession if it is
	// still open then.
	conn net.Conn
}

type conn struct {
	session string
	client  net.Conn
	done    chan struct{}

	mu sync.Mutex
	// +checklocks:mu
	upstream net.Conn
	// +checklocks:mu
	closed bool
	// dst and hello are what the connection was admitted for, at time
	// at, once it was (checked): Recheck decides on them again.
	// +checklocks:mu
	dst netip.AddrPort
	// +checklocks:mu
	at time.Time
	// +checklocks:mu
	hello Hello
	// +checklocks:mu
	checked bool
	// spliced is set once the connection is passed through unseen
	// (TLS not terminated): a revision that gives its name rules or a
	// secret must close it, or its requests would go unchecked.
	// +checklocks:mu
	spliced bool
	// active are the requests in flight on the connection, websockets
	// included (track): Recheck decides them again.
	// +checklocks:mu
	active map[*activeReq]struct{}
}

// activeReq is a request in flight: its host's name, the request as its
// rules decide it, and whether a person approved it.
type activeReq struct {
	name     string
	req      httprule.Request
	approved bool
}

// track records a request in flight on c until done is called.
func (c *conn) track(name string, req httprule.Request, approved bool) (done func()) {
	a := &activeReq{name: name, req: req, approved: approved}
	c.mu.Lock()
	if c.active == nil {
		c.active = map[*activeReq]struct{}{}
	}
	c.active[a] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.active, a)
		c.mu.Unlock()
	}
}

// close closes both sides of c.
func (c *conn) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closed = true
	c.client.Close()
	if c.upstream != nil {
		c.upstream.Close()
	}
}

// New returns a Server.
func New(cfg Config) (*Server, error) {
	if cfg.Sessions == nil || cfg.OriginalDst == nil || cfg.Dial == nil {
		return nil, errors.New("l7: Sessions, OriginalDst and Dial are required")
	}
	if cfg.PeekTimeout <= 0 {
		cfg.PeekTimeout = DefaultPeekTimeout
	}
	if cfg.DialTimeout <= 0 {
		cfg.DialTimeout = DefaultDialTimeout
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxSessionConns <= 0 {
		cfg.MaxSessionConns = DefaultMaxSessionConns
	}
	if cfg.SpliceIdleTimeout <= 0 {
		cfg.SpliceIdleTimeout = DefaultSpliceIdleTimeout
	}
	return &Server{cfg: cfg, sem: make(chan struct{}, cfg.MaxConns), conns: map[*conn]struct{}{},
		perSession: map[string]int{}, flows: map[flowKey]flow{}, transports: map[transportKey]*http.Transport{}, upstreams: map[string]int{}, bodyReads: map[string]int{}, digests: map[string]int{},
		held: map[*heldAsk]struct{}{}}, nil
}

// Serve accepts connections from l until ctx ends or l fails, then closes
// l and every connection, and returns once their handlers are done.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	stop := context.AfterFunc(ctx, func() { l.Close() })
	defer stop()
	defer func() {
		s.closeWhere(func(*conn) bool { return true })
		s.wg.Wait()
	}()
	for {
		c, err := l.Accept()
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return err
			}
			// Out of file descriptors, or a connection reset before it
			// was accepted: wait a moment and go on.
			log.G(ctx).Warn("l7: accept", "error", err)
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		select {
		case s.sem <- struct{}{}:
		default:
			log.G(ctx).Warn("l7: too many connections; closing", "client", c.RemoteAddr())
			c.Close()
			continue
		}
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer func() { <-s.sem }()
			s.handle(ctx, c)
		}()
	}
}

// CloseSession closes session id's connections and returns once each has
// been audited.
func (s *Server) CloseSession(id string) {
	for _, c := range s.closeWhere(func(c *conn) bool { return c.session == id }) {
		<-c.done
	}
	s.closeFast(id)
	s.mu.Lock()
	var ts []*http.Transport
	for k, t := range s.transports {
		if k.session == id {
			ts = append(ts, t)
			delete(s.transports, k)
		}
	}
	s.mu.Unlock()
	for _, t := range ts {
		t.CloseIdleConnections()
	}
	// An upstream connection a transport did not count as idle yet (an
	// HTTP/2 stream still being torn down) is closed too: the transport
	// is dropped, and nothing else would ever close it.
	s.mu.Lock()
	var left []net.Conn
	for _, f := range s.flows {
		if f.session == id && f.conn != nil {
			left = append(left, f.conn)
		}
	}
	s.mu.Unlock()
	for _, c := range left {
		c.Close()
	}
}

// Recheck decides again, under sess (the session's revised
// registration, already current), on each open connection of session
// sess.ID the gateway admitted and on each of its requests held for a
// person. A connection whose destination and first message (SNI, or the
// Host of its first request) sess.Check now refuses is closed, client and
// upstream side, whether spliced or served as HTTP (keep-alive, HTTP/2, a
// websocket); so is a spliced connection whose name sess now terminates
// (it gained HTTP rules or a secret, or inspect became "all"), since its
// requests would pass unseen. The session's idle upstream connections
// kept for reuse are closed. A held request the revised rules no longer
// ask about is decided by them at once (see heldAsk). It returns how many
// connections it closed.
func (s *Server) Recheck(sess *Session) int {
	id := sess.ID
	closed := s.closeWhere(func(c *conn) bool {
		if c.session != id {
			return false
		}
		c.mu.Lock()
		dst, h, at, checked, spliced := c.dst, c.hello, c.at, c.checked, c.spliced
		active := make([]*activeReq, 0, len(c.active))
		for a := range c.active {
			active = append(active, a)
		}
		c.mu.Unlock()
		if !checked {
			return false
		}
		// Decided as of the connection's admission (its pins then), by
		// the revised names.
		if !sess.Check(dst, h, at).Allow {
			return true
		}
		// A request in flight (a websocket, a long download) the
		// revised rules refuse: its connection ends.
		for _, a := range active {
			if !stillAllowed(sess, a.name, a.req, a.approved) {
				return true
			}
		}
		return spliced && terminates(sess, h)
	})
	if len(closed) > 0 {
		s.mu.Lock()
		var ts []*http.Transport
		for k, t := range s.transports {
			if k.session == id {
				ts = append(ts, t)
			}
		}
		s.mu.Unlock()
		for _, t := range ts {
			t.CloseIdleConnections()
		}
	}
	s.mu.Lock()
	var held []*heldAsk
	for a := range s.held {
		if a.session == id {
			held = append(held, a)
		}
	}
	s.mu.Unlock()
	for _, a := range held {
		a.redecide(sess)
	}
	return len(closed) + s.recheckFast(sess)
}

// revisedWhileChecked is why a connection is refused when the session's
// registration changed while it was being decided: the client connects
// again, and the revised policy decides.
const revisedWhileChecked = "airlock: the session's egress policy was revised while the connection was checked"

// terminates reports whether sess has the gateway terminate TLS whose
// first message was h.
func terminates(sess *Session, h Hello) bool {
	if h.Proto != ProtoTLS || sess.Terminate == nil {
		return false
	}
	sni, _, _ := NameOf(h.SNI)
	name := sni.WithoutTrailingDot()
	return name != "" && sess.Terminate(name)
}

// CloseIdleUpstreams closes every idle upstream connection kept for
// reuse: after the uplink went, they lead nowhere.
func (s *Server) CloseIdleUpstreams() {
	s.mu.Lock()
	ts := make([]*http.Transport, 0, len(s.transports))
	for _, t := range s.transports {
		ts = append(ts, t)
	}
	s.mu.Unlock()
	for _, t := range ts {
		t.CloseIdleConnections()
	}
}

func (s *Server) closeWhere(match func(*conn) bool) []*conn {
	s.mu.Lock()
	var out []*conn
	for c := range s.conns {
		if match(c) {
			out = append(out, c)
		}
	}
	s.mu.Unlock()
	for _, c := range out {
		c.close()
	}
	return out
}

// SessionOfFlow returns the session whose connection the gateway opened
// from local address client (as the server saw it) to server (optional).
func (s *Server) SessionOfFlow(client, server netip.AddrPort) (string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	local := netip.AddrPortFrom(client.Addr().Unmap(), client.Port())
	if server.IsValid() {
		f, ok := s.flows[flowKey{local, netip.AddrPortFrom(server.Addr().Unmap(), server.Port())}]
		return f.session, ok
	}
	// Without the server, only a local address no two flows share.
	id, n := "", 0
	for k, f := range s.flows {
		if k.local == local {
			id, n = f.session, n+1
		}
	}
	return id, n == 1
}

func addrPort(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	return netip.AddrPort{}
}

func (s *Server) handle(ctx context.Context, nc net.Conn) {
	start := time.Now()
	defer nc.Close()
	client := addrPort(nc.RemoteAddr())
	tc, ok := nc.(*net.TCPConn)
	if !ok {
		return
	}
	sess, ok := s.cfg.Sessions(client.Addr())
	if !ok {
		log.G(ctx).Info("l7: connection from an address of no session", "client", client)
		return
	}
	dst, err := s.cfg.OriginalDst(tc)
	if err != nil {
		log.G(ctx).Warn("l7: no original destination", "session", sess.ID, "client", client, "error", err)
		return
	}
	c := &conn{session: sess.ID, client: nc, done: make(chan struct{})}
	defer close(c.done)
	s.mu.Lock()
	s.conns[c] = struct{}{}
	s.perSession[sess.ID]++
	over := s.perSession[sess.ID] > s.cfg.MaxSessionConns
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		if s.perSession[sess.ID]--; s.perSession[sess.ID] <= 0 {
			delete(s.perSession, sess.ID)
		}
		s.mu.Unlock()
	}()

	ev := Event{Time: start, Kind: KindConnection, Session: sess.ID, Client: client, Dst: dst}
	emit := func() {
		ev.Duration = time.Since(start)
		if sess.Audit != nil {
			sess.Audit(ev)
		}
	}
	if over {
		ev.Action, ev.Reason = ActionRefused, fmt.Sprintf("airlock: more than %d connections through the L7 gateway at once", s.cfg.MaxSessionConns)
		emit()
		return
	}

	_ = nc.SetReadDeadline(start.Add(s.cfg.PeekTimeout))
	h, peeked, err := Peek(nc)
	ev.Proto, ev.SNI, ev.Host, ev.Method = h.Proto, h.SNI, h.Host, h.Method
	if err != nil {
		ev.Action, ev.Reason = ActionRefused, "airlock: "+err.Error()
		if len(peeked) == 0 {
			ev.Reason = "airlock: the client sent nothing (closed, or silent for the peek timeout)"
		}
		emit() // audited before the client learns of it
		refuse(nc, h.Proto, ev.Reason)
		return
	}
	d := sess.Check(dst, h, start)
	ev.Rule = d.Rule
	if !d.Allow {
		ev.Action, ev.Reason = ActionRefused, d.Reason
		emit()
		refuse(nc, h.Proto, d.Reason)
		return
	}
	_ = nc.SetReadDeadline(time.Time{})
	c.mu.Lock()
	c.dst, c.hello, c.at, c.checked = dst, h, start, true
	c.mu.Unlock()
	// A revision that replaced the session's registration while this
	// connection was checked under the old one has rechecked only the
	// connections checked by then: decide under the current one.
	cur, ok := s.cfg.Sessions(client.Addr())
	if !ok || cur.ID != sess.ID || cur != sess && !cur.Check(dst, h, start).Allow {
		ev.Action, ev.Reason = ActionRefused, revisedWhileChecked
		emit()
		refuse(nc, h.Proto, ev.Reason)
		return
	}
	sess = cur

	switch {
	case h.Proto == ProtoHTTP:
		s.serveHTTP(ctx, c, sess, nc, peeked, target{dst: dst}, client, nil)
		return
	case sess.Terminate != nil:
		sni, _, _ := NameOf(h.SNI)
		if name := sni.WithoutTrailingDot(); name != "" && sess.Terminate(name) {
			if sess.Certificate == nil {
				// Passing it through would skip its rules: fail closed.
				ev.Action, ev.Reason = ActionRefused, "airlock: TLS to "+name+" must be terminated (HTTP rules, a secret or inspect), and the session has no CA"
				emit()
				refuse(nc, h.Proto, ev.Reason)
				return
			}
			tlsCfg := &tls.Config{
				MinVersion: tls.VersionTLS12,
				NextProtos: []string{"h2", "http/1.1"},
				GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
					return sess.Certificate(name)
				},
			}
			s.serveHTTP(ctx, c, sess, nc, peeked, target{dst: dst, sni: name, tls: true}, client, tlsCfg)
			return
		}
	}

	// Passed through unseen from here on: a revision that has the
	// gateway terminate its name closes it (Recheck), and one made since
	// the registration was read refuses it here.
	c.mu.Lock()
	c.spliced = true
	c.mu.Unlock()
	if cur, ok := s.cfg.Sessions(client.Addr()); !ok || cur != sess && (!cur.Check(dst, h, start).Allow || terminates(cur, h)) {
		ev.Action, ev.Reason = ActionRefused, revisedWhileChecked
		emit()
		refuse(nc, h.Proto, ev.Reason)
		return
	}
	// Only the ClientHello's records go to the server until it has
	// answered them: a second ClientHello among the bytes after them
	// would be read by the server, unchecked, once it has asked for one
	// (retry.go). Bytes after the ClientHello inside its last record
	// cannot be held back: refused.
	end, err := helloRecords(peeked)
	if err == nil && end == 0 {
		err = errors.New("l7: the ClientHello's records end past the bytes read")
	}
	if err != nil {
		ev.Action, ev.Reason = ActionRefused, "airlock: "+err.Error()
		emit()
		refuse(nc, h.Proto, ev.Reason)
		return
	}

	dctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
	up, err := s.cfg.Dial(dctx, "tcp", dst.String())
	cancel()
	if err != nil {
		ev.Action, ev.Reason = ActionFailed, "upstream: "+err.Error()
		emit()
		return
	}
	c.mu.Lock()
	c.upstream = up
	closed := c.closed
	c.mu.Unlock()
	if closed {
		up.Close()
	}
	local := addrPort(up.LocalAddr())
	s.mu.Lock()
	key := flowKey{local, netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())}
	s.flows[key] = flow{session: sess.ID, server: dst, conn: up}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if f, ok := s.flows[key]; ok && f.conn == up {
			delete(s.flows, key)
		}
		s.mu.Unlock()
		up.Close()
	}()

	ev.Action, ev.Reason = ActionAllowed, d.Reason
	// The server's answer to the ClientHello is judged before anything
	// else of the client's reaches it: a HelloRetryRequest has the
	// client's second ClientHello checked first.
	g := &helloGate{client: nc, server: up, timeout: s.cfg.PeekTimeout, first: h, kept: bytes.Clone(peeked[end:])}
	err = g.send(peeked[:end])
	if err == nil {
		err = g.run()
	}
	var refused errRefused
	switch {
	case errors.As(err, &refused):
		ev.BytesUp, ev.BytesDn = g.up, g.dn
		ev.Action, ev.Reason = ActionRefused, refused.reason
		emit()
		refuse(nc, h.Proto, ev.Reason)
		return
	case err == nil:
		if err = g.reply(g.srv); err == nil {
			err = g.send(g.kept)
		}
	default:
		// The server ended or failed before its answer was judged:
		// the client gets what it sent.
		_ = g.reply(g.srv)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			ev.Reason = fmt.Sprintf("upstream: no answer to the ClientHello within %v: closed", s.cfg.PeekTimeout)
		}
	}
	ev.BytesUp, ev.BytesDn = g.up, g.dn
	if err != nil {
		emit()
		return
	}
	idle := watchIdle(s.cfg.SpliceIdleTimeout, nc, up)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		n, _ := io.Copy(up, nc)
		ev.BytesUp += n
		closeWrite(up)
	}()
	n, _ := io.Copy(nc, up)
	closeWrite(nc)
	wg.Wait()
	if idle.stop() {
		ev.Reason = fmt.Sprintf("idle both ways for %v: closed", s.cfg.SpliceIdleTimeout)
	}
	ev.BytesDn += n
	emit()
}

// idleWatch closes two connections once neither has received data for
// its timeout.
type idleWatch struct {
	timeout, every time.Duration
	a, b           net.Conn
	mu             sync.Mutex
	// +checklocks:mu
	timer *time.Timer
	// +checklocks:mu
	stopped, fired bool
}

// watchIdle watches a and b: the kernel's count of when each socket last
// received data (TCP_INFO's last_data_recv: from the client on one, from
// the server on the other), looked at a few times per timeout. The copies
// between them are left alone, so the kernel still splices them.
// Connections that give no TCP_INFO are not watched.
func watchIdle(timeout time.Duration, a, b net.Conn) *idleWatch {
	w := &idleWatch{timeout: timeout, every: min(timeout/4, time.Minute), a: a, b: b}
	w.mu.Lock()
	w.timer = time.AfterFunc(w.every, w.check)
	w.mu.Unlock()
	return w
}

func (w *idleWatch) check() {
	ia, oka := lastReceived(w.a)
	ib, okb := lastReceived(w.b)
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.stopped || !oka || !okb:
	case ia >= w.timeout && ib >= w.timeout:
		w.fired, w.stopped = true, true
		w.a.Close()
		w.b.Close()
	default:
		w.timer.Reset(w.every)
	}
}

// stop ends the watch and reports whether it closed the connections.
func (w *idleWatch) stop() (fired bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.timer.Stop()
	return w.fired
}

// lastReceived is how long ago the TCP socket under c last received
// data, as the kernel counts it.
func lastReceived(c net.Conn) (time.Duration, bool) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return 0, false
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return 0, false
	}
	var info *unix.TCPInfo
	if err := rc.Control(func(fd uintptr) {
		info, err = unix.GetsockoptTCPInfo(int(fd), unix.IPPROTO_TCP, unix.TCP_INFO)
	}); err != nil || info == nil {
		return 0, false
	}
	return time.Duration(info.Last_data_recv) * time.Millisecond, true
}

func closeWrite(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
}

// refuse tells the client it was refused, as its protocol allows.
func refuse(c net.Conn, proto, reason string) {
	_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
	switch proto {
	case ProtoHTTP:
		writeJSON(c, 403, "Forbidden", reason)
		// Read what the client still sends (a body) for a moment, so that
		// closing does not reset the connection before it reads the answer.
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		_, _ = io.Copy(io.Discard, io.LimitReader(c, MaxPeek))
	case ProtoTLS:
		// A fatal access_denied alert in a TLS 1.0-versioned record, as
		// servers send before a version is agreed.
		_, _ = c.Write([]byte{0x15, 0x03, 0x01, 0x00, 0x02, 0x02, 49})
	}
}

// writeJSON writes an HTTP/1.1 response with a short JSON body and closes
// the connection's write side.
func writeJSON(c net.Conn, code int, status, reason string) {
	body, _ := json.Marshal(map[string]string{"error": reason})
	body = append(body, '\n')
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		code, status, len(body), body)
	closeWrite(c)
}
