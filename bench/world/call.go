package world

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/credentials/verify"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// maxRequestBody bounds JSON request bodies.
const maxRequestBody = 1 << 20

// service is what the services share: a name, an audience and the world.
type service struct {
	w        *World
	name     string
	audience string
}

// call is one request being served. Its methods write the answer; finish
// records the audit event.
type call struct {
	s  *service
	rw http.ResponseWriter
	r  *http.Request

	raw      string
	claims   *verify.Claims
	ev       Event
	done     bool
	recorded bool
	// challenge records a request without a token as a challenge, not a
	// denial (git's anonymous first request).
	challenge bool
}

func (s *service) begin(rw http.ResponseWriter, r *http.Request) *call {
	return &call{s: s, rw: rw, r: r, ev: Event{
		Time:    s.w.now(),
		Service: s.name,
		Method:  r.Method,
		Path:    r.URL.EscapedPath(),
	}}
}

// finish records the audit event; a request that wrote no answer gets a
// 500.
func (c *call) finish() {
	if !c.done {
		c.fail(worldapi.ClassInternal, "", "", "no answer")
	}
	c.record()
}

// record adds the request's audit event, once. Answers call it before they
// are written, so a client that has read an answer finds its event.
func (c *call) record() {
	if c.recorded {
		return
	}
	c.recorded = true
	c.s.w.audit.record(c.ev)
}

// trustedKey is the context key under which ServeAs hands a request its
// claims.
type trustedKey struct{}

// trustedClaims returns the claims ServeAs gave the request, or nil. Only
// code of this package can set them: nothing a client sends can.
func trustedClaims(r *http.Request) *verify.Claims {
	c, _ := r.Context().Value(trustedKey{}).(*verify.Claims)
	return c
}

// authenticate verifies the request's token for the service's audience. On
// failure it answers 401 (503 when verification is unavailable) and
// returns false. A request served through ServeAs carries its claims
// instead and is authenticated as their subject, whatever it sends.
func (c *call) authenticate() bool {
	if tc := trustedClaims(c.r); tc != nil {
		c.claims = tc
		c.ev.Session, c.ev.Trusted = tc.Subject, true
		return true
	}
	raw, err := verify.TokenFromRequest(c.r)
	if err != nil {
		c.ev.Decision, c.ev.Reason = DecisionDeny, worldapi.ReasonNoToken
		if c.challenge {
			c.ev.Decision = DecisionChallenge
		}
		c.writeError(worldapi.ErrorDetail{
			Class:   worldapi.ClassUnauthenticated,
			Reason:  worldapi.ReasonNoToken,
			Message: "no credential: send the session's token as \"Authorization: Bearer TOKEN\"",
		})
		return false
	}
	claims, err := c.s.w.verifier.Verify(verify.RequestContext(c.r), raw, c.s.audience)
	if err != nil {
		c.rejected(err)
		return false
	}
	c.raw, c.claims = raw, claims
	c.ev.TokenID, c.ev.Session = claims.ID, claims.Subject
	return true
}

// authorize checks req against the token. target names the request's
// target for the audit event and the error. On denial it answers 403 (or
// 401 if the token stopped being valid) and returns false.
func (c *call) authorize(req scope.Request, target string) bool {
	c.ev.Action = req.Action
	if err := c.check(req); err != nil {
		c.rejectedTarget(err, req.Action, target)
		return false
	}
	return true
}

// check returns nil if the request's claims allow req, or the rejection.
// A token is authorized again through the verifier so that the rejection
// is reported to the issuer and carries its canonical message; claims
// given by ServeAs get the same message, and nothing is reported.
func (c *call) check(req scope.Request) error {
	if c.claims.Allows(req) {
		return nil
	}
	if c.raw == "" {
		return verify.Denied(c.claims, req)
	}
	_, err := c.s.w.verifier.Authorize(verify.RequestContext(c.r), c.raw, c.s.audience, req)
	return err
}

// rejected answers a token rejection.
func (c *call) rejected(err error) { c.rejectedTarget(err, c.ev.Action, "") }

