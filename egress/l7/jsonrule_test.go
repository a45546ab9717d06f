package l7

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

const restartURL = "https://rules.test/v1/namespaces/dev/deployments:restart"

// startJSON is a gateway whose host rules.test has the rules a generator
// writes for a bulk restart: a protected target denied, the request's
// targets allowed, any other restart asked about; bucket deletes allowed
// under one prefix; everything else denied.
func startJSON(t *testing.T, o attackOpts) (*attackGateway, chan seenBody) {
	t.Helper()
	const restart = "/v1/namespaces/*/deployments:restart"
	seen := make(chan seenBody, 16)
	o.rules = []policies.HTTPHost{{Host: "rules.test", Default: policies.HTTPDeny, Rules: []policies.HTTPRule{
		{Methods: []string{"POST"}, Path: restart, Action: policies.HTTPDeny, JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"svc-dev-billing-*"}}}},
		{Methods: []string{"POST"}, Path: restart, Action: policies.HTTPAllow, JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"svc-dev-*-4812-a", "svc-dev-auth-*"}}}},
		{Methods: []string{"POST"}, Path: restart, Action: policies.HTTPAsk},
		{Methods: []string{"POST"}, Path: "/v1/buckets/*:delete", Action: policies.HTTPAllow, JSON: []policies.HTTPJSONMatch{{Field: "prefix", Values: []string{"dev/alex/**"}}}},
		{Methods: []string{"GET"}, Path: "/v1/**", Action: policies.HTTPAllow},
	}}}
	g := startAttack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("upstream: reading the body: %v", err)
		}
		seen <- seenBody{method: r.Method, path: r.URL.Path, encoding: r.Header.Get("Content-Encoding"), body: b}
	}), o)
	return g, seen
}

// request is the audit event of the n-th request (from 1) the
// gateway answered.
func (g *attackGateway) request(t *testing.T, n int) Event {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		g.mu.Lock()
		var reqs []Event
		for _, ev := range g.evs {
			if ev.Kind == KindRequest {
				reqs = append(reqs, ev)
			}
		}
		g.mu.Unlock()
		if len(reqs) >= n {
			return reqs[n-1]
		}
	}
	t.Fatalf("fewer than %d requests audited", n)
	return Event{}
}

