package l7

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// TestAttackJSONDenyDodged: a json deny rule protects a target that a
// later rule of the same route would let through (a plain allow, or an
// ask a person may approve). A body the gateway cannot judge must not
// dodge it: one sent with a Content-Encoding header it does not have
// (Go's net/http leaves request bodies as they come, so a Go service
// decodes the plain JSON), one padded past MaxHeldBody (services read
// far more: the world's read 1 MiB), one whose named field holds what
// lenient services read a target from (JavaScript's String(["x"]) is
// "x"; Python iterates a mixed list), or one that is not a JSON object
// (a form body, which Rails and PHP read as params).
func TestAttackJSONDenyDodged(t *testing.T) {
	const restart = "/v1/namespaces/*/deployments:restart"
	for _, last := range []string{policies.HTTPAllow, policies.HTTPAsk} {
		acted := make(chan []string, 16)
		g := startAttack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			// A Go service as the world's: encoding/json into a struct,
			// Content-Encoding ignored (net/http does not decode it).
			var req struct{ Names []string }
			b, _ := io.ReadAll(r.Body)
			_ = json.Unmarshal(b, &req)
			acted <- req.Names
		}), attackOpts{tls: true, rules: []policies.HTTPHost{{Host: "rules.test", Default: policies.HTTPDeny, Rules: []policies.HTTPRule{
			{Methods: []string{"POST"}, Path: restart, Action: policies.HTTPDeny, JSON: []policies.HTTPJSONMatch{{Field: "names", Values: []string{"svc-prod-*"}}}},
			{Methods: []string{"POST"}, Path: restart, Action: last},
		}}}})
		for _, tt := range []struct{ name, body, encoding string }{
			{"bogus gzip header", `{"names":["svc-prod-db"]}`, "gzip"},
			{"unknown encoding", `{"names":["svc-prod-db"]}`, "x-none"},
			{"longer than the bound", `{"names":["svc-prod-db"],"pad":"` + strings.Repeat(" ", MaxHeldBody) + `"}`, ""},
			{"nested array", `{"names":[["svc-prod-db"]]}`, ""},
			{"mixed array", `{"names":["svc-prod-db",1]}`, ""},
			{"null in an array", `{"names":["svc-prod-db",null]}`, ""},
			{"object", `{"names":{"0":"svc-prod-db"}}`, ""},
			{"form body", `names[]=svc-prod-db`, ""},
		} {
			req := postJSON(tt.body)
			if tt.encoding != "" {
				req.Header.Set("Content-Encoding", tt.encoding)
			}
			res := doAsync(g.client(true), req)
			if last == policies.HTTPAsk {
				select {
				case a := <-g.asks:
					t.Errorf("%s: a denied target was held for a person by %q", tt.name, a.Rule)
					g.answer <- AskDecision{Allow: true, By: "habituated"}
				case code := <-res:
					if code != http.StatusForbidden {
						t.Errorf("then ask, %s: %d, want 403", tt.name, code)
					}
					continue
				}
			}
			code := <-res
			if code != http.StatusForbidden {
				t.Errorf("then %s, %s: %d, want 403", last, tt.name, code)
			}
			select {
			case names := <-acted:
				t.Errorf("then %s, %s: the service acted on %q", last, tt.name, names)
			default:
			}
		}
	}
}

// TestAttackStalledBodiesBounded: a sandbox that opens many streams on
// a route whose body the gateway reads before deciding, sends nearly
// MaxHeldBody bytes on each and then nothing, makes the gateway hold
// what it read until the body deadline (the approval timeout, 5 minutes
// by default): 64 KiB times its 512 connections times 64 streams, 2 GiB
// for one session. The reads a session has under way at once are
// bounded (maxSessionBodyReads); a request beyond them is refused at
// once with 429, before its body is read.
func TestAttackStalledBodiesBounded(t *testing.T) {
	const timeout = 8 * time.Second
	g, seen := startJSON(t, attackOpts{tls: true, askTimeout: timeout})
	const n = 3 * maxSessionBodyReads
	began := time.Now()
	type answer struct {
		code int
		took time.Duration
	}
	answers := make(chan answer, n)
	var pws []*io.PipeWriter
	var clients []*http.Client
	for range (n + 31) / 32 {
		clients = append(clients, g.client(true))
	}
	for i := range n {
		pr, pw := io.Pipe()
		pws = append(pws, pw)
		req, _ := http.NewRequest("POST", restartURL, pr)
		req.ContentLength = MaxHeldBody
		go func() {
			res := doAsync(clients[i/32], req)
			answers <- answer{<-res, time.Since(began)}
		}()
		go pw.Write(bytes.Repeat([]byte(" "), MaxHeldBody-1))
	}
	defer func() {
		for _, pw := range pws {
			pw.Close()
		}
	}()
	// A client may see the stream reset (the gateway answers without
	// reading the body) rather than the 429: the audit has the status.
	var stalled int
	for range n {
		a := <-answers
		switch {
		case a.code == http.StatusRequestTimeout:
			stalled++
		case (a.code == http.StatusTooManyRequests || a.code == 0) && a.took < timeout:
		default:
			t.Errorf("a stalled body: %d after %s", a.code, a.took)
		}
	}
	if stalled > maxSessionBodyReads {
		t.Errorf("%d stalled bodies held until the timeout; want at most %d", stalled, maxSessionBodyReads)
	}
	var refused bool
	g.mu.Lock()
	for _, ev := range g.evs {
		refused = refused || ev.Kind == KindRequest && ev.Status == http.StatusTooManyRequests && ev.Action == ActionRefused
	}
	g.mu.Unlock()
	if !refused {
		t.Error("no request audited as refused with 429")
	}
	noUpstream(t, seen)
}
