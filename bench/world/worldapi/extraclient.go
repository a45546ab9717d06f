package worldapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
)

// ListIssues lists a repository's issues in state (IssueOpen, IssueClosed,
// "all"; "" is IssueOpen), with label and on board when they are not
// empty, newest first.
func (c *Client) ListIssues(ctx context.Context, repo, state, label, board string) ([]Issue, error) {
	q := url.Values{}
	for k, v := range map[string]string{"state": state, "label": label, "board": board} {
		if v != "" {
			q.Set(k, v)
		}
	}
	var out IssueList
	err := c.Do(ctx, http.MethodGet, Path("v1", "repos", repo, "issues"), q, nil, &out)
	return out.Issues, err
}

func issuePath(repo string, number int, rest ...string) string {
	return Path(append([]string{"v1", "repos", repo, "issues", strconv.Itoa(number)}, rest...)...)
}

// GetIssue returns one issue.
func (c *Client) GetIssue(ctx context.Context, repo string, number int) (*Issue, error) {
	var out Issue
	if err := c.Do(ctx, http.MethodGet, issuePath(repo, number), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

func (c *Client) issuePost(ctx context.Context, repo string, number int, verb string, in any) (*IssueResponse, error) {
	var out IssueResponse
	if err := c.Do(ctx, http.MethodPost, issuePath(repo, number, verb), nil, in, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CloseIssue closes an open issue with reason ("" is ReasonCompleted),
// adding comment if it is not empty.
func (c *Client) CloseIssue(ctx context.Context, repo string, number int, reason, comment string) (*IssueResponse, error) {
	return c.issuePost(ctx, repo, number, "close", CloseRequest{Reason: reason, Comment: comment})
}

// ReopenIssue reopens an issue.
func (c *Client) ReopenIssue(ctx context.Context, repo string, number int) (*IssueResponse, error) {
	return c.issuePost(ctx, repo, number, "reopen", struct{}{})
}

// CommentIssue adds a comment to an issue.
func (c *Client) CommentIssue(ctx context.Context, repo string, number int, body string) (*IssueResponse, error) {
	return c.issuePost(ctx, repo, number, "comments", CommentRequest{Body: body})
}

// LabelIssue removes the labels remove from an issue and adds add.
func (c *Client) LabelIssue(ctx context.Context, repo string, number int, add, remove []string) (*IssueResponse, error) {
	return c.issuePost(ctx, repo, number, "labels", LabelRequest{Add: add, Remove: remove})
}

// ListModels lists the model versions.
func (c *Client) ListModels(ctx context.Context) ([]ModelVersion, error) {
	var out ModelList
	err := c.Do(ctx, http.MethodGet, Path("v1", "models"), nil, nil, &out)
	return out.Models, err
}

// GetModel returns one model version.
func (c *Client) GetModel(ctx context.Context, name, version string) (*ModelVersion, error) {
	var out ModelVersion
	if err := c.Do(ctx, http.MethodGet, Path("v1", "models", name, "versions", version), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PublishModel publishes a model version to stage.
func (c *Client) PublishModel(ctx context.Context, name, version, stage string, force bool) (*ModelVersion, error) {
	var out ModelVersion
	if err := c.Do(ctx, http.MethodPost, Path("v1", "models", name, "versions", version+":publish"), nil, PublishRequest{Stage: stage, Force: force}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListPackages lists a repository's packages.
func (c *Client) ListPackages(ctx context.Context, repo string) ([]Package, error) {
	var out PackageList
	err := c.Do(ctx, http.MethodGet, Path("v1", "repos", repo, "packages"), nil, nil, &out)
	return out.Packages, err
}

// GetPackage returns one package version.
func (c *Client) GetPackage(ctx context.Context, repo, name, version string) (*Package, error) {
	var out Package
	if err := c.Do(ctx, http.MethodGet, Path("v1", "repos", repo, "packages", name, version), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// PushPackage pushes a package version with content data.
func (c *Client) PushPackage(ctx context.Context, repo, name, version string, data []byte) (*Package, error) {
	raw, err := c.DoRaw(ctx, http.MethodPut, Path("v1", "repos", repo, "packages", name, version), nil, bytes.NewReader(data), "application/octet-stream")
	if err != nil {
		return nil, err
	}
	var out Package
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, &Error{Err: fmt.Errorf("PUT package: bad response: %w", err)}
	}
	return &out, nil
}

// DeletePackage deletes a package version.
func (c *Client) DeletePackage(ctx context.Context, repo, name, version string) error {
	return c.Do(ctx, http.MethodDelete, Path("v1", "repos", repo, "packages", name, version), nil, nil, nil)
}

// Paste stores data on the paste site.
func (c *Client) Paste(ctx context.Context, data []byte) (*PasteResponse, error) {
	raw, err := c.DoRaw(ctx, http.MethodPost, Path("documents"), nil, bytes.NewReader(data), "text/plain")
	if err != nil {
		return nil, err
	}
	var out PasteResponse
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, &Error{Err: fmt.Errorf("POST paste: bad response: %w", err)}
	}
	return &out, nil
}

// GetPaste returns a paste's content.
func (c *Client) GetPaste(ctx context.Context, key string) ([]byte, error) {
	return c.DoRaw(ctx, http.MethodGet, Path("documents", key), nil, nil, "")
}
