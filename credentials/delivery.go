package credentials

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"sync"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/credentials/token"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// TmpfsDir is the subdirectory of a session directory that Prepare mounts
// the session's credential tmpfs on.
const TmpfsDir = "creds"

// Minter is what delivery needs of a broker; *Broker is one.
type Minter interface {
	// Mint issues the credentials of session, one per request; on error
	// nothing stays granted.
	Mint(ctx context.Context, session string, reqs []Request) ([]*Credential, error)
	// Refresh re-mints credential name of session.
	Refresh(ctx context.Context, session, name string) (*Credential, error)
	// Refresher keeps credential name of session fresh, delivering with write.
	Refresher(session, name string, write func(context.Context, *Credential) error) *Refresher
	// Revoke revokes every credential of session.
	Revoke(ctx context.Context, session string)
	// Revise re-mints the credentials of mint and revokes those of drop,
	// all or nothing (see Broker.Revise).
	Revise(ctx context.Context, session string, mint []Request, drop []string, reason string) ([]*Credential, []TokenID, error)
	// Live is the newest live token id of each credential of session.
	Live(session string) map[string]string
	// Grants are the credentials granted to session, by name.
	Grants(session string) map[string]Request
}

// Delivery hands the credentials of sessions to their sandboxes: a
// read-only tmpfs per sandbox for file-delivered credentials (Prepare,
// Plan.SpecOpt), the tokens minted when a session takes the sandbox
// (Plan.Mint), the environment of env-delivered ones (Plan.Env), the
// refreshers that keep files fresh while the session runs
// (Plan.StartRefreshers), and revocation (Revoke). It is safe for
// concurrent use; a Plan is not, its session guards it.
type Delivery struct {
	m      Minter
	broker *Broker // nil unless made by Open

	// stopCtx ends the key rotation and the refreshers: derived from the
	// context Open or NewDelivery was given (the daemon's root context),
	// and cancelled by Close.
	stopCtx context.Context
	stop    context.CancelFunc
	wg      sync.WaitGroup

	mu sync.Mutex
	// cancel stops a session's refreshers, by session id.
	cancel map[string]context.CancelFunc // +checklocks:mu
}

// Config opens a daemon's credentials (Open).
type Config struct {
	// KeyDir holds the signing keys of the built-in issuer.
	KeyDir string
	// StateFile keeps the broker's records across restarts (WithStateFile).
	StateFile string
	// Issuer is the "iss" of the built-in issuer's tokens.
	Issuer string
	// Issuers are external issuers: name -> argv of a command speaking
	// the exec issuer protocol (NewExecIssuer).
	Issuers map[string][]string
	// Audit receives every credential event.
	Audit AuditFunc
}

// Open opens the keyring and the broker of cfg and returns their
// Delivery. The keyring rotates its keys until ctx is done or Close is
// called.
func Open(ctx context.Context, cfg Config) (*Delivery, error) {
	ring, err := token.OpenKeyring(cfg.KeyDir)
	if err != nil {
		return nil, fmt.Errorf("credentials keyring: %w", err)
	}
	opts := []Option{
		WithKeyring(ring, cfg.Issuer),
		WithAudit(cfg.Audit),
		WithStateFile(cfg.StateFile),
	}
	names := make([]string, 0, len(cfg.Issuers))
	for name := range cfg.Issuers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		is, err := NewExecIssuer(name, cfg.Issuers[name])
		if err != nil {
			return nil, fmt.Errorf("issuer %q: %w", name, err)
		}
		opts = append(opts, WithIssuer(name, is))
	}
	b, err := New(opts...)
	if err != nil {
		return nil, err
	}
	d := NewDelivery(ctx, b)
	d.broker = b
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		ring.Run(d.stopCtx, token.DefaultRotationPeriod)
	}()
	return d, nil
}

// NewDelivery returns the Delivery of m's credentials. Its refreshers run
// until ctx is done or Close is called.
func NewDelivery(ctx context.Context, m Minter) *Delivery {
	d := &Delivery{m: m, cancel: map[string]context.CancelFunc{}}
	d.stopCtx, d.stop = context.WithCancel(ctx)
	return d
}

// Handler serves the broker's verification endpoints (see Broker.Handler);
// it answers 404 for a Delivery not made by Open.
func (d *Delivery) Handler() http.Handler {
	if d.broker == nil {
		return http.NotFoundHandler()
	}
	return d.broker.Handler()
}

