package l7

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

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
