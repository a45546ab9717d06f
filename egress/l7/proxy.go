package l7

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/http/httputil"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress/httprule"
	"github.com/airlock-sandbox/airlock/policies"
)

// Timeouts of the connections the gateway serves as HTTP.
const (
	// DefaultIdleTimeout closes a client's kept-alive connection with no
	// request in flight.
	DefaultIdleTimeout = 2 * time.Minute
	headerTimeout      = 30 * time.Second
	maxHeaderBytes     = 64 << 10
	// maxPushCommands bounds the bytes of a git push's ref commands the
	// gateway reads before deciding.
	maxPushCommands = 1 << 20
	// maxSessionBodyReads bounds the requests of one session whose body
	// the gateway reads at once before deciding (a push's commands, the
	// body a json rule decides, a body whose digest a body_sha256 rule
	// compares, a held request's body): a request beyond them is refused
	// with 429 before its body is read, so that bodies a client sends in
	// part and then stalls on hold at most this many times MaxHeldBody (a
	// push: maxPushCommands; a digest: policies.MaxHashedBody) of the
	// gateway's memory until the body deadline.
	maxSessionBodyReads = 64
	// maxSessionDigests bounds the requests of one session whose body
	// (up to policies.MaxHashedBody) the gateway keeps for a body_sha256
	// rule until the request is done, held for approval included.
	maxSessionDigests = 8
	// MaxHeldBody bounds the bytes of a request's body that the gateway
	// reads before holding it for approval, to show whoever decides
	// (Ask.Body); the rest stays unread in the connection until the
	// decision, and goes on unseen if the request is approved.
	MaxHeldBody = 64 << 10
	// MaxHeldQuery bounds the bytes of a held request's raw query shown
	// to whoever decides (Ask.Query).
	MaxHeldQuery = 8 << 10
	// MaxHeldHeaders bounds the header fields of a held request shown
	// (Ask.Headers), MaxHeldHeaderBytes their names and values together,
	// MaxHeldHeaderValue each value.
	MaxHeldHeaders     = 100
	MaxHeldHeaderBytes = 16 << 10
	MaxHeldHeaderValue = 1 << 10
)

// Kinds of Event.
const (
	KindConnection = "connection"
	KindRequest    = "request"
)

// Ask is a request an HTTP rule holds for a person.
type Ask struct {
	Method, Host, Path, Rule string
	Refs                     []string
	// Body is the start of the request's body, at most MaxHeldBody
	// bytes, as the client sent it (in its Content-Encoding, not
	// decoded); nil when it has none. The request goes on with its body
	// whole and unchanged. BodyTruncated says the body is longer.
	Body          []byte
	BodyTruncated bool
	// ContentType and ContentEncoding are the request's headers as the
	// client sent them, so that Body can be read.
	ContentType, ContentEncoding string
	// Query is the request's raw query, at most MaxHeldQuery bytes;
	// QueryTruncated says it is longer.
	Query          string
	QueryTruncated bool
	// Headers are the request's header fields as the client sent them
	// (see heldHeaders): a header bound to a secret shows the secret's
	// placeholder and name, never its value. HeadersTruncated says some
	// were cut or left out.
	Headers          []api.HeaderField
	HeadersTruncated bool
	// Revised receives, at most once, the decision of a revision of the
	// session's policy whose rules no longer ask about the request: it
	// decides the request in place of a person.
	Revised <-chan AskDecision
}

// AskDecision is what came of an Ask.
type AskDecision struct {
	Allow bool
	// Reason says why (a person's reason, a timeout).
	Reason string
	// By says who decided: a person, "timeout", the approver hook.
	By string
	// ID is the approval's id.
	ID string
}

// reqKey carries a request's upstream destination to the transport's
// dialer.
type reqKey struct{}

// target is where one connection's requests go.
type target struct {
	dst netip.AddrPort
	// sni is the TLS server name the client sent, lower-case without a
	// trailing dot; empty on plain HTTP.
	sni string
	tls bool
}

// serveHTTP serves the HTTP requests of an intercepted connection, plain
// HTTP or TLS the gateway terminates (tlsCfg non-nil), until it closes:
// each request is checked (Host bound to the SNI and the pins, the
// placeholders of secrets, the host's HTTP rules, approvals), audited,
// and passed to the original destination by the session's transport.
func (s *Server) serveHTTP(ctx context.Context, cn *conn, sess *Session, nc net.Conn, peeked []byte, tg target, client netip.AddrPort, tlsCfg *tls.Config) {
	raw := &closeNotifyConn{Conn: nc, r: io.MultiReader(bytes.NewReader(peeked), nc), closed: make(chan struct{})}
	var c net.Conn = raw
	if tlsCfg != nil {
		c = tls.Server(raw, tlsCfg)
	}
	h := &httpHandler{s: s, sess: sess, tg: tg, client: client, count: &inflight{}, conn: cn, raw: raw}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: headerTimeout,
		IdleTimeout:       DefaultIdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          log.New(io.Discard, "", 0),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: maxStreams},
	}
	if tlsCfg != nil {
		srv.TLSConfig = tlsCfg
	}
	l := &oneConnListener{c: c, closed: raw.closed}
	_ = srv.Serve(l)
	<-raw.closed
	h.wait()
}

// transportKey names an upstream transport: one per session, original
// destination and HTTP version, so that upstream connections are never
// shared between sessions, and a request always goes to the address its
// client connected to (a kept-alive connection to another address of the
// same name is not reused for it).
//
// Requests that came over HTTP/2 go upstream over HTTP/2 where the server
// offers it (many streams share few connections); requests that came over
// HTTP/1.x go over HTTP/1.1, one at a time on each upstream connection, as
// their client sends them: a download then costs the gateway and the
// server no HTTP/2 framing and flow control (over HTTP/2, the server's CPU
// per byte of a download doubled).
type transportKey struct {
	session string
	dst     netip.AddrPort
	h2      bool
}

// maxStreams bounds the HTTP/2 streams of one client connection at once.
const maxStreams = 64

// upstreamTransport returns the transport of session id's requests to
// dst, over HTTP/2 (where the server offers it) when h2.
func (s *Server) upstreamTransport(id string, dst netip.AddrPort, h2 bool) *http.Transport {
	k := transportKey{session: id, dst: dst, h2: h2}
	s.mu.Lock()
	defer s.mu.Unlock()
	if t, ok := s.transports[k]; ok {
		return t
	}
	t := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			if !s.takeUpstream(id) {
				return nil, fmt.Errorf("airlock: more than %d upstream connections of the session at once", s.cfg.MaxSessionConns)
			}
			dctx, cancel := context.WithTimeout(ctx, s.cfg.DialTimeout)
			defer cancel()
			up, err := s.cfg.Dial(dctx, network, dst.String())
			if err != nil {
				s.releaseUpstream(id)
				return nil, err
			}
			return s.trackFlow(id, dst, up), nil
		},
		TLSClientConfig:       &tls.Config{RootCAs: s.cfg.UpstreamRoots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     h2,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       90 * time.Second,
		TLSHandshakeTimeout:   s.cfg.DialTimeout,
		ExpectContinueTimeout: time.Second,
		DisableCompression:    true,
	}
	if !h2 {
		// Not even where the server offers it.
		t.TLSNextProto = map[string]func(string, *tls.Conn) http.RoundTripper{}
	}
	s.transports[k] = t
	return t
}

