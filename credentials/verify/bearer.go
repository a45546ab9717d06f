package verify

import (
	"errors"
	"maps"
	"net/http"
	"slices"
	"strings"
)

// ErrNoToken is returned by TokenFromRequest when a request carries no
// credential.
var ErrNoToken = errors.New("no credential in request")

// TokenFromRequest returns the token a client sent: an "Authorization:
// Bearer TOKEN" header, or the password of HTTP Basic authentication (what
// git sends from a credential helper; the user name is ignored).
func TokenFromRequest(r *http.Request) (string, error) {
	h := r.Header.Get("Authorization")
	if h == "" {
		return "", ErrNoToken
	}
	scheme, rest, _ := strings.Cut(h, " ")
	if strings.EqualFold(scheme, "Bearer") {
		if tok := strings.TrimSpace(rest); tok != "" {
			return tok, nil
		}
		return "", ErrNoToken
	}
	if _, pass, ok := r.BasicAuth(); ok && pass != "" {
		return pass, nil
	}
	return "", ErrNoToken
}

func sortedKeys(m map[string]string) []string {
	return slices.Sorted(maps.Keys(m))
}
