package daemon

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/credentials"
	"github.com/airlock-sandbox/airlock/credentials/token"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// TokenIssuer is the "iss" of the tokens this daemon mints.
const TokenIssuer = "airlock"

// credsDir is the per-session tmpfs that holds delivered credential files.
const credsDir = "creds"

// credentialState is what the daemon keeps per session about its
// credentials: the refreshers to stop.
type credentialState struct {
	mu     sync.Mutex
	cancel map[string]context.CancelFunc // session id -> stops its refreshers
}

func (d *Daemon) openBroker(ctx context.Context) error {
	ring, err := token.OpenKeyring(filepath.Join(d.cfg.Root, "keys"))
	if err != nil {
		return fmt.Errorf("credentials keyring: %w", err)
	}
	opts := []credentials.Option{
		credentials.WithKeyring(ring, TokenIssuer),
		credentials.WithAudit(d.credentialAudit),
		credentials.WithStateFile(filepath.Join(d.cfg.Root, "credentials.json")),
	}
	names := make([]string, 0, len(d.cfg.Issuers))
	for name := range d.cfg.Issuers {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		is, err := credentials.NewExecIssuer(name, d.cfg.Issuers[name])
		if err != nil {
			return fmt.Errorf("issuer %q: %w", name, err)
		}
		opts = append(opts, credentials.WithIssuer(name, is))
	}
	b, err := credentials.New(opts...)
	if err != nil {
		return err
	}
	d.broker = b
	d.creds = &credentialState{cancel: map[string]context.CancelFunc{}}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		ring.Run(d.stopCtx, token.DefaultRotationPeriod)
	}()
	return nil
}

// CredentialsHandler serves the verification endpoints (JWKS, introspection,
// rejection reports) for services.
func (d *Daemon) CredentialsHandler() http.Handler { return d.broker.Handler() }

// ServeCredentials serves the verification endpoints on a TCP address until
// ctx is done. The address must be one services reach and sessions do not
// (the gateway's uplink side, or the host).
func (d *Daemon) ServeCredentials(ctx context.Context, addr string) (*http.Server, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: d.CredentialsHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	log.G(ctx).Info("serving credential verification endpoints", "address", l.Addr().String())
	return srv, nil
}

// credentialAudit copies broker events into the session's audit log.
func (d *Daemon) credentialAudit(ctx context.Context, e credentials.Event) {
	attributed := false
	if e.Session == "" && e.Kind == credentials.EventRejected && e.Client != "" {
		// A token the broker does not know (forged, malformed): the
		// session is the one whose connection presented it.
		e.Session, attributed = d.sessionOfConnection(ctx, e.Client, e.Server)
	}
	if e.Session == "" || validID(e.Session) != nil {
		log.G(ctx).Info("credential event", "kind", e.Kind, "jti", e.ID, "reason", e.Reason)
		return
	}
	ev := api.AuditEvent{
		Time: e.Time, Session: e.Session, Layer: "credentials", Action: string(e.Kind),
		Subject: e.Name, Reason: e.Reason,
		Fields: map[string]any{"jti": e.ID, "issuer": e.Issuer, "audience": e.Audience},
	}
	if len(e.Scopes) > 0 {
		ev.Fields["scopes"] = e.Scopes
	}
	if !e.Expires.IsZero() {
		ev.Fields["expires"] = e.Expires
	}
	if e.Action != "" {
		ev.Fields["action"] = e.Action
	}
	if e.Detail != "" {
		ev.Fields["detail"] = e.Detail
	}
	if e.Client != "" {
		ev.Fields["client"] = e.Client
	}
	if attributed {
		ev.Fields["attributed_by"] = "connection"
	}
	if s, err := d.get(e.Session); err == nil {
		s.audit.Emit(ctx, ev)
		return
	}
	dir := d.sessionDir(e.Session)
	if _, err := os.Stat(dir); err != nil {
		return
	}
	// An ended session's log keeps the cap its manifest set.
	var limit int64
	if rec, err := readRecord(dir); err == nil {
		limit = rec.Policy.Resources.AuditSize
	}
	a := newAuditLog(dir, limit)
	a.Emit(ctx, ev)
	_ = a.Close()
}

