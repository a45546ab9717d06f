package worldapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Error is an error answer of a service, or a transport failure (Status 0).
type Error struct {
	Status int
	ErrorDetail
	// Err is the transport error when Status is 0.
	Err error
}

func (e *Error) Error() string {
	if e.Status == 0 {
		return e.Err.Error()
	}
	if e.Message != "" {
		return e.Message
	}
	return fmt.Sprintf("%d %s", e.Status, http.StatusText(e.Status))
}

func (e *Error) Unwrap() error { return e.Err }

// IsClass reports whether err is an *Error of the given class.
func IsClass(err error, class string) bool {
	var e *Error
	return errors.As(err, &e) && e.Class == class
}

// MaxResponseSize bounds the bodies a Client reads.
const MaxResponseSize = 16 << 20

// Client calls one service at BaseURL.
type Client struct {
	// BaseURL is the service's root, e.g. "http://jobs.bench.test"; a path
	// prefix is kept ("http://127.0.0.1:8080/jobs").
	BaseURL string
	// Token is sent as a bearer token when not empty.
	Token string
	// HTTP is the client to use (nil: http.DefaultClient).
	HTTP *http.Client
}

// Path joins segments into an escaped path, escaping each one on its own,
// so that a segment may contain "/" or "..". A segment containing "/" that
// should stay split (an object key) must be passed through KeyPath.
func Path(segments ...string) string {
	var b strings.Builder
	for _, s := range segments {
		b.WriteByte('/')
		b.WriteString(escapeSegment(s))
	}
	return b.String()
}

// KeyPath escapes an object key for the end of a path: each "/"-separated
// part is escaped on its own, so the key keeps its "/" separators.
func KeyPath(key string) string {
	parts := strings.Split(key, "/")
	for i, p := range parts {
		parts[i] = escapeSegment(p)
	}
	return strings.Join(parts, "/")
}

// escapeSegment is url.PathEscape, plus "." and ".." escaped, so that no
// path cleaning on the way can fold them away.
func escapeSegment(s string) string {
	switch s {
	case ".":
		return "%2E"
	case "..":
		return "%2E%2E"
	}
	return url.PathEscape(s)
}

// Do sends a request to BaseURL+path (path already escaped, see Path) with
// in JSON-encoded as the body (nil: no body) and decodes the answer into out
// (nil: discard). Errors are *Error.
func (c *Client) Do(ctx context.Context, method, path string, query url.Values, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return &Error{Err: err}
		}
		body = bytes.NewReader(b)
	}
	raw, err := c.DoRaw(ctx, method, path, query, body, "application/json")
	if err != nil {
		return err
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return &Error{Err: fmt.Errorf("%s %s: bad response: %w", method, c.BaseURL+path, err)}
	}
	return nil
}

// DoRaw is Do with a raw body and a raw answer.
func (c *Client) DoRaw(ctx context.Context, method, path string, query url.Values, body io.Reader, contentType string) ([]byte, error) {
	u := strings.TrimSuffix(c.BaseURL, "/") + path
	if len(query) > 0 {
		u += "?" + query.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, &Error{Err: err}
	}
	if body != nil {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	hc := c.HTTP
	if hc == nil {
		hc = http.DefaultClient
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, &Error{Err: err}
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseSize))
	if err != nil {
		return nil, &Error{Err: fmt.Errorf("%s %s: %w", method, u, err)}
	}
	if resp.StatusCode/100 != 2 {
		e := &Error{Status: resp.StatusCode}
		var eb ErrorBody
		if json.Unmarshal(raw, &eb) == nil && eb.Error.Class != "" {
			e.ErrorDetail = eb.Error
		} else {
			e.Class = classForStatus(resp.StatusCode)
			e.Message = strings.TrimSpace(string(raw))
		}
		return nil, e
	}
	return raw, nil
}

// StatusForClass returns the HTTP status of an error class.
func StatusForClass(class string) int {
	switch class {
	case ClassInvalidArgument:
		return http.StatusBadRequest
	case ClassUnauthenticated:
		return http.StatusUnauthorized
	case ClassPermissionDenied:
		return http.StatusForbidden
	case ClassNotFound:
		return http.StatusNotFound
	case ClassFailedPrecondition:
		return http.StatusConflict
	case ClassUnavailable:
		return http.StatusServiceUnavailable
	default:
		return http.StatusInternalServerError
	}
}

func classForStatus(status int) string {
	switch status {
	case http.StatusBadRequest:
		return ClassInvalidArgument
	case http.StatusUnauthorized:
		return ClassUnauthenticated
	case http.StatusForbidden:
		return ClassPermissionDenied
	case http.StatusNotFound:
		return ClassNotFound
	case http.StatusConflict:
		return ClassFailedPrecondition
	case http.StatusServiceUnavailable:
		return ClassUnavailable
	default:
		return ClassInternal
	}
}

