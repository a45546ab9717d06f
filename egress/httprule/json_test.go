package httprule

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

// bulkHost is a block as the generator writes one for a bulk restart:
// allow some targets, refuse a protected one, ask about the rest.
func bulkHost(t *testing.T) *Host {
	t.Helper()
	const path = "/v1/namespaces/*/deployments:restart"
	s, err := Compile([]policies.HTTPHost{{Host: "api.test", Default: deny, Rules: []policies.HTTPRule{
		{Methods: []string{"POST"}, Path: path, Action: deny, JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"svc-dev-billing-*"}}}},
		{Methods: []string{"POST"}, Path: path, Action: allow, JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"svc-dev-*-4812-a", "svc-dev-auth-*"}}}},
		{Methods: []string{"POST"}, Path: "/v1/buckets/*:delete", Action: allow, JSON: []policies.HTTPJSONMatch{{Field: "prefix", Values: []string{"dev/alex/**"}}}},
		{Methods: []string{"POST"}, Path: "/v1/buckets/*:delete", Action: ask, JSON: []policies.HTTPJSONMatch{{Field: "keys", Values: []string{"dev/**"}}}},
		{Methods: []string{"POST"}, Path: path, Action: ask},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	return s.For("api.test")
}

func TestDecideJSON(t *testing.T) {
	h := bulkHost(t)
	const restart = "/v1/namespaces/dev/deployments:restart"
	tests := []struct {
		name, path, body string
		want             string
		rule             int // Index; -1 the default
	}{
		{"every name allowed", restart, `{"names":["svc-dev-auth-4812-a","svc-dev-web-4812-a"]}`, allow, 1},
		{"one string", restart, `{"names":"svc-dev-auth-1"}`, allow, 1},
		{"a denied name rides along", restart, `{"names":["svc-dev-auth-4812-a","svc-dev-billing-4812-a"]}`, deny, 0},
		{"a name no allow glob covers", restart, `{"names":["svc-dev-auth-4812-a","svc-prod-x"]}`, ask, 4},
		{"escaped: decoded first", restart, `{"names":["\u0073vc-dev-billing-4812-a"]}`, deny, 0},
		{"empty array", restart, `{"names":[]}`, ask, 4},
		{"null", restart, `{"names":null}`, ask, 4},
		{"numbers: denied, unread", restart, `{"names":[1,2]}`, deny, 0},
		{"mixed array: denied, unread", restart, `{"names":["svc-dev-auth-1",2]}`, deny, 0},
		{"nested array: denied, unread", restart, `{"names":[["svc-dev-billing-1"]]}`, deny, 0},
		{"null in an array: denied, unread", restart, `{"names":["svc-dev-auth-1",null]}`, deny, 0},
		{"object: denied, unread", restart, `{"names":{"a":"svc-dev-auth-1"}}`, deny, 0},
		{"boolean: denied, unread", restart, `{"names":true}`, deny, 0},
		{"missing", restart, `{"other":["svc-dev-auth-1"]}`, ask, 4},
		{"nested field only", restart, `{"spec":{"names":["svc-dev-auth-1"]}}`, ask, 4},
		{"top-level array: denied, opaque", restart, `[{"names":["svc-dev-auth-1"]}]`, deny, 0},
		{"not JSON: denied, opaque", restart, `names=svc-dev-auth-1`, deny, 0},
		{"no body", restart, ``, ask, 4},
		{"only spaces", restart, " \r\n", ask, 4},
		{"keys unread: asked", "/v1/buckets/b:delete", `{"keys":[["prod/x"]]}`, ask, 3},
		{"keys opaque: asked", "/v1/buckets/b:delete", `keys=prod/x`, ask, 3},
		{"other fields ignored", restart, `{"names":["svc-dev-auth-1"],"force":true,"x":[1,{"names":["svc-dev-billing-1"]}]}`, allow, 1},
		{"dot segments: denied", restart, `{"names":["svc-dev-auth-1/../../svc-prod"]}`, deny, 0},
		{"prefix allowed", "/v1/buckets/b:delete", `{"prefix":"dev/alex/"}`, allow, 2},
		{"prefix below", "/v1/buckets/b:delete", `{"prefix":"dev/alex/tmp/"}`, allow, 2},
		{"prefix above", "/v1/buckets/b:delete", `{"prefix":"dev/"}`, deny, -1},
		{"empty prefix", "/v1/buckets/b:delete", `{"prefix":""}`, deny, -1},
		{"dotted prefix", "/v1/buckets/b:delete", `{"prefix":"dev/alex/../bob/"}`, deny, -1},
		{"keys asked", "/v1/buckets/b:delete", `{"keys":["prod/x","dev/y"]}`, ask, 3},
		{"keys none matching", "/v1/buckets/b:delete", `{"keys":["prod/x"]}`, deny, -1},
		{"keys dot segment asked", "/v1/buckets/b:delete", `{"keys":["prod/../x"]}`, ask, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !h.NeedsJSON("POST", tt.path) {
				t.Fatalf("NeedsJSON(POST %s) = false", tt.path)
			}
			fields, isObject, err := h.ParseJSON([]byte(tt.body))
			if err != nil {
				t.Fatalf("ParseJSON: %v", err)
			}
			// As the gateway marks a body it read whole (readJSONBody).
			opaque := !isObject && strings.TrimSpace(tt.body) != ""
			d := h.Decide(Request{Method: "POST", Path: tt.path, JSONBody: isObject, JSON: fields, JSONOpaque: opaque})
			if d.Action != tt.want || d.Index != tt.rule {
				t.Fatalf("Decide = %s by %q (index %d), want %s by index %d", d.Action, d.Rule, d.Index, tt.want, tt.rule)
			}
		})
	}
}