// takeUpstream counts one more upstream connection of session id, if it
// has fewer than MaxSessionConns: HTTP/2 streams of few client
// connections must not open more.
func (s *Server) takeUpstream(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.upstreams[id] >= s.cfg.MaxSessionConns {
		return false
	}
	s.upstreams[id]++
	return true
}

func (s *Server) releaseUpstream(id string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.upstreams[id]--; s.upstreams[id] <= 0 {
		delete(s.upstreams, id)
	}
}

// trackFlow records up as session id's flow to dst until it is closed.
func (s *Server) trackFlow(id string, dst netip.AddrPort, up net.Conn) net.Conn {
	key := flowKey{addrPort(up.LocalAddr()), netip.AddrPortFrom(dst.Addr().Unmap(), dst.Port())}
	fc := &flowConn{Conn: up}
	fc.forget = func() {
		s.mu.Lock()
		if f, ok := s.flows[key]; ok && f.conn == net.Conn(fc) {
			delete(s.flows, key)
		}
		s.mu.Unlock()
		s.releaseUpstream(id)
	}
	s.mu.Lock()
	s.flows[key] = flow{session: id, server: dst, conn: fc}
	s.mu.Unlock()
	return fc
}

// flowConn is an upstream connection of the gateway. Its reads go ahead:
// a read smaller than readAheadSize reads up to readAheadSize into a
// buffer lent by a pool for as long as it holds bytes, and later reads
// take from it. TLS reads a record (16 KiB at most) a read, so on a
// download this reads several a system call; an idle connection holds no
// buffer.
type flowConn struct {
	net.Conn
	once   sync.Once
	forget func()

	// Read's, used by one goroutine at a time: ahead[r:w] is read and not
	// yet returned; err came with it.
	ahead []byte
	r, w  int
	err   error
	// large: a read filled a small read-ahead; reads are readAheadSize.
	large bool

	// beforeWait, when set, is called before a read that goes to the
	// socket, which may wait: a response body's client writes held
	// behind (closeNotifyConn.hold) are sent then, so that nothing the
	// gateway has read waits on the server.
	beforeWait atomic.Pointer[func()]
}

// readAheadSize is the size of an upstream connection's read-ahead. A
// download's writes to the client are sent before each read that goes
// to the socket (beforeWait): the larger the read, the fewer and larger
// both are. The buffer is held only while it holds bytes.
//
// A connection reads ahead smallReadAhead bytes until a read fills them:
// most responses through the gateway are small, and a pool's buffers do
// not outlive two garbage collections, which come every session or two
// in a busy daemon, so every small response made a new 256 KiB buffer
// (and a write-behind one). Only a connection whose read fills the small
// buffer, a download, reads readAheadSize at a time from then on.
const (
	readAheadSize  = 256 << 10
	smallReadAhead = 16 << 10
)

var (
	readAheadBuffers      = sync.Pool{New: func() any { b := make([]byte, readAheadSize); return &b }}
	smallReadAheadBuffers = sync.Pool{New: func() any { b := make([]byte, smallReadAhead); return &b }}
)

// readAheadPool is the pool of read-ahead buffers of buf's size.
func readAheadPool(buf []byte) *sync.Pool {
	if cap(buf) == readAheadSize {
		return &readAheadBuffers
	}
	return &smallReadAheadBuffers
}

func (c *flowConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.r == c.w {
		if c.err != nil {
			err := c.err
			c.err = nil
			return 0, err
		}
		if f := c.beforeWait.Load(); f != nil {
			(*f)()
		}
		if len(p) >= readAheadSize {
			return c.Conn.Read(p)
		}
		pool := &smallReadAheadBuffers
		if c.large {
			pool = &readAheadBuffers
		}
		bp := pool.Get().(*[]byte)
		n, err := c.Conn.Read(*bp)
		if n == 0 {
			pool.Put(bp)
			return 0, err
		}
		if n == len(*bp) {
			c.large = true
		}
		c.ahead, c.r, c.w, c.err = *bp, 0, n, err
	}
	n := copy(p, c.ahead[c.r:c.w])
	c.r += n
	if c.r == c.w {
		buf := c.ahead
		c.ahead, c.r, c.w = nil, 0, 0
		readAheadPool(buf).Put(&buf)
	}
	return n, nil
}

func (c *flowConn) Close() error {
	c.once.Do(c.forget)
	return c.Conn.Close()
}

type httpHandler struct {
	s *Server
	// conn is the connection the requests came on (nil in tests that
	// serve a handler alone): Recheck ends it when a request in flight on
	// it is refused by a revision.
	conn *conn
	// sess is the session's registration the connection was accepted
	// under; each request runs under the registration current when it
	// comes (a revision replaces it).
	sess   *Session
	tg     target
	client netip.AddrPort
	count  *inflight
	// raw is the client connection under TLS (nil in tests that serve a
	// handler alone): a response body is written through it behind, see
	// closeNotifyConn.hold.
	raw *closeNotifyConn
}

// inflight counts a connection's requests in flight, so that the
// connection's end waits for the last one's audit.
type inflight struct {
	mu sync.Mutex
	// +checklocks:mu
	n int
	// +checklocks:mu
	idle chan struct{} // closed when n drops to 0
}

func (h *httpHandler) enter() {
	c := h.count
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n == 0 {
		c.idle = make(chan struct{})
	}
	c.n++
}

func (h *httpHandler) leave() {
	c := h.count
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.n--; c.n == 0 {
		close(c.idle)
	}
}

func (h *httpHandler) wait() {
	c := h.count
	c.mu.Lock()
	idle := c.idle
	n := c.n
	c.mu.Unlock()
	if n > 0 {
		<-idle
	}
}

// refusal is a request the gateway answers itself.
type refusal struct {
	status int
	action string
	reason string
	rule   string
}