func postJSON(body string) *http.Request {
	req, _ := http.NewRequest("POST", restartURL, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	return req
}

func noUpstream(t *testing.T, seen chan seenBody) {
	t.Helper()
	select {
	case s := <-seen:
		t.Errorf("the upstream got %s %s %q", s.method, s.path, s.body)
	default:
	}
}

// TestJSONRuleAllowed: a bulk restart whose every target an allow rule
// names reaches the upstream byte for byte (spacing, escapes, other
// fields), over HTTP/1.1 and HTTP/2, with a length or chunked.
func TestJSONRuleAllowed(t *testing.T) {
	g, seen := startJSON(t, attackOpts{tls: true})
	body := " {\"names\" : [ \"svc-dev-auth-4812-a\",\"svc-dev-\\u0077eb-4812-a\" ] ,\"reason\":\"caf\u00e9 \\\"x\\\"\", \"force\": [1, {\"names\": [\"svc-dev-billing-1\"]}]}\r\n"
	n := 0
	for _, h2 := range []bool{false, true} {
		for _, chunked := range []bool{false, true} {
			req := postJSON(body)
			if chunked {
				req.Body = io.NopCloser(&slowReader{parts: []string{body[:7], body[7:30], body[30:]}})
				req.ContentLength = -1
			}
			res := doAsync(g.client(h2), req)
			waitStatus(t, res, http.StatusOK)
			n++
			if s := <-seen; string(s.body) != body {
				t.Errorf("h2=%v chunked=%v: upstream got %q, want %q", h2, chunked, s.body, body)
			}
			if ev := g.request(t, n); ev.Action != ActionAllowed || !strings.Contains(ev.Rule, "rule 2") || !strings.Contains(ev.Rule, "json names") {
				t.Errorf("h2=%v chunked=%v: audited %s by %q", h2, chunked, ev.Action, ev.Rule)
			}
		}
	}
	// The bucket delete under the allowed prefix.
	req, _ := http.NewRequest("POST", "https://rules.test/v1/buckets/b:delete", strings.NewReader(`{"prefix":"dev/alex/"}`))
	waitStatus(t, doAsync(g.client(true), req), http.StatusOK)
	if s := <-seen; string(s.body) != `{"prefix":"dev/alex/"}` {
		t.Errorf("upstream got %q", s.body)
	}
}

// TestJSONRuleDenied: a denied target riding along with allowed ones
// refuses the whole request, 403 naming the rule; the upstream sees
// nothing.
func TestJSONRuleDenied(t *testing.T) {
	g, seen := startJSON(t, attackOpts{tls: true})
	n := 0
	for _, h2 := range []bool{false, true} {
		for _, body := range []string{
			`{"names":["svc-dev-auth-4812-a","svc-dev-billing-4812-a"]}`,
			`{"names":"svc-dev-billing-4812-a"}`,
			`{"names":["svc-dev-\u0062illing-4812-a"]}`,
			`{"names":["svc-dev-auth-4812-a/../svc-dev-billing-4812-a"]}`,
		} {
			resp, err := g.client(h2).Do(postJSON(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			n++
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "json names [svc-dev-billing-*] -\\u003e deny") {
				t.Errorf("h2=%v %s: %d %s", h2, body, resp.StatusCode, b)
			}
			if ev := g.request(t, n); ev.Action != ActionDenied || !strings.Contains(ev.Rule, "rule 1") {
				t.Errorf("h2=%v %s: audited %s by %q", h2, body, ev.Action, ev.Rule)
			}
		}
	}
	noUpstream(t, seen)
}

// TestJSONRuleAsked: a target no allow rule names falls through to the
// ask rule; the hold shows the body, and the approved request goes on
// byte for byte. So does a body whose field is missing, null or empty.
// Bodies the json rules cannot read (longer than MaxHeldBody,
// gzip-encoded, not a JSON object, a field not strings) match the json
// deny rule instead: a service may read a denied target out of them.
func TestJSONRuleAsked(t *testing.T) {
	g, seen := startJSON(t, attackOpts{tls: true})
	long := `{"names":["svc-dev-auth-4812-a"],"pad":"` + strings.Repeat("A", MaxHeldBody) + `"}`
	var zb bytes.Buffer
	zw := gzip.NewWriter(&zb)
	io.WriteString(zw, `{"names":["svc-dev-auth-4812-a"]}`)
	zw.Close()
	for _, tt := range []struct {
		name, body, encoding string
		denied               bool
	}{
		{"unnamed target", `{"names":["svc-dev-auth-4812-a","svc-prod-auth-4812-a"]}`, "", false},
		{"longer than the bound", long, "", true},
		{"gzip", zb.String(), "gzip", true},
		{"not JSON", `names=svc-dev-auth-4812-a`, "", true},
		{"top-level array", `[{"names":["svc-dev-auth-4812-a"]}]`, "", true},
		{"field missing", `{"ids":["svc-dev-auth-4812-a"]}`, "", false},
		{"numbers", `{"names":[4812]}`, "", true},
		{"nested array", `{"names":[["svc-dev-auth-4812-a"]]}`, "", true},
		{"null", `{"names":null}`, "", false},
		{"empty list", `{"names":[]}`, "", false},
		{"no body", ``, "", false},
	} {
		for _, h2 := range []bool{false, true} {
			req := postJSON(tt.body)
			if tt.encoding != "" {
				req.Header.Set("Content-Encoding", tt.encoding)
			}
			if tt.denied {
				resp, err := g.client(h2).Do(req)
				if err != nil {
					t.Fatal(err)
				}
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "json names [svc-dev-billing-*] -\\u003e deny") {
					t.Errorf("%s h2=%v: %d %s", tt.name, h2, resp.StatusCode, b)
				}
				continue
			}
			res := doAsync(g.client(h2), req)
			a := g.held(t)
			want := []byte(tt.body)
			if len(want) > MaxHeldBody {
				want = want[:MaxHeldBody]
			}
			if !strings.Contains(a.Rule, "rule 3") || !bytes.Equal(a.Body, want) {
				t.Errorf("%s h2=%v: held by %q with %d bytes", tt.name, h2, a.Rule, len(a.Body))
			}
			g.answer <- AskDecision{Allow: true, By: "test"}
			waitStatus(t, res, http.StatusOK)
			if s := <-seen; string(s.body) != tt.body || s.encoding != tt.encoding {
				t.Errorf("%s h2=%v: upstream got %d bytes in %q, want the %d sent", tt.name, h2, len(s.body), s.encoding, len(tt.body))
			}
		}
	}
	noUpstream(t, seen)
}

// TestAttackJSONAmbiguous: bodies that JSON parsers read differently —
// so that the gateway would check one list of targets and the service
// act on another — are refused outright, "ambiguous JSON body", and
// audited as refused: duplicate keys (Go's encoding/json takes the last,
// other parsers the first), keys equal to a named field without regard
// to case or under Unicode folding (Go's encoding/json matches struct
// fields so), a second object after the first (json.Decoder reads the
// first), syntax lenient parsers accept, invalid UTF-8, lone surrogates.
func TestAttackJSONAmbiguous(t *testing.T) {
	g, seen := startJSON(t, attackOpts{tls: true})
	n := 0
	for _, body := range []string{
		`{"names":["svc-dev-auth-4812-a"],"names":["svc-dev-billing-4812-a"]}`,
		`{"names":["svc-dev-billing-4812-a"],"names":["svc-dev-auth-4812-a"]}`,
		`{"names":["svc-dev-auth-4812-a"],"Names":["svc-dev-billing-4812-a"]}`,
		`{"NAMES":["svc-dev-billing-4812-a"]}`,
		`{"names":["svc-dev-auth-4812-a"],"nameſ":["svc-dev-billing-4812-a"]}`,
		`{"names":["svc-dev-auth-4812-a"],"name\u017f":["svc-dev-billing-4812-a"]}`,
		`{"names":["svc-dev-auth-4812-a"],"\u004eames":["svc-dev-billing-4812-a"]}`,
		`{"names":["svc-dev-auth-4812-a"]}{"names":["svc-dev-billing-4812-a"]}`,
		`{"names":["svc-dev-auth-4812-a"]} trailing`,
		`{"names":["svc-dev-auth-4812-a"],}`,
		`{"names":['svc-dev-auth-4812-a']}`,
		"\ufeff" + `{"names":["svc-dev-auth-4812-a"]}`,
		"{\"names\":[\"svc-dev-auth-4812-a\xc0\"]}",
		`{"names":["svc-dev-auth-4812-a\udc00"]}`,
	} {
		for _, h2 := range []bool{false, true} {
			resp, err := g.client(h2).Do(postJSON(body))
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			n++
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "ambiguous JSON body") {
				t.Errorf("h2=%v %q: %d %s", h2, body, resp.StatusCode, b)
			}
			if ev := g.request(t, n); ev.Action != ActionRefused || !strings.Contains(ev.Reason, "ambiguous JSON body") {
				t.Errorf("h2=%v %q: audited %s: %q", h2, body, ev.Action, ev.Reason)
			}
		}
	}
	select {
	case a := <-g.asks:
		t.Errorf("an ambiguous body was held: %+v", a)
	default:
	}
	noUpstream(t, seen)

	// Requests no json rule could decide are not parsed: a GET with an
	// odd body passes.
	req, _ := http.NewRequest("GET", "https://rules.test/v1/x", strings.NewReader(`{"names":1,"names":2}`))
	waitStatus(t, doAsync(g.client(false), req), http.StatusOK)
	<-seen
}

