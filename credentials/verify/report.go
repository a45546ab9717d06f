package verify

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
)

// Rejection reports a refused token to the issuer, for its audit log. It
// never carries the token.
type Rejection struct {
	// ID and Subject are set when the token's signature was valid.
	ID       string `json:"jti,omitempty"`
	Subject  string `json:"sub,omitempty"`
	Audience string `json:"audience,omitempty"`
	// Action is the scope.Request action that was denied (Authorize).
	Action string `json:"action,omitempty"`
	// Reason is Reason(err).
	Reason string `json:"reason"`
	Detail string `json:"detail,omitempty"`
	// Client and Server are the two ends (IP:port) of the connection that
	// presented the token, as the service saw them (see WithConnection).
	// The issuer attributes a token it cannot identify (forged, malformed)
	// to the session that opened that connection.
	Client string `json:"client,omitempty"`
	Server string `json:"server,omitempty"`
}

type connKey struct{}

type conn struct{ client, server string }

// WithConnection returns ctx carrying the addresses (IP:port) of the
// connection a token came on: a Verifier's report of a rejection made
// with that context says where the token came from.
func WithConnection(ctx context.Context, client, server string) context.Context {
	return context.WithValue(ctx, connKey{}, conn{client: client, server: server})
}

// RequestContext is r's context carrying r's connection (WithConnection):
// pass it to Verify and Authorize.
func RequestContext(r *http.Request) context.Context {
	var server string
	if a, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr); ok {
		server = a.String()
	}
	return WithConnection(r.Context(), r.RemoteAddr, server)
}

// Reporter receives rejections.
type Reporter interface {
	Report(ctx context.Context, r Rejection) error
}

// HTTPReporter POSTs rejections as JSON to the daemon's /v1/report.
type HTTPReporter struct {
	url    string
	client *http.Client
}

// NewHTTPReporter returns a Reporter that POSTs to url.
func NewHTTPReporter(url string, opts ...RemoteOption) *HTTPReporter {
	rc := newRemoteConfig(opts)
	return &HTTPReporter{url: url, client: rc.client}
}

// Report implements Reporter.
func (h *HTTPReporter) Report(ctx context.Context, r Rejection) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, h.url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := h.client.Do(req)
	if err != nil {
		return fmt.Errorf("report rejection: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("report rejection to %s: status %s", h.url, resp.Status)
	}
	return nil
}