func (h *httpHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.enter()
	defer h.leave()
	began := time.Now()
	ev := Event{Time: began, Kind: KindRequest, Session: h.sess.ID, Client: h.client, Dst: h.tg.dst,
		Proto: ProtoHTTP, SNI: h.tg.sni, Host: r.Host, Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery != "",
		Terminated: h.tg.tls}
	if h.tg.tls {
		ev.Proto = ProtoTLS
	}
	// Over HTTP/2 each write is flushed: what the gateway read is passed
	// on before it waits on the server for more.
	cw := &countingWriter{ResponseWriter: w, flushWrites: r.ProtoMajor == 2}
	body := &countingBody{r: r.Body}
	r.Body = body
	emit := func() {
		ev.Duration = time.Since(began)
		ev.BytesUp, ev.BytesDn = body.n, cw.n
		if ev.Status == 0 {
			ev.Status = cw.status
		}
		if h.sess.Audit != nil {
			h.sess.Audit(ev)
		}
	}
	refuse := func(f refusal) {
		ev.Action, ev.Reason, ev.Status = f.action, f.reason, f.status
		if f.rule != "" {
			ev.Rule = f.rule
		}
		// Audited before the client learns of it, so that whoever reads
		// the audit after the answer finds it.
		emit()
		writeRefusal(cw, f)
	}

	// A revision of the session's egress replaces its registration: the
	// request is decided by the current one. Another session at the
	// client's address, or none, means the network is going.
	cur, ok := h.s.cfg.Sessions(h.client.Addr())
	if !ok || cur.ID != h.sess.ID {
		refuse(refusal{status: http.StatusForbidden, action: ActionRefused, reason: "airlock: the session's network is being removed"})
		return
	}
	h = &httpHandler{s: h.s, sess: cur, tg: h.tg, client: h.client, count: h.count, conn: h.conn, raw: h.raw}
	name, f := h.checkHost(r)
	if f != nil {
		refuse(*f)
		return
	}
	if f := checkUpgrade(r); f != nil {
		refuse(*f)
		return
	}
	ev.Host = name
	clean, err := httprule.NormalizePath(r.URL.EscapedPath())
	if err != nil {
		refuse(refusal{status: http.StatusBadRequest, action: ActionRefused, reason: "airlock: request path: " + err.Error()})
		return
	}
	ev.Path = clean
	var secrets []Secret
	if h.sess.Secrets != nil {
		secrets = h.sess.Secrets()
	}
	// What a held request's body is in, as the client sent it: a secret
	// injected into these headers is not shown with the body.
	sent := sentHeaders{
		contentType:     strings.Join(r.Header.Values("Content-Type"), ", "),
		contentEncoding: strings.Join(r.Header.Values("Content-Encoding"), ", "),
	}
	if h.tg.tls {
		// The headers injectSecrets sets to a secret's value: a held
		// request shows them with the placeholder (see heldHeaders).
		sent.bound = bindings(secrets, name)
	}
	if err := injectSecrets(secrets, r, name, h.tg.tls); err != nil {
		var ex *exfiltration
		action := ActionRefused
		if errors.As(err, &ex) {
			action = ActionExfiltration
		}
		refuse(refusal{status: http.StatusForbidden, action: action, reason: err.Error()})
		return
	}
	var held []func()
	defer func() {
		for _, release := range held {
			release()
		}
	}()
	if f := h.authorize(cw, r, name, clean, sent, &ev, &held); f != nil {
		refuse(*f)
		return
	}
	// In flight from here on, a websocket for as long as it is open: a
	// revision whose rules refuse it ends its connection (Recheck). One
	// made since the request took the registration decides it now.
	if h.conn != nil {
		done := h.conn.track(name, httprule.Request{Method: r.Method, Path: clean}, ev.Action == ActionApproved)
		defer done()
		if cur, ok := h.s.cfg.Sessions(h.client.Addr()); !ok || cur != h.sess && !stillAllowed(cur, name, httprule.Request{Method: r.Method, Path: clean}, ev.Action == ActionApproved) {
			refuse(refusal{status: http.StatusForbidden, action: ActionDenied, reason: "airlock: the session's policy was revised while the request was decided; its rules refuse it now"})
			return
		}
	}

	var scan *scanReader
	if len(secrets) > 0 {
		scan = newScanReader(r.Body, secrets, func() http.Header { return r.Trailer })
		r.Body = scan
	}
	injected := h.tg.tls && len(bindings(secrets, name)) > 0
	if injected {
		cw.scrub = func(hd http.Header) { scrubHeader(hd, secrets) }
	}
	scheme := "http"
	if h.tg.tls {
		scheme = "https"
	}
	authority := h.tg.dst.Addr().String()
	if name != "" {
		authority = name
	}
	upHost := net.JoinHostPort(authority, strconv.Itoa(int(h.tg.dst.Port())))
	var upstreamErr error
	var wsIdle *idleRWC
	var wsScan *wsScanConn // a websocket's client frames, read and scanned
	// The upstream connection the request went on, when the response's
	// body may be written behind (see closeNotifyConn): over HTTP/1.x
	// to the client, whose connection carries one response at a time.
	var upConn atomic.Pointer[flowConn]
	writeBehind := h.raw != nil && r.ProtoMajor == 1
	var heldOn *flowConn // the connection whose reads flush the held writes
	var flushHeld *func()
	defer func() {
		// Whatever was held goes out before the response ends, also
		// when the reverse proxy aborts it. The upstream connection may
		// carry another request already (its body was read to the
		// end): its hook is left alone.
		if heldOn != nil {
			heldOn.beforeWait.CompareAndSwap(flushHeld, nil)
			_ = h.raw.release()
		}
	}()
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.Out.URL.Scheme = scheme
			pr.Out.URL.Host = upHost
			pr.Out.Host = r.Host
			// The query as the sandbox sent it, and as a held request
			// showed it: ReverseProxy would drop the pairs of a query
			// with a ';' or a bad escape, so that the service read
			// something else than the person who approved it.
			pr.Out.URL.RawQuery = r.URL.RawQuery
			if ev.Action == ActionApproved {
				// Trailers come after the body, past the decision: a
				// held request goes on without them.
				pr.Out.Trailer = nil
			}
			if injected {
				// The response is scrubbed of the value: ask for it
				// uncompressed.
				pr.Out.Header.Del("Accept-Encoding")
			}
			if len(secrets) > 0 {
				// A websocket's frames are scanned (the client's) and
				// scrubbed (a bound host's): no extension is offered,
				// since permessage-deflate would hide a placeholder or
				// a value in them.
				pr.Out.Header.Del("Sec-WebSocket-Extensions")
			}
			ctx := context.WithValue(pr.Out.Context(), reqKey{}, h.tg)
			if writeBehind {
				ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
					c := info.Conn
					if tc, ok := c.(*tls.Conn); ok {
						c = tc.NetConn()
					}
					if fc, ok := c.(*flowConn); ok {
						upConn.Store(fc)
					}
				}})
			}
			pr.Out = pr.Out.WithContext(ctx)
		},
		Transport:     h.s.upstreamTransport(h.sess.ID, h.tg.dst, h.tg.tls && r.ProtoMajor == 2),
		FlushInterval: 0,
		ModifyResponse: func(resp *http.Response) error {
			if injected {
				// What the bound host sends back never carries the value:
				// headers, body, trailers, and a websocket's frames.
				scrubHeader(resp.Header, secrets)
				if err := decodeForScrub(resp); err != nil {
					return err
				}
				if resp.StatusCode == http.StatusSwitchingProtocols {
					up, ok := resp.Body.(io.ReadWriteCloser)
					if !ok {
						return errors.New("upgraded response without a connection")
					}
					resp.Body = newWSScrubConn(up, secrets, nil)
				} else {
					// A placeholder is longer than its value: the length
					// changes.
					resp.Header.Del("Content-Length")
					resp.ContentLength = -1
					resp.Body = newScrubber(resp.Body, secrets, func() { scrubHeader(resp.Trailer, secrets) })
				}
			}
			if resp.StatusCode == http.StatusSwitchingProtocols && len(secrets) > 0 {
				// The client's frames are read and scanned as a body
				// is; the extension was not offered, and is not taken
				// if the server names it anyway.
				up, ok := resp.Body.(io.ReadWriteCloser)
				if !ok {
					return errors.New("upgraded response without a connection")
				}
				resp.Header.Del("Sec-WebSocket-Extensions")
				wsScan = newWSScanConn(up, secrets)
				resp.Body = wsScan
			}
			if resp.StatusCode == http.StatusSwitchingProtocols {
				// A websocket idle both ways is closed, as a spliced
				// connection is.
				if up, ok := resp.Body.(io.ReadWriteCloser); ok {
					wsIdle = newIdleRWC(up, h.s.cfg.SpliceIdleTimeout)
					resp.Body = wsIdle
				}
			} else if fc := upConn.Load(); fc != nil {
				// The body's writes to the client are held behind, and
				// sent before each read that may wait on the server.
				flush := func() { _ = h.raw.flush() }
				heldOn, flushHeld = fc, &flush
				fc.beforeWait.Store(flushHeld)
				h.raw.hold()
				cw.held = h.raw
			}
			return nil
		},
		BufferPool: copyBuffers,
		ErrorLog:   log.New(io.Discard, "", 0),
		ErrorHandler: func(w http.ResponseWriter, _ *http.Request, err error) {
			upstreamErr = err
			if scan != nil && scan.hit.Load() != nil {
				return
			}
			msg := err.Error()
			if injected {
				// The transport quotes what it could not parse of the
				// bound host's answer, which may carry the value.
				msg = scrubString(msg, secrets)
			}
			writeRefusal(w, refusal{status: http.StatusBadGateway, reason: "upstream: " + msg})
		},
	}
	rp.ServeHTTP(cw, r)
	switch {
	case scan != nil && scan.hit.Load() != nil:
		hit := scan.hit.Load()
		ex := &exfiltration{secret: hit.secret, what: hit.what, where: hit.where, host: name}
		ev.Action, ev.Reason = ActionExfiltration, ex.Error()+" (the request was cut off before it)"
		if cw.status == 0 {
			ev.Status = http.StatusForbidden
			emit() // before the answer, as every refusal
			writeRefusal(cw, refusal{status: http.StatusForbidden, reason: ev.Reason})
			return
		}
	case wsScan != nil && wsScan.Refusal() != nil:
		r := wsScan.Refusal()
		ev.Action, ev.Reason = ActionRefused, r.reason
		if r.secret != "" {
			ex := &exfiltration{secret: r.secret, what: r.what, where: r.where, host: name}
			ev.Action, ev.Reason = ActionExfiltration, ex.Error()+fmt.Sprintf(" (the websocket was closed before it, %d)", r.code)
		}
	case upstreamErr != nil:
		ev.Action, ev.Reason = ActionFailed, "upstream: "+upstreamErr.Error()
	default:
		if ev.Action == "" {
			ev.Action = ActionAllowed
		}
	}
	if wsIdle != nil && wsIdle.stop() {
		ev.Reason = strings.TrimPrefix(ev.Reason+"; ", "; ") + fmt.Sprintf("websocket idle both ways for %v: closed", h.s.cfg.SpliceIdleTimeout)
	}
	emit()
}

