package credentials

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/credentials/clock"
)

// script writes an executable shell script into a temporary directory.
func script(t *testing.T, body string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "issuer.sh")
	if err := os.WriteFile(path, []byte("#!/bin/sh\n"+body), 0o700); err != nil {
		t.Fatal(err)
	}
	return path
}

const execSecret = "AKIA-super-secret-value"

var execReq = IssueRequest{Session: "s-1", Name: "aws", Audience: "objects.corp.test", Scopes: []string{"objects.get bucket=b"}, TTL: 15 * time.Minute}

func TestExecIssuerSuccess(t *testing.T) {
	fc := clock.NewFake(t0)
	stdin := filepath.Join(t.TempDir(), "stdin.json")
	path := script(t, `cat > "$STDIN_COPY"
echo "issuing for $EXTRA" >&2
cat <<EOF
{"token": "`+execSecret+`", "expires_at": "2026-03-01T12:15:00Z",
 "env": {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "`+execSecret+`"}}
EOF
`)
	is, err := NewExecIssuer("aws", []string{path}, WithExecClock(fc), WithExecEnv("STDIN_COPY="+stdin, "EXTRA=x"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := is.Issue(t.Context(), execReq)
	if err != nil {
		t.Fatal(err)
	}
	if c.Token.Reveal() != execSecret || !c.Expiry.Equal(t0.Add(15*time.Minute)) || c.Revocable {
		t.Fatalf("credential %+v", c)
	}
	if !strings.HasPrefix(c.ID, "sha256:") || len(c.ID) != len("sha256:")+16 {
		t.Fatalf("fingerprint id %q", c.ID)
	}
	if c.Env["AWS_SECRET_ACCESS_KEY"].Reveal() != execSecret || len(c.Env) != 2 {
		t.Fatalf("env %v", c.Env)
	}

	b, err := os.ReadFile(stdin)
	if err != nil {
		t.Fatal(err)
	}
	var in map[string]any
	if err := json.Unmarshal(b, &in); err != nil {
		t.Fatalf("stdin %s: %v", b, err)
	}
	want := map[string]any{"session": "s-1", "name": "aws", "audience": "objects.corp.test",
		"scopes": []any{"objects.get bucket=b"}, "ttl_seconds": float64(900)}
	if got, _ := json.Marshal(in); string(got) != string(mustMarshal(t, want)) {
		t.Fatalf("stdin %s, want %s", got, mustMarshal(t, want))
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestExecIssuerID(t *testing.T) {
	path := script(t, `echo '{"token":"t","expires_at":"2026-03-01T14:00:00+01:00","id":"sts-123"}'`)
	is, _ := NewExecIssuer("x", []string{path}, WithExecClock(clock.NewFake(t0)))
	c, err := is.Issue(t.Context(), execReq)
	if err != nil {
		t.Fatal(err)
	}
	if c.ID != "sts-123" || !c.Expiry.Equal(t0.Add(time.Hour)) {
		t.Fatalf("credential id %q expiry %v; want sts-123 and %v", c.ID, c.Expiry, t0.Add(time.Hour))
	}
}

func TestExecIssuerFailures(t *testing.T) {
	tests := []struct {
		name    string
		body    string
		timeout time.Duration
		wantMsg []string
	}{
		{
			name:    "non-zero exit",
			body:    "echo 'sts: AccessDenied for role dev' >&2\necho 'second line' >&2\nexit 3",
			wantMsg: []string{"exited with status 3", "sts: AccessDenied for role dev"},
		},
		{
			name:    "non-zero exit after printing a token",
			body:    `echo '{"token":"` + execSecret + `","expires_at":"2030-01-01T00:00:00Z"}'; echo "failed: ` + execSecret + `" >&2; exit 1`,
			wantMsg: []string{"exited with status 1", "failed: [REDACTED]"},
		},
		{
			name:    "bad JSON",
			body:    `echo '{"token": "` + execSecret + `", '`,
			wantMsg: []string{"output is not valid JSON"},
		},
		{
			name:    "wrong type",
			body:    `echo '{"token": 5, "expires_at": "2030-01-01T00:00:00Z"}'`,
			wantMsg: []string{`field "token" has the wrong type`},
		},
		{
			name:    "two values",
			body:    `echo '{"token":"a","expires_at":"2030-01-01T00:00:00Z"} {}'`,
			wantMsg: []string{"more than one JSON value"},
		},
		{
			name:    "empty output",
			body:    `true`,
			wantMsg: []string{"no output"},
		},
		{
			name:    "no token",
			body:    `echo '{"expires_at":"2030-01-01T00:00:00Z"}'`,
			wantMsg: []string{`no "token"`},
		},
		{
			name:    "no expiry",
			body:    `echo '{"token":"` + execSecret + `"}'`,
			wantMsg: []string{`no "expires_at"`},
		},
		{
			name:    "bad expiry",
			body:    `echo '{"token":"` + execSecret + `","expires_at":"tomorrow"}'`,
			wantMsg: []string{`expires_at "tomorrow" is not an RFC 3339 time`},
		},
		{
			name:    "already expired",
			body:    `echo '{"token":"` + execSecret + `","expires_at":"2026-03-01T11:59:59Z"}'`,
			wantMsg: []string{"not in the future"},
		},
		{
			name:    "bad env name",
			body:    `echo '{"token":"t","expires_at":"2030-01-01T00:00:00Z","env":{"A=B":"x"}}'`,
			wantMsg: []string{`env name "A=B"`},
		},
		{
			name:    "timeout",
			body:    "echo 'contacting sts' >&2\nsleep 30 &\nwait",
			timeout: 200 * time.Millisecond,
			wantMsg: []string{"timed out after 200ms", "contacting sts"},
		},
		{
			name:    "output too large",
			body:    `head -c 2000000 /dev/zero`,
			wantMsg: []string{"output larger than"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			opts := []ExecOption{WithExecClock(clock.NewFake(t0))}
			if tt.timeout > 0 {
				opts = append(opts, WithExecTimeout(tt.timeout))
			}
			path := script(t, tt.body)
			is, err := NewExecIssuer("aws", []string{path}, opts...)
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			c, err := is.Issue(t.Context(), execReq)
			if err == nil {
				t.Fatalf("Issue = %+v, want error", c)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Fatalf("Issue took %s", d)
			}
			msg := err.Error()
			for _, w := range tt.wantMsg {
				if !strings.Contains(msg, w) {
					t.Errorf("error %q lacks %q", msg, w)
				}
			}
			if !strings.Contains(msg, `exec issuer "aws"`) {
				t.Errorf("error %q does not name the issuer", msg)
			}
			if strings.Contains(msg, execSecret) {
				t.Errorf("error %q contains the secret", msg)
			}
			if !errdefs.IsUnavailable(err) {
				t.Errorf("error %q is not Unavailable", msg)
			}
		})
	}
}

func TestExecIssuerStartAndCancel(t *testing.T) {
	is, _ := NewExecIssuer("x", []string{filepath.Join(t.TempDir(), "missing")})
	if _, err := is.Issue(t.Context(), execReq); err == nil || !strings.Contains(err.Error(), "run ") {
		t.Fatalf("missing command: %v", err)
	}

	path := script(t, "sleep 30")
	is, _ = NewExecIssuer("x", []string{path})
	ctx, cancel := context.WithCancel(t.Context())
	go func() {
		time.Sleep(50 * time.Millisecond)
		cancel()
	}()
	if _, err := is.Issue(ctx, execReq); err == nil || !strings.Contains(err.Error(), "context canceled") {
		t.Fatalf("cancelled: %v", err)
	}

	if _, err := NewExecIssuer("x", nil); err == nil {
		t.Fatal("NewExecIssuer accepted an empty command")
	}
	if _, err := NewExecIssuer("x", []string{"/bin/true"}, WithExecTimeout(0)); err == nil {
		t.Fatal("NewExecIssuer accepted a zero timeout")
	}
}

func TestBrokerWithExecIssuer(t *testing.T) {
	fc := clock.NewFake(t0)
	ok := script(t, `echo '{"token":"`+execSecret+`","expires_at":"2026-03-01T12:30:00Z"}'`)
	bad := script(t, "echo 'no role for session' >&2; exit 2")
	okIs, _ := NewExecIssuer("sts", []string{ok}, WithExecClock(fc))
	badIs, _ := NewExecIssuer("vault", []string{bad}, WithExecClock(fc))
	h := newHarness(t, WithIssuer("sts", okIs), WithIssuer("vault", badIs))
	h.clock.Set(t0)

	creds := h.mint(t, "s-1", Request{Name: "aws", Issuer: "sts", Audience: "aws", Scopes: []string{"objects.get bucket=b"}})
	if c := creds[0]; c.Issuer != "sts" || c.Token.Reveal() != execSecret || c.Revocable {
		t.Fatalf("credential %+v", c)
	}
	_, err := h.broker.Mint(h.ctx, "s-2", []Request{gitReq, {Name: "db", Issuer: "vault", Audience: "db", Scopes: []string{"x.y"}}})
	if err == nil || !strings.Contains(err.Error(), `session s-2: credential "db" (issuer "vault"): exec issuer "vault"`) ||
		!strings.Contains(err.Error(), "no role for session") {
		t.Fatalf("Mint with a failing exec issuer = %v", err)
	}
	// External credentials are not revocable: stopping the session emits
	// no revocation for them.
	h.broker.Revoke(h.ctx, "s-1")
	for _, e := range h.audit.all() {
		if e.Kind == EventRevoked && e.Session == "s-1" {
			t.Fatalf("revocation event for an external credential: %+v", e)
		}
	}
}
