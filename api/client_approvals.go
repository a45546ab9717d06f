package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/containerd/errdefs"
)

// maxApprovalLine bounds one line of a follow stream.
const maxApprovalLine = 1 << 20

// ListApprovals returns the requests held for approval, oldest first: a
// session's when session is set, all otherwise.
func (c *Client) ListApprovals(ctx context.Context, session string) ([]Approval, error) {
	var out []Approval
	if err := c.doJSON(ctx, http.MethodGet, "/v1/approvals", approvalsQuery(session, false), nil, &out); err != nil {
		return nil, err
	}
	return out, nil
}

// FollowApprovals calls fn with an ApprovalHeld event for each request
// held now, then with each hold and decision as it happens, until ctx is
// done (it then returns ctx's error), the daemon ends the stream, or fn
// returns an error (which it returns).
func (c *Client) FollowApprovals(ctx context.Context, session string, fn func(ApprovalEvent) error) error {
	resp, err := c.do(ctx, http.MethodGet, "/v1/approvals", approvalsQuery(session, true), nil, "")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), maxApprovalLine)
	for sc.Scan() {
		var ev ApprovalEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("approvals stream: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && !errors.Is(err, io.EOF) {
		return c.streamError(ctx, fmt.Errorf("approvals stream: %w", err))
	}
	return ctx.Err()
}

// DecideApproval allows or denies a held request and returns it decided.
// An unknown id is a not-found error; one decided before (by a person,
// the approver, a timeout or the session's end) a failed-precondition
// error that says how.
func (c *Client) DecideApproval(ctx context.Context, id string, d ApprovalDecision) (*Approval, error) {
	if id == "" {
		return nil, fmt.Errorf("approval id must not be empty: %w", errdefs.ErrInvalidArgument)
	}
	var a Approval
	if err := c.doJSON(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id), nil, d, &a); err != nil {
		return nil, err
	}
	return &a, nil
}

func approvalsQuery(session string, follow bool) url.Values {
	q := url.Values{}
	if session != "" {
		q.Set("session", session)
	}
	if follow {
		q.Set("follow", "1")
	}
	return q
}
