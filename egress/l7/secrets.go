package l7

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// Secret is a value the sandbox never holds: it holds Placeholder, which
// the gateway replaces by Value only in a request over TLS, with a
// verified upstream certificate, to a host Inject names. Any other
// request that carries the placeholder, where the gateway can see it, is
// refused as an exfiltration attempt.
type Secret struct {
	Name        string
	Placeholder string
	// Value is nil when the secret's source could not be read: a request
	// that needs it is refused.
	Value  []byte
	Inject []Inject
}

// Inject binds a secret to a host: on TLS to Host the gateway sets
// Header to the value, or, with Bearer, Authorization to "Bearer " and
// the value.
type Inject struct {
	Host   string // lower-case name without a trailing dot
	Header string
	Bearer bool
}

func (in Inject) header() string {
	if in.Bearer {
		return "Authorization"
	}
	return in.Header
}

// bindings returns the injections that apply to a request for host over
// TLS, one per secret and header.
func bindings(secrets []Secret, host string) []binding {
	var out []binding
	for i := range secrets {
		for _, in := range secrets[i].Inject {
			if in.Host == host {
				out = append(out, binding{secret: &secrets[i], inject: in})
			}
		}
	}
	return out
}

type binding struct {
	secret *Secret
	inject Inject
}

// placeholderIn returns the secret whose placeholder s contains, if one
// does.
func placeholderIn(secrets []Secret, s string) (*Secret, bool) {
	for i := range secrets {
		if p := secrets[i].Placeholder; p != "" && strings.Contains(s, p) {
			return &secrets[i], true
		}
	}
	return nil, false
}

// exfiltration says why a request was refused for carrying a placeholder.
type exfiltration struct {
	secret string
	where  string
	host   string
}

func (e *exfiltration) Error() string {
	return fmt.Sprintf("airlock: the placeholder of secret %s in the request's %s to %s: a secret's placeholder may go only in its bound header, over TLS, to the hosts it is bound to", e.secret, e.where, e.host)
}

// injectSecrets checks a request's target and header fields for
// placeholders and sets the bound headers. tls says whether the request
// goes to its upstream over TLS (verified: the gateway never skips
// verification). A placeholder anywhere but a header bound to host, or in
// a request over plain HTTP, is an exfiltration; a bound secret whose
// value is missing is an error too.
func injectSecrets(secrets []Secret, r *http.Request, host string, tls bool) error {
	if len(secrets) == 0 {
		return nil
	}
	if s, ok := placeholderIn(secrets, r.URL.RequestURI()); ok {
		return &exfiltration{secret: s.Name, where: "target", host: host}
	}
	var bound []binding
	if tls {
		bound = bindings(secrets, host)
	}
	isBound := func(field string) bool {
		for _, b := range bound {
			if http.CanonicalHeaderKey(b.inject.header()) == field {
				return true
			}
		}
		return false
	}
	for field, vs := range r.Header {
		if isBound(field) {
			continue
		}
		for _, v := range vs {
			if s, ok := placeholderIn(secrets, v); ok {
				return &exfiltration{secret: s.Name, where: "header " + field, host: host}
			}
		}
	}
	for _, t := range r.Trailer {
		for _, v := range t {
			if s, ok := placeholderIn(secrets, v); ok {
				return &exfiltration{secret: s.Name, where: "trailer", host: host}
			}
		}
	}
	for _, b := range bound {
		if b.secret.Value == nil {
			return fmt.Errorf("airlock: secret %s bound to %s has no value (its source could not be read by the daemon)", b.secret.Name, host)
		}
		v := string(b.secret.Value)
		if b.inject.Bearer {
			v = "Bearer " + v
		}
		// Whatever the client sent in the bound header, placeholder or
		// not, the header carries the secret to this host.
		r.Header.Set(b.inject.header(), v)
	}
	return nil
}

// errPlaceholderInBody is returned by a scanReader that met a placeholder.
var errPlaceholderInBody = errors.New("placeholder in the request body")

// scanReader passes a request body on and fails once a placeholder
// appears in it: it holds back the last len(longest placeholder)-1 bytes
// until more arrive, so a placeholder split across reads is never passed
// on whole.
type scanReader struct {
	r       io.ReadCloser
	secrets []Secret
	keep    int
	buf     []byte // bytes read, not yet passed on
	out     []byte // bytes checked, ready to pass on
	eof     bool
	found   *Secret
	n       int64
}

func newScanReader(r io.ReadCloser, secrets []Secret) *scanReader {
	keep := 0
	for _, s := range secrets {
		keep = max(keep, len(s.Placeholder)-1)
	}
	return &scanReader{r: r, secrets: secrets, keep: keep}
}

func (s *scanReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.found != nil {
			return 0, errPlaceholderInBody
		}
		if s.eof {
			return 0, io.EOF
		}
		chunk := make([]byte, 32<<10)
		n, err := s.r.Read(chunk)
		s.buf = append(s.buf, chunk[:n]...)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return 0, err
			}
			s.eof = true
		}
		for i := range s.secrets {
			if ph := s.secrets[i].Placeholder; ph != "" && bytes.Contains(s.buf, []byte(ph)) {
				s.found = &s.secrets[i]
				s.buf = nil
				return 0, errPlaceholderInBody
			}
		}
		cut := len(s.buf) - s.keep
		if s.eof {
			cut = len(s.buf)
		}
		if cut > 0 {
			s.out = append(s.out, s.buf[:cut]...)
			s.buf = append(s.buf[:0], s.buf[cut:]...)
		}
	}
	n := copy(p, s.out)
	s.out = s.out[n:]
	s.n += int64(n)
	return n, nil
}

func (s *scanReader) Close() error { return s.r.Close() }