// idleRWC is an upgraded connection's upstream side, closed once no data
// has gone either way through it for its timeout (the reverse proxy then
// closes the client's side too).
type idleRWC struct {
	io.ReadWriteCloser
	timeout, every time.Duration
	base           time.Time    // the watch's start, on the monotonic clock
	last           atomic.Int64 // when data last went either way, in nanoseconds since base
	closed         atomic.Bool  // the watch closed it
	mu             sync.Mutex
	// +checklocks:mu
	timer *time.Timer
	// +checklocks:mu
	stopped, fired bool
}

func newIdleRWC(c io.ReadWriteCloser, timeout time.Duration) *idleRWC {
	w := &idleRWC{ReadWriteCloser: c, timeout: timeout, every: min(timeout/4, time.Minute), base: time.Now()}
	w.mu.Lock()
	w.timer = time.AfterFunc(w.every, w.check)
	w.mu.Unlock()
	return w
}

func (w *idleRWC) Read(p []byte) (int, error) {
	n, err := w.ReadWriteCloser.Read(p)
	if n > 0 {
		w.last.Store(int64(time.Since(w.base)))
	}
	if w.closed.Load() {
		// Not an end of stream, which the reverse proxy would pass on
		// as a half-close and then wait for the client: an error, which
		// ends the relay both ways.
		return n, errIdleClosed
	}
	return n, err
}

// errIdleClosed ends an upgraded connection the idle watch closed.
var errIdleClosed = errors.New("idle both ways: closed")

func (w *idleRWC) Write(p []byte) (int, error) {
	n, err := w.ReadWriteCloser.Write(p)
	if n > 0 {
		w.last.Store(int64(time.Since(w.base)))
	}
	return n, err
}

// CloseWrite half-closes the upstream, as the transport's upgraded body
// does, where the connection under it can.
func (w *idleRWC) CloseWrite() error {
	if cw, ok := w.ReadWriteCloser.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("CloseWrite: %w", http.ErrNotSupported)
}

func (w *idleRWC) check() {
	idle := time.Since(w.base) - time.Duration(w.last.Load())
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.stopped:
	case idle >= w.timeout:
		w.fired, w.stopped = true, true
		w.closed.Store(true)
		w.ReadWriteCloser.Close()
	default:
		w.timer.Reset(min(w.every, w.timeout-idle+time.Millisecond))
	}
}

// stop ends the watch and reports whether it closed the connection.
func (w *idleRWC) stop() (fired bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	w.timer.Stop()
	return w.fired
}

// copyBufferSize is the size of the buffers responses are copied through;
// a TLS record holds at most 16 KiB.
const copyBufferSize = 32 << 10

// copyBuffers lends the reverse proxy its copy buffers, which it would
// otherwise allocate for every request.
var copyBuffers = &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}}

type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte { return *b.p.Get().(*[]byte) }

func (b *bufferPool) Put(buf []byte) {
	if cap(buf) == copyBufferSize {
		buf = buf[:copyBufferSize]
		b.p.Put(&buf)
	}
}

// checkUpgrade lets only websockets upgrade a connection: after a 101
// only a websocket's frames are read (wsScanConn), so a protocol that
// carries requests (h2c) would carry them past every check.
func checkUpgrade(r *http.Request) *refusal {
	up := r.Header.Values("Upgrade")
	if len(up) == 0 {
		return nil
	}
	if r.Method == http.MethodGet && len(up) == 1 && strings.EqualFold(strings.TrimSpace(up[0]), "websocket") {
		return nil
	}
	return &refusal{status: http.StatusForbidden, action: ActionRefused,
		reason: fmt.Sprintf("airlock: upgrade to %q refused: only GET upgrades to websocket pass (what follows another upgrade, requests in h2c, would not be checked)", strings.Join(up, ", "))}
}

