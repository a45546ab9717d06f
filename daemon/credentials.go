package daemon

import (
	"context"
	"net/http"
	"os"
	"path/filepath"

	"github.com/airlock-sandbox/airlock/credentials"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// TokenIssuer is the "iss" of the tokens this daemon mints.
const TokenIssuer = "airlock"

// openCredentials opens the credential broker (its signing keys under
// the root, the external issuers, the records of live tokens) and the
// delivery of its credentials into sandboxes.
func (d *Daemon) openCredentials() error {
	c, err := credentials.Open(d.stopCtx, credentials.Config{
		KeyDir:    filepath.Join(d.cfg.Root, "keys"),
		StateFile: filepath.Join(d.cfg.Root, "credentials.json"),
		Issuer:    TokenIssuer,
		Issuers:   d.cfg.Issuers,
		Audit:     d.credentialAudit,
	})
	if err != nil {
		return err
	}
	d.creds = c
	return nil
}

// CredentialsHandler serves the verification endpoints (JWKS, introspection,
// rejection reports) for services.
func (d *Daemon) CredentialsHandler() http.Handler { return d.creds.Handler() }

// credentialAudit copies broker events into the session's audit log.
func (d *Daemon) credentialAudit(ctx context.Context, e credentials.Event) {
	d.countCredential(e)
	attributed := false
	if e.Session == "" && e.Kind == credentials.EventRejected && e.Client != "" {
		// A token the broker does not know (forged, malformed): the
		// session is the one whose connection presented it.
		e.Session, attributed = d.egress.SessionOfConnection(ctx, e.Client, e.Server)
	}
	if e.Session == "" || validID(e.Session) != nil {
		log.G(ctx).Info("credential event", "kind", e.Kind, "jti", e.ID, "reason", e.Reason)
		return
	}
	ev := e.AuditEvent()
	if attributed {
		ev.Fields["attributed_by"] = "connection"
	}
	if sa, ok := ctx.Value(sessionAuditKey{}).(sessionAudit); ok && sa.id == e.Session && sa.log != nil {
		sa.log.Emit(ctx, ev)
		return
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
	version := 1
	if rec, err := readRecord(dir); err == nil {
		limit, version = rec.Policy.Resources.AuditSize, rec.version()
	}
	a := d.newAudit(dir, limit, nil)
	a.SetPolicyVersion(version)
	a.Emit(ctx, ev)
	_ = a.Close()
}

type sessionAuditKey struct{}

type sessionAudit struct {
	id  string
	log *audit.Log
}

// withSessionAudit sends the credential events of session id emitted under
// ctx to its open audit log: a session being claimed is not yet among the
// daemon's sessions, and without it each event read the session's record
// from disk and opened, wrote and closed its log again.
func withSessionAudit(ctx context.Context, id string, l *audit.Log) context.Context {
	return context.WithValue(ctx, sessionAuditKey{}, sessionAudit{id: id, log: l})
}
