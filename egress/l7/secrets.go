package l7

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf16"
	"unicode/utf8"
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

// MinGuardedValue is the shortest secret value the gateway looks for in
// requests: a shorter one would turn up in ordinary traffic by chance.
const MinGuardedValue = 8

// guarded reports whether the gateway looks for sec's value itself in
// requests (a copy the sandbox found, say, in a configuration file).
func (sec *Secret) guarded() bool { return len(sec.Value) >= MinGuardedValue }

// valueIn returns the secret whose value s contains, if one does.
func valueIn(secrets []Secret, s string) (*Secret, bool) {
	for i := range secrets {
		if secrets[i].guarded() && strings.Contains(s, string(secrets[i].Value)) {
			return &secrets[i], true
		}
	}
	return nil, false
}

// leakInFold is leakIn without regard to case.
func leakInFold(secrets []Secret, s string) (*Secret, string, bool) {
	ls := strings.ToLower(s)
	for i := range secrets {
		if p := secrets[i].Placeholder; p != "" && strings.Contains(ls, strings.ToLower(p)) {
			return &secrets[i], "placeholder", true
		}
		if secrets[i].guarded() && strings.Contains(ls, strings.ToLower(string(secrets[i].Value))) {
			return &secrets[i], "value", true
		}
	}
	return nil, "", false
}

// leakIn returns the secret whose placeholder or value s carries, and
// which of the two; an Authorization or Proxy-Authorization value's Basic
// credentials are looked at decoded too.
func leakIn(secrets []Secret, s string) (*Secret, string, bool) {
	return leakInDepth(secrets, s, maxUnescapes)
}

// maxUnescapes is how many rounds of percent-decoding leakIn looks
// through: a bound, so that a value nested deeper (%2525...) costs a
// pass per round, never one per byte.
const maxUnescapes = 2

func leakInDepth(secrets []Secret, s string, unescapes int) (*Secret, string, bool) {
	if sec, ok := placeholderIn(secrets, s); ok {
		return sec, "placeholder", true
	}
	if sec, ok := valueIn(secrets, s); ok {
		return sec, "value", true
	}
	if scheme, cred, ok := strings.Cut(strings.TrimSpace(s), " "); ok && strings.EqualFold(scheme, "Basic") {
		// Servers take padded and unpadded, standard and URL-safe.
		cred = strings.TrimSpace(cred)
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
			if dec, err := enc.DecodeString(cred); err == nil {
				if sec, what, ok := leakInDepth(secrets, string(dec), unescapes); ok {
					return sec, what, true
				}
			}
		}
	}
	// Servers decode percent-escapes in header values too (cookies,
	// form-style values).
	if unescapes > 0 {
		if u := lenientUnescape(s); u != s {
			return leakInDepth(secrets, u, unescapes-1)
		}
	}
	return nil, "", false
}

// lenientUnescape decodes every valid %XX escape of s, once, and leaves
// anything else as it is.
func lenientUnescape(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if hi, ok := unhex(s[i+1]); ok {
				if lo, ok := unhex(s[i+2]); ok {
					b = append(b, hi<<4|lo)
					i += 2
					continue
				}
			}
		}
		b = append(b, s[i])
	}
	return string(b)
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// exfiltration says why a request was refused for carrying a placeholder
// or a secret's value.
type exfiltration struct {
	secret string
	what   string // "placeholder" or "value"
	where  string
	host   string
}