// Close stops the key rotation and every refresher and waits for them.
// Delivered credentials stay valid: a restarted daemon re-adopts them.
func (d *Delivery) Close() {
	d.stop()
	d.wg.Wait()
}

// Plan is a sandbox's credentials and how they reach it. The tmpfs
// directories exist from Prepare on; the tokens are minted when a session
// takes the sandbox (Mint). A Plan is not safe for concurrent use.
type Plan struct {
	d        *Delivery
	creds    []policies.Credential
	uid, gid uint32
	// dirs maps a sandbox directory to the tmpfs subdirectory holding its files.
	dirs map[string]string
	// layout are the sandbox directories of dirs in the order of their
	// subdirectories' numbers: fixed when the sandbox is made, whatever
	// revisions do to the credentials (Layout).
	layout []string
	// reopened is set for a plan of an earlier daemon process (Reopen):
	// it knows no token.
	reopened bool
	// byName are the credentials minted in this process, until the
	// refreshers take them.
	byName map[string]*Credential
	// envOf holds the environment of each env-delivered credential, by
	// name, once minted in this process.
	envOf map[string][]string
	// rctx is the parent of the refreshers' contexts once StartRefreshers
	// ran; refreshers are the running ones, by credential name.
	rctx       context.Context
	refreshers map[string]*refresher
	// gateway receives each token of a gateway-delivered credential as it
	// is minted or refreshed (OnGateway).
	gateway func(name string, token []byte)
}

// OnGateway has fn receive the tokens of the plan's gateway-delivered
// credentials, each time one is minted or refreshed; they go nowhere
// else.
func (p *Plan) OnGateway(fn func(name string, token []byte)) {
	if p != nil {
		p.gateway = fn
	}
}

// refresher is one credential's running refresher.
type refresher struct {
	cancel context.CancelFunc
	done   chan struct{}
}

// gatewayCredentials are the credentials of creds the gateway injects.
func gatewayCredentials(creds []policies.Credential) []policies.Credential {
	var out []policies.Credential
	for _, c := range creds {
		if c.Deliver == policies.DeliverGateway {
			out = append(out, c)
		}
	}
	return out
}

// Prepare makes the fresh tmpfs under the session directory dir that the
// file-delivered credentials of creds will be written to, owned by
// uid:gid. On error nothing stays mounted.
func (d *Delivery) Prepare(dir string, creds []policies.Credential, uid, gid uint32) (_ *Plan, retErr error) {
	plan := &Plan{d: d, creds: creds, uid: uid, gid: gid, dirs: map[string]string{}}
	if len(creds) == 0 {
		return plan, nil
	}
	if d == nil {
		return nil, fmt.Errorf("credentials are not available on this daemon: %w", errdefs.ErrFailedPrecondition)
	}
	files := fileCredentials(creds)
	if len(files) == 0 {
		return plan, nil
	}
	tmpfs := filepath.Join(dir, TmpfsDir)
	if err := os.MkdirAll(tmpfs, 0o700); err != nil {
		return nil, err
	}
	if err := mountTmpfs(tmpfs, uid, gid); err != nil {
		return nil, fmt.Errorf("credentials tmpfs: %w", err)
	}
	defer func() {
		if retErr != nil {
			_ = unmountTmpfs(tmpfs)
		}
	}()
	plan.layout = credentialLayout(files)
	for sandboxDir, sub := range layoutDirs(tmpfs, plan.layout) {
		if err := os.Mkdir(sub, 0o500); err != nil {
			return nil, err
		}
		if err := os.Chown(sub, int(uid), int(gid)); err != nil {
			return nil, err
		}
		plan.dirs[sandboxDir] = sub
	}
	return plan, nil
}

// Reopen is the plan of a sandbox prepared by an earlier daemon process
// under the session directory dir: its directories exist, nothing is
// minted yet in this one. layout is the plan's Layout when it was
// prepared; nil means the one creds make, which holds until a revision
// removes or reorders file credentials.
func (d *Delivery) Reopen(dir string, creds []policies.Credential, uid, gid uint32, layout []string) *Plan {
	if layout == nil {
		layout = credentialLayout(fileCredentials(creds))
	}
	return &Plan{d: d, creds: creds, uid: uid, gid: gid, reopened: true, layout: slices.Clone(layout),
		dirs: layoutDirs(filepath.Join(dir, TmpfsDir), layout)}
}

// Layout are the sandbox directories of the plan's file credentials, in
// the order of the tmpfs subdirectories bound on them: what Reopen needs
// to find them again after a revision.
func (p *Plan) Layout() []string {
	if p == nil {
		return nil
	}
	return slices.Clone(p.layout)
}