// TestDecideJSONUnread: a body the gateway did not read whole (too long,
// content-encoded) matches no rule with json conditions, whatever the
// fields say.
func TestDecideJSONUnread(t *testing.T) {
	h := bulkHost(t)
	d := h.Decide(Request{Method: "POST", Path: "/v1/namespaces/dev/deployments:restart", JSON: map[string][]string{"names": {"svc-dev-auth-1"}}})
	if d.Action != ask || d.Index != 4 {
		t.Fatalf("Decide = %s by %q", d.Action, d.Rule)
	}
}

func TestNeedsJSON(t *testing.T) {
	h := bulkHost(t)
	for _, tt := range []struct {
		method, path string
		want         bool
	}{
		{"POST", "/v1/namespaces/dev/deployments:restart", true},
		{"post", "/v1/namespaces/dev/deployments:restart", true},
		{"GET", "/v1/namespaces/dev/deployments:restart", false},
		{"POST", "/v1/jobs:cancel", false},
		{"POST", "/v1/buckets/b:delete", true},
	} {
		if got := h.NeedsJSON(tt.method, tt.path); got != tt.want {
			t.Errorf("NeedsJSON(%s %s) = %v", tt.method, tt.path, got)
		}
	}
	s, _ := Compile([]policies.HTTPHost{{Host: "x.test", Rules: []policies.HTTPRule{{Path: "/a", Action: deny}}}})
	if s.For("x.test").NeedsJSON("POST", "/a") || s.For("x.test").HasJSON() || (*Host)(nil).NeedsJSON("POST", "/") {
		t.Fatal("NeedsJSON true without json conditions")
	}
}

