package approvals

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// Verdict is an approver's decision.
type Verdict struct {
	Allow  bool
	Reason string
}

// Approver decides held requests on a person's behalf, or passes them on
// to one (a chat message, a ticket). Approve is called once per hold with
// the request pending, and its context ends when the request is decided
// otherwise or reaches its deadline. A nil Verdict with a nil error is no
// decision: the request waits for a person, as it does on an error.
type Approver interface {
	Approve(ctx context.Context, a api.Approval) (*Verdict, error)
}

// ParseApprover returns the approver spec names: "exec:CMD [ARGS...]", an
// ExecApprover running the absolute path CMD with ARGS (split at spaces;
// no shell).
func ParseApprover(spec string) (Approver, error) {
	kind, rest, ok := strings.Cut(spec, ":")
	if !ok || kind != "exec" {
		return nil, fmt.Errorf("approver %q: want exec:COMMAND [ARGS...]: %w", spec, errdefs.ErrInvalidArgument)
	}
	argv := strings.Fields(rest)
	if len(argv) == 0 {
		return nil, fmt.Errorf("approver %q: no command after exec: : %w", spec, errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(argv[0]) {
		return nil, fmt.Errorf("approver %q: command %q must be an absolute path: %w", spec, argv[0], errdefs.ErrInvalidArgument)
	}
	return NewExecApprover(argv)
}

// runApprover asks the store's approver about e (held, as a) within
// ctx, which ends with e's decision or deadline, and decides e by its
// verdict. A failure or no verdict is logged and leaves e to a person.
func (s *Store) runApprover(ctx context.Context, e *entry, a api.Approval) {
	defer s.wg.Done()
	defer e.stopApprover()
	ctx = log.With(ctx, "approval", a.ID, "session", a.Session)
	select {
	case s.approverSlots <- struct{}{}:
		defer func() { <-s.approverSlots }()
	case <-ctx.Done():
		return
	}
	v, err := s.approver.Approve(ctx, a)
	switch {
	case ctx.Err() != nil:
		// Decided otherwise, or its deadline came: nothing to say.
		return
	case err != nil:
		log.G(ctx).Warn("approver failed; the request waits for a person", "error", err)
		return
	case v == nil:
		log.G(ctx).Info("approver made no decision; the request waits for a person")
		return
	}
	if _, err := s.settle(ctx, e, v.Allow, cleanReason(v.Reason), ByApprover); err != nil && !errors.Is(err, errdefs.ErrFailedPrecondition) {
		log.G(ctx).Warn("approver's decision not taken", "error", err)
	}
}
