package l7

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// upstreamSeen is what the service behind a held request got.
type upstreamSeen struct {
	rawQuery string
	trailer  http.Header
	header   http.Header
	body     string
}

func startSeen(t *testing.T) (*attackGateway, chan upstreamSeen) {
	t.Helper()
	got := make(chan upstreamSeen, 1)
	g := startAttack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- upstreamSeen{rawQuery: r.URL.RawQuery, trailer: r.Trailer.Clone(), header: r.Header.Clone(), body: string(b)}
		w.WriteHeader(200)
	}), attackOpts{tls: true, rules: []policies.HTTPHost{{Host: "rules.test", Default: policies.HTTPAsk}}})
	return g, got
}

// TestHeldQueryForwardedAsShown: the query a held request shows is the
// one forwarded once it is allowed. httputil.ReverseProxy drops the pairs
// of a query holding a ';' or a bad %-escape: the approver read
// dry_run=true while the service got only force=true.
func TestHeldQueryForwardedAsShown(t *testing.T) {
	g, got := startSeen(t)
	req := mustReq("POST", "https://rules.test/deploy?dry_run=true;&force=true")
	res := doAsync(g.client(true), req)
	a := g.held(t)
	if a.Query != "dry_run=true;&force=true" {
		t.Fatalf("shown query %q", a.Query)
	}
	g.answer <- AskDecision{Allow: true, By: "alice", Reason: "a dry run"}
	waitStatus(t, res, 200)
	if s := <-got; s.rawQuery != a.Query {
		t.Errorf("shown to the approver: ?%s; forwarded upstream: ?%s", a.Query, s.rawQuery)
	}

	// A bad %-escape does the same.
	req = mustReq("POST", "https://rules.test/deploy?confirm=no%zz&confirm=yes")
	res = doAsync(g.client(true), req)
	a = g.held(t)
	g.answer <- AskDecision{Allow: true, By: "alice"}
	waitStatus(t, res, 200)
	if s := <-got; s.rawQuery != "confirm=no%zz&confirm=yes" || s.rawQuery != a.Query {
		t.Errorf("shown to the approver: ?%s; forwarded upstream: ?%s", a.Query, s.rawQuery)
	}
}

// TestHeldRequestLosesTrailers: a held request's trailers (fields sent
// after a chunked body, past the decision) are not shown, so they are not
// forwarded either: a trailer X-Http-Method-Override: DELETE reached the
// service of a request approved as a POST.
func TestHeldRequestLosesTrailers(t *testing.T) {
	g, got := startSeen(t)
	req := mustReq("POST", "https://rules.test/items/7")
	req.Body = nopCloser{strings.NewReader(`{"note":"touch"}`)}
	req.ContentLength = -1 // chunked
	req.Trailer = http.Header{"X-Http-Method-Override": {"DELETE"}}
	res := doAsync(g.client(false), req)
	a := g.held(t)
	for _, h := range a.Headers {
		if strings.Contains(h.Name+h.Value, "Override") || strings.Contains(h.Value, "DELETE") || strings.EqualFold(h.Name, "Trailer") {
			t.Fatalf("the ask shows the trailer: %+v", a.Headers)
		}
	}
	if a.HeadersTruncated {
		t.Fatalf("headers marked cut")
	}
	t.Logf("the ask's headers: %+v", a.Headers)
	g.answer <- AskDecision{Allow: true, By: "alice"}
	waitStatus(t, res, 200)
	if s := <-got; len(s.trailer) != 0 || s.body != `{"note":"touch"}` {
		t.Errorf("upstream got trailers %v and body %q; want the body alone", s.trailer, s.body)
	}
}