// decodeForScrub makes a compressed response of a host a secret is bound
// to readable, so that it can be scrubbed: gzip is decoded (the client
// asked for none), any other coding is an error.
func decodeForScrub(resp *http.Response) error {
	ce := strings.ToLower(strings.TrimSpace(resp.Header.Get("Content-Encoding")))
	switch ce {
	case "", "identity":
		return nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(resp.Body)
		if err != nil {
			return fmt.Errorf("airlock: the gzip response of a host a secret is bound to: %w", err)
		}
		resp.Body = &replayBody{Reader: zr, c: resp.Body}
		resp.Header.Del("Content-Encoding")
		resp.Header.Del("Content-Length")
		resp.ContentLength = -1
		return nil
	}
	return fmt.Errorf("airlock: a response in Content-Encoding %q from a host a secret is bound to cannot be checked for the value", ce)
}

// checkHost binds the request's Host to the connection: on TLS the gateway
// terminated, it must be the SNI; on plain HTTP the session checks it as
// it checked the first request's (a kept-alive connection cannot switch
// to another host). It returns the name the request goes to, empty for an
// address a CIDR entry allows.
func (h *httpHandler) checkHost(r *http.Request) (string, *refusal) {
	host, err := hostOnly(r.Host)
	if err != nil {
		return "", &refusal{status: http.StatusBadRequest, action: ActionRefused, reason: "airlock: Host " + strconv.Quote(r.Host) + " is not valid"}
	}
	name, ip, err := NameOf(host)
	if err != nil {
		return "", &refusal{status: http.StatusForbidden, action: ActionRefused, reason: fmt.Sprintf("airlock: Host %q is not a valid hostname", r.Host)}
	}
	if h.tg.tls {
		if name == "" || name.WithoutTrailingDot() != h.tg.sni {
			return "", &refusal{status: http.StatusMisdirectedRequest, action: ActionRefused,
				reason: fmt.Sprintf("airlock: Host %q differs from SNI %q", r.Host, h.tg.sni)}
		}
		return h.tg.sni, nil
	}
	d := h.sess.Check(h.tg.dst, Hello{Proto: ProtoHTTP, Host: host, Method: r.Method}, time.Now())
	if !d.Allow {
		return "", &refusal{status: http.StatusForbidden, action: ActionRefused, reason: d.Reason, rule: d.Rule}
	}
	if name == "" {
		_ = ip
		return "", nil
	}
	return name.WithoutTrailingDot(), nil
}

// sentHeaders are headers of a request as its client sent them, and the
// bindings of secrets that injectSecrets set in its header after.
type sentHeaders struct {
	contentType, contentEncoding string
	bound                        []binding
}

// heldQuery returns a held request's raw query for an Ask, at most
// MaxHeldQuery bytes, and whether it is longer.
func heldQuery(r *http.Request) (string, bool) {
	q := r.URL.RawQuery
	if len(q) > MaxHeldQuery {
		return q[:MaxHeldQuery], true
	}
	return q, false
}

// heldHeaders returns a held request's header fields for an Ask: one per
// value, in name order, at most MaxHeldHeaders of them and
// MaxHeldHeaderBytes of names and values, each value at most
// MaxHeldHeaderValue bytes (cut: Truncated); truncated says some were cut
// or left out. It is called after injectSecrets, which refused any
// request with a placeholder or value in a field not bound, and set the
// bound fields to the secrets' values: those are shown as the secret's
// placeholder ("Bearer " and it for a bearer binding) with its name,
// whatever the client sent in them, so no value leaves the gateway here.
func heldHeaders(hd http.Header, bound []binding) (fields []api.HeaderField, truncated bool) {
	secretOf := func(name string) *binding {
		for i := range bound {
			if http.CanonicalHeaderKey(bound[i].inject.header()) == name {
				return &bound[i]
			}
		}
		return nil
	}
	names := make([]string, 0, len(hd))
	for k := range hd {
		names = append(names, k)
	}
	slices.Sort(names)
	size := 0
	for _, k := range names {
		vs := hd[k]
		var secret string
		if b := secretOf(k); b != nil {
			v := b.secret.Placeholder
			if b.inject.Bearer {
				v = "Bearer " + v
			}
			vs, secret = []string{v}, b.secret.Name
		}
		for _, v := range vs {
			f := api.HeaderField{Name: k, Value: v, Secret: secret}
			if len(f.Value) > MaxHeldHeaderValue {
				f.Value, f.Truncated = f.Value[:MaxHeldHeaderValue], true
			}
			if len(fields) == MaxHeldHeaders || size+len(k)+len(f.Value) > MaxHeldHeaderBytes {
				return fields, true
			}
			size += len(k) + len(f.Value)
			truncated = truncated || f.Truncated
			fields = append(fields, f)
		}
	}
	return fields, truncated
}

