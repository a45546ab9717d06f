package httprule

import (
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

const (
	digestA = "6b86b273ff34fce19d6b804eff5a3f5747ada4eaa22f1d49c01e52ddb7875b4b" // sha256("1")
	digestB = "d4735e3a265e16eee03f59718b9b5d03019c07d8b6c51f90da3a666eec13ab35" // sha256("2")
	digestC = "4e07408562bedb8b60ce05c1decfe3ad16b72230967de01f640b7e4729b49fce" // sha256("3")
)

// TestDecideBody: an allow rule with body_sha256 matches a body read
// whole with one of its digests, nothing else; a deny or ask rule matches
// a listed digest, and any body the gateway could not read whole.
func TestDecideBody(t *testing.T) {
	s, err := Compile([]policies.HTTPHost{{Host: "paste.test", Default: deny, Rules: []policies.HTTPRule{
		{Methods: []string{"POST"}, Path: "/documents", Action: deny, BodySHA256: []string{digestC}},
		{Methods: []string{"POST"}, Path: "/documents", Action: allow, BodySHA256: []string{digestA, digestB}},
		{Methods: []string{"POST"}, Path: "/drafts", Action: ask, BodySHA256: []string{digestA}},
		{Methods: []string{"GET"}, Action: allow},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	h := s.For("paste.test")
	for _, tt := range []struct {
		name string
		r    Request
		want string
		idx  int
	}{
		{"pinned", Request{Method: "POST", Path: "/documents", BodySHA256: digestA}, allow, 1},
		{"the other pinned", Request{Method: "post", Path: "/documents", BodySHA256: digestB}, allow, 1},
		{"refused content", Request{Method: "POST", Path: "/documents", BodySHA256: digestC}, deny, 0},
		{"unread body", Request{Method: "POST", Path: "/documents", BodyOpaque: true}, deny, 0},
		{"not digested", Request{Method: "POST", Path: "/documents"}, deny, 0},
		{"opaque with a pinned digest", Request{Method: "POST", Path: "/documents", BodySHA256: digestA, BodyOpaque: true}, deny, 0},
		{"ask on a listed digest", Request{Method: "POST", Path: "/drafts", BodySHA256: digestA}, ask, 2},
		{"ask on an unread body", Request{Method: "POST", Path: "/drafts", BodyOpaque: true}, ask, 2},
		{"another body under ask", Request{Method: "POST", Path: "/drafts", BodySHA256: digestB}, deny, -1},
		{"a read", Request{Method: "GET", Path: "/documents/k"}, allow, 3},
		{"a form of pinned parts", Request{Method: "POST", Path: "/documents", BodySHA256: digestC, FormSHA256: []string{digestB, digestA}}, deny, 0},
		{"a form of pinned parts only", Request{Method: "POST", Path: "/documents", BodySHA256: "00" + digestA[2:], FormSHA256: []string{digestB, digestA}}, allow, 1},
		{"a form with a part not pinned", Request{Method: "POST", Path: "/documents", BodySHA256: "00" + digestA[2:], FormSHA256: []string{digestA, "00" + digestB[2:]}}, deny, -1},
		{"a form with a refused part", Request{Method: "POST", Path: "/documents", BodySHA256: "00" + digestA[2:], FormSHA256: []string{digestA, digestC}}, deny, 0},
		{"an opaque form", Request{Method: "POST", Path: "/documents", BodyOpaque: true, FormSHA256: []string{digestA}}, deny, 0},
		{"ask on a form's part", Request{Method: "POST", Path: "/drafts", BodySHA256: "00" + digestA[2:], FormSHA256: []string{"00" + digestB[2:], digestA}}, ask, 2},
	} {
		if d := h.Decide(tt.r); d.Action != tt.want || d.Index != tt.idx {
			t.Errorf("%s: %s by %q (%d), want %s by %d", tt.name, d.Action, d.Rule, d.Index, tt.want, tt.idx)
		}
	}
	if !h.NeedsBody("post", "/documents") || !h.NeedsBody("POST", "/drafts") || h.NeedsBody("GET", "/documents") || h.NeedsBody("POST", "/other") || (*Host)(nil).NeedsBody("POST", "/") {
		t.Error("NeedsBody is not true exactly for the request lines of body_sha256 rules")
	}
	if d := h.Decide(Request{Method: "POST", Path: "/documents", BodySHA256: digestA}); !strings.Contains(d.Rule, "body_sha256 ["+digestA[:12]+" "+digestB[:12]+"]") {
		t.Errorf("rule described as %q", d.Rule)
	}
}

func TestCompileBodyErrors(t *testing.T) {
	for _, tt := range []struct {
		r    policies.HTTPRule
		want string
	}{
		{policies.HTTPRule{Action: allow, BodySHA256: []string{strings.ToUpper(digestA)}}, "not 64 lower-case hex digits"},
		{policies.HTTPRule{Action: allow, BodySHA256: []string{digestA[:63]}}, "not 64 lower-case hex digits"},
		{policies.HTTPRule{Action: allow, BodySHA256: []string{}}, "names no digest"},
		{policies.HTTPRule{Action: allow, BodySHA256: []string{digestA}, JSON: []policies.HTTPJSONMatch{{Field: "a", Values: []string{"x"}}}}, "at most one of them"},
		{policies.HTTPRule{Action: allow, BodySHA256: []string{digestA}, Refs: []string{"refs/heads/x"}}, "at most one of them"},
	} {
		_, err := Compile([]policies.HTTPHost{{Host: "x.test", Rules: []policies.HTTPRule{tt.r}}})
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%+v: %v, want %q", tt.r, err, tt.want)
		}
	}
}