// TestJSONRuleExpectContinue: a client that waits for 100 Continue before
// sending its body gets it (the gateway reads the body to decide) and
// the request is decided on the body: allowed, and refused.
func TestJSONRuleExpectContinue(t *testing.T) {
	g, seen := startJSON(t, attackOpts{})
	for _, tt := range []struct {
		body string
		want int
	}{
		{`{"names":["svc-dev-auth-4812-a"]}`, http.StatusOK},
		{`{"names":["svc-dev-billing-4812-a"]}`, http.StatusForbidden},
	} {
		c := g.dial(t, 0)
		c.SetDeadline(time.Now().Add(5 * time.Second))
		fmt.Fprintf(c, "POST /v1/namespaces/dev/deployments:restart HTTP/1.1\r\nHost: rules.test\r\nContent-Type: application/json\r\nContent-Length: %d\r\nExpect: 100-continue\r\n\r\n", len(tt.body))
		br := bufio.NewReader(c)
		line, err := br.ReadString('\n')
		if err != nil || !strings.HasPrefix(line, "HTTP/1.1 100 ") {
			t.Fatalf("before the body: %q, %v; want 100 Continue", line, err)
		}
		br.ReadString('\n') // the empty line
		io.WriteString(c, tt.body)
		resp, err := http.ReadResponse(br, nil)
		for err == nil && resp.StatusCode == http.StatusContinue {
			// The upstream's own 100 Continue, which the gateway relays.
			resp, err = http.ReadResponse(br, nil)
		}
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tt.want {
			t.Errorf("%s: %d, want %d", tt.body, resp.StatusCode, tt.want)
		}
		if tt.want == http.StatusOK {
			if s := <-seen; string(s.body) != tt.body {
				t.Errorf("upstream got %q", s.body)
			}
		}
	}
	noUpstream(t, seen)
}

// TestJSONRuleStalledClient: a client that sends part of the body a json
// rule would read, then nothing, is answered 408 after the session's
// approval timeout, and nothing reaches the upstream.
func TestJSONRuleStalledClient(t *testing.T) {
	const timeout = 500 * time.Millisecond
	g, seen := startJSON(t, attackOpts{askTimeout: timeout})
	c := g.dial(t, 0)
	began := time.Now()
	io.WriteString(c, "POST /v1/namespaces/dev/deployments:restart HTTP/1.1\r\nHost: rules.test\r\nContent-Length: 100\r\n\r\n{\"names\":[")
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer to a stalled body: %v", err)
	}
	resp.Body.Close()
	if took := time.Since(began); resp.StatusCode != http.StatusRequestTimeout || took < timeout || took > timeout+2*time.Second {
		t.Errorf("%d after %s; want 408 after the %s timeout", resp.StatusCode, took, timeout)
	}
	noUpstream(t, seen)
}