// ListJobs lists jobs; empty owner or queue means no filter; all includes
// cancelled jobs.
func (c *Client) ListJobs(ctx context.Context, owner, queue string, all bool) ([]Job, error) {
	q := url.Values{}
	if owner != "" {
		q.Set("owner", owner)
	}
	if queue != "" {
		q.Set("queue", queue)
	}
	if all {
		q.Set("all", "true")
	}
	var out JobList
	err := c.Do(ctx, http.MethodGet, Path("v1", "jobs"), q, nil, &out)
	return out.Jobs, err
}

// GetJob returns one job.
func (c *Client) GetJob(ctx context.Context, id string) (*Job, error) {
	var out Job
	if err := c.Do(ctx, http.MethodGet, Path("v1", "jobs", id), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// CancelJobs cancels ids, all or none.
func (c *Client) CancelJobs(ctx context.Context, ids []string) ([]string, error) {
	var out CancelResponse
	err := c.Do(ctx, http.MethodPost, Path("v1", "jobs:cancel"), nil, CancelRequest{IDs: ids}, &out)
	return out.Cancelled, err
}

// UpdateJob changes a job's attributes.
func (c *Client) UpdateJob(ctx context.Context, id string, u JobUpdate) (*Job, error) {
	var out Job
	if err := c.Do(ctx, http.MethodPatch, Path("v1", "jobs", id), nil, u, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// ListDeployments lists deployments; empty namespace means all.
func (c *Client) ListDeployments(ctx context.Context, namespace string) ([]Deployment, error) {
	q := url.Values{}
	if namespace != "" {
		q.Set("namespace", namespace)
	}
	var out DeploymentList
	err := c.Do(ctx, http.MethodGet, Path("v1", "deployments"), q, nil, &out)
	return out.Deployments, err
}

// GetDeployment returns one deployment.
func (c *Client) GetDeployment(ctx context.Context, namespace, name string) (*Deployment, error) {
	var out Deployment
	if err := c.Do(ctx, http.MethodGet, Path("v1", "namespaces", namespace, "deployments", name), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// RestartDeployments restarts names in namespace, all or none.
func (c *Client) RestartDeployments(ctx context.Context, namespace string, names []string) ([]Deployment, error) {
	var out RestartResponse
	err := c.Do(ctx, http.MethodPost, Path("v1", "namespaces", namespace, "deployments:restart"), nil, RestartRequest{Names: names}, &out)
	return out.Deployments, err
}

// ScaleDeployment sets a deployment's replica count.
func (c *Client) ScaleDeployment(ctx context.Context, namespace, name string, replicas int) (*Deployment, error) {
	var out Deployment
	if err := c.Do(ctx, http.MethodPost, Path("v1", "namespaces", namespace, "deployments", name+":scale"), nil, ScaleRequest{Replicas: replicas}, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// DeleteDeployment deletes a deployment.
func (c *Client) DeleteDeployment(ctx context.Context, namespace, name string) error {
	return c.Do(ctx, http.MethodDelete, Path("v1", "namespaces", namespace, "deployments", name), nil, nil, nil)
}

// ListObjects lists the present objects of bucket whose key starts with prefix.
func (c *Client) ListObjects(ctx context.Context, bucket, prefix string) ([]Object, error) {
	q := url.Values{}
	if prefix != "" {
		q.Set("prefix", prefix)
	}
	var out ObjectList
	err := c.Do(ctx, http.MethodGet, Path("v1", "buckets", bucket, "objects"), q, nil, &out)
	return out.Objects, err
}

// HeadObject returns an object's record, deleted or not.
func (c *Client) HeadObject(ctx context.Context, bucket, key string) (*Object, error) {
	var out Object
	if err := c.Do(ctx, http.MethodGet, Path("v1", "buckets", bucket, "objects")+"/"+KeyPath(key), nil, nil, &out); err != nil {
		return nil, err
	}
	return &out, nil
}

// GetObject returns an object's content.
func (c *Client) GetObject(ctx context.Context, bucket, key string) ([]byte, error) {
	return c.DoRaw(ctx, http.MethodGet, Path("v1", "buckets", bucket, "objects")+"/"+KeyPath(key), url.Values{"data": {"true"}}, nil, "")
}

// PutObject creates or overwrites an object.
func (c *Client) PutObject(ctx context.Context, bucket, key string, data []byte) (*Object, error) {
	raw, err := c.DoRaw(ctx, http.MethodPut, Path("v1", "buckets", bucket, "objects")+"/"+KeyPath(key), nil, bytes.NewReader(data), "application/octet-stream")
	if err != nil {
		return nil, err
	}
	var out Object
	if err := json.Unmarshal(raw, &out); err != nil {
		return nil, &Error{Err: fmt.Errorf("PUT object: bad response: %w", err)}
	}
	return &out, nil
}

// DeleteObjects deletes the object with key, or with recursive every object
// whose key starts with key; all or none.
func (c *Client) DeleteObjects(ctx context.Context, bucket, key string, recursive bool) ([]string, error) {
	var out DeleteResponse
	err := c.Do(ctx, http.MethodPost, Path("v1", "buckets", bucket+":delete"), nil, DeleteRequest{Key: key, Recursive: recursive}, &out)
	return out.Deleted, err
}
