// Package dnsproxy is airlock's DNS allowlist proxy: the only resolver a
// sandbox can reach.
//
// One Server serves every session; a query's session is found from its
// source address. Each query passes a chain of small handlers, after
// CoreDNS's plugin contract:
//
//	session   unknown source address → REFUSED; over the session's Limiter
//	          (rate, queries at once) → dropped (UDP) or REFUSED (TCP), never
//	          forwarded
//	validate  one question, class IN, opcode QUERY, a well-formed hostname
//	allowlist names the session may not resolve → REFUSED + EDE Blocked (15),
//	          never forwarded
//	types     A and CNAME pass; AAAA passes when the session allows IPv6,
//	          otherwise (and for HTTPS/SVCB) an empty NOERROR answer; any
//	          other type → REFUSED + EDE Blocked
//	answer    checks the CNAME chain (at most 8 hops, every target must be
//	          allowed), keeps only the chain and its final A/AAAA records,
//	          drops addresses the session may not reach (addrs.go; REFUSED +
//	          EDE Blocked when none is left), pins the rest for the session,
//	          clamps TTLs, then answers
//	cache     shared by all sessions, keyed by name and type
//	forward   UDP to the upstreams with a fresh id and EDNS0 size 1232;
//	          over TCP when truncated and the client came over TCP
//
// Every query yields one audit Event for its session.
package dnsproxy

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	"github.com/miekg/dns"

	"github.com/airlock-sandbox/airlock/internal/log"
)

// Defaults for Options.
const (
	DefaultTTLFloor        = 5 * time.Second
	DefaultTTLCap          = 300 * time.Second
	DefaultCacheSize       = 10000
	DefaultQueryTimeout    = 5 * time.Second
	DefaultUpstreamTimeout = 2 * time.Second
	DefaultLogWindow       = time.Minute
)

// Dialer opens a connection to an upstream server; network is "udp" or
// "tcp". A caller can use it to send upstream traffic from a particular
// network namespace.
type Dialer func(ctx context.Context, network, address string) (net.Conn, error)

type config struct {
	upstreams       []string
	ttlFloor        time.Duration
	ttlCap          time.Duration
	cacheSize       int
	queryTimeout    time.Duration
	upstreamTimeout time.Duration
	logWindow       time.Duration
	dial            Dialer
	audit           func(Event)
	addrs           addrPolicy // which answer addresses may be pinned (addrs.go)
	now             func() time.Time
	exchange        exchangeFunc // tests only
}

// Option configures a Server.
type Option func(*config) error

// WithUpstreams sets the upstream resolvers, tried in order: IP addresses
// with an optional port ("192.0.2.53", "192.0.2.53:5353", "[2001:db8::53]:53").
// Names are not accepted: resolving the resolver would need a resolver.
func WithUpstreams(addrs ...string) Option {
	return func(c *config) error {
		c.upstreams = c.upstreams[:0]
		for _, a := range addrs {
			ap, err := netip.ParseAddrPort(a)
			if err != nil {
				ip, err2 := netip.ParseAddr(a)
				if err2 != nil {
					return fmt.Errorf("upstream %q: want IP or IP:port: %w", a, errdefs.ErrInvalidArgument)
				}
				ap = netip.AddrPortFrom(ip, 53)
			}
			if ap.Port() == 0 || ap.Addr().Zone() != "" {
				return fmt.Errorf("upstream %q: want a port and no zone: %w", a, errdefs.ErrInvalidArgument)
			}
			c.upstreams = append(c.upstreams, ap.String())
		}
		return nil
	}
}

// WithTTLBounds sets the shortest and longest time an answer's addresses are
// pinned. Clients never get a TTL above the pin's.
func WithTTLBounds(floor, ceiling time.Duration) Option {
	return func(c *config) error {
		if floor < time.Second || ceiling < floor {
			return fmt.Errorf("TTL bounds %v..%v: want 1s <= floor <= cap: %w", floor, ceiling, errdefs.ErrInvalidArgument)
		}
		c.ttlFloor, c.ttlCap = floor.Truncate(time.Second), ceiling.Truncate(time.Second)
		return nil
	}
}