// authorize applies the host's HTTP rules, holding an ask for a person.
// The body it reads before deciding (a git push's commands, the body a
// json condition checks, the start of a held request's body) it puts
// back, so the request goes on unchanged; those reads end by the
// session's AskTimeout (see bodyDeadline).
//
// What must last as long as the request (the slot of a body kept for its
// digest) it appends to held, for the caller to release when it is done.
func (h *httpHandler) authorize(w http.ResponseWriter, r *http.Request, name, clean string, sent sentHeaders, ev *Event, held *[]func()) *refusal {
	if h.sess.Rules == nil {
		return nil
	}
	rules := h.sess.Rules(name)
	if rules == nil {
		return nil
	}
	req := httprule.Request{Method: r.Method, Path: clean}
	if httprule.IsReceivePack(r.Method, clean) {
		req.IsPush = true
		undo, f := h.bodyDeadline(w, r)
		if f != nil {
			return f
		}
		ups, consumed, err := httprule.ReadPush(r.Body, r.Header.Get("Content-Encoding"), maxPushCommands)
		undo()
		if err != nil {
			if f := bodyReadRefusal(err); f != nil {
				return f
			}
			return &refusal{status: http.StatusForbidden, action: ActionRefused, reason: "airlock: git push commands: " + err.Error()}
		}
		req.Push = ups
		r.Body = &replayBody{Reader: io.MultiReader(bytes.NewReader(consumed), r.Body), c: r.Body}
		for _, u := range ups {
			ev.Refs = append(ev.Refs, u.Ref)
		}
	}
	if !req.IsPush && rules.NeedsJSON(r.Method, clean) {
		if f := readJSONBody(w, r, h, rules, &req); f != nil {
			return f
		}
	}
	if !req.IsPush && rules.NeedsBody(r.Method, clean) {
		// The body read for its digest stays in memory, up to
		// MaxHashedBody, until the request is done (held for a person,
		// perhaps): a session has at most maxSessionDigests of them.
		release, ok := h.s.takeDigest(h.sess.ID)
		if !ok {
			return &refusal{status: http.StatusTooManyRequests, action: ActionRefused,
				reason: fmt.Sprintf("airlock: the session has %d requests whose bodies the gateway holds for a body_sha256 rule, the most it may", maxSessionDigests)}
		}
		*held = append(*held, release)
		if f := digestBody(w, r, h, &req); f != nil {
			return f
		}
	}
	d := rules.Decide(req)
	ev.Rule = d.Rule
	switch d.Action {
	case policies.HTTPAllow:
		return nil
	case policies.HTTPAsk:
		if h.sess.Ask == nil {
			return &refusal{status: http.StatusForbidden, action: ActionDenied, rule: d.Rule,
				reason: "airlock: rule " + d.Rule + " asks for approval, and this daemon has no approvals"}
		}
		ask := Ask{Method: r.Method, Host: name, Path: clean, Rule: d.Rule, Refs: ev.Refs,
			ContentType: sent.contentType, ContentEncoding: sent.contentEncoding}
		ask.Query, ask.QueryTruncated = heldQuery(r)
		ask.Headers, ask.HeadersTruncated = heldHeaders(r.Header, sent.bound)
		undo, f := h.bodyDeadline(w, r)
		if f != nil {
			f.rule = d.Rule
			return f
		}
		body, truncated, err := holdBody(r)
		undo()
		if err != nil {
			f := bodyReadRefusal(err)
			if f == nil {
				f = &refusal{status: http.StatusBadRequest, action: ActionRefused,
					reason: "airlock: reading the body of a request held for approval: " + err.Error()}
			}
			f.rule = d.Rule
			return f
		}
		ask.Body, ask.BodyTruncated = body, truncated
		ha := h.s.hold(h.sess.ID, name, req)
		defer h.s.unhold(ha)
		ask.Revised = ha.ch
		// A revision made since this request took the session's
		// registration has not seen the hold: decide under the current
		// one.
		if cur, ok := h.s.cfg.Sessions(h.client.Addr()); ok && cur.ID == h.sess.ID && cur != h.sess {
			ha.redecide(cur)
		}
		held := time.Now()
		a := h.sess.Ask(r.Context(), ask)
		ev.Held = time.Since(held)
		ev.Approval, ev.ApprovedBy = a.ID, a.By
		if rd, ok := ha.decision(); ok && a.By == rd.By {
			// Decided by the revised rules, not by a person.
			ev.Rule = rd.Rule
			if a.Allow {
				return nil
			}
			return &refusal{status: http.StatusForbidden, action: ActionDenied, rule: rd.Rule, reason: "airlock: " + rd.Reason}
		}
		if a.Allow {
			ev.Action = ActionApproved
			return nil
		}
		reason := "airlock: not approved"
		if a.By != "" {
			reason += " (" + a.By + ")"
		}
		if a.Reason != "" {
			reason += ": " + a.Reason
		}
		return &refusal{status: http.StatusForbidden, action: ActionDenied, rule: d.Rule, reason: reason}
	default:
		return &refusal{status: http.StatusForbidden, action: ActionDenied, rule: d.Rule,
			reason: "airlock: denied by " + d.Rule}
	}
}

// revisedRules returns the rules sess (a revised registration) has for
// name, nil if none, and decides under them a request read before the
// revision: a body the revised rules would read and the request was not
// read for (it was read under rules without json or body_sha256
// conditions) counts as unreadable: no allow rule with such conditions
// matches it, every deny and ask rule does.
func revisedRules(sess *Session, name string, req httprule.Request) (*httprule.Host, httprule.Decision) {
	if sess.Rules == nil {
		return nil, httprule.Decision{}
	}
	rules := sess.Rules(name)
	if rules == nil {
		return nil, httprule.Decision{}
	}
	if rules.NeedsJSON(req.Method, req.Path) && !req.JSONBody {
		req.JSONOpaque = true
	}
	if rules.NeedsBody(req.Method, req.Path) && req.BodySHA256 == "" {
		req.BodyOpaque = true
	}
	return rules, rules.Decide(req)
}

// stillAllowed reports whether sess, a revised registration, lets a
// request to name that is in flight (its body already gone, perhaps
// upgraded to a websocket) go on: its host's rules (see revisedRules) do
// not deny it, and do not ask about it unless a person approved it
// already.
func stillAllowed(sess *Session, name string, req httprule.Request, approved bool) bool {
	rules, d := revisedRules(sess, name, req)
	if rules == nil {
		return true
	}
	switch d.Action {
	case policies.HTTPAllow:
		return true
	case policies.HTTPAsk:
		return approved
	}
	return false
}

// heldAsk is a request held for a person that a revision of the
// session's policy may decide first (Server.Recheck): under the revised
// rules of its host it is allowed or denied outright when they no longer
// ask about it, so that a withdrawn rule's ask cannot be approved after
// the revision, and a widened one does not wait for a person.
type heldAsk struct {
	session, name string
	req           httprule.Request
	ch            chan AskDecision // buffered; sent on at most once

	mu sync.Mutex
	// +checklocks:mu
	decided *revisedDecision
}

// revisedDecision is how a revision decided a held request.
type revisedDecision struct {
	By, Rule, Reason string
}

// hold registers a request held for a person, for a revision to decide.
func (s *Server) hold(session, name string, req httprule.Request) *heldAsk {
	a := &heldAsk{session: session, name: name, req: req, ch: make(chan AskDecision, 1)}
	s.mu.Lock()
	s.held[a] = struct{}{}
	s.mu.Unlock()
	return a
}

// unhold forgets a held request once it is decided.
func (s *Server) unhold(a *heldAsk) {
	s.mu.Lock()
	delete(s.held, a)
	s.mu.Unlock()
}