func (c *call) rejectedTarget(err error, action, target string) {
	reason := verify.Reason(err)
	c.ev.Decision, c.ev.Reason = DecisionDeny, reason
	var ve *verify.Error
	if errors.As(err, &ve) {
		if ve.ID != "" {
			c.ev.TokenID, c.ev.Session = ve.ID, ve.Subject
		}
	}
	d := worldapi.ErrorDetail{Reason: reason, Action: action, Target: target}
	switch {
	case errors.Is(err, verify.ErrScopeDenied):
		d.Class = worldapi.ClassPermissionDenied
		if target != "" {
			d.Message = fmt.Sprintf("%s %s: %v", action, target, err)
		} else {
			d.Message = err.Error()
		}
	case errors.Is(err, verify.ErrUnavailable):
		d.Class = worldapi.ClassUnavailable
		d.Message = err.Error()
		log.G(c.r.Context()).Warn("world: token verification unavailable", "service", c.s.name, "error", err)
	default:
		d.Class = worldapi.ClassUnauthenticated
		d.Message = err.Error()
	}
	c.writeError(d)
}

// allow marks the request allowed for the audit event.
func (c *call) allow() { c.ev.Decision = DecisionAllow }

// fail answers an error that is not a token rejection.
func (c *call) fail(class, kind, target, msg string) {
	c.writeError(worldapi.ErrorDetail{Class: class, Kind: kind, Target: target, Message: msg})
}

func (c *call) notFound(kind, target string) {
	c.fail(worldapi.ClassNotFound, kind, target, fmt.Sprintf("%s %q not found", kind, target))
}

func (c *call) writeError(d worldapi.ErrorDetail) {
	status := worldapi.StatusForClass(d.Class)
	c.ev.Error = d.Message
	if status == http.StatusUnauthorized && c.rw.Header().Get("WWW-Authenticate") == "" {
		c.rw.Header().Set("WWW-Authenticate", `Bearer realm="airlock-world"`)
	}
	c.writeJSON(status, worldapi.ErrorBody{Error: d})
}

func (c *call) ok(v any) { c.writeJSON(http.StatusOK, v) }

func (c *call) writeJSON(status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b = []byte(`{"error":{"class":"internal","message":"encode answer"}}`)
	}
	c.ev.Status = status
	c.done = true
	c.record()
	c.rw.Header().Set("Content-Type", "application/json")
	c.rw.Header().Set("Cache-Control", "no-store")
	c.rw.WriteHeader(status)
	c.rw.Write(append(b, '\n'))
}

// decode reads the JSON request body into v; on error it answers 400.
func (c *call) decode(v any) bool {
	dec := json.NewDecoder(io.LimitReader(c.r.Body, maxRequestBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		c.fail(worldapi.ClassInvalidArgument, "", "", "bad request body: "+err.Error())
		return false
	}
	return true
}

// decodeOptional is decode for a body that may be empty (then v is left
// as it is).
func (c *call) decodeOptional(v any) bool {
	dec := json.NewDecoder(io.LimitReader(c.r.Body, maxRequestBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil && !errors.Is(err, io.EOF) {
		c.fail(worldapi.ClassInvalidArgument, "", "", "bad request body: "+err.Error())
		return false
	}
	return true
}

// methodNotAllowed answers 405 for a known path.
func (c *call) methodNotAllowed(allowed ...string) {
	c.rw.Header().Set("Allow", strings.Join(allowed, ", "))
	c.ev.Status = http.StatusMethodNotAllowed
	c.ev.Error = "method not allowed"
	c.done = true
	c.record()
	c.rw.Header().Set("Content-Type", "application/json")
	c.rw.WriteHeader(http.StatusMethodNotAllowed)
	b, _ := json.Marshal(worldapi.ErrorBody{Error: worldapi.ErrorDetail{Class: worldapi.ClassInvalidArgument, Message: "method " + c.r.Method + " not allowed; use " + strings.Join(allowed, " or ")}})
	c.rw.Write(append(b, '\n'))
}

func (c *call) noRoute() {
	c.fail(worldapi.ClassNotFound, "", "", "no such endpoint: "+c.r.Method+" "+c.r.URL.EscapedPath())
}

// segments splits the request's escaped path into unescaped segments,
// without cleaning: "/v1/jobs/%2E%2E" is ["v1", "jobs", ".."].
func segments(r *http.Request) ([]string, bool) {
	p := r.URL.EscapedPath()
	if !strings.HasPrefix(p, "/") {
		return nil, false
	}
	parts := strings.Split(p[1:], "/")
	for i, s := range parts {
		u, err := url.PathUnescape(s)
		if err != nil {
			return nil, false
		}
		parts[i] = u
	}
	return parts, true
}

// hasPrefix reports whether segs starts with want.
func hasPrefix(segs []string, want ...string) bool {
	if len(segs) < len(want) {
		return false
	}
	for i, w := range want {
		if segs[i] != w {
			return false
		}
	}
	return true
}
