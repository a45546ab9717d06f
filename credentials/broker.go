// Package credentials owns a session's credentials from minting to
// revocation. The broker (Broker) mints the credentials a manifest
// declares, through the built-in issuer (airlock tokens, package token) or
// an operator's ExecIssuer; it keeps track of them, re-mints them before
// they expire (Refresher), revokes them when the session stops, and serves
// the endpoints services verify against: the JWKS, token introspection and
// rejection reports (Handler). Every mint, refresh, revocation and reported
// rejection is an audit Event.
//
// Delivery is the daemon's front door (Open): it brings the credentials
// into a sandbox. Prepare mounts a small read-only tmpfs for the
// file-delivered ones, and Plan.SpecOpt binds its directories into the
// container; Plan.Mint mints the tokens when a session takes the sandbox
// and writes the files (WriteAtomic); env-delivered ones reach the command
// through the launch message (Plan.StartEnv) and exec'd processes through
// Plan.Env, never through the container's spec; Plan.StartRefreshers keeps
// the files fresh and Delivery.Revoke ends it all. It needs of a broker
// only the small Minter interface.
//
// Services check tokens with package verify; package scope defines what a
// token's scopes allow.
//
// A credential's secret never reaches a log, an audit event or an error
// message: it is a token.Secret, which prints as [REDACTED].
//
// Revocation is deny-by-default: the introspection endpoint reports a token
// active only while the broker holds a record of it for a live session. A
// session's tokens become inactive the moment Revoke returns.
package credentials

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/credentials/clock"
	"github.com/airlock-sandbox/airlock/credentials/token"
	"github.com/airlock-sandbox/airlock/credentials/verify"
	"github.com/airlock-sandbox/airlock/internal/atomicfile"
	"github.com/airlock-sandbox/airlock/internal/log"
)

const (
	// BuiltinIssuer is the issuer name of airlock's own tokens.
	BuiltinIssuer = "airlock"
	// DefaultTTL is the lifetime of a credential whose request has none.
	DefaultTTL = 15 * time.Minute
	// recordMargin is how long a token record outlives the token, to cover
	// verifiers' clock leeway.
	recordMargin = time.Minute
)

// Request asks for one credential of a session.
type Request struct {
	// Name identifies the credential within its session and names its file
	// (letters, digits, '.', '_', '-'; at most 64 bytes).
	Name string `json:"name"`
	// Issuer is BuiltinIssuer (also when empty) or a configured issuer.
	Issuer   string   `json:"issuer"`
	Audience string   `json:"audience"`
	Scopes   []string `json:"scopes"`
	// TTL is the lifetime; zero means DefaultTTL.
	TTL time.Duration `json:"ttl"`
	// Generation counts the revisions that re-minted this credential
	// (set by Broker.Revise): a refresh issued under an earlier one is
	// refused, also when a revision changed only how the token is
	// delivered.
	Generation uint64 `json:"generation,omitempty"`
	// Delivery is how the token reaches the session ("file:PATH",
	// "env:VAR", "gateway"): the broker keeps it with the grant, and
	// uses it for nothing else, so that a restarted daemon can tell a
	// revision that moved the credential (Plan.Reconcile).
	Delivery string `json:"delivery,omitempty"`
}

// Broker mints, tracks and revokes the credentials of sessions. It is safe
// for concurrent use.
type Broker struct {
	clock     clock.Clock
	issuers   map[string]Issuer
	ring      *token.Keyring
	iss       string
	verifier  *verify.Verifier // introspection; nil without a keyring
	audit     AuditFunc
	statePath string

	mu sync.Mutex
	// grants are the requests of live sessions: session -> name -> request.
	// +checklocks:mu
	grants map[string]map[string]Request
	// tokens are the airlock tokens minted and not yet expired, by jti.
	// +checklocks:mu
	tokens map[string]*record
}

// record is what the broker remembers of an airlock token: never the token.
type record struct {
	Session  string    `json:"session"`
	Name     string    `json:"name"`
	Audience string    `json:"audience"`
	Scopes   []string  `json:"scopes"`
	Expiry   time.Time `json:"expiry"`
	Revoked  bool      `json:"revoked,omitempty"`
}