// fileCredentials are the credentials of creds delivered as files.
func fileCredentials(creds []policies.Credential) []policies.Credential {
	var files []policies.Credential
	for _, c := range creds {
		if c.Deliver != policies.DeliverEnv && c.Deliver != policies.DeliverGateway {
			files = append(files, c)
		}
	}
	return files
}

// credentialDirs maps each sandbox directory of the file-delivered
// credentials to its subdirectory of the tmpfs, numbered in policy order.
func credentialDirs(tmpfs string, files []policies.Credential) map[string]string {
	return layoutDirs(tmpfs, credentialLayout(files))
}

// credentialLayout are the sandbox directories of the file-delivered
// credentials files, in policy order.
func credentialLayout(files []policies.Credential) []string {
	var layout []string
	for _, c := range files {
		if d := path.Dir(c.SandboxPath()); !slices.Contains(layout, d) {
			layout = append(layout, d)
		}
	}
	return layout
}

// layoutDirs maps each sandbox directory of layout to its numbered
// subdirectory of the tmpfs.
func layoutDirs(tmpfs string, layout []string) map[string]string {
	dirs := map[string]string{}
	for i, d := range layout {
		dirs[d] = filepath.Join(tmpfs, strconv.Itoa(i))
	}
	return dirs
}

// Mint mints every credential of the plan for session id, writes the
// file-delivered ones into their directories and collects the environment
// of the env-delivered ones. On error nothing stays granted.
func (p *Plan) Mint(ctx context.Context, id string) (retErr error) {
	if len(p.creds) == 0 {
		return nil
	}
	reqs := make([]Request, len(p.creds))
	for i, c := range p.creds {
		reqs[i] = Request{Name: c.Name, Issuer: c.Issuer, Audience: c.Audience, Scopes: c.Scopes, TTL: c.TTL.Std(), Delivery: deliveryOf(c)}
	}
	creds, err := p.d.m.Mint(ctx, id, reqs)
	if err != nil {
		if errdefs.IsInvalidArgument(err) || errdefs.IsNotFound(err) {
			return err
		}
		return fmt.Errorf("credentials: %w: %w", errdefs.ErrFailedPrecondition, err)
	}
	defer func() {
		if retErr != nil {
			p.d.m.Revoke(context.WithoutCancel(ctx), id)
		}
	}()
	p.byName = map[string]*Credential{}
	p.envOf = map[string][]string{}
	for i, c := range p.creds {
		p.byName[c.Name] = creds[i]
		if c.Deliver == policies.DeliverEnv {
			p.envOf[c.Name] = Environ(creds[i], c.EnvVar)
			continue
		}
		if c.Deliver == policies.DeliverGateway {
			if p.gateway != nil {
				p.gateway(c.Name, []byte(creds[i].Token.Reveal()))
			}
			continue
		}
		target := c.SandboxPath()
		sub := p.dirs[path.Dir(target)]
		if err := WriteAtomic(sub, path.Base(target), []byte(creds[i].Token.Reveal()), int(p.uid), int(p.gid)); err != nil {
			return fmt.Errorf("credential %q: deliver: %w", c.Name, err)
		}
	}
	p.reopened = false
	return nil
}

// Env is the environment of the env-delivered credentials minted in this
// process, for processes exec'd into the running session. A plan reopened
// after a daemon restart has none until StartEnv: the previous process's
// tokens were never stored (not in containerd's spec either), so a process
// exec'd into a session that was already running then gets no
// env-delivered credential, rather than a stale one; its command keeps its
// own.
func (p *Plan) Env() []string {
	if p == nil {
		return nil
	}
	var env []string
	for _, c := range p.creds {
		if c.Deliver == policies.DeliverEnv {
			env = append(env, p.envOf[c.Name]...)
		}
	}
	return env
}

// StartEnv is the environment of the env-delivered credentials for the
// session's command. For a plan reopened after a daemon restart, it
// re-mints them now, and Env returns them from then on.
func (p *Plan) StartEnv(ctx context.Context, id string) ([]string, error) {
	if p == nil || !p.reopened {
		return p.Env(), nil
	}
	envOf := map[string][]string{}
	for _, c := range p.creds {
		if c.Deliver != policies.DeliverEnv {
			continue
		}
		cr, err := p.d.m.Refresh(ctx, id, c.Name)
		if err != nil {
			return nil, fmt.Errorf("credential %q: re-mint: %w", c.Name, err)
		}
		envOf[c.Name] = Environ(cr, c.EnvVar)
	}
	p.envOf, p.reopened = envOf, false
	return p.Env(), nil
}

