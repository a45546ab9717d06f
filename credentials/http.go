package credentials

import (
	"context"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"strings"
	"time"
	"unicode"

	"github.com/airlock-sandbox/airlock/credentials/verify"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// Request body limits of the endpoints.
const (
	maxIntrospectBody = 64 << 10
	maxReportBody     = 16 << 10
	maxReportField    = 256
)

// Handler serves the endpoints that services verify against:
//
//	GET  /.well-known/jwks.json   the public keys (JWKS) that verify airlock tokens
//	POST /v1/introspect           token=TOKEN (form or JSON) -> verify.Introspection
//	POST /v1/report               verify.Rejection (JSON) -> 204; audited as "rejected"
//
// The daemon serves it on the gateway's uplink side, where the world's
// services and the host can reach it and sessions cannot. JWKS and
// introspection answer 404 when the broker has no keyring.
func (b *Broker) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /.well-known/jwks.json", b.serveJWKS)
	mux.HandleFunc("POST /v1/introspect", b.serveIntrospect)
	mux.HandleFunc("POST /v1/report", b.serveReport)
	return mux
}

func (b *Broker) serveJWKS(w http.ResponseWriter, r *http.Request) {
	if b.ring == nil {
		writeError(w, http.StatusNotFound, "not_found", "no built-in issuer")
		return
	}
	w.Header().Set("Cache-Control", "max-age=60")
	writeJSON(w, http.StatusOK, b.ring.JWKS())
}

// Introspect reports whether raw is an active airlock token, after RFC 7662.
// It checks everything a service's verifier checks except the audience, and
// requires the broker to hold a live record of the token.
func (b *Broker) Introspect(ctx context.Context, raw string) verify.Introspection {
	if b.verifier == nil {
		return verify.Introspection{Active: false, Reason: verify.Reason(verify.ErrUnavailable)}
	}
	c, err := b.verifier.VerifyIgnoringAudience(ctx, raw)
	if err != nil {
		res := verify.Introspection{Active: false, Reason: verify.Reason(err)}
		var e *verify.Error
		if errors.As(err, &e) {
			res.ID, res.Subject = e.ID, e.Subject
		}
		return res
	}
	return verify.Introspection{
		Active:    true,
		ID:        c.ID,
		Subject:   c.Subject,
		Session:   c.Session,
		Issuer:    c.Issuer,
		Audience:  c.Audience,
		Scopes:    c.Scopes,
		Expiry:    c.Expiry.Unix(),
		IssuedAt:  unix(c.IssuedAt),
		NotBefore: unix(c.NotBefore),
		TokenType: "Bearer",
	}
}

// unix returns t in seconds since the epoch, or 0 for the zero time.
func unix(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func (b *Broker) serveIntrospect(w http.ResponseWriter, r *http.Request) {
	if b.ring == nil {
		writeError(w, http.StatusNotFound, "not_found", "no built-in issuer")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxIntrospectBody)
	var raw string
	ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	switch ct {
	case "application/json":
		var body struct {
			Token string `json:"token"`
		}
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_argument", "body is not a JSON object with \"token\"")
			return
		}
		raw = body.Token
	case "application/x-www-form-urlencoded":
		if err := r.ParseForm(); err != nil {
			writeError(w, http.StatusBadRequest, "invalid_argument", "cannot parse form")
			return
		}
		raw = r.PostForm.Get("token")
	default:
		writeError(w, http.StatusUnsupportedMediaType, "invalid_argument", "send token as application/x-www-form-urlencoded or application/json")
		return
	}
	if raw == "" {
		writeError(w, http.StatusBadRequest, "invalid_argument", "missing token")
		return
	}
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, b.Introspect(r.Context(), raw))
}

func (b *Broker) serveReport(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxReportBody)
	var rej verify.Rejection
	if err := json.NewDecoder(r.Body).Decode(&rej); err != nil {
		writeError(w, http.StatusBadRequest, "invalid_argument", "body is not a JSON rejection")
		return
	}
	if rej.Reason == "" {
		writeError(w, http.StatusBadRequest, "invalid_argument", "missing reason")
		return
	}
	e := Event{
		Kind:     EventRejected,
		Time:     b.clock.Now(),
		ID:       clean(rej.ID),
		Audience: clean(rej.Audience),
		Action:   clean(rej.Action),
		Reason:   clean(rej.Reason),
		Detail:   clean(rej.Detail),
		Remote:   r.RemoteAddr,
		Client:   clean(rej.Client),
		Server:   clean(rej.Server),
	}
	// The session comes from the broker's own record of the token, not from
	// what the reporter claims.
	if e.ID != "" {
		b.mu.Lock()
		if rec, ok := b.tokens[e.ID]; ok {
			e.Session, e.Name, e.Issuer, e.Expires = rec.Session, rec.Name, BuiltinIssuer, rec.Expiry
			e.Scopes = append([]string(nil), rec.Scopes...)
		}
		b.mu.Unlock()
	}
	log.G(r.Context()).Info("credential rejected by service", "session", e.Session, "name", e.Name,
		"jti", e.ID, "audience", e.Audience, "action", e.Action, "reason", e.Reason, "remote", e.Remote, "client", e.Client)
	if b.audit != nil {
		b.audit(r.Context(), e)
	}
	w.WriteHeader(http.StatusNoContent)
}

// clean bounds a reported field and strips control characters, so that a
// report cannot forge lines in a log.
func clean(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return -1
		}
		return r
	}, s)
	if len(s) > maxReportField {
		s = strings.ToValidUTF8(s[:maxReportField], "")
	}
	return s
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes the API's error envelope.
func writeError(w http.ResponseWriter, status int, class, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]string{"class": class, "message": msg}})
}
