// Package approvals holds requests for a decision. The L7 gateway's
// HTTP rules with "ask" call Store.Ask, which blocks (the request's
// connection held open) until one of these decides it, whichever comes
// first:
//   - a person, through the API (Store.Decide: POST /v1/approvals/{id},
//     airlock approve|deny);
//   - the approver hook, if one is configured (--approver exec:CMD, see
//     ExecApprover); its failure or silence leaves the request to a
//     person;
//   - the request's timeout (denied, by "timeout");
//   - its context (the client went away: denied, by "cancelled");
//   - the end of its session (Store.CancelSession: denied, by "session
//     ended"), or of the daemon (Store.Close).
//
// Exactly one of them decides; the others find the request decided. The
// store is bounded: a session may hold DefaultMaxPerSession requests and
// the daemon DefaultMaxTotal; an ask beyond either is denied at once (by
// "limit") and never held. Every hold and decision is audited through the
// request's Audit function (layer "approval"), and published to followers
// (Store.Follow), each of which buffers a bounded number of events: a slow
// follower loses events, is told how many, and never slows an Ask.
//
// A held request carries its query, its header fields and the start of
// its body (Request.Query, Headers: a secret's placeholder, never its
// value, in a header bound to one; Body: at most MaxBody, 64 KiB, as the
// sandbox sent it) so that whoever decides can see what it would do. The
// headers, like the body, are dropped once it is decided. While it is pending the body is visible to whoever
// can read airlockd's API socket (the list, the followers) and to the
// approver hook (on its stdin); it is never audited or logged (the audit
// records its length, body_bytes), and a decided request no longer
// carries it. Secrets the L7 gateway injects go into headers, never into
// the body, so no secret value is in it (a placeholder the sandbox put
// there may be: it is worthless, and the gateway cuts the request off
// where it meets it on the way out).
//
// A decision is taken as given: the store does not know who may approve
// what. Whoever can use airlockd's API socket can approve any session's
// request.
package approvals

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// Bounds and defaults.
const (
	// DefaultMaxPerSession bounds the requests one session holds at once.
	DefaultMaxPerSession = 64
	// DefaultMaxTotal bounds the requests held at once in all sessions.
	DefaultMaxTotal = 1024
	// DefaultTimeout is a request's timeout when it sets none.
	DefaultTimeout = time.Duration(policies.DefaultApprovalTimeout)
	// MaxReason bounds a decision's reason, in bytes.
	MaxReason = 1024
	// MaxBody bounds the bytes of a held request's body the store keeps
	// (the L7 gateway reads no more: l7.MaxHeldBody).
	MaxBody = 64 << 10
	// MaxQuery bounds the bytes of a held request's query the store
	// keeps, MaxHeaders its header fields (the L7 gateway sends no more:
	// l7.MaxHeldQuery, l7.MaxHeldHeaders).
	MaxQuery   = 8 << 10
	MaxHeaders = 100
	// followBuffer bounds the events a follower has not read yet.
	followBuffer = 256
	// keepDecided is how many decided requests are remembered, so that a
	// late decision gets "already decided" rather than "not found".
	keepDecided = 1024
	// maxApproverRuns bounds the approver hook's runs at once; holds
	// beyond wait for a slot (a person may decide them meanwhile).
	maxApproverRuns = 16
)

// Who decided, besides a person.
const (
	ByTimeout      = "timeout"
	ByCancelled    = "cancelled"
	BySessionEnded = "session ended"
	ByLimit        = "limit"
	ByApprover     = "approver"
	ByDaemon       = "daemon stopping"
)

// Audit actions of layer "approval".
const (
	ActionHeld    = "held"
	ActionAllowed = "allowed"
	ActionDenied  = "denied"
)