// redecide decides a again under sess, the session's revised
// registration: if its host's rules now allow or deny the request (or it
// has none), that decision is sent to whoever holds it.
func (a *heldAsk) redecide(sess *Session) {
	rules, d := revisedRules(sess, a.name, a.req)
	rd := revisedDecision{By: fmt.Sprintf("policy revision %d", sess.Version)}
	allow := true
	if rules == nil {
		rd.Reason = fmt.Sprintf("the session's policy was revised (version %d) while the request was held: %s has no HTTP rules now", sess.Version, a.name)
	} else {
		if d.Action == policies.HTTPAsk {
			return // still a person's to decide
		}
		allow = d.Action == policies.HTTPAllow
		verb := "allowed"
		if !allow {
			verb = "denied"
		}
		rd.Rule = d.Rule
		rd.Reason = fmt.Sprintf("%s by %s: the session's policy was revised (version %d) while the request was held", verb, d.Rule, sess.Version)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.decided != nil {
		return
	}
	a.decided = &rd
	a.ch <- AskDecision{Allow: allow, By: rd.By, Reason: rd.Reason}
}

// decision is how a revision decided a, if one did.
func (a *heldAsk) decision() (revisedDecision, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.decided == nil {
		return revisedDecision{}, false
	}
	return *a.decided, true
}

// readJSONBody reads the body of a request that a rule with json
// conditions may decide, at most MaxHeldBody bytes within bodyDeadline's
// bound, and puts it back, so the request goes on byte for byte. A body
// read whole and not content-encoded is parsed into req (JSONBody, JSON);
// a longer or encoded one (gzip is not decoded: the gateway would have to
// bound a decompression), or one that is not a JSON object, is opaque
// (JSONOpaque): no json allow rule matches it, every json deny or ask
// rule does. A body that JSON parsers may read differently is refused
// outright.
func readJSONBody(w http.ResponseWriter, r *http.Request, h *httpHandler, rules *httprule.Host, req *httprule.Request) *refusal {
	undo, f := h.bodyDeadline(w, r)
	if f != nil {
		return f
	}
	body, truncated, err := holdBody(r)
	undo()
	if err != nil {
		if f := bodyReadRefusal(err); f != nil {
			return f
		}
		return &refusal{status: http.StatusBadRequest, action: ActionRefused,
			reason: "airlock: reading the body of a request json rules check: " + err.Error()}
	}
	if len(body) == 0 {
		return nil
	}
	for _, ce := range r.Header.Values("Content-Encoding") {
		if !strings.EqualFold(strings.TrimSpace(ce), "identity") {
			req.JSONOpaque = true
			return nil
		}
	}
	if truncated {
		req.JSONOpaque = true
		return nil
	}
	fields, isObject, err := rules.ParseJSON(body)
	if err != nil {
		return &refusal{status: http.StatusForbidden, action: ActionRefused, reason: "airlock: " + err.Error()}
	}
	req.JSONBody, req.JSON = isObject, fields
	req.JSONOpaque = !isObject && len(bytes.TrimLeft(body, " \t\r\n")) > 0
	return nil
}

// digestBody reads the body of a request that a rule with body_sha256
// may decide, at most policies.MaxHashedBody bytes within bodyDeadline's
// bound, and puts it back, so the request goes on byte for byte. A body
// read whole and not content-encoded gets its SHA-256 in req.BodySHA256,
// and, if it is a multipart form read strictly, its parts' digests in
// req.FormSHA256; a longer or encoded one is opaque (req.BodyOpaque): no body_sha256
// allow rule matches it, every such deny or ask rule does.
func digestBody(w http.ResponseWriter, r *http.Request, h *httpHandler, req *httprule.Request) *refusal {
	undo, f := h.bodyDeadline(w, r)
	if f != nil {
		return f
	}
	body, truncated, err := readBodyUpTo(r, policies.MaxHashedBody)
	undo()
	if err != nil {
		if f := bodyReadRefusal(err); f != nil {
			return f
		}
		return &refusal{status: http.StatusBadRequest, action: ActionRefused,
			reason: "airlock: reading the body of a request body_sha256 rules check: " + err.Error()}
	}
	for _, ce := range r.Header.Values("Content-Encoding") {
		if !strings.EqualFold(strings.TrimSpace(ce), "identity") {
			req.BodyOpaque = true
			return nil
		}
	}
	if truncated {
		req.BodyOpaque = true
		return nil
	}
	sum := sha256.Sum256(body)
	req.BodySHA256 = hex.EncodeToString(sum[:])
	if ct := r.Header.Values("Content-Type"); len(ct) == 1 {
		req.FormSHA256, _ = httprule.FormDigests(ct[0], body)
	}
	return nil
}

// bodyDeadline bounds the gateway's reads of a request's body before its
// decision by the session's AskTimeout (or the default approval timeout),
// so that a client that sends headers and then nothing holds no
// goroutine longer than a request waits for a decision. The returned
// function lifts the bound: the rest of the body streams as the client
// sends it. Where the connection cannot take a deadline, the reads are
// bounded only by its end.
//
// A session has at most maxSessionBodyReads such reads under way at
// once (each holds up to MaxHeldBody bytes it read until it ends): a
// request of r's session beyond them gets a refusal (429) instead, and
// its body is not read. A request without a body takes none.
func (h *httpHandler) bodyDeadline(w http.ResponseWriter, r *http.Request) (undo func(), f *refusal) {
	if r.Body == nil || r.Body == http.NoBody {
		return func() {}, nil
	}
	release, ok := h.s.takeBodyRead(h.sess.ID)
	if !ok {
		return nil, &refusal{status: http.StatusTooManyRequests, action: ActionRefused,
			reason: fmt.Sprintf("airlock: the session has %d requests whose bodies the gateway is reading before deciding, the most it may", maxSessionBodyReads)}
	}
	timeout := h.sess.AskTimeout
	if timeout <= 0 {
		timeout = policies.DefaultApprovalTimeout.Std()
	}
	rc := http.NewResponseController(w)
	if err := rc.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return release, nil
	}
	return func() { _ = rc.SetReadDeadline(time.Time{}); release() }, nil
}

// takeDigest counts a request of session whose body the gateway keeps for
// a body_sha256 rule: false when the session has maxSessionDigests; else
// release ends it.
func (s *Server) takeDigest(session string) (release func(), ok bool) {
	return s.takeSlot(s.digests, session, maxSessionDigests)
}

// takeBodyRead counts a read of a request's body before its decision in
// session: false when the session has maxSessionBodyReads under way;
// else release ends it.
func (s *Server) takeBodyRead(session string) (release func(), ok bool) {
	return s.takeSlot(s.bodyReads, session, maxSessionBodyReads)
}

// takeSlot counts one more of session's in counts (a map guarded by
// s.mu): false when it has max already; else release, safe to repeat,
// counts it off.
func (s *Server) takeSlot(counts map[string]int, session string, max int) (release func(), ok bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if counts[session] >= max {
		return nil, false
	}
	counts[session]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			if counts[session]--; counts[session] <= 0 {
				delete(counts, session)
			}
		})
	}, true
}

// bodyReadRefusal is the refusal of a request whose body did not come
// before bodyDeadline's bound, nil for other errors.
func bodyReadRefusal(err error) *refusal {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return nil
	}
	return &refusal{status: http.StatusRequestTimeout, action: ActionRefused,
		reason: "airlock: the request's body did not come in time for a decision"}
}

// holdBody reads the start of r's body for an Ask: at most MaxHeldBody
// bytes, and whether there is more. What it read it puts back in front of
// the rest, so that the request goes on byte for byte as the client sent
// it. A request without a body has none (nil).
func holdBody(r *http.Request) (held []byte, truncated bool, err error) {
	return readBodyUpTo(r, MaxHeldBody)
}

// readBodyUpTo reads at most max bytes of r's body and puts what it read
// back in front of the rest; truncated says there was more.
func readBodyUpTo(r *http.Request, max int) (held []byte, truncated bool, err error) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, false, nil
	}
	buf, err := io.ReadAll(io.LimitReader(r.Body, int64(max)+1))
	if len(buf) > 0 {
		r.Body = &replayBody{Reader: io.MultiReader(bytes.NewReader(buf), r.Body), c: r.Body}
	}
	switch {
	case err != nil:
		return nil, false, err
	case len(buf) == 0:
		return nil, false, nil
	case len(buf) > max:
		return buf[:max:max], true, nil
	}
	return buf, false, nil
}

