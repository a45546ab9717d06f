package console

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
)

// Cookie and form field names.
const (
	cookieName = "airlock_console"
	csrfField  = "csrf"
)

// Bounds of the console's logins.
const (
	// loginTTL is how long a session cookie is good for.
	loginTTL = 12 * time.Hour
	// maxLogins bounds the cookies kept; the oldest goes first.
	maxLogins = 256
)

// auth decides who may use the console: a token holder (TCP), or a peer
// the check admits (unix socket); and whether a POST is the console's own.
type auth struct {
	// token is the bearer token; nil: none asked (a unix socket).
	token []byte
	// peerCheck admits a unix socket's peer; nil: no peer asked.
	peerCheck func(Peer) error
	// hosts are the Host headers accepted; empty: any unless
	// loopbackNames.
	hosts []string
	// loopbackNames accepts a Host naming loopback (localhost,
	// 127.0.0.1, [::1]) on any port: a unix socket console reached
	// through a forwarded port the console cannot know.
	loopbackNames bool
	// csrfKey keys the CSRF tokens (an HMAC of the login cookie).
	csrfKey [32]byte
	// cookiePath is the login cookie's Path: the console's base path.
	cookiePath string
	now        func() time.Time

	mu sync.Mutex
	// logins are the session cookies handed out, with their expiry.
	logins map[string]time.Time // +checklocks:mu
}

func newAuth() *auth {
	a := &auth{logins: map[string]time.Time{}, now: time.Now}
	_, _ = rand.Read(a.csrfKey[:])
	return a
}

// hostOK says whether r's Host is one the console answers to (a loopback
// console refuses other names: DNS rebinding).
func (a *auth) hostOK(r *http.Request) bool {
	host := strings.ToLower(r.Host)
	switch {
	case len(a.hosts) > 0:
		return slices.Contains(a.hosts, host)
	case a.loopbackNames:
		name, _, err := net.SplitHostPort(host)
		if err != nil {
			name = strings.Trim(host, "[]")
		}
		return name == "localhost" || name == "127.0.0.1" || name == "::1"
	}
	return true
}

// tokenOK compares a presented token with the console's in constant time.
func (a *auth) tokenOK(t string) bool {
	return len(a.token) > 0 && subtle.ConstantTimeCompare([]byte(t), a.token) == 1
}

// presented returns the token r carries in ?token= or an Authorization
// header, and where.
func presented(r *http.Request) (tok string, inQuery bool) {
	if t := r.URL.Query().Get("token"); t != "" {
		return t, true
	}
	if t, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer "); ok {
		return strings.TrimSpace(t), false
	}
	return "", false
}

// login hands out a new session cookie.
func (a *auth) login(w http.ResponseWriter) string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	v := hex.EncodeToString(b[:])
	now := a.now()
	a.mu.Lock()
	for k, exp := range a.logins {
		if now.After(exp) {
			delete(a.logins, k)
		}
	}
	for len(a.logins) >= maxLogins {
		oldest := ""
		for k, exp := range a.logins {
			if oldest == "" || exp.Before(a.logins[oldest]) {
				oldest = k
			}
		}
		delete(a.logins, oldest)
	}
	a.logins[v] = now.Add(loginTTL)
	a.mu.Unlock()
	path := a.cookiePath
	if path == "" {
		path = "/"
	}
	http.SetCookie(w, &http.Cookie{Name: cookieName, Value: v, Path: path, HttpOnly: true,
		SameSite: http.SameSiteStrictMode, MaxAge: int(loginTTL / time.Second)})
	return v
}

// loggedIn returns r's session cookie when it is one the console handed
// out and has not expired.
func (a *auth) loggedIn(r *http.Request) (string, bool) {
	c, err := r.Cookie(cookieName)
	if err != nil || c.Value == "" {
		return "", false
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	exp, ok := a.logins[c.Value]
	if !ok || a.now().After(exp) {
		return "", false
	}
	return c.Value, true
}

// csrf is the CSRF token of a login.
func (a *auth) csrf(login string) string {
	m := hmac.New(sha256.New, a.csrfKey[:])
	m.Write([]byte("airlock console csrf\x00" + login))
	return hex.EncodeToString(m.Sum(nil))
}

// csrfOK checks a POST's CSRF token against its login.
func (a *auth) csrfOK(login, tok string) bool {
	return hmac.Equal([]byte(a.csrf(login)), []byte(tok))
}

// sameOrigin says whether a POST comes from one of the console's own
// pages: its Origin, or without one its Referer, is http://HOST.
func sameOrigin(r *http.Request) bool {
	want := "http://" + strings.ToLower(r.Host)
	if o := r.Header.Get("Origin"); o != "" {
		return strings.ToLower(o) == want
	}
	ref, err := url.Parse(r.Header.Get("Referer"))
	if err != nil || ref.Host == "" {
		return false
	}
	return strings.ToLower(ref.Scheme+"://"+ref.Host) == want
}