// Request is a request to hold for a decision.
type Request struct {
	Session string
	Method  string
	Host    string
	// Path is the request's path, its query already redacted.
	Path string
	// Rule is the text of the rule that asked, for people and the audit.
	Rule string
	// Refs are the refs a git push would update (may be empty).
	Refs []string
	// Body is the start of the request's body as its client sent it, for
	// whoever decides (the API, followers, the approver hook); the store
	// keeps at most MaxBody bytes of it (BodyTruncated set if it cut
	// more), and only until the request is decided. It is never audited
	// nor logged: the audit records its length only. ContentType and
	// ContentEncoding say what it is.
	Body                         []byte
	BodyTruncated                bool
	ContentType, ContentEncoding string
	// Query is the request's raw query, kept to MaxQuery bytes
	// (QueryTruncated set if it cut more); it stays once the request is
	// decided, and is neither audited nor logged.
	Query          string
	QueryTruncated bool
	// Headers are the request's header fields as its client sent them
	// (a secret's placeholder, never its value, in a field bound to one),
	// kept to MaxHeaders fields (HeadersTruncated set if it cut more),
	// and like Body only until the request is decided.
	Headers          []api.HeaderField
	HeadersTruncated bool
	// Timeout bounds the wait; zero or less is DefaultTimeout.
	Timeout time.Duration
	// Revised, when it delivers, decides the request in place of a
	// person: a revision of the session's policy whose rules no longer
	// ask about it allows or denies it outright.
	Revised <-chan Revision
	// Audit receives the hold and its decision as events of layer
	// "approval"; nil records nothing. It is called from the goroutine
	// that decides, which may be another request's.
	Audit func(ctx context.Context, ev api.AuditEvent)
}

// Revision decides a held request in place of a person
// (Request.Revised).
type Revision struct {
	Allow      bool
	By, Reason string
}

// Decision is how a request was decided: what the gateway acts on. Its
// JSON encoding is fit for the body of a refusal.
type Decision struct {
	// ID is the hold's id; empty when the ask was refused without a hold
	// (By is ByLimit or ByDaemon).
	ID    string `json:"id,omitempty"`
	Allow bool   `json:"allow"`
	// Rule is the request's Rule.
	Rule string `json:"rule"`
	// By is who decided: a person as the API saw them, or one of the By
	// constants.
	By     string `json:"by"`
	Reason string `json:"reason,omitempty"`
	// Waited is how long the request was held.
	Waited time.Duration `json:"-"`
}

// Store holds requests until they are decided. It is safe for concurrent
// use.
type Store struct {
	maxSession, maxTotal int
	approver             Approver
	approverSlots        chan struct{}
	// wg counts the approver's runs; Close waits for them.
	wg sync.WaitGroup

	mu sync.Mutex
	// pending are the held requests by id; perSession counts them.
	pending    map[string]*entry // +checklocks:mu
	perSession map[string]int    // +checklocks:mu
	// decided remembers the last keepDecided decided requests; order is
	// a ring of their ids, next its next slot.
	decided   map[string]*entry      // +checklocks:mu
	order     []string               // +checklocks:mu
	next      int                    // +checklocks:mu
	followers map[*Follower]struct{} // +checklocks:mu
	closed    bool                   // +checklocks:mu
}

// entry is one held request.
type entry struct {
	// a is guarded by Store.mu until the request is decided, and
	// read-only after.
	a     api.Approval
	audit func(ctx context.Context, ev api.AuditEvent)
	// bodyBytes and bodyTruncated describe a.Body for the audit (a.Body
	// itself is dropped once the request is decided).
	bodyBytes     int
	bodyTruncated bool
	// logged is closed once the hold is audited: a decision is audited
	// after it.
	logged chan struct{}
	// done is closed once the decision is audited and published;
	// decision is set before.
	done     chan struct{}
	decision Decision
	// stopApprover ends the approver's run for it; nil without one.
	stopApprover context.CancelFunc
}

// Option configures New.
type Option func(*Store)

// WithLimits bounds the requests held at once per session and in all
// (zero or less keeps a default).
func WithLimits(perSession, total int) Option {
	return func(s *Store) {
		if perSession > 0 {
			s.maxSession = perSession
		}
		if total > 0 {
			s.maxTotal = total
		}
	}
}