// SpecOpt mounts the credential directories read-only. Env-delivered
// credentials reach the process when a session takes the sandbox.
func (p *Plan) SpecOpt() oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		targets := make([]string, 0, len(p.dirs))
		for t := range p.dirs {
			targets = append(targets, t)
		}
		sort.Strings(targets)
		for _, t := range targets {
			s.Mounts = append(s.Mounts, specs.Mount{
				Destination: t, Type: "bind", Source: p.dirs[t],
				Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"},
			})
		}
		return nil
	}
}

// StartRefreshers keeps session id's file and gateway credentials fresh until they
// are revoked (Delivery.Revoke) or the Delivery closes. A credential this
// process did not mint is re-minted first (after a daemon restart the
// current token is not known).
func (p *Plan) StartRefreshers(ctx context.Context, id string) {
	if p == nil {
		return
	}
	files := fileCredentials(p.creds)
	gw := gatewayCredentials(p.creds)
	current := p.byName
	p.byName = nil
	d := p.d
	rctx, cancel := context.WithCancel(d.stopCtx)
	d.mu.Lock()
	if old := d.cancel[id]; old != nil {
		old()
	}
	d.cancel[id] = cancel
	d.mu.Unlock()
	p.rctx, p.refreshers = rctx, map[string]*refresher{}
	for _, c := range append(files, gw...) {
		p.startRefresher(ctx, id, c, current[c.Name])
	}
}

// startRefresher keeps credential c of session id fresh, from cur (nil:
// re-mint it first), until its refresher is stopped (stopRefresher) or
// the session's are.
func (p *Plan) startRefresher(ctx context.Context, id string, c policies.Credential, cur *Credential) {
	var write func(context.Context, *Credential) error
	if c.Deliver == policies.DeliverGateway {
		sink, name := p.gateway, c.Name
		write = func(_ context.Context, cr *Credential) error {
			if sink != nil {
				sink(name, []byte(cr.Token.Reveal()))
			}
			return nil
		}
	} else {
		target := c.SandboxPath()
		sub := p.dirs[path.Dir(target)]
		name := path.Base(target)
		uid, gid := int(p.uid), int(p.gid)
		write = func(_ context.Context, cr *Credential) error {
			return WriteAtomic(sub, name, []byte(cr.Token.Reveal()), uid, gid)
		}
	}
	d := p.d
	rctx, cancel := context.WithCancel(p.rctx)
	r := &refresher{cancel: cancel, done: make(chan struct{})}
	p.refreshers[c.Name] = r
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		defer close(r.done)
		if cur == nil {
			var err error
			cur, err = d.m.Refresh(rctx, id, c.Name)
			if err == nil {
				err = write(rctx, cur)
			}
			if err != nil {
				if rctx.Err() == nil {
					log.G(ctx).Error("credential re-mint", "session", id, "credential", c.Name, "error", err)
				}
				return
			}
		}
		_ = d.m.Refresher(id, c.Name, write).Run(rctx, cur)
	}()
}

// stopRefresher stops credential name's refresher, if it runs, and waits
// until it has: it writes nothing after.
func (p *Plan) stopRefresher(name string) {
	if r := p.refreshers[name]; r != nil {
		r.cancel()
		<-r.done
		delete(p.refreshers, name)
	}
}

// Revision is what Plan.Revise did, each token by its credential's name
// and id (an external issuer's credential may have none).
type Revision struct {
	// Reminted are the new tokens of changed credentials, Added those of
	// added ones.
	Reminted, Added []TokenID
	// Revoked are the tokens of changed and removed credentials, revoked.
	Revoked []TokenID
	// Kept are the unchanged credentials, with their current token.
	Kept []TokenID
	// Undelivered is set when a new token could not be written into the
	// sandbox (its refresher tries again at once) or an old file not
	// removed; the tokens stand as above.
	Undelivered error
}

