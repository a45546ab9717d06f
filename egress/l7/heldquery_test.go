package l7

import (
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestHeldRequestShowsQueryAndHeaders: whoever decides a held request
// sees what goes on once it is allowed, beyond the method, the path and
// the body: the sandbox holds "POST rules.test/deploy" with a harmless
// body, and the query (env=production&force=true) and a header many
// frameworks honour (X-HTTP-Method-Override: DELETE) are in the Ask, as
// the service then gets them.
func TestHeldRequestShowsQueryAndHeaders(t *testing.T) {
	got := make(chan *http.Request, 1)
	g := startAttack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r
		w.WriteHeader(200)
	}), attackOpts{tls: true, rules: []policies.HTTPHost{{Host: "rules.test", Default: policies.HTTPAsk}}})
	req := mustReq("POST", "https://rules.test/deploy?env=production&force=true")
	req.Header.Set("X-HTTP-Method-Override", "DELETE")
	req.Header.Set("Content-Type", "application/json")
	req.Header.Add("X-Note", "one")
	req.Header.Add("X-Note", "two\u202e")
	req.Body = nopCloser{strings.NewReader(`{"dry_run":true}`)}
	req.ContentLength = int64(len(`{"dry_run":true}`))
	res := doAsync(g.client(true), req)
	a := g.held(t)
	if a.Path != "/deploy" || a.Query != "env=production&force=true" || a.QueryTruncated {
		t.Errorf("the ask shows path %q query %q (truncated %v), want /deploy and env=production&force=true", a.Path, a.Query, a.QueryTruncated)
	}
	for _, want := range []api.HeaderField{
		{Name: "X-Http-Method-Override", Value: "DELETE"},
		{Name: "Content-Type", Value: "application/json"},
		{Name: "X-Note", Value: "one"},
		{Name: "X-Note", Value: "two\u202e"},
	} {
		if !slices.Contains(a.Headers, want) {
			t.Errorf("the ask's headers %+v lack %+v", a.Headers, want)
		}
	}
	if a.HeadersTruncated {
		t.Errorf("headers truncated: %+v", a.Headers)
	}
	if !slices.IsSortedFunc(a.Headers, func(x, y api.HeaderField) int { return strings.Compare(x.Name, y.Name) }) {
		t.Errorf("headers not in name order: %+v", a.Headers)
	}
	g.answer <- AskDecision{Allow: true, By: "alice", Reason: "shown whole"}
	waitStatus(t, res, 200)
	r := <-got
	if r.URL.RawQuery != a.Query || r.Header.Get("X-HTTP-Method-Override") != "DELETE" {
		t.Fatalf("forwarded %q %q", r.URL.RawQuery, r.Header.Get("X-HTTP-Method-Override"))
	}
}

// TestHeldRequestHeadersHideSecrets: a header bound to a secret is shown
// with the secret's placeholder and name, whatever the client sent in it
// (here a made-up value), and the secret's value is nowhere in the Ask;
// the upstream gets the value.
func TestHeldRequestHeadersHideSecrets(t *testing.T) {
	secrets := append(placeholderSecret("rules.test"), Secret{Name: "TOKEN", Placeholder: "airlock-secret-eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee",
		Value: []byte("bearer-real-value-never-shown-9c1"), Inject: []Inject{{Host: "rules.test", Bearer: true}}})
	g, seen := startHeld(t, attackOpts{tls: true, secrets: secrets})
	req, _ := http.NewRequest("GET", "https://rules.test/v1/list?page=2", nil)
	req.Header.Set("x-api-key", testPlaceholder)
	req.Header.Set("Authorization", "Bearer made-up")
	res := doAsync(g.client(true), req)
	a := g.held(t)
	shown := fmt.Sprintf("%+v", a)
	if strings.Contains(shown, testSecret) || strings.Contains(shown, "bearer-real-value-never-shown-9c1") {
		t.Errorf("the hold shows a secret's value: %s", shown)
	}
	for _, want := range []api.HeaderField{
		{Name: "X-Api-Key", Value: testPlaceholder, Secret: "API_KEY"},
		{Name: "Authorization", Value: "Bearer airlock-secret-eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", Secret: "TOKEN"},
	} {
		if !slices.Contains(a.Headers, want) {
			t.Errorf("the ask's headers %+v lack %+v", a.Headers, want)
		}
	}
	if a.Query != "page=2" {
		t.Errorf("query %q", a.Query)
	}
	g.answer <- AskDecision{Allow: true, By: "test"}
	waitStatus(t, res, 200)
	if s := <-seen; s.path != "/v1/list" {
		t.Errorf("upstream got %s", s.path)
	}
}

// TestHeldRequestBounds: a query longer than MaxHeldQuery and headers
// beyond the bounds are cut, and the Ask says so.
func TestHeldRequestBounds(t *testing.T) {
	hd := http.Header{}
	hd.Set("A-Long", strings.Repeat("v", MaxHeldHeaderValue+10))
	for i := range MaxHeldHeaders + 5 {
		hd.Set(fmt.Sprintf("X-F%03d", i), "x")
	}
	fields, truncated := heldHeaders(hd, nil)
	if !truncated || len(fields) != MaxHeldHeaders {
		t.Fatalf("%d fields, truncated %v: want %d and true", len(fields), truncated, MaxHeldHeaders)
	}
	if f := fields[0]; f.Name != "A-Long" || len(f.Value) != MaxHeldHeaderValue || !f.Truncated {
		t.Errorf("first field %s: %d bytes, truncated %v", f.Name, len(f.Value), f.Truncated)
	}
	hd = http.Header{}
	for i := range 40 {
		hd.Set(fmt.Sprintf("X-Big%02d", i), strings.Repeat("y", MaxHeldHeaderValue-7))
	}
	fields, truncated = heldHeaders(hd, nil)
	size := 0
	for _, f := range fields {
		size += len(f.Name) + len(f.Value)
	}
	if !truncated || size > MaxHeldHeaderBytes || len(fields) == 0 || len(fields) == 40 {
		t.Errorf("%d fields of %d bytes, truncated %v", len(fields), size, truncated)
	}
	fields, truncated = heldHeaders(http.Header{"B": {"2"}, "A": {"1", "0"}}, nil)
	if want := []api.HeaderField{{Name: "A", Value: "1"}, {Name: "A", Value: "0"}, {Name: "B", Value: "2"}}; truncated || !slices.Equal(fields, want) {
		t.Errorf("heldHeaders = %+v, %v; want %+v", fields, truncated, want)
	}

	g, _ := startHeld(t, attackOpts{tls: true})
	long := strings.Repeat("q=1&", MaxHeldQuery/4+2)
	res := doAsync(g.client(true), mustReq("GET", "https://rules.test/x?"+long))
	a := g.held(t)
	if !a.QueryTruncated || a.Query != long[:MaxHeldQuery] {
		t.Errorf("query of %d bytes shown as %d bytes, truncated %v", len(long), len(a.Query), a.QueryTruncated)
	}
	g.answer <- AskDecision{By: "test"}
	waitStatus(t, res, 403)
}

type nopCloser struct{ *strings.Reader }

func (nopCloser) Close() error { return nil }
