package credentials

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/credentials/token"
)

// Issuer mints one credential. The broker's built-in issuer signs airlock
// tokens; ExecIssuer runs an operator's command.
type Issuer interface {
	Issue(ctx context.Context, req IssueRequest) (*Credential, error)
}

// IssueRequest is what an Issuer is asked for.
type IssueRequest struct {
	Session  string
	Name     string
	Audience string
	Scopes   []string
	TTL      time.Duration
}

// Credential is a minted credential. Token and Env values are Secrets: they
// print and log as [REDACTED].
type Credential struct {
	Name   string
	Issuer string // the issuer's configured name
	Token  token.Secret
	// Env holds extra variables some external credentials consist of
	// (e.g. AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN).
	Env map[string]token.Secret
	// ID identifies the credential in audit records: the "jti" of an
	// airlock token, the issuer's id, or a fingerprint of the token.
	ID        string
	Audience  string
	Scopes    []string
	IssuedAt  time.Time
	Expiry    time.Time
	Revocable bool // airlock tokens are; external credentials only expire
}

// LogValue logs a credential's metadata, never its token.
func (c *Credential) LogValue() slog.Value {
	if c == nil {
		return slog.StringValue("<nil>")
	}
	return slog.GroupValue(
		slog.String("name", c.Name),
		slog.String("issuer", c.Issuer),
		slog.String("id", c.ID),
		slog.String("audience", c.Audience),
		slog.Time("expires", c.Expiry),
	)
}

// builtin adapts a token.Minter to Issuer.
type builtin struct {
	m *token.Minter
}

// NewBuiltinIssuer returns an Issuer that mints airlock tokens with m.
func NewBuiltinIssuer(m *token.Minter) Issuer { return builtin{m: m} }

func (b builtin) Issue(_ context.Context, req IssueRequest) (*Credential, error) {
	raw, c, err := b.m.Mint(token.MintRequest{
		Session:  req.Session,
		Audience: req.Audience,
		Scopes:   req.Scopes,
		TTL:      req.TTL,
	})
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errdefs.ErrInvalidArgument, err)
	}
	return &Credential{
		Name:      req.Name,
		Token:     raw,
		ID:        c.ID,
		Audience:  req.Audience,
		Scopes:    c.Scopes,
		IssuedAt:  c.IssuedAt,
		Expiry:    c.Expiry,
		Revocable: true,
	}, nil
}