// WithCacheSize bounds the answer cache; 0 disables it.
func WithCacheSize(entries int) Option {
	return func(c *config) error {
		if entries < 0 {
			return fmt.Errorf("cache size %d: %w", entries, errdefs.ErrInvalidArgument)
		}
		c.cacheSize = entries
		return nil
	}
}

// WithTimeouts sets the deadline for a whole query and for each upstream
// attempt.
func WithTimeouts(query, upstream time.Duration) Option {
	return func(c *config) error {
		if query <= 0 || upstream <= 0 {
			return fmt.Errorf("timeouts must be positive: %w", errdefs.ErrInvalidArgument)
		}
		c.queryTimeout, c.upstreamTimeout = query, upstream
		return nil
	}
}

// WithDialer sets how upstream connections are opened.
func WithDialer(d Dialer) Option {
	return func(c *config) error {
		if d == nil {
			return fmt.Errorf("nil dialer: %w", errdefs.ErrInvalidArgument)
		}
		c.dial = d
		return nil
	}
}

// WithAudit receives events for queries that have no session (unknown
// source address). Session events go to SessionPolicy.Audit.
func WithAudit(f func(Event)) Option {
	return func(c *config) error {
		c.audit = f
		return nil
	}
}

// WithLogWindow sets how long a refused (session, name) pair stays quiet in
// the log after it was logged once.
func WithLogWindow(d time.Duration) Option {
	return func(c *config) error {
		c.logWindow = d
		return nil
	}
}

// WithClock replaces time.Now, for cache and TTL tests.
func WithClock(now func() time.Time) Option {
	return func(c *config) error {
		c.now = now
		return nil
	}
}

// Server is the DNS allowlist proxy. It is safe for concurrent use and can
// serve any number of sockets at once.
type Server struct {
	sessions Sessions
	cfg      config
	chain    handler
	cache    *cache        // nil when disabled
	pool     *upstreamPool // nil when exchange is replaced in tests
	logs     *limiter
	// sessionLogs bounds log lines per session, whatever the names.
	sessionLogs *lineBudget
	stats       counters

	done    chan struct{}  // closed by Shutdown
	running sync.WaitGroup // ServePacketConn and ServeListener calls

	mu sync.Mutex
	// +checklocks:mu
	closed bool
}

// New returns a Server answering for sessions. At least one upstream is
// required. Errors are of class errdefs.ErrInvalidArgument.
func New(sessions Sessions, opts ...Option) (*Server, error) {
	if sessions == nil {
		return nil, fmt.Errorf("dnsproxy: nil sessions: %w", errdefs.ErrInvalidArgument)
	}
	cfg := config{
		ttlFloor:        DefaultTTLFloor,
		ttlCap:          DefaultTTLCap,
		cacheSize:       DefaultCacheSize,
		queryTimeout:    DefaultQueryTimeout,
		upstreamTimeout: DefaultUpstreamTimeout,
		logWindow:       DefaultLogWindow,
		dial:            (&net.Dialer{}).DialContext,
		now:             time.Now,
	}
	for _, o := range opts {
		if err := o(&cfg); err != nil {
			return nil, fmt.Errorf("dnsproxy: %w", err)
		}
	}
	if len(cfg.upstreams) == 0 {
		return nil, fmt.Errorf("dnsproxy: no upstream resolvers: %w", errdefs.ErrInvalidArgument)
	}
	s := &Server{
		sessions:    sessions,
		cfg:         cfg,
		logs:        newLimiter(cfg.logWindow),
		sessionLogs: newLineBudget(cfg.logWindow, maxSessionLogLines),
		done:        make(chan struct{}),
	}
	if cfg.cacheSize > 0 {
		s.cache = newCache(cfg.cacheSize)
	}
	exchange := cfg.exchange
	if exchange == nil {
		s.pool = newUpstreamPool(cfg.dial, cfg.upstreams)
		exchange = s.pool.exchange
	}
	var next handler = &forwardHandler{s: s, exchange: exchange}
	if s.cache != nil {
		next = &cacheHandler{s: s, next: next}
	}
	next = &answerHandler{s: s, next: next}
	next = &typeHandler{s: s, next: next}
	next = &allowHandler{s: s, next: next}
	next = &validateHandler{s: s, next: next}
	s.chain = &sessionHandler{s: s, next: next}
	return s, nil
}

