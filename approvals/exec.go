package approvals

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"time"
	"unicode"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/limitbuf"
)

const (
	maxExecStdout = 64 << 10
	maxExecStderr = 64 << 10
	maxErrLine    = 200
)

// execPath is the PATH an approver command runs with.
const execPath = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// ExecApprover runs an operator-configured command for every held
// request (airlockd --approver exec:CMD): to decide it by a rule of its
// own, or to pass it on to people elsewhere and wait for their answer.
//
// The command gets the held request on stdin, one JSON api.Approval:
//
//	{"id": "3f9c0e1a2b4d5e6f", "session": "ID", "method": "POST",
//	 "host": "git.corp.test", "path": "/repo.git/git-receive-pack",
//	 "query": "", "headers": [{"name": "Content-Type", "value": "..."}, ...],
//	 "rule": "ask POST /repo.git/git-receive-pack", "refs": ["refs/heads/main"],
//	 "body": "MDA5NGIxYzQ...", "content_type": "application/x-git-receive-pack-request",
//	 "created": "...", "deadline": "...", "state": "pending"}
//
// "query" is the request's raw query ("query_truncated" if it is longer
// than 8 KiB) and "headers" its header fields as the sandbox sent them
// ("headers_truncated" if some were left out; a header bound to a secret
// has the secret's placeholder and "secret": its name, never its value):
// see api.Approval. "body" is the start of the request's body (base64, at most 64 KiB, as
// the sandbox sent it: "content_encoding" says if it is compressed;
// "body_truncated" if it is longer), so that the command can see what
// the request would do. It is the sandbox's bytes: a command that shows
// it to a person must escape it. It goes to the command's stdin only;
// airlockd logs neither it nor the command's stdout.
//
// and writes one JSON object to stdout, then exits 0:
//
//	{"decision": "allow" | "deny", "reason": "why (optional)"}
//
// An empty output or an empty "decision" is no decision. A non-zero exit,
// output that is not such an object (unknown fields included), or a run
// past the request's deadline or the exec timeout is a failure. Either way
// the request waits for a person, and the daemon logs why, quoting the
// first line of stderr. A person's decision that comes first ends the
// run. The command runs without a shell, in its own process group (killed
// with it), with no environment from airlockd but a fixed PATH and what
// WithExecEnv adds: the daemon's secrets never reach it. Its output is
// bounded (64KiB each for stdout and stderr).
type ExecApprover struct {
	argv    []string
	env     []string
	timeout time.Duration
}

// ExecOption configures NewExecApprover.
type ExecOption func(*ExecApprover)

// WithExecTimeout bounds each run (default: the request's deadline only).
func WithExecTimeout(d time.Duration) ExecOption { return func(e *ExecApprover) { e.timeout = d } }

// WithExecEnv adds KEY=VALUE entries to the command's environment.
func WithExecEnv(env ...string) ExecOption {
	return func(e *ExecApprover) { e.env = append(e.env, env...) }
}

// NewExecApprover returns an approver running argv.
func NewExecApprover(argv []string, opts ...ExecOption) (*ExecApprover, error) {
	if len(argv) == 0 || argv[0] == "" {
		return nil, fmt.Errorf("exec approver: empty command: %w", errdefs.ErrInvalidArgument)
	}
	e := &ExecApprover{argv: append([]string(nil), argv...)}
	for _, o := range opts {
		o(e)
	}
	if e.timeout < 0 {
		return nil, fmt.Errorf("exec approver: timeout must not be negative: %w", errdefs.ErrInvalidArgument)
	}
	return e, nil
}

// String names the approver for logs.
func (e *ExecApprover) String() string { return "exec:" + strings.Join(e.argv, " ") }

// Approve implements Approver.
func (e *ExecApprover) Approve(ctx context.Context, a api.Approval) (*Verdict, error) {
	in, err := json.Marshal(a)
	if err != nil {
		return nil, err
	}
	runCtx := ctx
	if e.timeout > 0 {
		var cancel context.CancelFunc
		runCtx, cancel = context.WithTimeout(ctx, e.timeout)
		defer cancel()
	}
	cmd := exec.CommandContext(runCtx, e.argv[0], e.argv[1:]...)
	cmd.Stdin = bytes.NewReader(in)
	stdout := limitbuf.New(maxExecStdout)
	stderr := limitbuf.New(maxExecStderr)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Env = append([]string{execPath}, e.env...)
	cmd.WaitDelay = time.Second
	setProcessGroup(cmd)

	runErr := cmd.Run()
	line := firstLine(stderr.Bytes())
	fail := func(msg string) error {
		if line != "" {
			msg += ": " + line
		}
		return fmt.Errorf("approver %s: %s: %w", e.argv[0], msg, errdefs.ErrUnavailable)
	}
	var exitErr *exec.ExitError
	switch {
	case runErr == nil:
	case ctx.Err() != nil:
		return nil, fmt.Errorf("approver %s: %w", e.argv[0], ctx.Err())
	case errors.Is(runCtx.Err(), context.DeadlineExceeded):
		return nil, fail(fmt.Sprintf("timed out after %s", e.timeout))
	case errors.As(runErr, &exitErr):
		if code := exitErr.ExitCode(); code >= 0 {
			return nil, fail(fmt.Sprintf("exited with status %d", code))
		}
		return nil, fail(fmt.Sprintf("ended: %s", exitErr.ProcessState))
	default:
		return nil, fail(fmt.Sprintf("run: %v", runErr))
	}
	if stdout.Truncated {
		return nil, fail(fmt.Sprintf("output larger than %d bytes", maxExecStdout))
	}
	v, err := parseVerdict(stdout.Bytes())
	if err != nil {
		return nil, fail(err.Error())
	}
	return v, nil
}

// parseVerdict decodes an approver's output: nil for no decision.
func parseVerdict(b []byte) (*Verdict, error) {
	if len(bytes.TrimSpace(b)) == 0 {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var out api.ApprovalDecision
	if err := dec.Decode(&out); err != nil {
		var se *json.SyntaxError
		switch {
		case errors.As(err, &se):
			return nil, fmt.Errorf("output is not valid JSON (syntax error at byte %d)", se.Offset)
		case errors.Is(err, io.ErrUnexpectedEOF):
			return nil, errors.New("output is not valid JSON (it ends early)")
		default:
			return nil, fmt.Errorf("output is not a decision object: %v", err)
		}
	}
	if dec.More() {
		return nil, errors.New("output has more than one JSON value")
	}
	if _, err := dec.Token(); err != io.EOF {
		// More() misses a stray closing bracket: read to the end.
		return nil, errors.New("output has data after its JSON value")
	}
	switch out.Decision {
	case "":
		return nil, nil
	case api.DecisionAllow:
		return &Verdict{Allow: true, Reason: out.Reason}, nil
	case api.DecisionDeny:
		return &Verdict{Reason: out.Reason}, nil
	}
	return nil, fmt.Errorf("decision %q is neither %q nor %q", truncateRunes(out.Decision, 40), api.DecisionAllow, api.DecisionDeny)
}

// firstLine returns the first non-empty line of stderr, bounded and
// without control characters.
func firstLine(stderr []byte) string {
	for l := range strings.Lines(string(stderr)) {
		if l = strings.TrimSpace(l); l != "" {
			l = strings.Map(func(r rune) rune {
				if unicode.IsControl(r) {
					return -1
				}
				return r
			}, strings.ToValidUTF8(l, ""))
			return truncateRunes(l, maxErrLine)
		}
	}
	return ""
}

func truncateRunes(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}