// Option configures New.
type Option func(*Broker) error

// WithKeyring enables the built-in issuer: tokens signed with ring's active
// key, with "iss" set to iss. It also enables the JWKS and introspection
// endpoints.
func WithKeyring(ring *token.Keyring, iss string) Option {
	return func(b *Broker) error {
		if ring == nil || iss == "" {
			return errors.New("WithKeyring: keyring and issuer are required")
		}
		b.ring, b.iss = ring, iss
		return nil
	}
}

// WithIssuer adds an issuer under name, e.g. an ExecIssuer.
func WithIssuer(name string, is Issuer) Option {
	return func(b *Broker) error {
		if name == "" || is == nil {
			return errors.New("WithIssuer: name and issuer are required")
		}
		if name == BuiltinIssuer {
			return fmt.Errorf("WithIssuer: %q is the built-in issuer; use WithKeyring", name)
		}
		b.issuers[name] = is
		return nil
	}
}

// WithClock sets the broker's clock (default clock.Real); the built-in
// issuer uses it too.
func WithClock(c clock.Clock) Option {
	return func(b *Broker) error { b.clock = c; return nil }
}

// WithAudit sends audit events to f.
func WithAudit(f AuditFunc) Option {
	return func(b *Broker) error { b.audit = f; return nil }
}

// WithStateFile keeps the broker's records (requests and token ids, never
// tokens) in path (mode 0600), so that a restarted daemon still knows which
// tokens are live and which are revoked.
func WithStateFile(path string) Option {
	return func(b *Broker) error { b.statePath = path; return nil }
}