// ServePacketConn answers DNS over UDP on pc until ctx is done or Shutdown
// is called, then closes pc. The socket may belong to another network
// namespace; on a wildcard address, each answer leaves from the address its
// query was sent to. Queries are served by a pool of at most maxUDPWorkers
// worker goroutines, never by a goroutine per query; a query that finds
// every worker busy and the pool full is dropped. ctx also carries the
// logger.
func (s *Server) ServePacketConn(ctx context.Context, pc net.PacketConn) error {
	if pc == nil {
		return fmt.Errorf("dnsproxy: nil packet conn: %w", errdefs.ErrInvalidArgument)
	}
	if err := s.begin(); err != nil {
		return err
	}
	defer s.running.Done()
	return s.serveUDP(ctx, pc)
}

// ServeListener answers DNS over TCP on l until ctx is done or Shutdown is
// called, then closes l. It keeps at most maxTCPConns connections open, at
// most maxTCPConnsPerClient from one address, and closes others at once.
func (s *Server) ServeListener(ctx context.Context, l net.Listener) error {
	if l == nil {
		return fmt.Errorf("dnsproxy: nil listener: %w", errdefs.ErrInvalidArgument)
	}
	return s.run(ctx, &dns.Server{Listener: newConnLimitListener(l, s)})
}

// run serves a TCP listener with miekg/dns.
func (s *Server) run(ctx context.Context, srv *dns.Server) error {
	srv.Handler = dns.HandlerFunc(func(w dns.ResponseWriter, r *dns.Msg) { s.serve(ctx, w, r) })
	srv.MsgAcceptFunc = func(dh dns.Header) dns.MsgAcceptAction {
		// Drop responses (answering them could start a loop); let the
		// validate handler judge everything else, so that it is audited.
		if dh.Bits&(1<<15) != 0 { // QR
			s.stats.malformed.Add(1)
			return dns.MsgIgnore
		}
		return dns.MsgAccept
	}
	srv.MsgInvalidFunc = func([]byte, error) { s.stats.malformed.Add(1) }
	started := make(chan struct{})
	srv.NotifyStartedFunc = func() { close(started) }

	if err := s.begin(); err != nil {
		return err
	}
	defer s.running.Done()

	errc := make(chan error, 1)
	go func() { errc <- srv.ActivateAndServe() }()
	select {
	case err := <-errc:
		return err
	case <-started:
	}
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	case <-s.done:
	}
	// In-flight queries finish within their own timeout.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.queryTimeout)
	defer cancel()
	err := srv.ShutdownContext(sctx)
	<-errc
	return err
}

// begin counts a serving call in s.running, unless the Server is shut
// down.
func (s *Server) begin() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return fmt.Errorf("dnsproxy: server is shut down: %w", errdefs.ErrFailedPrecondition)
	}
	s.running.Add(1)
	return nil
}

// Shutdown stops every socket the Server serves and waits, until ctx is
// done, for them to close and for queries in flight to finish. The Server
// cannot serve again afterwards.
func (s *Server) Shutdown(ctx context.Context) error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.mu.Unlock()
	stopped := make(chan struct{})
	go func() {
		s.running.Wait()
		close(stopped)
	}()
	select {
	case <-stopped:
		if s.pool != nil {
			s.pool.close()
		}
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// serve runs the handler chain for one query and writes the error response
// if no handler did.
func (s *Server) serve(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) {
	if r.Response {
		s.stats.malformed.Add(1)
		return
	}
	s.stats.queries.Add(1)
	q := new(query)
	req := &q.req
	req.init(w)
	qctx := &q.ctx
	qctx.init(ctx, time.Now().Add(s.cfg.queryTimeout), req)
	defer qctx.release()
	ctx = qctx
	rc, err := s.chain.ServeDNS(ctx, w, r)
	if clientWrote(rc) {
		return
	}
	if rc == dns.RcodeServerFailure {
		s.stats.servfail.Add(1)
	}
	if werr := w.WriteMsg(newReply(r, rc)); werr != nil {
		log.G(ctx).Debug("dns: write error response", "client", req.client, "error", werr)
	}
	if err != nil {
		log.G(ctx).Debug("dns: query failed", "client", req.client, "rcode", dns.RcodeToString[rc], "error", err)
	}
}
