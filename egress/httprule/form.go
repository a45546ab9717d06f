package httprule

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"mime"
	"regexp"
	"strings"
)

// Bounds of a form FormDigests reads: a form beyond them has no part
// digests, so body_sha256 sees only its whole body's digest.
const (
	maxFormParts       = 16
	maxFormParamLength = 255 // a part's name or filename, in bytes
	maxFormHeaderLine  = 1024
)

// FormDigests returns the SHA-256 digests (lower-case hex) of the parts'
// contents of a multipart/form-data body (curl -F file=@x), in order, or
// false if the body is not such a form read strictly. Everything a
// strict form may hold besides the parts' contents is its framing and,
// per part, a Content-Disposition of form-data with a name and perhaps a
// filename (each at most 255 bytes of printable ASCII) and perhaps a
// Content-Type: so a body_sha256 rule that lists every part's digest
// lets out those contents and no other bytes of the body.
//
// Strict means: a Content-Type of multipart/form-data with one plain
// boundary parameter of 1 to 70 characters (RFC 2046) and nothing else,
// the body beginning with the first delimiter (no preamble) and ending
// with the closing one and at most a CRLF (no epilogue), lines ending in
// CRLF, no header but Content-Disposition and Content-Type, each at most
// once, header lines of printable ASCII with no RFC 2231 parameter ("*"),
// none folded or longer than 1 KiB, and at most 16 parts.
// Whatever a lenient server would make of other bytes (a preamble, a
// Content-Transfer-Encoding, a second Content-Disposition), they would
// reach it beside the pinned contents, so such a form is not read.
func FormDigests(contentType string, body []byte) ([]string, bool) {
	m := formType.FindStringSubmatch(contentType)
	if m == nil || m[1] != m[3] {
		return nil, false
	}
	boundary := m[2]
	if !validBoundary(boundary) {
		return nil, false
	}
	rest, ok := bytes.CutPrefix(body, []byte("--"+boundary+"\r\n"))
	if !ok {
		return nil, false
	}
	sep := []byte("\r\n--" + boundary)
	var digests []string
	for {
		if len(digests) == maxFormParts {
			return nil, false
		}
		head, after, ok := bytes.Cut(rest, []byte("\r\n\r\n"))
		if !ok || !strictPartHeader(head) {
			return nil, false
		}
		content, tail, ok := bytes.Cut(after, sep)
		if !ok {
			return nil, false
		}
		sum := sha256.Sum256(content)
		digests = append(digests, hex.EncodeToString(sum[:]))
		if next, ok := bytes.CutPrefix(tail, []byte("\r\n")); ok {
			rest = next
			continue
		}
		end, ok := bytes.CutPrefix(tail, []byte("--"))
		if !ok || (len(end) != 0 && string(end) != "\r\n") {
			return nil, false
		}
		return digests, true
	}
}

// formType is the one Content-Type FormDigests reads: multipart/form-data
// with a single plain boundary parameter, quoted or not, and nothing
// else. Parsers differ on the rest (an RFC 2231 boundary*= beside a
// boundary=, a backslash in a quoted one), and where they differ a server
// would split the body at another boundary than the gateway did.
var formType = regexp.MustCompile(`^(?i:multipart/form-data)[ \t]*;[ \t]*(?i:boundary)=("?)([0-9A-Za-z'()+_,\-./:=? ]{1,70})("?)[ \t]*$`)

// validBoundary: 1 to 70 of RFC 2046's bchars, not ending in a space.
func validBoundary(b string) bool {
	if len(b) == 0 || len(b) > 70 || b[len(b)-1] == ' ' {
		return false
	}
	for i := 0; i < len(b); i++ {
		c := b[i]
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || strings.IndexByte("'()+_,-./:=? ", c) >= 0) {
			return false
		}
	}
	return true
}

// strictPartHeader checks a part's header lines (without the blank line
// that ends them).
func strictPartHeader(head []byte) bool {
	var disposition, ctype bool
	for _, line := range strings.Split(string(head), "\r\n") {
		if len(line) == 0 || len(line) > maxFormHeaderLine || line[0] == ' ' || line[0] == '\t' {
			return false
		}
		// Printable ASCII only, and no RFC 2231 parameter (name*=, name*0=):
		// parsers that decode them and parsers that drop them would see
		// different names, and the length bound below sees neither.
		for i := 0; i < len(line); i++ {
			if c := line[i]; (c < ' ' && c != '\t') || c > '~' || c == '*' {
				return false
			}
		}
		name, value, ok := strings.Cut(line, ":")
		if !ok || !isToken(name) {
			return false
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(name) {
		case "content-disposition":
			if disposition {
				return false
			}
			disposition = true
			d, params, err := mime.ParseMediaType(value)
			if err != nil || d != "form-data" {
				return false
			}
			for k, v := range params {
				if k != "name" && k != "filename" || len(v) > maxFormParamLength {
					return false
				}
			}
			if _, ok := params["name"]; !ok {
				return false
			}
		case "content-type":
			if ctype {
				return false
			}
			ctype = true
			if _, _, err := mime.ParseMediaType(value); err != nil {
				return false
			}
		default:
			return false
		}
	}
	return disposition
}