// WithApprover asks a for a decision on every hold (nil: none).
func WithApprover(a Approver) Option { return func(s *Store) { s.approver = a } }

// New returns an empty store.
func New(opts ...Option) *Store {
	s := &Store{
		maxSession: DefaultMaxPerSession, maxTotal: DefaultMaxTotal,
		approverSlots: make(chan struct{}, maxApproverRuns),
		pending:       map[string]*entry{}, perSession: map[string]int{},
		decided: map[string]*entry{}, order: make([]string, keepDecided),
		followers: map[*Follower]struct{}{},
	}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Ask holds r until it is decided (see the package comment) and returns
// the decision. Over the store's bounds, or once the store is closed, it
// denies at once without holding.
func (s *Store) Ask(ctx context.Context, r Request) Decision {
	timeout := r.Timeout
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	now := time.Now().UTC()
	e := &entry{
		a: api.Approval{
			Session: r.Session, Method: r.Method, Host: r.Host, Path: r.Path, Rule: r.Rule,
			Refs: slices.Clone(r.Refs), Created: now, Deadline: now.Add(timeout), State: api.ApprovalPending,
			Body: r.Body, BodyTruncated: r.BodyTruncated, ContentType: r.ContentType, ContentEncoding: r.ContentEncoding,
			Query: r.Query, QueryTruncated: r.QueryTruncated,
			Headers: slices.Clone(r.Headers), HeadersTruncated: r.HeadersTruncated,
		},
		audit:  r.Audit,
		logged: make(chan struct{}),
		done:   make(chan struct{}),
	}
	if len(e.a.Body) == 0 {
		e.a.Body = nil
	}
	if len(e.a.Body) > MaxBody {
		e.a.Body, e.a.BodyTruncated = e.a.Body[:MaxBody:MaxBody], true
	}
	e.bodyBytes, e.bodyTruncated = len(e.a.Body), e.a.BodyTruncated
	if len(e.a.Query) > MaxQuery {
		e.a.Query, e.a.QueryTruncated = e.a.Query[:MaxQuery], true
	}
	if len(e.a.Headers) == 0 {
		e.a.Headers = nil
	}
	if len(e.a.Headers) > MaxHeaders {
		e.a.Headers, e.a.HeadersTruncated = e.a.Headers[:MaxHeaders:MaxHeaders], true
	}
	s.mu.Lock()
	if by, reason := s.refuseLocked(r.Session); by != "" {
		s.mu.Unlock()
		d := Decision{Rule: r.Rule, By: by, Reason: reason}
		e.emit(ctx, ActionDenied, d)
		return d
	}
	e.a.ID = s.newIDLocked()
	s.pending[e.a.ID] = e
	s.perSession[r.Session]++
	s.publishLocked(api.ApprovalHeld, e)
	var actx context.Context
	if s.approver != nil {
		actx, e.stopApprover = context.WithDeadline(context.WithoutCancel(ctx), e.a.Deadline)
		s.wg.Add(1)
	}
	held := e.a
	s.mu.Unlock()

	e.emit(ctx, ActionHeld, Decision{ID: held.ID, Rule: r.Rule})
	close(e.logged)
	log.G(ctx).Info("request held for approval", "approval", held.ID, "method", r.Method, "host", r.Host,
		"path", r.Path, "rule", r.Rule, "timeout", timeout, "body_bytes", len(held.Body))
	if actx != nil {
		go s.runApprover(actx, e, held)
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	select {
	case <-e.done:
	case <-timer.C:
		_, _ = s.settle(ctx, e, false, fmt.Sprintf("no decision within %s", timeout), ByTimeout)
	case v := <-r.Revised:
		_, _ = s.settle(ctx, e, v.Allow, v.Reason, v.By)
	case <-ctx.Done():
		_, _ = s.settle(ctx, e, false, "the request went away before a decision", ByCancelled)
	}
	<-e.done
	return e.decision
}

// refuseLocked returns who refuses a new hold in session and why, or
// empty strings when it may be held.
func (s *Store) refuseLocked(session string) (by, reason string) {
	switch {
	case s.closed:
		return ByDaemon, "airlockd is stopping; no request is held"
	case s.perSession[session] >= s.maxSession:
		return ByLimit, fmt.Sprintf("session %s already holds %d requests for approval, the most it may; refused without asking", session, s.maxSession)
	case len(s.pending) >= s.maxTotal:
		return ByLimit, fmt.Sprintf("%d requests are held for approval, the most airlockd holds; refused without asking", s.maxTotal)
	}
	return "", ""
}

// newIDLocked returns a fresh id: 16 hex digits from crypto/rand.
func (s *Store) newIDLocked() string {
	for {
		var b [8]byte
		_, _ = rand.Read(b[:])
		id := hex.EncodeToString(b[:])
		if s.pending[id] == nil && s.decided[id] == nil {
			return id
		}
	}
}

// Decide allows or denies the held request id, by whom (a person, as the
// API saw them; or ByApprover), and returns it decided. An unknown id is
// an errdefs.ErrNotFound error; one decided before (by anyone) is
// errdefs.ErrFailedPrecondition; a reason longer than MaxReason or with
// control characters is errdefs.ErrInvalidArgument.
func (s *Store) Decide(ctx context.Context, id string, allow bool, reason, by string) (api.Approval, error) {
	if err := checkReason(reason); err != nil {
		return api.Approval{}, err
	}
	if by == "" {
		return api.Approval{}, fmt.Errorf("a decision needs who took it: %w", errdefs.ErrInvalidArgument)
	}
	s.mu.Lock()
	e := s.pending[id]
	s.mu.Unlock()
	if e == nil {
		return api.Approval{}, s.notPending(id)
	}
	return s.settle(ctx, e, allow, reason, by)
}

// notPending is the error for a decision on id, which is not pending.
func (s *Store) notPending(id string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.decided[id]; e != nil {
		return fmt.Errorf("approval %s was already %s by %s: %w", id, e.a.State, e.a.By, errdefs.ErrFailedPrecondition)
	}
	return fmt.Errorf("no approval %q is pending: %w", id, errdefs.ErrNotFound)
}

// settle decides e, if no one did before, then audits and publishes the
// decision and wakes its Ask.
func (s *Store) settle(ctx context.Context, e *entry, allow bool, reason, by string) (api.Approval, error) {
	s.mu.Lock()
	if e.a.State != api.ApprovalPending {
		s.mu.Unlock()
		return api.Approval{}, s.notPending(e.a.ID)
	}
	now := time.Now().UTC()
	e.a.State, e.a.Decided, e.a.By, e.a.Reason = api.ApprovalDenied, &now, by, reason
	// Whoever decides saw the body and the headers while the request was
	// pending; the decided requests remembered do not keep them (the
	// query stays, with the path).
	e.a.Body, e.a.Headers = nil, nil
	if allow {
		e.a.State = api.ApprovalAllowed
	}
	delete(s.pending, e.a.ID)
	if s.perSession[e.a.Session]--; s.perSession[e.a.Session] <= 0 {
		delete(s.perSession, e.a.Session)
	}
	if old := s.order[s.next]; old != "" {
		delete(s.decided, old)
	}
	s.order[s.next], s.next = e.a.ID, (s.next+1)%len(s.order)
	s.decided[e.a.ID] = e
	s.publishLocked(api.ApprovalDecided, e)
	a := e.a
	s.mu.Unlock()

	if e.stopApprover != nil {
		e.stopApprover()
	}
	d := Decision{ID: a.ID, Allow: allow, Rule: a.Rule, By: by, Reason: reason, Waited: now.Sub(a.Created)}
	<-e.logged
	action := ActionDenied
	if allow {
		action = ActionAllowed
	}
	e.emit(ctx, action, d)
	log.G(ctx).Info("approval decided", "approval", a.ID, "session", a.Session, "action", action, "by", by,
		"reason", reason, "waited", d.Waited)
	e.decision = d
	close(e.done)
	return a, nil
}

// emit audits e's hold (ActionHeld) or decision.
func (e *entry) emit(ctx context.Context, action string, d Decision) {
	if e.audit == nil {
		return
	}
	fields := map[string]any{"method": e.a.Method, "rule": e.a.Rule}
	if d.ID != "" {
		fields["id"] = d.ID
	}
	if len(e.a.Refs) > 0 {
		fields["refs"] = e.a.Refs
	}
	if action == ActionHeld {
		fields["deadline"] = e.a.Deadline
		// The body's length, never the body: the audit is kept long.
		if e.bodyBytes > 0 {
			fields["body_bytes"] = e.bodyBytes
			if e.bodyTruncated {
				fields["body_truncated"] = true
			}
		}
	} else {
		fields["by"] = d.By
		fields["waited_ms"] = d.Waited.Milliseconds()
	}
	e.audit(context.WithoutCancel(ctx), api.AuditEvent{
		Session: e.a.Session, Layer: "approval", Action: action,
		Subject: e.a.Host + e.a.Path, Reason: d.Reason, Fields: fields,
	})
}

// Pending counts the requests held for a decision, in all sessions.
func (s *Store) Pending() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.pending)
}

