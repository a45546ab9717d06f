package agent

import (
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func TestEndpointRoutes(t *testing.T) {
	for _, tc := range []struct {
		method, path string
		status       int // 0: parsed
		subresource  string
	}{
		{"GET", "/v1/namespaces/team-a/sessions/hello-x/logs", 0, "log"},
		{"GET", "/v1/namespaces/team-a/sessions/hello-x/wait", 0, "log"},
		{"GET", "/v1/namespaces/team-a/sessions/hello-x/diff", 0, "diff"},
		{"GET", "/v1/namespaces/team-a/sessions/hello-x/audit", 0, "audit"},
		{"POST", "/v1/namespaces/team-a/sessions/hello-x/commit", 0, "commit"},
		{"POST", "/v1/namespaces/team-a/sessions/hello-x/discard", 0, "commit"},
		{"POST", "/v1/namespaces/team-a/sessions/hello-x/exec", 0, "exec"},
		{"POST", "/v1/namespaces/team-a/sessions/hello-x/stop", 0, "stop"},
		{"POST", "/v1/namespaces/team-a/sessions/hello-x/attach", 0, "attach"},
		{"GET", "/v1/namespaces/team-a/sessions/hello-x/attach", http.StatusMethodNotAllowed, ""},
		{"GET", "/v1/namespaces/team-a/sessions/hello-x/exec", http.StatusMethodNotAllowed, ""},
		{"PUT", "/v1/namespaces/team-a/sessions/hello-x/stop", http.StatusMethodNotAllowed, ""},
		// Routes of the socket API that the endpoint does not serve.
		{"POST", "/v1/namespaces/team-a/sessions/hello-x/start", http.StatusNotFound, ""},
		{"PATCH", "/v1/namespaces/team-a/sessions/hello-x/policy", http.StatusNotFound, ""},
		{"DELETE", "/v1/namespaces/team-a/sessions/hello-x", http.StatusNotFound, ""},
		{"GET", "/v1/sessions/abc/logs", http.StatusNotFound, ""},
		{"POST", "/v1/sessions", http.StatusNotFound, ""},
		{"GET", "/v1/namespaces/team-a/sessions/hello-x/commit", http.StatusMethodNotAllowed, ""},
		{"POST", "/v1/namespaces/team-a/sessions/hello-x/logs", http.StatusMethodNotAllowed, ""},
		// Names that are no Kubernetes names.
		{"GET", "/v1/namespaces/Team_A/sessions/hello-x/logs", http.StatusBadRequest, ""},
		{"GET", "/v1/namespaces/team-a/sessions/..%2f..%2fx/logs", http.StatusNotFound, ""},
		{"GET", "/v1/namespaces/team-a/sessions/a%3Fb/logs", http.StatusBadRequest, ""},
		{"GET", "/v1/namespaces/team-a/sessions//logs", http.StatusBadRequest, ""},
	} {
		r := httptest.NewRequest(tc.method, tc.path, nil)
		_, _, rt, err := parsePath(r)
		if tc.status == 0 {
			if err != nil || rt.subresource != tc.subresource {
				t.Errorf("%s %s: %+v, %v; want subresource %s", tc.method, tc.path, rt, err, tc.subresource)
			}
			continue
		}
		ee, ok := err.(*endpointError)
		if !ok || ee.status != tc.status {
			t.Errorf("%s %s: %v; want status %d", tc.method, tc.path, err, tc.status)
		}
	}
}

// A flood of distinct keys never holds more than maxCached entries.
func TestDecisionCacheBounded(t *testing.T) {
	var c decisionCache
	now := time.Now()
	for i := range 3 * maxCached {
		c.put(sha256.Sum256(fmt.Append(nil, i)), decision{ok: true, expires: now.Add(time.Minute)}, now)
		if len(c.m) > maxCached {
			t.Fatalf("%d entries after %d puts", len(c.m), i+1)
		}
	}
	k := sha256.Sum256([]byte("x"))
	c.put(k, decision{ok: true, expires: now.Add(time.Second)}, now)
	if _, ok := c.get(k, now); !ok {
		t.Error("a fresh decision is not cached")
	}
	if _, ok := c.get(k, now.Add(2*time.Second)); ok {
		t.Error("an expired decision is still taken")
	}
}

// The serving certificate is kept across restarts (clients pin it), and
// made again when it nears expiry or no longer names the address.
func TestServingCertKept(t *testing.T) {
	dir := t.TempDir()
	now := time.Now()
	_, first, err := servingCert(dir, "node-a", "127.0.0.1", now)
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "serving.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("serving.key: %v, %v; want mode 0600", fi, err)
	}
	_, again, err := servingCert(dir, "node-a", "127.0.0.1", now.Add(time.Hour))
	if err != nil || !bytes.Equal(first, again) {
		t.Errorf("restarted: a new certificate (%v)", err)
	}
	if _, moved, err := servingCert(dir, "node-a", "10.1.2.3", now); err != nil || bytes.Equal(first, moved) {
		t.Errorf("new address: the old certificate kept (%v)", err)
	}
	_, cur, _ := servingCert(dir, "node-a", "10.1.2.3", now)
	if _, late, err := servingCert(dir, "node-a", "10.1.2.3", now.Add(certValidity-certRenewBefore+time.Hour)); err != nil || bytes.Equal(cur, late) {
		t.Errorf("near expiry: the old certificate kept (%v)", err)
	}
}

// TestStreamLimit: each user has max places; a place given back is taken
// again; one user's full count leaves another's alone.
func TestStreamLimit(t *testing.T) {
	var l streamLimit
	for i := range 3 {
		if !l.acquire("alice", 3) {
			t.Fatalf("alice's place %d refused", i+1)
		}
	}
	if l.acquire("alice", 3) {
		t.Error("alice's 4th place taken, want refused")
	}
	if !l.acquire("bob", 3) {
		t.Error("bob's first place refused while alice's are full")
	}
	l.release("alice")
	if !l.acquire("alice", 3) {
		t.Error("alice's place given back not taken again")
	}
	for range 3 {
		l.release("alice")
	}
	l.release("bob")
	if len(l.open) != 0 {
		t.Errorf("after every place given back: %v, want nothing kept", l.open)
	}
}

func TestUnverifiedAudiences(t *testing.T) {
	jwt := func(claims string) string {
		return "eyJhbGciOiJFUzI1NiJ9." + base64.RawURLEncoding.EncodeToString([]byte(claims)) + ".c2ln"
	}
	for _, tc := range []struct {
		token string
		want  []string
	}{
		{jwt(`{"aud":["airlock.dev/nodes/a","x"]}`), []string{"airlock.dev/nodes/a", "x"}},
		{jwt(`{"aud":"airlock.dev/nodes/a"}`), []string{"airlock.dev/nodes/a"}},
		{jwt(`{"sub":"no audience"}`), nil},
		{jwt(`{"aud":7}`), nil},
		{jwt(`not json`), nil},
		{"a-static-token", nil},
		{"a.b.c", nil},
		{"x." + strings.Repeat("A", 9000) + ".y", nil},
	} {
		if got := unverifiedAudiences(tc.token); !slices.Equal(got, tc.want) {
			t.Errorf("unverifiedAudiences(%.40q) = %q, want %q", tc.token, got, tc.want)
		}
	}
}