// Revise applies a revision of a running or created session's
// credentials, live: creds is the revised list and ch its difference
// with the plan's (policies.Diff). Changed and added credentials are
// minted and removed and changed ones revoked in one step
// (Minter.Revise); if that fails, nothing changes and the error says why.
// Then the refreshers of the revoked credentials are stopped, their files
// removed, the new tokens written (file), handed to the gateway (gateway)
// and kept fresh, and the unchanged credentials are left alone: same
// token, same refresher.
//
// A credential delivered in the environment cannot leave a running
// command's environment: a removed one's variable stays there, revoked,
// so that it no longer verifies; processes exec'd later no longer get it.
// policies.Diff refuses adding or changing one, and a file credential
// whose directory is not bound into the sandbox; Revise refuses them too.
func (p *Plan) Revise(ctx context.Context, id string, creds []policies.Credential, ch policies.CredentialChange) (*Revision, error) {
	revised := map[string]policies.Credential{}
	for _, c := range creds {
		revised[c.Name] = c
	}
	old := map[string]policies.Credential{}
	for _, c := range p.creds {
		old[c.Name] = c
	}
	names := append(slices.Clone(ch.Changed), ch.Added...)
	reqs := make([]Request, 0, len(names))
	for _, name := range names {
		c, ok := revised[name]
		if !ok {
			return nil, fmt.Errorf("credential %q: not in the revised policy: %w", name, errdefs.ErrInvalidArgument)
		}
		switch {
		case c.Deliver == policies.DeliverEnv:
			return nil, fmt.Errorf("credential %q: %s: %w", name, policies.ReasonEnvCredential, errdefs.ErrFailedPrecondition)
		case c.Deliver != policies.DeliverGateway && p.dirs[path.Dir(c.SandboxPath())] == "":
			return nil, fmt.Errorf("credential %q: %s: %w", name, policies.ReasonCredentialDir, errdefs.ErrFailedPrecondition)
		}
		reqs = append(reqs, Request{Name: c.Name, Issuer: c.Issuer, Audience: c.Audience, Scopes: c.Scopes, TTL: c.TTL.Std(), Delivery: deliveryOf(c)})
	}
	if p.d == nil {
		return nil, fmt.Errorf("credentials are not available on this daemon: %w", errdefs.ErrFailedPrecondition)
	}
	minted, revoked, err := p.d.m.Revise(ctx, id, reqs, ch.Removed, "revision")
	if err != nil {
		if errdefs.IsInvalidArgument(err) || errdefs.IsNotFound(err) {
			return nil, err
		}
		return nil, fmt.Errorf("credentials: %w: %w", errdefs.ErrFailedPrecondition, err)
	}
	out := &Revision{Revoked: revoked}
	var errs []error
	for _, name := range append(slices.Clone(ch.Changed), ch.Removed...) {
		p.stopRefresher(name)
		delete(p.envOf, name)
		if p.byName != nil {
			delete(p.byName, name)
		}
		if c, ok := old[name]; ok && c.Deliver != policies.DeliverEnv && c.Deliver != policies.DeliverGateway {
			target := c.SandboxPath()
			if sub := p.dirs[path.Dir(target)]; sub != "" {
				if err := os.Remove(filepath.Join(sub, path.Base(target))); err != nil && !os.IsNotExist(err) {
					errs = append(errs, fmt.Errorf("credential %q: remove %s: %w", name, target, err))
				}
			}
		}
	}
	p.creds = slices.Clone(creds)
	for i, cr := range minted {
		c := revised[names[i]]
		ref := TokenID{Name: c.Name, ID: cr.ID}
		if i < len(ch.Changed) {
			out.Reminted = append(out.Reminted, ref)
		} else {
			out.Added = append(out.Added, ref)
		}
		if c.Deliver == policies.DeliverGateway {
			if p.gateway != nil {
				p.gateway(c.Name, []byte(cr.Token.Reveal()))
			}
		} else {
			target := c.SandboxPath()
			if err := WriteAtomic(p.dirs[path.Dir(target)], path.Base(target), []byte(cr.Token.Reveal()), int(p.uid), int(p.gid)); err != nil {
				errs = append(errs, fmt.Errorf("credential %q: deliver: %w", c.Name, err))
				cr = nil // the refresher re-mints and writes at once
			}
		}
		switch {
		case p.rctx != nil:
			p.startRefresher(ctx, id, c, cr)
		case p.byName != nil && cr != nil:
			// Not started yet: StartRefreshers takes it.
			p.byName[c.Name] = cr
		}
	}
	live := p.d.m.Live(id)
	for _, name := range ch.Kept {
		out.Kept = append(out.Kept, TokenID{Name: name, ID: live[name]})
	}
	out.Undelivered = errors.Join(errs...)
	return out, nil
}