// New returns a Broker. With a state file, it loads the records left by a
// previous run.
func New(opts ...Option) (*Broker, error) {
	b := &Broker{
		clock:   clock.Real,
		issuers: map[string]Issuer{},
		grants:  map[string]map[string]Request{},
		tokens:  map[string]*record{},
	}
	for _, o := range opts {
		if err := o(b); err != nil {
			return nil, err
		}
	}
	if b.ring != nil {
		b.issuers[BuiltinIssuer] = NewBuiltinIssuer(token.NewMinter(b.iss, b.ring, token.WithMinterClock(b.clock)))
		v, err := verify.New(b.ring, revocationFunc(b.checkRevoked), verify.WithClock(b.clock), verify.WithLeeway(0))
		if err != nil {
			return nil, err
		}
		b.verifier = v
	}
	if b.statePath != "" {
		if err := b.load(); err != nil {
			return nil, err
		}
	}
	return b, nil
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// normalize fills defaults and checks r.
func (b *Broker) normalize(r Request) (Request, error) {
	if !nameRE.MatchString(r.Name) {
		return r, fmt.Errorf("credential name %q: use letters, digits, '.', '_' and '-', at most 64 bytes: %w", r.Name, errdefs.ErrInvalidArgument)
	}
	if r.Issuer == "" {
		r.Issuer = BuiltinIssuer
	}
	if _, ok := b.issuers[r.Issuer]; !ok {
		return r, fmt.Errorf("credential %q: issuer %q is not configured (configured: %v): %w", r.Name, r.Issuer, b.issuerNames(), errdefs.ErrInvalidArgument)
	}
	if r.Audience == "" {
		return r, fmt.Errorf("credential %q: no audience: %w", r.Name, errdefs.ErrInvalidArgument)
	}
	if len(r.Scopes) == 0 {
		return r, fmt.Errorf("credential %q: no scopes (a credential without scopes allows nothing): %w", r.Name, errdefs.ErrInvalidArgument)
	}
	if r.TTL == 0 {
		r.TTL = DefaultTTL
	}
	if r.TTL < 0 {
		return r, fmt.Errorf("credential %q: negative ttl %s: %w", r.Name, r.TTL, errdefs.ErrInvalidArgument)
	}
	r.Scopes = slices.Clone(r.Scopes)
	return r, nil
}

func (b *Broker) issuerNames() []string {
	names := make([]string, 0, len(b.issuers))
	for n := range b.issuers {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// Mint issues the credentials of session, one per request, in order. If any
// fails, the ones already minted are revoked and the error names the
// failing credential and issuer; nothing is left granted.
func (b *Broker) Mint(ctx context.Context, session string, reqs []Request) (_ []*Credential, retErr error) {
	if session == "" {
		return nil, fmt.Errorf("mint credentials: empty session id: %w", errdefs.ErrInvalidArgument)
	}
	norm := make([]Request, len(reqs))
	seen := map[string]bool{}
	for i, r := range reqs {
		n, err := b.normalize(r)
		if err != nil {
			return nil, fmt.Errorf("session %s: %w", session, err)
		}
		if seen[n.Name] {
			return nil, fmt.Errorf("session %s: credential %q declared twice: %w", session, n.Name, errdefs.ErrInvalidArgument)
		}
		seen[n.Name] = true
		norm[i] = n
	}

	var minted []*Credential
	defer func() {
		if retErr != nil && len(minted) > 0 {
			b.revoke(ctx, session, minted, "session start failed")
		}
	}()
	for _, r := range norm {
		c, err := b.issue(ctx, session, r)
		if err != nil {
			return nil, fmt.Errorf("session %s: credential %q (issuer %q): %w", session, r.Name, r.Issuer, err)
		}
		if err := b.commit(session, r, c, true); err != nil {
			return nil, err
		}
		minted = append(minted, c)
		b.emit(ctx, EventMinted, session, c)
	}
	return minted, nil
}

// Refresh re-mints the credential name of session with its original
// request. The previous token stays valid until it expires.
func (b *Broker) Refresh(ctx context.Context, session, name string) (*Credential, error) {
	b.mu.Lock()
	r, ok := b.grants[session][name]
	b.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("session %s: credential %q: %w", session, name, errdefs.ErrNotFound)
	}
	c, err := b.issue(ctx, session, r)
	if err != nil {
		return nil, fmt.Errorf("session %s: refresh credential %q (issuer %q): %w", session, name, r.Issuer, err)
	}
	if err := b.commit(session, r, c, false); err != nil {
		return nil, err
	}
	b.emit(ctx, EventRefreshed, session, c)
	return c, nil
}

func (b *Broker) issue(ctx context.Context, session string, r Request) (*Credential, error) {
	is := b.issuers[r.Issuer]
	c, err := is.Issue(ctx, IssueRequest{
		Session:  session,
		Name:     r.Name,
		Audience: r.Audience,
		Scopes:   slices.Clone(r.Scopes),
		TTL:      r.TTL,
	})
	if err != nil {
		return nil, err
	}
	if c == nil || c.Token == "" {
		return nil, errors.New("issuer returned no credential")
	}
	now := b.clock.Now()
	if !c.Expiry.After(now) {
		return nil, fmt.Errorf("issuer returned a credential that expired at %s", c.Expiry.UTC().Format(time.RFC3339))
	}
	c.Name, c.Issuer = r.Name, r.Issuer
	if c.Audience == "" {
		c.Audience = r.Audience
	}
	if c.Scopes == nil {
		c.Scopes = slices.Clone(r.Scopes)
	}
	if c.IssuedAt.IsZero() {
		c.IssuedAt = now
	}
	return c, nil
}

// commit records c under session. fresh means a new grant (Mint), which
// must not exist yet; otherwise the grant must still exist (Refresh), or
// the session was revoked meanwhile and c is revoked at once.
func (b *Broker) commit(session string, r Request, c *Credential, fresh bool) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.grants[session]
	_, exists := g[r.Name]
	var err error
	switch {
	case fresh && exists:
		err = fmt.Errorf("session %s: credential %q already exists: %w", session, r.Name, errdefs.ErrAlreadyExists)
	case !fresh && !exists:
		err = fmt.Errorf("session %s: credential %q was revoked during refresh: %w", session, r.Name, errdefs.ErrNotFound)
	case !fresh && !sameRequest(g[r.Name], r):
		// A revision replaced the grant while this token was issued
		// under the old one: it is recorded revoked, and the refresher
		// of the old grant ends.
		err = fmt.Errorf("session %s: credential %q was revised during refresh: %w", session, r.Name, errdefs.ErrNotFound)
	}
	if c.Revocable {
		b.tokens[c.ID] = &record{
			Session: session, Name: c.Name, Audience: c.Audience,
			Scopes: slices.Clone(c.Scopes), Expiry: c.Expiry, Revoked: err != nil,
		}
	}
	if err != nil {
		return err
	}
	if g == nil {
		g = map[string]Request{}
		b.grants[session] = g
	}
	g[r.Name] = r
	if serr := b.saveLocked(); serr != nil {
		if c.Revocable {
			b.tokens[c.ID].Revoked = true
		}
		if fresh {
			delete(g, r.Name)
		}
		return fmt.Errorf("session %s: credential %q: %w", session, r.Name, serr)
	}
	return nil
}

// sameRequest reports whether a and b ask for the same credential.
func sameRequest(a, b Request) bool {
	return a.Name == b.Name && a.Issuer == b.Issuer && a.Audience == b.Audience &&
		slices.Equal(a.Scopes, b.Scopes) && a.TTL == b.TTL && a.Generation == b.Generation
}

// TokenID names a token by its credential's name and its id (jti).
type TokenID struct {
	Name string `json:"name"`
	ID   string `json:"jti"`
}

// Revise revises the credentials of session in one step: each request of
// mint is issued anew, replacing the grant of its name or adding one, and
// every live token of the re-minted names and of the names in drop is
// revoked, the grants of drop with them. Introspection reports the
// revoked tokens inactive and the new ones active as soon as Revise
// returns. If a request is invalid, an issuer fails or the state cannot
// be saved, nothing changes and the error names the credential: the
// tokens already issued were never recorded, so they do not verify.
// External credentials are not recorded and cannot be revoked; they
// expire on their own. It returns the new credentials in mint's order and
// the revoked tokens, sorted by name and id.
func (b *Broker) Revise(ctx context.Context, session string, mint []Request, drop []string, reason string) ([]*Credential, []TokenID, error) {
	if session == "" {
		return nil, nil, fmt.Errorf("revise credentials: empty session id: %w", errdefs.ErrInvalidArgument)
	}
	norm := make([]Request, len(mint))
	names := map[string]bool{}
	for i, r := range mint {
		n, err := b.normalize(r)
		if err != nil {
			return nil, nil, fmt.Errorf("session %s: %w", session, err)
		}
		if names[n.Name] {
			return nil, nil, fmt.Errorf("session %s: credential %q declared twice: %w", session, n.Name, errdefs.ErrInvalidArgument)
		}
		names[n.Name] = true
		norm[i] = n
	}
	for _, name := range drop {
		if names[name] {
			return nil, nil, fmt.Errorf("session %s: credential %q both re-minted and removed: %w", session, name, errdefs.ErrInvalidArgument)
		}
		names[name] = true
	}
	minted := make([]*Credential, len(norm))
	for i, r := range norm {
		c, err := b.issue(ctx, session, r)
		if err != nil {
			return nil, nil, fmt.Errorf("session %s: credential %q (issuer %q): %w", session, r.Name, r.Issuer, err)
		}
		minted[i] = c
	}

	b.mu.Lock()
	now := b.clock.Now()
	g := b.grants[session]
	prevGrants := maps.Clone(g)
	if g == nil && len(norm) > 0 {
		g = map[string]Request{}
		b.grants[session] = g
	}
	fresh := map[string]bool{}
	for i, r := range norm {
		if c := minted[i]; c.Revocable {
			fresh[c.ID] = true
			b.tokens[c.ID] = &record{Session: session, Name: c.Name, Audience: c.Audience,
				Scopes: slices.Clone(c.Scopes), Expiry: c.Expiry}
		}
		r.Generation = g[r.Name].Generation + 1
		g[r.Name] = r
	}
	for _, name := range drop {
		delete(g, name)
	}
	var revoked []TokenID
	var events []Event
	for jti, rec := range b.tokens {
		if rec.Session != session || rec.Revoked || fresh[jti] || !names[rec.Name] {
			continue
		}
		rec.Revoked = true
		revoked = append(revoked, TokenID{Name: rec.Name, ID: jti})
		events = append(events, Event{
			Kind: EventRevoked, Time: now, Session: session, Name: rec.Name, Issuer: BuiltinIssuer,
			ID: jti, Audience: rec.Audience, Scopes: slices.Clone(rec.Scopes), Expires: rec.Expiry, Reason: reason,
		})
	}
	if err := b.saveLocked(); err != nil {
		// Nothing of it stands.
		for jti := range fresh {
			delete(b.tokens, jti)
		}
		for _, r := range revoked {
			b.tokens[r.ID].Revoked = false
		}
		if prevGrants == nil {
			delete(b.grants, session)
		} else {
			b.grants[session] = prevGrants
		}
		b.mu.Unlock()
		return nil, nil, fmt.Errorf("session %s: revise credentials: %w", session, err)
	}
	b.mu.Unlock()

	sortRevoked := func(x, y TokenID) int { return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.ID, y.ID)) }
	slices.SortFunc(revoked, sortRevoked)
	slices.SortFunc(events, func(x, y Event) int { return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.ID, y.ID)) })
	for _, e := range events {
		log.G(ctx).Info("credential revoked", "session", session, "name", e.Name, "jti", e.ID, "reason", reason)
		if b.audit != nil {
			b.audit(ctx, e)
		}
	}
	for _, c := range minted {
		b.emit(ctx, EventMinted, session, c)
	}
	return minted, revoked, nil
}