// writeRefusal answers a request the gateway refused, with a JSON body
// naming the reason and the rule.
func writeRefusal(w http.ResponseWriter, f refusal) {
	body := map[string]string{"error": f.reason}
	if f.rule != "" {
		body["rule"] = f.rule
	}
	b, _ := json.Marshal(body)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Airlock-Refused", "1")
	w.Header().Set("Connection", "close")
	w.WriteHeader(f.status)
	_, _ = w.Write(append(b, '\n'))
}

type replayBody struct {
	io.Reader
	c io.Closer
}

func (b *replayBody) Close() error { return b.c.Close() }

type countingBody struct {
	r io.ReadCloser
	n int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.n += int64(n)
	return n, err
}

func (b *countingBody) Close() error { return b.r.Close() }

// countingWriter counts the bytes of a response's body and keeps its
// status; Unwrap lets the reverse proxy flush and hijack (websockets)
// through it.
type countingWriter struct {
	http.ResponseWriter
	n      int64
	status int
	// scrub, when set, scrubs an informational response's header.
	scrub func(http.Header)
	// held, when set, is the client connection the body is written
	// through, holding writes behind: each write is flushed down to it,
	// a flush sends what it holds.
	held *closeNotifyConn
	// flushWrites has each write flushed (HTTP/2).
	flushWrites bool
}

func (w *countingWriter) WriteHeader(code int) {
	if w.status == 0 || code >= 200 && w.status < 200 {
		w.status = code
	}
	if code < 200 && w.scrub != nil {
		// An informational response (103 Early Hints; over HTTP/2 even a
		// 101) is passed on by the reverse proxy before ModifyResponse
		// sees anything. A final 101 was scrubbed there already; again
		// changes nothing.
		w.scrub(w.Header())
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *countingWriter) Write(p []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	n, err := w.ResponseWriter.Write(p)
	w.n += int64(n)
	if err == nil && (w.held != nil || w.flushWrites) {
		// Down to the client connection (where it is held until the
		// gateway would wait on the server), not in the server's
		// buffers until the next write.
		err = http.NewResponseController(w.ResponseWriter).Flush()
	}
	return n, err
}

func (w *countingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// FlushError flushes the response, and the client connection's writes
// held behind (server-sent events go on event by event).
func (w *countingWriter) FlushError() error {
	if err := http.NewResponseController(w.ResponseWriter).Flush(); err != nil {
		return err
	}
	if w.held != nil {
		return w.held.flush()
	}
	return nil
}

// closeNotifyConn is a client connection whose first bytes were peeked:
// it reads them first, and tells when it is closed. While it holds (a
// response body copied from the server), its writes are held behind, up
// to writeBehindSize, and sent together when the gateway would wait on
// the server (flush): TLS writes a record (16 KiB at most) a write, and a
// system call a record cost the gateway a send through the kernel, and
// the client a wake-up, for every 16 KiB.
type closeNotifyConn struct {
	net.Conn
	r      io.Reader
	once   sync.Once
	closed chan struct{}

	wmu sync.Mutex
	// +checklocks:wmu
	holding bool
	// +checklocks:wmu
	behind *[]byte // held writes, a buffer lent by smallWriteBehindBuffers or writeBehindBuffers
	// +checklocks:wmu
	werr error // a failed write of held bytes, returned by every later Write
}

// writeBehindSize bounds the bytes a client connection holds behind: a
// read-ahead's worth of records. Held writes go to a buffer of a small
// read-ahead's worth first, moved to one of writeBehindSize only when
// they outgrow it (a download's).
const (
	writeBehindSize      = readAheadSize + 16<<10
	smallWriteBehindSize = smallReadAhead + 16<<10
)

var (
	writeBehindBuffers      = sync.Pool{New: func() any { b := make([]byte, 0, writeBehindSize); return &b }}
	smallWriteBehindBuffers = sync.Pool{New: func() any { b := make([]byte, 0, smallWriteBehindSize); return &b }}
)

// writeBehindPool is the pool of write-behind buffers of buf's size.
func writeBehindPool(buf []byte) *sync.Pool {
	if cap(buf) == writeBehindSize {
		return &writeBehindBuffers
	}
	return &smallWriteBehindBuffers
}

func (c *closeNotifyConn) Read(p []byte) (int, error) { return c.r.Read(p) }

func (c *closeNotifyConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.werr != nil {
		return 0, c.werr
	}
	if c.behind != nil && len(*c.behind)+len(p) > writeBehindSize || !c.holding {
		if err := c.flushLocked(); err != nil {
			return 0, err
		}
	}
	if !c.holding || len(p) >= writeBehindSize {
		return c.Conn.Write(p)
	}
	if c.behind == nil {
		c.behind = smallWriteBehindBuffers.Get().(*[]byte)
	}
	if b := *c.behind; len(b)+len(p) > cap(b) {
		// Outgrown: the held bytes move to a large buffer.
		large := writeBehindBuffers.Get().(*[]byte)
		*large = append((*large)[:0], b...)
		*c.behind = b[:0]
		smallWriteBehindBuffers.Put(c.behind)
		c.behind = large
	}
	*c.behind = append(*c.behind, p...)
	return len(p), nil
}

// +checklocks:c.wmu
func (c *closeNotifyConn) flushLocked() error {
	if c.behind == nil {
		return c.werr
	}
	b := *c.behind
	var err error
	if len(b) > 0 {
		_, err = c.Conn.Write(b)
	}
	*c.behind = b[:0]
	writeBehindPool(b).Put(c.behind)
	c.behind = nil
	if err != nil {
		c.werr = err
	}
	return err
}

// hold has later writes held behind until flush or release.
func (c *closeNotifyConn) hold() {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.holding = true
}

// flush sends the writes held behind.
func (c *closeNotifyConn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	return c.flushLocked()
}

// release sends the writes held behind, and holds no more.
func (c *closeNotifyConn) release() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.holding = false
	return c.flushLocked()
}

func (c *closeNotifyConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { close(c.closed) })
	return err
}

// CloseWrite lets a hijacked websocket relay half-close the client side.
func (c *closeNotifyConn) CloseWrite() error {
	if tc, ok := c.Conn.(*net.TCPConn); ok {
		return tc.CloseWrite()
	}
	return nil
}

// oneConnListener hands out one connection, then blocks until it is
// closed.
type oneConnListener struct {
	mu     sync.Mutex
	c      net.Conn
	closed chan struct{}
}

func (l *oneConnListener) Accept() (net.Conn, error) {
	l.mu.Lock()
	c := l.c
	l.c = nil
	l.mu.Unlock()
	if c != nil {
		return c, nil
	}
	<-l.closed
	return nil, net.ErrClosed
}

func (l *oneConnListener) Close() error   { return nil }
func (l *oneConnListener) Addr() net.Addr { return &net.TCPAddr{} }
