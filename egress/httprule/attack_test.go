package httprule

import (
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// TestAttackHeadPassesGetRule: HEAD is GET without the body (RFC 9110
// 9.3.2), and servers run their GET handlers for it (Go's net/http,
// Express, Rails, Django): a rule that denies or asks about GET does not
// cover HEAD, so whatever side effect the GET handler has runs unasked.
func TestAttackHeadPassesGetRule(t *testing.T) {
	set, err := Compile([]policies.HTTPHost{{Host: "api.test", Rules: []policies.HTTPRule{
		{Methods: []string{"GET"}, Path: "/admin/**", Action: policies.HTTPDeny},
		{Methods: []string{"GET"}, Path: "/trigger", Action: policies.HTTPAsk},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"/admin/users", "/trigger"} {
		if d := set.For("api.test").Decide(Request{Method: "HEAD", Path: p}); d.Action == policies.HTTPAllow {
			t.Errorf("HEAD %s: allowed by %q; a rule on GET must cover HEAD", p, d.Rule)
		}
	}
}

// TestAttackEncodedQueryDelimiter: "%3F" and "%23" decode to '?' and '#'
// inside the path NormalizePath returns, so "/admin%3Fx" is matched as
// "/admin?x" and passes a deny rule on "/admin"; a server or front proxy
// that decodes the target and parses it again (a proxy_pass that
// re-encodes the decoded URI, a framework that decodes before splitting
// the query) sees "/admin". NormalizePath refuses the raw characters for
// this reason; the encoded ones have the same two readings.
func TestAttackEncodedQueryDelimiter(t *testing.T) {
	for _, raw := range []string{"/admin%3Fx", "/admin%3fx", "/admin%23x"} {
		if p, err := NormalizePath(raw); err == nil {
			t.Errorf("NormalizePath(%q) = %q; want an error (servers that decode then parse read %q)", raw, p, "/admin")
		}
	}
}