// List returns the pending requests of session (all sessions when
// empty), oldest first.
func (s *Store) List(session string) []api.Approval {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.listLocked(session)
}

func (s *Store) listLocked(session string) []api.Approval {
	out := []api.Approval{}
	for _, e := range s.pending {
		if session == "" || e.a.Session == session {
			out = append(out, e.a)
		}
	}
	slices.SortFunc(out, func(a, b api.Approval) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out
}

// CancelSession denies every request session holds (by BySessionEnded)
// and returns how many; each decision is audited before it returns.
func (s *Store) CancelSession(ctx context.Context, session string) int {
	return s.denyAll(ctx, session, "the session ended before a decision", BySessionEnded)
}

// Close denies every held request (by ByDaemon), refuses new ones, ends
// the followers' streams and waits for the approver's runs to end.
func (s *Store) Close(ctx context.Context) {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.denyAll(ctx, "", "airlockd is stopping", ByDaemon)
	s.mu.Lock()
	fs := make([]*Follower, 0, len(s.followers))
	for f := range s.followers {
		fs = append(fs, f)
	}
	s.mu.Unlock()
	for _, f := range fs {
		f.Close()
	}
	s.wg.Wait()
}

func (s *Store) denyAll(ctx context.Context, session, reason, by string) int {
	s.mu.Lock()
	var es []*entry
	for _, e := range s.pending {
		if session == "" || e.a.Session == session {
			es = append(es, e)
		}
	}
	s.mu.Unlock()
	n := 0
	for _, e := range es {
		if _, err := s.settle(ctx, e, false, reason, by); err == nil {
			n++
		}
	}
	return n
}

// checkReason refuses a reason too long for the audit, or with control
// characters (it is shown in a terminal and in a refusal's body).
func checkReason(r string) error {
	if len(r) > MaxReason {
		return fmt.Errorf("reason is %d bytes, more than %d: %w", len(r), MaxReason, errdefs.ErrInvalidArgument)
	}
	if !utf8.ValidString(r) {
		return fmt.Errorf("reason is not valid UTF-8: %w", errdefs.ErrInvalidArgument)
	}
	if i := strings.IndexFunc(r, unicode.IsControl); i >= 0 {
		return fmt.Errorf("reason has a control character at byte %d: %w", i, errdefs.ErrInvalidArgument)
	}
	return nil
}

// cleanReason makes a reason from an approver fit: control characters
// removed, at most MaxReason bytes.
func cleanReason(r string) string {
	r = strings.ToValidUTF8(r, "")
	r = strings.Map(func(c rune) rune {
		if unicode.IsControl(c) {
			return ' '
		}
		return c
	}, r)
	r = strings.TrimSpace(r)
	if len(r) > MaxReason {
		r = strings.ToValidUTF8(r[:MaxReason-len("…")], "") + "…"
	}
	return r
}
