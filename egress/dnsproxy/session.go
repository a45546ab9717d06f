package dnsproxy

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
)

// Pinner admits addresses into one session's egress allow set (an nftables
// set with per-element timeouts). The proxy calls Pin before it returns an
// answer holding those addresses; when Pin fails the answer is withheld and
// the client gets SERVFAIL. ports is empty for "every port". Pin must not
// modify or keep addrs and ports beyond the call, and should return
// promptly: the query waits for it, within ctx's deadline.
type Pinner interface {
	Pin(ctx context.Context, addrs []netip.Addr, ports []uint16, ttl time.Duration) error
}

// NamedPinner is a Pinner that is also told which name the addresses
// were asked for (before any CNAME): the proxy calls PinName instead of
// Pin.
type NamedPinner interface {
	Pinner
	PinName(ctx context.Context, name allowlist.FQDN, addrs []netip.Addr, ports []uint16, ttl time.Duration) error
}

// PinnerFunc adapts a function to a Pinner.
type PinnerFunc func(ctx context.Context, addrs []netip.Addr, ports []uint16, ttl time.Duration) error

// Pin calls f.
func (f PinnerFunc) Pin(ctx context.Context, addrs []netip.Addr, ports []uint16, ttl time.Duration) error {
	return f(ctx, addrs, ports, ttl)
}

// SessionPolicy is what the proxy needs to know about one sandbox session.
// It is read concurrently and must not be modified once handed out by
// Sessions; replace it instead.
type SessionPolicy struct {
	// ID names the session in logs and audit events.
	ID string
	// Allowlist decides which names may be resolved. Nil refuses every name.
	Allowlist *allowlist.List
	// AllowPrivate are private ranges (allowlist.PrivateRanges) whose
	// addresses this session may pin from DNS answers, besides the
	// server's WithAllowPrivate ranges. They never open the ranges no
	// session may reach.
	AllowPrivate []netip.Prefix
	// IPv6 lets AAAA queries through. Without it, AAAA queries for allowed
	// names get an empty NOERROR answer and are not forwarded.
	IPv6 bool
	// Pinner receives the addresses of every answer before it is returned.
	Pinner Pinner
	// Names, if not nil, records for each query which addresses were
	// pinned for the queried name, once Pin succeeded: the L7 gateway
	// binds SNI and Host to them.
	Names *Names
	// Audit receives one Event per query. It is called on the query path
	// and must not block. Nil drops the events.
	Audit func(Event)
	// Limit bounds the session's query rate and concurrency; nil: no
	// limit. Give every address of a session the same Limiter.
	Limit *Limiter
}

// Sessions maps a client's source address to its session.
type Sessions interface {
	Lookup(addr netip.Addr) (*SessionPolicy, bool)
}

// SessionMap is a Sessions backed by a map, safe for concurrent use.
// The zero value is empty and ready.
type SessionMap struct {
	mu sync.RWMutex
	// +checklocks:mu
	m map[netip.Addr]*SessionPolicy
}

// Set maps addr (unmapped if IPv4-in-IPv6) to p, replacing any previous
// policy.
func (s *SessionMap) Set(addr netip.Addr, p *SessionPolicy) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[netip.Addr]*SessionPolicy{}
	}
	s.m[addr.Unmap()] = p
}

// Delete removes addr.
func (s *SessionMap) Delete(addr netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, addr.Unmap())
}

// Lookup implements Sessions.
func (s *SessionMap) Lookup(addr netip.Addr) (*SessionPolicy, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	p, ok := s.m[addr.Unmap()]
	return p, ok
}

// Action is the outcome of a query, as audited.
type Action string

// Actions.
const (
	// ActionAllowed: the query was answered from upstream data (possibly
	// cached); any addresses in the answer were pinned first.
	ActionAllowed Action = "allowed"
	// ActionRefused: policy refused the query, or answered it empty
	// without forwarding (AAAA without IPv6, HTTPS/SVCB). Nothing was
	// forwarded and nothing pinned.
	ActionRefused Action = "refused"
	// ActionFailed: the query was allowed but could not be answered
	// (upstream failure, pin failure, malformed upstream answer).
	ActionFailed Action = "failed"
)

// Event is the audit record of one query.
type Event struct {
	Time    time.Time    `json:"time"`
	Session string       `json:"session,omitempty"`
	Client  netip.Addr   `json:"client"`
	Proto   string       `json:"proto"`          // "udp" or "tcp"
	Name    string       `json:"name,omitempty"` // normalised; as received (escaped) if malformed
	Type    string       `json:"type,omitempty"`
	Action  Action       `json:"action"`
	Rcode   string       `json:"rcode"`
	Reason  string       `json:"reason,omitempty"`
	Rule    string       `json:"rule,omitempty"`   // allowlist entry that decided
	CNAMEs  []string     `json:"cnames,omitempty"` // chain targets, in order
	Answers []netip.Addr `json:"answers,omitempty"`
	Dropped []Dropped    `json:"dropped,omitempty"` // answer addresses not pinned, and why
	Ports   []uint16     `json:"ports,omitempty"`   // pinned ports; empty = all
	PinTTL  uint32       `json:"pin_ttl,omitempty"` // seconds
	Cached  bool         `json:"cached,omitempty"`
}