// TestParseJSONAmbiguous: bodies that parsers read differently are
// errors (the gateway refuses them), whichever rule would apply.
func TestParseJSONAmbiguous(t *testing.T) {
	h := bulkHost(t)
	for _, body := range []string{
		`{"names":["svc-dev-auth-1"],"names":["svc-dev-billing-1"]}`, // last wins in Go
		`{"names":["svc-dev-billing-1"],"names":["svc-dev-auth-1"]}`, // first wins elsewhere
		`{"names":["svc-dev-auth-1"],"Names":["svc-dev-billing-1"]}`,
		`{"NAMES":["svc-dev-billing-1"]}`,
		`{"nameſ":["svc-dev-billing-1"]}`, // ſ folds to s
		`{"name\u017f":["svc-dev-billing-1"]}`,
		`{"\u006eames":["svc-dev-auth-1"],"names":["svc-dev-billing-1"]}`,
		`{"keys":["dev/a"],"KEYS":["prod/b"]}`,
		`{"names":["svc-dev-auth-1"]} {"names":["svc-dev-billing-1"]}`, // json.Decoder reads the first
		`{"names":["svc-dev-auth-1"]}garbage`,
		`{"names":["svc-dev-auth-1"],}`,
		`{"names":["svc-dev-auth-1"] /* c */}`,
		`{"names":["svc-dev-auth-1"]`, // cut short
		"\xef\xbb\xbf" + `{"names":["svc-dev-auth-1"]}`,
		"{\"names\":[\"svc-dev-auth-\xff\"]}",
		`{"names":["svc-dev-auth-\ud800"]}`,
		`{"names":["a"],"x":NaN}`,
	} {
		if fields, _, err := h.ParseJSON([]byte(body)); !errors.Is(err, ErrAmbiguousJSON) {
			t.Errorf("ParseJSON(%s) = %v, %v; want ErrAmbiguousJSON", body, fields, err)
		}
	}
	// Keys that no rule names may repeat and differ in case.
	if _, ok, err := h.ParseJSON([]byte(`{"force":true,"Force":false,"force":1,"names":"svc-dev-auth-1"}`)); err != nil || !ok {
		t.Errorf("unnamed duplicate keys: %v, %v", ok, err)
	}
}

// TestParseJSONDeep: nesting is read without recursion; deeper than
// encoding/json reads, the body is refused rather than left unread.
func TestParseJSONDeep(t *testing.T) {
	h := bulkHost(t)
	body := func(depth int) []byte {
		return []byte(`{"x":` + strings.Repeat(`[{"a":`, depth) + "1" + strings.Repeat("}]", depth) + `,"names":["svc-dev-auth-1"]}`)
	}
	fields, ok, err := h.ParseJSON(body(2000))
	if err != nil || !ok || len(fields["names"]) != 1 {
		t.Fatalf("depth 4000: %v %v %v", fields, ok, err)
	}
	if _, _, err := h.ParseJSON(body(15000)); !errors.Is(err, ErrAmbiguousJSON) {
		t.Fatalf("depth 30000: %v", err)
	}
}