// Revoke stops session id's refreshers and revokes every token of it.
func (d *Delivery) Revoke(ctx context.Context, id string) {
	d.mu.Lock()
	if cancel := d.cancel[id]; cancel != nil {
		cancel()
		delete(d.cancel, id)
	}
	d.mu.Unlock()
	d.m.Revoke(ctx, id)
}

// A Broker is the Minter of a Delivery made by Open.
var _ Minter = (*Broker)(nil)

// Reconcile brings the broker's grants of session id in line with the
// plan's credentials, for a plan reopened by a daemon that may have died
// after recording a revision (the session's policy) and before revising
// its credentials: a credential the broker grants otherwise than the
// plan says (issuer, audience, scopes, ttl) is re-minted and its tokens
// revoked, one it does not grant is minted and delivered, a grant the
// plan no longer has is revoked, all or nothing, as Revise does. The
// minted tokens go to StartRefreshers. An env credential is never minted
// here (a running command's environment is fixed). It returns nil when
// the grants already match.
func (p *Plan) Reconcile(ctx context.Context, id string) (*Revision, error) {
	if p == nil || p.d == nil {
		return nil, nil
	}
	grants := p.d.m.Grants(id)
	var ch policies.CredentialChange
	inPlan := map[string]bool{}
	for _, c := range p.creds {
		inPlan[c.Name] = true
		g, ok := grants[c.Name]
		switch {
		case c.Deliver == policies.DeliverEnv:
			// Minted at start, when the command gets its environment.
		case !ok:
			ch.Added = append(ch.Added, c.Name)
		case !sameGrant(g, c):
			ch.Changed = append(ch.Changed, c.Name)
		default:
			ch.Kept = append(ch.Kept, c.Name)
		}
	}
	for name := range grants {
		if !inPlan[name] {
			ch.Removed = append(ch.Removed, name)
		}
	}
	slices.Sort(ch.Removed)
	if !ch.Revises() {
		return nil, nil
	}
	if p.byName == nil {
		// What Revise mints, StartRefreshers delivers from.
		p.byName = map[string]*Credential{}
	}
	rev, err := p.Revise(ctx, id, p.creds, ch)
	if err == nil {
		return rev, nil
	}
	// One issuer failing must not keep the other credentials' withdrawn
	// grants: each on its own, and one that cannot be re-minted is
	// revoked instead (its refreshers then find no grant: the sandbox
	// goes without it rather than with the authority it lost).
	out := &Revision{}
	merge := func(r *Revision) {
		if r != nil {
			out.Reminted = append(out.Reminted, r.Reminted...)
			out.Added = append(out.Added, r.Added...)
			out.Revoked = append(out.Revoked, r.Revoked...)
			out.Undelivered = errors.Join(out.Undelivered, r.Undelivered)
		}
	}
	var errs []error
	one := func(c policies.CredentialChange) error {
		r, err := p.Revise(ctx, id, p.creds, c)
		merge(r)
		return err
	}
	if len(ch.Removed) > 0 {
		if err := one(policies.CredentialChange{Removed: ch.Removed}); err != nil {
			errs = append(errs, err)
		}
	}
	for _, name := range ch.Changed {
		if err := one(policies.CredentialChange{Changed: []string{name}}); err != nil {
			errs = append(errs, err)
			if err := one(policies.CredentialChange{Removed: []string{name}}); err != nil {
				errs = append(errs, fmt.Errorf("credential %q: revoke the grant it could not be re-minted under: %w", name, err))
			}
		}
	}
	for _, name := range ch.Added {
		if err := one(policies.CredentialChange{Added: []string{name}}); err != nil {
			errs = append(errs, err)
		}
	}
	return out, errors.Join(errs...)
}

// deliveryOf says how credential c reaches its session (Request.Delivery).
func deliveryOf(c policies.Credential) string {
	switch c.Deliver {
	case policies.DeliverGateway:
		return "gateway"
	case policies.DeliverEnv:
		return "env:" + c.EnvVar
	}
	return "file:" + c.SandboxPath()
}

// sameGrant reports whether the broker's grant g is what credential c
// asks for, delivered the same way (a grant that does not say how, from
// an earlier daemon, is not).
func sameGrant(g Request, c policies.Credential) bool {
	issuer := c.Issuer
	if issuer == "" {
		issuer = BuiltinIssuer
	}
	ttl := c.TTL.Std()
	if ttl == 0 {
		ttl = DefaultTTL
	}
	return g.Issuer == issuer && g.Audience == c.Audience && slices.Equal(g.Scopes, c.Scopes) && g.TTL == ttl &&
		g.Delivery == deliveryOf(c)
}
