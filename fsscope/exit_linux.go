package fsscope

import (
	"context"
	"errors"
	"fmt"
)

// Exit ends a session whose sandbox is gone, in one pass: it does what
// Teardown(ctx, true), Finish and Teardown(ctx, false) do in turn, except
// that the quota filesystem stays mounted from start to end instead of
// being unmounted and mounted again by each step (on_exit "review" with no
// changes costs a walk of empty upper directories), and that the state
// file is not rewritten to say the sandbox is gone when it is removed
// anyway. res and review are Finish's: when changes are left for review,
// or on_exit failed, the session is left as Teardown(ctx, true) leaves it,
// for Diff, Commit and Discard; otherwise everything is removed. A crash
// part-way leaves a state that Load followed by Exit, or Cleanup, takes up.
func (s *Session) Exit(ctx context.Context, audit func(Event)) (res *CommitResult, review bool, err error) {
	if err := s.unmountSandbox(ctx); err != nil {
		return nil, false, fmt.Errorf("unmount sandbox view: %w", err)
	}
	res, review, err = s.Finish(ctx, audit)
	if err != nil || review {
		return res, review, errors.Join(err, s.Teardown(ctx, true))
	}
	return res, false, s.Teardown(ctx, false)
}

// unmountSandbox is the first half of Teardown(ctx, true): it rolls back an
// interrupted commit and removes the sandbox's mounts, but leaves the quota
// filesystem mounted and the state file as it is (still live), so that a
// crash before the end is taken up as if the sandbox had just exited.
func (s *Session) unmountSandbox(ctx context.Context) error {
	unlock, err := s.lock()
	if err != nil {
		return err
	}
	defer unlock()
	if err := s.recoverJournalsLocked(ctx); err != nil {
		return err
	}
	if err := s.unmountSandboxLocked(); err != nil {
		return err
	}
	s.st.Live = false
	return nil
}