// credentialPlan is a session's credentials and how they reach it. The
// tmpfs directories exist from prepare on; the tokens are minted when a
// session takes the sandbox.
type credentialPlan struct {
	policy   []policies.Credential
	uid, gid uint32
	// dirs maps a sandbox directory to the tmpfs subdirectory holding its files.
	dirs   map[string]string
	creds  []*credentials.Credential
	byName map[string]*credentials.Credential
	// env holds the environment of env-delivered credentials.
	env []string
}

// prepareCredentials makes the fresh tmpfs that file-delivered
// credentials of p will be written to, under the session directory. On
// error nothing stays mounted.
func (d *Daemon) prepareCredentials(dir string, p *policies.Policy, uid, gid uint32) (_ *credentialPlan, retErr error) {
	plan := &credentialPlan{policy: p.Credentials, uid: uid, gid: gid, dirs: map[string]string{}}
	if len(p.Credentials) == 0 {
		return plan, nil
	}
	if d.broker == nil {
		return nil, fmt.Errorf("credentials are not available on this daemon: %w", errdefs.ErrFailedPrecondition)
	}
	var files []policies.Credential
	for _, c := range p.Credentials {
		if c.Deliver != policies.DeliverEnv {
			files = append(files, c)
		}
	}
	if len(files) == 0 {
		return plan, nil
	}
	tmpfs := filepath.Join(dir, credsDir)
	if err := os.MkdirAll(tmpfs, 0o700); err != nil {
		return nil, err
	}
	opts := fmt.Sprintf("size=1m,nr_inodes=256,mode=0500,uid=%d,gid=%d", uid, gid)
	if err := unix.Mount("tmpfs", tmpfs, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, opts); err != nil {
		return nil, fmt.Errorf("credentials tmpfs: %w", err)
	}
	defer func() {
		if retErr != nil {
			_ = unix.Unmount(tmpfs, unix.MNT_DETACH)
		}
	}()
	for sandboxDir, sub := range credentialDirs(tmpfs, files) {
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

// credentialDirs maps each sandbox directory of the file-delivered
// credentials to its subdirectory of the tmpfs, numbered in policy order.
func credentialDirs(tmpfs string, files []policies.Credential) map[string]string {
	dirs := map[string]string{}
	for _, c := range files {
		sandboxDir := path.Dir(credentialPath(c))
		if _, ok := dirs[sandboxDir]; !ok {
			dirs[sandboxDir] = filepath.Join(tmpfs, strconv.Itoa(len(dirs)))
		}
	}
	return dirs
}

// reopenCredentials is the plan of a sandbox prepared by an earlier daemon
// process: its directories exist, nothing is minted yet in this one.
func (d *Daemon) reopenCredentials(dir string, p *policies.Policy) *credentialPlan {
	uid, gid, _ := p.UserIDs()
	var files []policies.Credential
	for _, c := range p.Credentials {
		if c.Deliver != policies.DeliverEnv {
			files = append(files, c)
		}
	}
	return &credentialPlan{policy: p.Credentials, uid: uid, gid: gid, dirs: credentialDirs(filepath.Join(dir, credsDir), files)}
}

// mint mints every credential of the plan for session id, writes the
// file-delivered ones into their directories and collects the environment
// of the env-delivered ones. On error nothing stays granted.
func (cp *credentialPlan) mint(ctx context.Context, d *Daemon, id string) (retErr error) {
	if len(cp.policy) == 0 {
		return nil
	}
	reqs := make([]credentials.Request, len(cp.policy))
	for i, c := range cp.policy {
		reqs[i] = credentials.Request{Name: c.Name, Issuer: c.Issuer, Audience: c.Audience, Scopes: c.Scopes, TTL: c.TTL.Std()}
	}
	creds, err := d.broker.Mint(ctx, id, reqs)
	if err != nil {
		if errdefs.IsInvalidArgument(err) || errdefs.IsNotFound(err) {
			return err
		}
		return fmt.Errorf("credentials: %w: %w", errdefs.ErrFailedPrecondition, err)
	}
	defer func() {
		if retErr != nil {
			d.broker.Revoke(context.WithoutCancel(ctx), id)
		}
	}()
	cp.creds = creds
	cp.byName = map[string]*credentials.Credential{}
	cp.env = nil
	for i, c := range cp.policy {
		cp.byName[c.Name] = creds[i]
		if c.Deliver == policies.DeliverEnv {
			cp.env = append(cp.env, credentials.Environ(creds[i], c.EnvVar)...)
			continue
		}
		target := credentialPath(c)
		sub := cp.dirs[path.Dir(target)]
		if err := credentials.WriteAtomic(sub, path.Base(target), []byte(creds[i].Token.Reveal()), int(cp.uid), int(cp.gid)); err != nil {
			return fmt.Errorf("credential %q: deliver: %w", c.Name, err)
		}
	}
	return nil
}

func credentialPath(c policies.Credential) string {
	if c.Path != "" {
		return c.Path
	}
	return path.Join(credentials.DefaultDir, c.Name)
}

// specOpt mounts the credential directories read-only. Env-delivered
// credentials reach the process when a session takes the sandbox.
func (cp *credentialPlan) specOpt() oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		targets := make([]string, 0, len(cp.dirs))
		for t := range cp.dirs {
			targets = append(targets, t)
		}
		sort.Strings(targets)
		for _, t := range targets {
			s.Mounts = append(s.Mounts, specs.Mount{
				Destination: t, Type: "bind", Source: cp.dirs[t],
				Options: []string{"rbind", "ro", "nosuid", "nodev", "noexec"},
			})
		}
		return nil
	}
}