// Live returns the id of the newest live token of each credential of
// session, by name; credentials of external issuers have none.
func (b *Broker) Live(session string) map[string]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]string{}
	newest := map[string]time.Time{}
	now := b.clock.Now()
	for jti, rec := range b.tokens {
		if rec.Session != session || rec.Revoked || !rec.Expiry.After(now) {
			continue
		}
		if _, ok := b.grants[session][rec.Name]; !ok {
			continue
		}
		if t, ok := newest[rec.Name]; !ok || rec.Expiry.After(t) || rec.Expiry.Equal(t) && jti > out[rec.Name] {
			newest[rec.Name], out[rec.Name] = rec.Expiry, jti
		}
	}
	return out
}

// Grants returns the requests session holds credentials under, by name.
func (b *Broker) Grants(session string) map[string]Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := map[string]Request{}
	for name, r := range b.grants[session] {
		r.Scopes = slices.Clone(r.Scopes)
		out[name] = r
	}
	return out
}

// Revoke revokes every token of session and forgets its requests, so that
// no refresh can mint another. Introspection reports the tokens inactive as
// soon as Revoke returns. External credentials cannot be revoked; they
// expire on their own.
func (b *Broker) Revoke(ctx context.Context, session string) {
	b.revoke(ctx, session, nil, "session stopped")
}

