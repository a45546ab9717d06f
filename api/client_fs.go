package api

import (
	"context"
	"io"
	"net/http"
	"net/url"
)

// Diff returns what a session changed in its overlay workspaces.
func (c *Client) Diff(ctx context.Context, id string) (*ChangeSet, error) {
	p, err := sessionPath(id, "diff")
	if err != nil {
		return nil, err
	}
	var cs ChangeSet
	if err := c.doJSON(ctx, http.MethodGet, p, nil, nil, &cs); err != nil {
		return nil, err
	}
	return &cs, nil
}

// UnifiedDiff returns the session's changes to text files as a unified
// diff.
func (c *Client) UnifiedDiff(ctx context.Context, id string) ([]byte, error) {
	p, err := sessionPath(id, "diff")
	if err != nil {
		return nil, err
	}
	resp, err := c.do(ctx, http.MethodGet, p, url.Values{"format": {"unified"}}, nil, "")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// Commit applies a stopped session's change set to the host, as far as the
// workspace's rules allow.
func (c *Client) Commit(ctx context.Context, id string, req CommitRequest) (*CommitResult, error) {
	p, err := sessionPath(id, "commit")
	if err != nil {
		return nil, err
	}
	var res CommitResult
	if err := c.doJSON(ctx, http.MethodPost, p, nil, req, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

// Discard drops a stopped session's change set.
func (c *Client) Discard(ctx context.Context, id string) error {
	p, err := sessionPath(id, "discard")
	if err != nil {
		return err
	}
	return c.doJSON(ctx, http.MethodPost, p, nil, nil, nil)
}