// startRefreshers keeps a running session's file credentials fresh until
// its credentials are revoked. A credential missing from current is
// re-minted first (after a daemon restart the current token is not known).
func (d *Daemon) startRefreshers(ctx context.Context, s *session, current map[string]*credentials.Credential) {
	var files []policies.Credential
	for _, c := range s.rec.Policy.Credentials {
		if c.Deliver != policies.DeliverEnv {
			files = append(files, c)
		}
	}
	if len(files) == 0 {
		return
	}
	id := s.rec.ID
	uid, gid, _ := s.rec.Policy.UserIDs()
	rctx, cancel := context.WithCancel(d.stopCtx)
	d.creds.mu.Lock()
	if old := d.creds.cancel[id]; old != nil {
		old()
	}
	d.creds.cancel[id] = cancel
	d.creds.mu.Unlock()
	subs := map[string]string{}
	for _, c := range files {
		dir := path.Dir(credentialPath(c))
		if _, ok := subs[dir]; !ok {
			subs[dir] = filepath.Join(s.dir, credsDir, strconv.Itoa(len(subs)))
		}
	}
	for _, c := range files {
		target := credentialPath(c)
		sub := subs[path.Dir(target)]
		name := path.Base(target)
		write := func(_ context.Context, cr *credentials.Credential) error {
			return credentials.WriteAtomic(sub, name, []byte(cr.Token.Reveal()), int(uid), int(gid))
		}
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			cur := current[c.Name]
			if cur == nil {
				var err error
				cur, err = d.broker.Refresh(rctx, id, c.Name)
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
			_ = d.broker.Refresher(id, c.Name, write).Run(rctx, cur)
		}()
	}
}

// revokeCredentials stops refreshers and revokes every token of a session.
func (d *Daemon) revokeCredentials(ctx context.Context, id string) {
	d.creds.mu.Lock()
	if cancel := d.creds.cancel[id]; cancel != nil {
		cancel()
		delete(d.creds.cancel, id)
	}
	d.creds.mu.Unlock()
	d.broker.Revoke(ctx, id)
}

// sessionOfConnection returns the session that opened the TCP connection
// a service saw from client to server (IP:port each; server may be
// empty), through the gateway's view of its sessions' flows.
func (d *Daemon) sessionOfConnection(ctx context.Context, client, server string) (string, bool) {
	if d.egress == nil {
		return "", false
	}
	c, err := netip.ParseAddrPort(client)
	if err != nil {
		return "", false
	}
	var srv netip.AddrPort
	if server != "" {
		if srv, err = netip.ParseAddrPort(server); err != nil {
			srv = netip.AddrPort{}
		}
	}
	ns, err := d.egress.gw.SessionByFlow(ctx, c, srv, "tcp")
	if err != nil {
		log.G(ctx).Debug("credential rejection from a connection of no session", "client", client, "error", err)
		return "", false
	}
	return ns.ID(), true
}