// revoke revokes the given credentials of session, or all of them when
// only is nil, and drops the grants concerned.
func (b *Broker) revoke(ctx context.Context, session string, only []*Credential, reason string) {
	b.mu.Lock()
	var events []Event
	now := b.clock.Now()
	ids := map[string]bool{}
	changed := false
	for _, c := range only {
		ids[c.ID] = true
		if _, ok := b.grants[session][c.Name]; ok {
			delete(b.grants[session], c.Name)
			changed = true
		}
	}
	if _, ok := b.grants[session]; ok && (only == nil || len(b.grants[session]) == 0) {
		delete(b.grants, session)
		changed = true
	}
	for jti, rec := range b.tokens {
		if rec.Session != session || rec.Revoked || (only != nil && !ids[jti]) {
			continue
		}
		rec.Revoked = true
		events = append(events, Event{
			Kind: EventRevoked, Time: now, Session: session, Name: rec.Name, Issuer: BuiltinIssuer,
			ID: jti, Audience: rec.Audience, Scopes: slices.Clone(rec.Scopes), Expires: rec.Expiry, Reason: reason,
		})
	}
	if b.pruneLocked(now) > 0 || len(events) > 0 {
		changed = true
	}
	var err error
	if changed {
		// Repeated revocations (stop, exit, remove) write nothing new.
		err = b.saveLocked()
	}
	b.mu.Unlock()

	if err != nil {
		// The revocation is in effect; only its persistence failed.
		log.G(ctx).Error("could not save credential state", "session", session, "error", err)
	}
	slices.SortFunc(events, func(x, y Event) int { return cmp.Or(cmp.Compare(x.Name, y.Name), cmp.Compare(x.ID, y.ID)) })
	for _, e := range events {
		log.G(ctx).Info("credential revoked", "session", session, "name", e.Name, "jti", e.ID, "reason", reason)
		if b.audit != nil {
			b.audit(ctx, e)
		}
	}
}