func (e *exfiltration) Error() string {
	what := e.what
	if what == "" {
		what = "placeholder"
	}
	return fmt.Sprintf("airlock: the %s of secret %s in the request's %s to %s: a secret may go only in its bound header, over TLS, to the hosts it is bound to", what, e.secret, e.where, e.host)
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
	// The method and the Host are not in r.Header, and a header's name is
	// as much the client's as its value.
	for where, v := range map[string]string{"method": r.Method, "host": r.Host} {
		if s, what, ok := leakIn(secrets, v); ok {
			return &exfiltration{secret: s.Name, what: what, where: where, host: host}
		}
	}
	for field := range r.Header {
		// A field's name reaches the server in another case (canonical,
		// or lower-case in HTTP/2): compare without regard to case.
		if s, what, ok := leakInFold(secrets, field); ok {
			return &exfiltration{secret: s.Name, what: what, where: "header name", host: host}
		}
	}
	// Servers decode the target, part by part: leakIn looks at it decoded
	// too, every valid escape decoded whatever surrounds it (an invalid
	// one elsewhere must not hide a valid one).
	if s, what, ok := leakIn(secrets, r.URL.RequestURI()); ok {
		return &exfiltration{secret: s.Name, what: what, where: "target", host: host}
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
			if s, what, ok := leakIn(secrets, v); ok {
				return &exfiltration{secret: s.Name, what: what, where: "header " + field, host: host}
			}
		}
	}
	for field, t := range r.Trailer {
		if s, what, ok := leakInFold(secrets, field); ok {
			return &exfiltration{secret: s.Name, what: what, where: "trailer name", host: host}
		}
		for _, v := range t {
			if s, what, ok := leakIn(secrets, v); ok {
				return &exfiltration{secret: s.Name, what: what, where: "trailer", host: host}
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

// errPlaceholderInBody is returned by a scanReader that met a placeholder
// or a secret's value.
var errPlaceholderInBody = errors.New("placeholder in the request body")

// heldTail returns how many bytes at the end of b could be the start of
// one of pats: those must wait for the next read before they pass on.
func heldTail(b []byte, pats [][]byte) int {
	held := 0
	for _, p := range pats {
		for n := min(len(p)-1, len(b)); n > held; n-- {
			if bytes.HasSuffix(b, p[:n]) {
				held = n
				break
			}
		}
	}
	return held
}

// holdback keeps the bytes a stream read until they may pass on: all of
// them at the end, else all but a tail that could be the start of a
// pattern.
type holdback struct {
	buf []byte // read, not yet passed on
	out []byte // ready to pass on
}

// release moves what may pass on from buf to out.
func (h *holdback) release(pats [][]byte, eof bool) {
	cut := len(h.buf)
	if !eof {
		cut -= heldTail(h.buf, pats)
	}
	h.releaseTo(cut)
}

// releaseTo moves buf's first cut bytes to out.
func (h *holdback) releaseTo(cut int) {
	if cut > 0 {
		h.out = append(h.out, h.buf[:cut]...)
		h.buf = append(h.buf[:0], h.buf[cut:]...)
	}
}

// fill reads once from r onto the end of buf, into buf's spare room: a
// body that arrives a byte at a time costs no read buffer per byte.
func (h *holdback) fill(r io.Reader) error {
	h.buf = slices.Grow(h.buf, 32<<10)
	n, err := r.Read(h.buf[len(h.buf):cap(h.buf)])
	h.buf = h.buf[:len(h.buf)+n]
	return err
}

// take copies what is ready into p.
func (h *holdback) take(p []byte) int {
	n := copy(p, h.out)
	h.out = h.out[n:]
	return n
}

// streamScan is the scan of what a client streams to a server: request
// bodies (scanReader) and a websocket's messages (wsScanConn) share it.
// What has been read and not passed on is in buf; check looks at it, as
// written and decoded as a server may decode it, for a placeholder or a
// guarded value, and says how much of it may pass on: only a tail that
// could be the start of one is held back, until more arrives, so one
// split across reads is never passed on whole and a stream is not
// delayed.
type streamScan struct {
	secrets []Secret
	pats    [][]byte
	holdback
}

func newStreamScan(secrets []Secret) streamScan {
	s := streamScan{secrets: secrets}
	for i := range secrets {
		if secrets[i].Placeholder != "" {
			s.pats = append(s.pats, []byte(secrets[i].Placeholder))
		}
		if secrets[i].guarded() {
			s.pats = append(s.pats, secrets[i].Value)
		}
	}
	return s
}

// check returns the secret whose placeholder ("placeholder") or value
// ("value") buf carries, if one does; otherwise how many of buf's bytes
// may pass on: all of them at eof, else all but those that could begin
// a match, raw or decoded, and an escape buf ends in the middle of.
func (s *streamScan) check(eof bool) (sec *Secret, what string, cut int) {
	// A server decodes a form's percent-escapes and JSON's string
	// escapes: the stream is looked at decoded too.
	// And twice: a JSON document in a form field is decoded by the
	// form's escapes and then the string's.
	// The decoded copies are scratch, lent for the call: a stream kept
	// open (a websocket) holds none of them.
	sc1, sc2 := decodeScratch.Get().(*escapeScratch), decodeScratch.Get().(*escapeScratch)
	defer decodeScratch.Put(sc1)
	defer decodeScratch.Put(sc2)
	dec, off, partial := decodeEscapesInto(sc1.dec[:0], sc1.off[:0], s.buf)
	// The second round reads the first's output up to an escape the
	// read cut, which may still decode to anything.
	whole, _ := slices.BinarySearch(off, partial)
	dec2, off2, partial2 := decodeEscapesInto(sc2.dec[:0], sc2.off[:0], dec[:whole])
	defer func() {
		if dec != nil && cap(dec) <= maxScratch {
			sc1.dec, sc1.off = dec[:0], off[:0]
		}
		if dec2 != nil && cap(dec2) <= maxScratch {
			sc2.dec, sc2.off = dec2[:0], off2[:0]
		}
	}()
	has := func(p []byte) bool {
		return bytes.Contains(s.buf, p) || bytes.Contains(dec, p) || bytes.Contains(dec2, p)
	}
	for i := range s.secrets {
		sec := &s.secrets[i]
		switch {
		case sec.Placeholder != "" && has([]byte(sec.Placeholder)):
			return sec, "placeholder", 0
		case sec.guarded() && has(sec.Value):
			return sec, "value", 0
		}
	}
	// Held back: a tail that could start a pattern, raw or decoded,
	// and an escape the read ended in the middle of.
	cut = len(s.buf)
	if !eof {
		cut -= heldTail(s.buf, s.pats)
		cut = min(cut, decodedHold(dec, off, partial, len(s.buf), s.pats, func(i int) int { return i }))
		// The second round's offsets are into the first's output.
		cut = min(cut, decodedHold(dec2, off2, partial2, whole, s.pats, func(i int) int { return off[i] }))
	}
	return nil, "", cut
}

// scanReader passes a request body on and fails once a placeholder
// appears in it, or in the request's trailers once it has ended (see
// streamScan).
type scanReader struct {
	r        io.ReadCloser
	trailers func() http.Header
	streamScan
	eof bool
	// hit is set, once, by Read (the transport's goroutine) and read by
	// the handler.
	hit atomic.Pointer[scanHit]
}

// scanHit is the placeholder or value a scanReader met, and where.
type scanHit struct{ secret, what, where string }

func newScanReader(r io.ReadCloser, secrets []Secret, trailers func() http.Header) *scanReader {
	return &scanReader{r: r, trailers: trailers, streamScan: newStreamScan(secrets)}
}

func (s *scanReader) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.hit.Load() != nil {
			return 0, errPlaceholderInBody
		}
		if s.eof {
			return 0, io.EOF
		}
		err := s.fill(s.r)
		if err != nil {
			if !errors.Is(err, io.EOF) {
				return 0, err
			}
			s.eof = true
		}
		sec, what, cut := s.check(s.eof)
		if sec != nil {
			s.hit.Store(&scanHit{secret: sec.Name, what: what, where: "body"})
			s.buf = nil
			return 0, errPlaceholderInBody
		}
		if s.eof && s.trailers != nil {
			// Trailers are known once the body has ended.
			for _, vs := range s.trailers() {
				for _, v := range vs {
					if sec, what, ok := leakIn(s.secrets, v); ok {
						s.hit.Store(&scanHit{secret: sec.Name, what: what, where: "trailer"})
						s.buf = nil
						return 0, errPlaceholderInBody
					}
				}
			}
		}
		s.releaseTo(cut)
	}
	return s.take(p), nil
}

func (s *scanReader) Close() error { return s.r.Close() }

// decodeEscapes decodes what a server may decode in a request body:
// percent-escapes (%XX, a form's) and JSON's string escapes (\uXXXX,
// \", \\, \/, \b, \f, \n, \r, \t), in one pass, anything else as
// it is. It returns the decoded bytes, the offset in b of the raw bytes
// each came from, and the offset of an escape b ends in the middle of
// (len(b) if none); nil and nil when b has no escape at all.
func decodeEscapes(b []byte) (dec []byte, off []int, partial int) {
	return decodeEscapesInto(nil, nil, b)
}

// escapeScratch is room for one round of decodeEscapesInto.
type escapeScratch struct {
	dec []byte
	off []int
}

// decodeScratch lends streamScan.check its decoding rooms; one grown past
// maxScratch is not kept.
var decodeScratch = sync.Pool{New: func() any { return new(escapeScratch) }}

const maxScratch = 256 << 10

// decodeEscapesInto is decodeEscapes decoding into dec and off (empty,
// with room to reuse).
func decodeEscapesInto(dec []byte, off []int, b []byte) ([]byte, []int, int) {
	if bytes.IndexByte(b, '%') < 0 && bytes.IndexByte(b, '\\') < 0 {
		return nil, nil, len(b) // nothing to decode: what the raw scan sees
	}
	dec, off, partial := slices.Grow(dec[:0], len(b)), slices.Grow(off[:0], len(b)), len(b)
	emit := func(c byte, at int) {
		dec = append(dec, c)
		off = append(off, at)
	}
	nextPct, nextBS := -1, -1
	for i := 0; i < len(b); i++ {
		if c := b[i]; c != '%' && c != '\\' {
			// A run without escapes, as it is, up to the next '%' or
			// '\\' (each found once, not once a run).
			if nextPct < i {
				nextPct = len(b)
				if k := bytes.IndexByte(b[i:], '%'); k >= 0 {
					nextPct = i + k
				}
			}
			if nextBS < i {
				nextBS = len(b)
				if k := bytes.IndexByte(b[i:], '\\'); k >= 0 {
					nextBS = i + k
				}
			}
			j := min(nextPct, nextBS)
			dec = append(dec, b[i:j]...)
			for k := i; k < j; k++ {
				off = append(off, k)
			}
			i = j - 1
			continue
		}
		switch c := b[i]; {
		case c == '%':
			if escapeCut(b[i+1:], 2) {
				partial = min(partial, i)
			}
			if i+2 < len(b) {
				if hi, ok := unhex(b[i+1]); ok {
					if lo, ok := unhex(b[i+2]); ok {
						emit(hi<<4|lo, i)
						i += 2
						continue
					}
				}
			}
			emit(c, i)
		case c == '\\' && i+1 < len(b) && b[i+1] == 'u':
			if escapeCut(b[i+2:], 4) {
				partial = min(partial, i)
			}
			if i+5 < len(b) {
				r, ok := hex4(b[i+2 : i+6])
				if ok && utf16.IsSurrogate(r) && r < 0xdc00 {
					// A character past U+FFFF is a high surrogate's
					// escape and a low one's.
					rest := b[i+6:]
					if len(rest) < 6 && bytes.HasPrefix([]byte(`\u`), rest[:min(len(rest), 2)]) && escapeCut(rest[min(len(rest), 2):], 4) {
						partial = min(partial, i)
					}
					if len(rest) >= 6 && rest[0] == '\\' && rest[1] == 'u' {
						if lo, ok := hex4(rest[2:6]); ok {
							if c := utf16.DecodeRune(r, lo); c != utf8.RuneError {
								for _, x := range utf8.AppendRune(nil, c) {
									emit(x, i)
								}
								i += 11
								continue
							}
						}
					}
				}
				if ok && !utf16.IsSurrogate(r) {
					for _, x := range utf8.AppendRune(nil, r) {
						emit(x, i)
					}
					i += 5
					continue
				}
			}
			emit(c, i)
		case c == '\\' && i+1 < len(b):
			if x, ok := jsonEscapes[b[i+1]]; ok {
				emit(x, i)
				i++
				continue
			}
			emit(c, i)
		case c == '\\':
			partial = min(partial, i)
			emit(c, i)
		default:
			emit(c, i)
		}
	}
	return dec, off, partial
}

// hex4 decodes a \u escape's four hex digits.
func hex4(h []byte) (rune, bool) {
	var r rune
	for _, c := range h {
		v, ok := unhex(c)
		if !ok {
			return 0, false
		}
		r = r<<4 | rune(v)
	}
	return r, true
}

// decodedHold is where holding back must start for one decoding round:
// at a decoded tail that could begin a pattern, and at an escape the
// round's input (n bytes) ends in the middle of (partial, an offset into
// that input; n if none), with the decoded bytes before it that could
// begin one. dec is the round's output, off each byte's offset into its
// input, raw an offset into the input mapped to one into the body; no
// hold is math.MaxInt.
func decodedHold(dec []byte, off []int, partial, n int, pats [][]byte, raw func(int) int) int {
	hold := math.MaxInt
	if t := heldTail(dec, pats); t > 0 {
		hold = raw(off[len(dec)-t])
	}
	if partial < n {
		// The cut escape may decode to the next byte of a pattern the
		// bytes before it begin.
		k, _ := slices.BinarySearch(off, partial)
		if t := heldTail(dec[:k], pats); t > 0 {
			hold = min(hold, raw(off[k-t]))
		}
		hold = min(hold, raw(partial))
	}
	return hold
}

// jsonEscapes are JSON's one-character escapes.
var jsonEscapes = map[byte]byte{'"': '"', '\\': '\\', '/': '/', 'b': '\b', 'f': '\f', 'n': '\n', 'r': '\r', 't': '\t'}

// escapeCut reports whether rest, what follows an escape's introducer,
// is shorter than the n hex digits the escape needs and all hex: the
// escape may go on in the next read.
func escapeCut(rest []byte, n int) bool {
	if len(rest) >= n {
		return false
	}
	for _, c := range rest {
		if _, ok := unhex(c); !ok {
			return false
		}
	}
	return true
}

// scrubber replaces secrets' values by their placeholders in a response
// body, so that a bound host that echoes a request (a debugging endpoint,
// an error that quotes the header) does not hand the value to the
// sandbox. Like scanReader it holds back only a tail that could start a
// value.
type scrubber struct {
	r    io.ReadCloser
	from [][]byte
	to   [][]byte
	holdback
	eof   bool
	err   error
	onEOF func() // scrubs the trailers, known once the body has ended
}

func newScrubber(r io.ReadCloser, secrets []Secret, onEOF func()) *scrubber {
	s := &scrubber{r: r, onEOF: onEOF}
	for _, sec := range secrets {
		if len(sec.Value) > 0 {
			s.from = append(s.from, sec.Value)
			s.to = append(s.to, []byte(sec.Placeholder))
		}
	}
	return s
}

func (s *scrubber) Read(p []byte) (int, error) {
	for len(s.out) == 0 {
		if s.eof {
			return 0, s.err
		}
		err := s.fill(s.r)
		if err != nil {
			s.eof, s.err = true, err
			if s.onEOF != nil {
				s.onEOF()
			}
		}
		for i := range s.from {
			if bytes.Contains(s.buf, s.from[i]) {
				s.buf = bytes.ReplaceAll(s.buf, s.from[i], s.to[i])
			}
		}
		s.release(s.from, s.eof)
	}
	return s.take(p), nil
}

func (s *scrubber) Close() error { return s.r.Close() }

// scrubHeader replaces secrets' values by their placeholders in a
// response's header fields, and drops a field whose name carries a value
// (in any letter case: names are canonicalized).
func scrubHeader(h http.Header, secrets []Secret) {
	for k, vs := range h {
		lk := strings.ToLower(k)
		if slices.ContainsFunc(secrets, func(sec Secret) bool {
			return len(sec.Value) > 0 && strings.Contains(lk, strings.ToLower(string(sec.Value)))
		}) {
			delete(h, k)
			continue
		}
		for i, v := range vs {
			vs[i] = scrubString(v, secrets)
		}
		h[k] = vs
	}
}

// scrubString replaces secrets' values by their placeholders in s.
func scrubString(s string, secrets []Secret) string {
	for _, sec := range secrets {
		if len(sec.Value) > 0 && strings.Contains(s, string(sec.Value)) {
			s = strings.ReplaceAll(s, string(sec.Value), sec.Placeholder)
		}
	}
	return s
}