func TestCompileJSONErrors(t *testing.T) {
	rule := func(r policies.HTTPRule) []policies.HTTPHost {
		r.Action = cmpOr(r.Action, allow)
		return []policies.HTTPHost{{Host: "api.test", Rules: []policies.HTTPRule{r}}}
	}
	tests := []struct {
		name  string
		hosts []policies.HTTPHost
		want  string
	}{
		{"no values", rule(policies.HTTPRule{JSON: []policies.HTTPJSONMatch{{Field: "names"}}}), `json field "names" has no values`},
		{"empty value", rule(policies.HTTPRule{JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{""}}}}), "empty value"},
		{"bad glob", rule(policies.HTTPRule{JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"a**"}}}}), `"**" must be a whole segment`},
		{"empty segment", rule(policies.HTTPRule{JSON: []policies.HTTPJSONMatch{{Field: "keys", Values: []string{"dev//x"}}}}), "empty segment"},
		{"bad field", rule(policies.HTTPRule{JSON: []policies.HTTPJSONMatch{{Field: "spec.names", Values: []string{"a"}}}}), "not a plain JSON key"},
		{"non-ASCII field", rule(policies.HTTPRule{JSON: []policies.HTTPJSONMatch{{Field: "nameſ", Values: []string{"a"}}}}), "not a plain JSON key"},
		{"field twice", rule(policies.HTTPRule{JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"a"}}, {Field: "Names", Values: []string{"b"}}}}), "named twice"},
		{"with refs", rule(policies.HTTPRule{Refs: []string{"refs/heads/*"}, JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"a"}}}}), "not both"},
		{"case across rules", []policies.HTTPHost{{Host: "api.test", Rules: []policies.HTTPRule{
			{Action: allow, JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"a"}}}},
			{Action: deny, JSON: []policies.HTTPJSONMatch{{Field: "Names", Values: []string{"b"}}}},
		}}}, "rule 2: json field \"Names\" differs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Compile(tt.hosts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Compile: %v; want an error saying %q", err, tt.want)
			}
		})
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// TestDecideJSONFields: a rule with conditions on two fields. An allow
// rule needs both, every string matching; a deny rule matches a body
// one field of which names a denied target, the other missing.
func TestDecideJSONFields(t *testing.T) {
	two := []policies.HTTPJSONMatch{{Field: "names", Values: []string{"prod-*"}}, {Field: "ids", Values: []string{"prod-*"}}}
	s, err := Compile([]policies.HTTPHost{{Host: "api.test", Default: allow, Rules: []policies.HTTPRule{
		{Path: "/deny", Action: deny, JSON: two},
		{Path: "/allow", Action: allow, JSON: two},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	h := s.For("api.test")
	for _, tt := range []struct{ path, body, want string }{
		{"/deny", `{"names":["prod-db"]}`, deny},
		{"/deny", `{"ids":["prod-1"],"names":null}`, deny},
		{"/deny", `{"names":["dev-db"],"ids":["dev-1"]}`, allow},
		{"/deny", `{}`, allow},
		{"/allow", `{"names":["prod-db"],"ids":["prod-1"]}`, allow},
	} {
		fields, isObject, err := h.ParseJSON([]byte(tt.body))
		if err != nil {
			t.Fatal(err)
		}
		if d := h.Decide(Request{Method: "POST", Path: tt.path, JSONBody: isObject, JSON: fields}); d.Action != tt.want {
			t.Errorf("%s %s: %s by %s, want %s", tt.path, tt.body, d.Action, d.Rule, tt.want)
		}
	}
	// An allow rule with a field missing does not match: the default
	// (allow here) decides, so check the rule did not.
	fields, _, _ := h.ParseJSON([]byte(`{"names":["prod-db"]}`))
	if d := h.Decide(Request{Method: "POST", Path: "/allow", JSONBody: true, JSON: fields}); d.Index != -1 {
		t.Errorf("an allow rule matched a body without one of its fields: %s", d.Rule)
	}
}

func TestDescribeJSON(t *testing.T) {
	d := bulkHost(t).Decide(Request{Method: "POST", Path: "/v1/namespaces/dev/deployments:restart", JSONBody: true, JSON: map[string][]string{"names": {"svc-dev-billing-1"}}})
	if want := `http "api.test" rule 1 (POST /v1/namespaces/*/deployments:restart json names [svc-dev-billing-*] -> deny)`; d.Rule != want {
		t.Fatalf("Rule = %q, want %q", d.Rule, want)
	}
}

// FuzzParseJSON: what ParseJSON reads of a body it does not refuse is
// what Go's encoding/json, decoding into a struct as the world's
// services do (keys matched without regard to case, the last duplicate
// winning), and a json.Decoder reading the first value, act on.
func FuzzParseJSON(f *testing.F) {
	for _, s := range []string{`{"names":["a","b"]}`, `{"names":"a"}`, `{"Names":["a"]}`, `{"names":["a"],"names":["b"]}`, `{"names":["a"]} {"names":["b"]}`, `{"nameſ":["b"]}`, `{"names":["\u0061"]}`, `{"names":[1]}`, `[]`, `{"names":null}`} {
		f.Add([]byte(s))
	}
	s, err := Compile([]policies.HTTPHost{{Host: "api.test", Rules: []policies.HTTPRule{{Action: allow, JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"**"}}}}}}})
	if err != nil {
		f.Fatal(err)
	}
	h := s.For("api.test")
	f.Fuzz(func(t *testing.T, body []byte) {
		fields, isObject, err := h.ParseJSON(body)
		if err != nil || !isObject {
			return
		}
		got, ok := fields["names"]
		var list struct{ Names []string }
		var one struct{ Names string }
		var first struct{ Names []string }
		switch {
		case json.Unmarshal(body, &list) == nil:
			if ok && !slices.Equal(list.Names, got) {
				t.Fatalf("ParseJSON: %q; encoding/json: %q", got, list.Names)
			}
			if json.NewDecoder(bytes.NewReader(body)).Decode(&first) != nil || !slices.Equal(first.Names, list.Names) {
				t.Fatalf("json.Decoder: %q; Unmarshal: %q", first.Names, list.Names)
			}
		case json.Unmarshal(body, &one) == nil:
			if ok && !slices.Equal([]string{one.Names}, got) {
				t.Fatalf("ParseJSON: %q; encoding/json: %q", got, one.Names)
			}
		}
	})
}

// TestDecideJSONMatchEvery: an ask rule with json_match = "every" holds a
// bulk call only when every target is one a person may allow; a body
// naming anything else, or one the gateway could not read, falls through
// to the default (deny), so it is refused outright rather than asked about.
func TestDecideJSONMatchEvery(t *testing.T) {
	const path = "/v1/namespaces/*/deployments:restart"
	s, err := Compile([]policies.HTTPHost{{Host: "api.test", Default: deny, Rules: []policies.HTTPRule{
		{Methods: []string{"POST"}, Path: path, Action: ask, JSONMatch: policies.JSONMatchEvery,
			JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"svc-dev-*-4812-a"}}}},
		{Methods: []string{"POST"}, Path: path, Action: allow, JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"svc-dev-auth-*"}}}},
	}}})
	if err != nil {
		t.Fatal(err)
	}
	h := s.For("api.test")
	for _, tt := range []struct {
		name, body string
		opaque     bool
		want       string
		rule       int
	}{
		{"every target held", `{"names":["svc-dev-auth-4812-a","svc-dev-billing-4812-a"]}`, false, ask, 0},
		{"a held target and another", `{"names":["svc-dev-billing-4812-a","svc-dev-team-x"]}`, false, deny, -1},
		{"allowed by the next rule", `{"names":["svc-dev-auth-1"]}`, false, allow, 1},
		{"a number among them", `{"names":["svc-dev-billing-4812-a",1]}`, false, deny, -1},
		{"missing", `{"other":["svc-dev-billing-4812-a"]}`, false, deny, -1},
		{"unread", ``, true, deny, -1},
	} {
		t.Run(tt.name, func(t *testing.T) {
			var fields map[string][]string
			isObject := false
			if !tt.opaque {
				fields, isObject, err = h.ParseJSON([]byte(tt.body))
				if err != nil {
					t.Fatal(err)
				}
			}
			d := h.Decide(Request{Method: "POST", Path: "/v1/namespaces/dev/deployments:restart", JSONBody: isObject, JSON: fields, JSONOpaque: tt.opaque})
			if d.Action != tt.want || d.Index != tt.rule {
				t.Fatalf("Decide = %s by %q (index %d), want %s by index %d", d.Action, d.Rule, d.Index, tt.want, tt.rule)
			}
		})
	}
	for _, bad := range []policies.HTTPRule{
		{Path: path, Action: allow, JSONMatch: policies.JSONMatchAny, JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"x"}}}},
		{Path: path, Action: ask, JSONMatch: "all", JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"x"}}}},
		{Path: path, Action: ask, JSONMatch: policies.JSONMatchEvery},
		{Path: path, Action: deny, JSONMatch: policies.JSONMatchEvery, JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"x"}}}},
	} {
		if _, err := Compile([]policies.HTTPHost{{Host: "api.test", Default: deny, Rules: []policies.HTTPRule{bad}}}); err == nil {
			t.Errorf("rule %+v compiled", bad)
		}
	}
}
