package credentials

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/credentials/clock"
	"github.com/airlock-sandbox/airlock/credentials/token"
	"github.com/airlock-sandbox/airlock/internal/limitbuf"
)

// DefaultExecTimeout bounds an exec issuer's run.
const DefaultExecTimeout = 10 * time.Second

const (
	maxExecStdout = 1 << 20
	maxExecStderr = 64 << 10
	maxErrLine    = 200
)

// ExecIssuer runs an operator-configured command to mint a credential (an
// STS call, a vault lookup, a cloud CLI).
//
// The command gets one JSON object on stdin:
//
//	{"session": "ID", "name": "NAME", "audience": "AUD",
//	 "scopes": ["..."], "ttl_seconds": 900}
//
// and writes one JSON object to stdout, then exits 0:
//
//	{"token": "SECRET", "expires_at": "2026-03-01T12:15:00Z",
//	 "id": "optional id for the audit log",
//	 "env": {"AWS_ACCESS_KEY_ID": "...", "AWS_SECRET_ACCESS_KEY": "..."}}
//
// "token" and "expires_at" (RFC 3339, in the future) are required. "env" is
// for credentials made of several values; "id" defaults to a fingerprint of
// the token. A non-zero exit, a timeout, or output that is not such an
// object fails the request; the error quotes the first line of stderr and
// never the output. The command inherits the daemon's environment plus Env,
// and runs in its own process group, which is killed on timeout.
type ExecIssuer struct {
	name    string
	argv    []string
	env     []string
	timeout time.Duration
	clock   clock.Clock
}

// ExecOption configures NewExecIssuer.
type ExecOption func(*ExecIssuer)

// WithExecTimeout bounds each run (default DefaultExecTimeout).
func WithExecTimeout(d time.Duration) ExecOption { return func(e *ExecIssuer) { e.timeout = d } }

// WithExecEnv adds KEY=VALUE entries to the command's environment.
func WithExecEnv(env ...string) ExecOption {
	return func(e *ExecIssuer) { e.env = append(e.env, env...) }
}

// WithExecClock sets the clock used to check "expires_at".
func WithExecClock(c clock.Clock) ExecOption { return func(e *ExecIssuer) { e.clock = c } }

// NewExecIssuer returns an issuer named name (for messages) that runs argv.
func NewExecIssuer(name string, argv []string, opts ...ExecOption) (*ExecIssuer, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("exec issuer %q: empty command: %w", name, errdefs.ErrInvalidArgument)
	}
	e := &ExecIssuer{name: name, argv: append([]string(nil), argv...), timeout: DefaultExecTimeout, clock: clock.Real}
	for _, o := range opts {
		o(e)
	}
	if e.timeout <= 0 {
		return nil, fmt.Errorf("exec issuer %q: timeout must be positive: %w", name, errdefs.ErrInvalidArgument)
	}
	return e, nil
}

type execInput struct {
	Session    string   `json:"session"`
	Name       string   `json:"name"`
	Audience   string   `json:"audience"`
	Scopes     []string `json:"scopes"`
	TTLSeconds int64    `json:"ttl_seconds"`
}

type execOutput struct {
	Token     string            `json:"token"`
	ExpiresAt string            `json:"expires_at"`
	ID        string            `json:"id"`
	Env       map[string]string `json:"env"`
}

var envNameRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// Issue implements Issuer.
func (e *ExecIssuer) Issue(ctx context.Context, req IssueRequest) (*Credential, error) {
	in, err := json.Marshal(execInput{
		Session:    req.Session,
		Name:       req.Name,
		Audience:   req.Audience,
		Scopes:     req.Scopes,
		TTLSeconds: int64(req.TTL.Round(time.Second) / time.Second),
	})
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithTimeout(ctx, e.timeout)
	defer cancel()

	cmd := exec.CommandContext(runCtx, e.argv[0], e.argv[1:]...)
	cmd.Stdin = bytes.NewReader(in)
	stdout := limitbuf.New(maxExecStdout)
	stderr := limitbuf.New(maxExecStderr)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append(os.Environ(), e.env...)
	cmd.WaitDelay = time.Second
	setProcessGroup(cmd)

	runErr := cmd.Run()
	out, parseErr := parseExecOutput(stdout.Bytes())
	line := firstLine(stderr.Bytes(), out.Token)
	withStderr := func(msg string) error {
		if line != "" {
			msg += ": " + line
		}
		return fmt.Errorf("exec issuer %q: %s: %w", e.name, msg, errdefs.ErrUnavailable)
	}
	var exitErr *exec.ExitError
	switch {
	case runErr == nil:
	case ctx.Err() != nil:
		return nil, fmt.Errorf("exec issuer %q: %w", e.name, ctx.Err())
	case errors.Is(runCtx.Err(), context.DeadlineExceeded):
		return nil, withStderr(fmt.Sprintf("%s timed out after %s", e.argv[0], e.timeout))
	case errors.As(runErr, &exitErr):
		if code := exitErr.ExitCode(); code >= 0 {
			return nil, withStderr(fmt.Sprintf("%s exited with status %d", e.argv[0], code))
		}
		return nil, withStderr(fmt.Sprintf("%s ended: %s", e.argv[0], exitErr.ProcessState))
	default:
		return nil, withStderr(fmt.Sprintf("run %s: %v", e.argv[0], runErr))
	}
	if stdout.Truncated {
		return nil, withStderr(fmt.Sprintf("output larger than %d bytes", maxExecStdout))
	}
	if parseErr != nil {
		return nil, withStderr(parseErr.Error())
	}
	exp, err := time.Parse(time.RFC3339, out.ExpiresAt)
	if err != nil {
		return nil, withStderr(fmt.Sprintf("expires_at %q is not an RFC 3339 time", out.ExpiresAt))
	}
	if now := e.clock.Now(); !exp.After(now) {
		return nil, withStderr(fmt.Sprintf("credential expires at %s, which is not in the future", out.ExpiresAt))
	}
	c := &Credential{
		Name:     req.Name,
		Token:    token.Secret(out.Token),
		ID:       out.ID,
		Audience: req.Audience,
		Scopes:   req.Scopes,
		IssuedAt: e.clock.Now(),
		Expiry:   exp,
	}
	if c.ID == "" {
		sum := sha256.Sum256([]byte(out.Token))
		c.ID = "sha256:" + hex.EncodeToString(sum[:8])
	}
	if len(out.Env) > 0 {
		c.Env = make(map[string]token.Secret, len(out.Env))
		for k, v := range out.Env {
			if !envNameRE.MatchString(k) {
				return nil, withStderr(fmt.Sprintf("env name %q is not a valid variable name", k))
			}
			c.Env[k] = token.Secret(v)
		}
	}
	return c, nil
}

// parseExecOutput decodes the command's output. Its errors never quote the
// output: it holds the credential.
func parseExecOutput(b []byte) (execOutput, error) {
	var out execOutput
	if len(bytes.TrimSpace(b)) == 0 {
		return out, errors.New("no output (want a JSON object with \"token\" and \"expires_at\")")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&out); err != nil {
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.As(err, &se):
			return execOutput{}, fmt.Errorf("output is not valid JSON (syntax error at byte %d)", se.Offset)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return execOutput{}, errors.New("output is not valid JSON (it ends early)")
		case errors.As(err, &te):
			return execOutput{}, fmt.Errorf("output field %q has the wrong type (want %s)", te.Field, te.Type)
		default:
			return execOutput{}, errors.New("output is not a JSON object")
		}
	}
	if dec.More() {
		return execOutput{}, errors.New("output has more than one JSON value")
	}
	if out.Token == "" {
		return out, errors.New("output has no \"token\"")
	}
	if out.ExpiresAt == "" {
		return out, errors.New("output has no \"expires_at\"")
	}
	return out, nil
}

// firstLine returns the first non-empty line of stderr, bounded, without
// control characters, and with secret (if it appears) redacted.
func firstLine(stderr []byte, secret string) string {
	var line string
	for l := range strings.Lines(string(stderr)) {
		if l = strings.TrimSpace(l); l != "" {
			line = l
			break
		}
	}
	if secret != "" {
		line = strings.ReplaceAll(line, secret, token.Redacted)
	}
	line = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, line)
	if len(line) > maxErrLine {
		line = strings.ToValidUTF8(line[:maxErrLine], "") + "…"
	}
	return line
}