// IsRevoked reports whether the token with the given id was revoked.
func (b *Broker) IsRevoked(jti string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	rec, ok := b.tokens[jti]
	return ok && rec.Revoked
}

// Sessions returns the sessions that hold credentials, sorted.
func (b *Broker) Sessions() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make([]string, 0, len(b.grants))
	for s := range b.grants {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// Prune forgets tokens that expired more than a minute ago.
func (b *Broker) Prune(ctx context.Context) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.pruneLocked(b.clock.Now()) > 0 {
		if err := b.saveLocked(); err != nil {
			log.G(ctx).Error("could not save credential state", "error", err)
		}
	}
}

// +checklocks:b.mu
func (b *Broker) pruneLocked(now time.Time) int {
	n := 0
	for jti, rec := range b.tokens {
		if now.Sub(rec.Expiry) > recordMargin {
			delete(b.tokens, jti)
			n++
		}
	}
	return n
}

func (b *Broker) emit(ctx context.Context, kind EventKind, session string, c *Credential) {
	msg := "credential " + string(kind)
	log.G(ctx).Info(msg, "session", session, "name", c.Name, "issuer", c.Issuer, "jti", c.ID,
		"audience", c.Audience, "expires", c.Expiry)
	if b.audit == nil {
		return
	}
	b.audit(ctx, Event{
		Kind: kind, Time: b.clock.Now(), Session: session, Name: c.Name, Issuer: c.Issuer, ID: c.ID,
		Audience: c.Audience, Scopes: slices.Clone(c.Scopes), Expires: c.Expiry,
	})
}

// checkRevoked is the broker's own revocation check: deny unless the token
// is recorded and not revoked.
func (b *Broker) checkRevoked(_ context.Context, _ string, c *verify.Claims) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	rec, ok := b.tokens[c.ID]
	switch {
	case !ok:
		return &verify.Error{Kind: verify.ErrRevoked, Detail: "token unknown to the issuer"}
	case rec.Revoked:
		return &verify.Error{Kind: verify.ErrRevoked, Detail: "revoked"}
	case rec.Session != c.Subject:
		return &verify.Error{Kind: verify.ErrRevoked, Detail: "token recorded for another session"}
	}
	return nil
}

type revocationFunc func(ctx context.Context, raw string, c *verify.Claims) error

func (f revocationFunc) CheckRevoked(ctx context.Context, raw string, c *verify.Claims) error {
	return f(ctx, raw, c)
}

type stateFile struct {
	Grants map[string]map[string]Request `json:"grants"`
	Tokens map[string]*record            `json:"tokens"`
}

// +checklocks:b.mu
func (b *Broker) saveLocked() error {
	if b.statePath == "" {
		return nil
	}
	data, err := json.Marshal(stateFile{Grants: b.grants, Tokens: b.tokens})
	if err != nil {
		return fmt.Errorf("encode credential state: %w", err)
	}
	if err := atomicfile.Write(filepath.Dir(b.statePath), filepath.Base(b.statePath), data, 0o600, -1, -1); err != nil {
		return fmt.Errorf("save credential state: %w", err)
	}
	return nil
}

func (b *Broker) load() error {
	data, err := os.ReadFile(b.statePath)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("load credential state: %w", err)
	}
	var st stateFile
	if err := json.Unmarshal(data, &st); err != nil {
		return fmt.Errorf("load credential state %s: %w", b.statePath, err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for s, g := range st.Grants {
		b.grants[s] = g
	}
	for jti, rec := range st.Tokens {
		if rec != nil {
			b.tokens[jti] = rec
		}
	}
	b.pruneLocked(b.clock.Now())
	return nil
}
