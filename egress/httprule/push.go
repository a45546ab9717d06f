package httprule

import (
	"bufio"
	"compress/flate"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Errors of ReadPush, matched with errors.Is.
var (
	// ErrPush: the body does not start with a well-formed list of ref
	// updates.
	ErrPush = errors.New("malformed push")
	// ErrPushTooLarge: the list of ref updates did not end within the
	// bytes ReadPush was allowed to read.
	ErrPushTooLarge = errors.New("push commands too large")
	// ErrSignedPush: the push carries a push certificate (git push
	// --signed), whose ref updates ReadPush does not read.
	ErrSignedPush = errors.New("signed pushes (push certificates) are not supported")
	// ErrEncoding: the body's Content-Encoding is neither none nor gzip.
	ErrEncoding = errors.New("unsupported content encoding")
)

// RefUpdate is one ref update of a push: object ids in lower-case hex (40
// digits for SHA-1 repositories, 64 for SHA-256), Old all zeros to create
// the ref, New all zeros to delete it.
type RefUpdate struct {
	Old, New, Ref string
}

// IsDelete reports whether the update deletes its ref.
func (u RefUpdate) IsDelete() bool { return strings.Trim(u.New, "0") == "" }

// maxPktLen is git's LARGE_PACKET_MAX: the longest pkt-line, its 4-byte
// length included.
const maxPktLen = 65520

// gzipBuffer is the buffer between a gzip body and its decompressor.
const gzipBuffer = 4096

// maxGzipOverread bounds how far past the compressed bytes the ref
// updates needed ReadPush reads from a gzip body: the buffer, and one
// stored (uncompressed) deflate block read into the decompressor's 32 KiB
// window at once.
const maxGzipOverread = 32<<10 + gzipBuffer

// ReadPush reads the ref updates at the start of a git smart-HTTP
// receive-pack request body (gitprotocol-pack, "Reference Update
// Request"), for Decide:
//
//	*PKT-LINE("shallow" SP obj-id)
//	PKT-LINE(old-id SP new-id SP name NUL capability-list)
//	*PKT-LINE(old-id SP new-id SP name)
//	flush-pkt
//
// It parses as git receive-pack does: one trailing LF of a line is
// dropped, a line's name ends at its first NUL, and capabilities are read
// wherever a NUL gives them. It is stricter where git would refuse the
// push anyway: object ids are lower-case hex, 40 digits or, with the
// capability object-format=sha256, 64; names are full ref names git
// accepts (refs/..., no "..", "//", "@{", control characters or
// " ~^:?*[\"); an empty line, a delim-pkt or a response-end-pkt before
// the flush-pkt is an error (ErrPush). A push certificate ("push-cert"),
// which would carry the updates inside signed text, is refused
// (ErrSignedPush). A push of no updates (the "0000" git sends to probe a
// server before a large request) returns none and no error.
//
// It reads no further than the flush-pkt that ends the list, and never
// more than max bytes from body (ErrPushTooLarge beyond). consumed is
// every byte it read from body, in order, so that the caller can send
// consumed and then the rest of body on unchanged; on error too.
//
// contentEncoding is the request's Content-Encoding: "" or "identity",
// or "gzip" (or "x-gzip": git sends pushes uncompressed, but git
// http-backend takes both, so other clients may use them); any other is
// ErrEncoding. A gzip body is decompressed to parse, at most max bytes
// of it (ErrPushTooLarge beyond); consumed is then the compressed bytes read,
// which may run up to 36 KiB past those the updates needed (still within
// max).
func ReadPush(body io.Reader, contentEncoding string, max int) (updates []RefUpdate, consumed []byte, err error) {
	raw := &capReader{r: body, max: max, record: true}
	var src io.Reader = raw
	switch strings.ToLower(strings.TrimSpace(contentEncoding)) {
	case "", "identity":
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bufio.NewReaderSize(raw, gzipBuffer))
		if err != nil {
			return nil, raw.buf, gzipError(err)
		}
		src = &capReader{r: zr, max: max}
	default:
		return nil, nil, fmt.Errorf("%w %q: the push commands cannot be read", ErrEncoding, contentEncoding)
	}
	updates, err = parseCommands(src)
	return updates, raw.buf, err
}

func gzipError(err error) error {
	var corrupt flate.CorruptInputError
	switch {
	case errors.Is(err, ErrPushTooLarge):
		return err
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: the gzip stream ends before the flush-pkt", ErrPush)
	case errors.Is(err, gzip.ErrHeader), errors.Is(err, gzip.ErrChecksum), errors.As(err, &corrupt):
		return fmt.Errorf("%w: gzip: %w", ErrPush, err)
	}
	return fmt.Errorf("reading the push: %w", err)
}

// capReader reads at most max bytes from r, and fails with
// ErrPushTooLarge when asked for more; with record it keeps them.
type capReader struct {
	r      io.Reader
	max    int
	n      int
	record bool
	buf    []byte
}

func (c *capReader) Read(p []byte) (int, error) {
	room := c.max - c.n
	if room <= 0 {
		return 0, fmt.Errorf("%w: more than %d bytes", ErrPushTooLarge, c.max)
	}
	if len(p) > room {
		p = p[:room]
	}
	n, err := c.r.Read(p)
	c.n += n
	if c.record {
		c.buf = append(c.buf, p[:n]...)
	}
	return n, err
}

// parseCommands reads pkt-lines up to the flush-pkt.
func parseCommands(r io.Reader) ([]RefUpdate, error) {
	var (
		updates []RefUpdate
		hexLen  int // of the object ids seen so far; 0 before the first
		format  string
		buf     = make([]byte, maxPktLen)
	)
	useLen := func(id string) error {
		if hexLen == 0 {
			hexLen = len(id)
		}
		if len(id) != hexLen {
			return fmt.Errorf("%w: object ids of %d and %d digits in one push", ErrPush, hexLen, len(id))
		}
		return nil
	}
	for line := 1; ; line++ {
		payload, flush, err := readPkt(r, buf)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if flush {
			break
		}
		p := string(payload)
		p = strings.TrimSuffix(p, "\n")
		if id, ok := strings.CutPrefix(p, "shallow "); ok {
			if !isObjectID(id) {
				return nil, fmt.Errorf("%w: line %d: shallow %q is not an object id", ErrPush, line, id)
			}
			if err := useLen(id); err != nil {
				return nil, err
			}
			continue
		}
		cmd, caps, hasCaps := strings.Cut(p, "\x00")
		if hasCaps {
			f, err := objectFormat(caps)
			if err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			if f != "" {
				format = f
			}
		}
		if cmd == "push-cert" {
			return nil, ErrSignedPush
		}
		u, err := parseCommand(cmd)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", line, err)
		}
		if err := useLen(u.Old); err != nil {
			return nil, err
		}
		updates = append(updates, u)
	}
	want := 40
	if format == "sha256" {
		want = 64
	}
	if hexLen != 0 && hexLen != want {
		return nil, fmt.Errorf("%w: object ids of %d digits where the object format asks for %d", ErrPush, hexLen, want)
	}
	return updates, nil
}

// readPkt reads one pkt-line into buf. A flush-pkt returns flush.
func readPkt(r io.Reader, buf []byte) (payload []byte, flush bool, err error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return nil, false, readError(err)
	}
	n := 0
	for _, c := range hdr {
		if !isHex(c) {
			return nil, false, fmt.Errorf("%w: pkt-line length %q is not hex", ErrPush, hdr[:])
		}
		n = n<<4 | int(unhex(c))
	}
	switch {
	case n == 0:
		return nil, true, nil
	case n == 1 || n == 2:
		return nil, false, fmt.Errorf("%w: a delim-pkt or response-end-pkt where ref updates belong", ErrPush)
	case n <= 4:
		return nil, false, fmt.Errorf("%w: pkt-line length %d", ErrPush, n)
	case n > maxPktLen:
		return nil, false, fmt.Errorf("%w: pkt-line length %d over %d", ErrPush, n, maxPktLen)
	}
	if _, err := io.ReadFull(r, buf[:n-4]); err != nil {
		return nil, false, readError(err)
	}
	return buf[:n-4], false, nil
}

func readError(err error) error {
	switch {
	case errors.Is(err, ErrPushTooLarge), errors.Is(err, ErrPush):
		return err
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return fmt.Errorf("%w: the body ends before the flush-pkt", ErrPush)
	}
	return gzipError(err)
}

// parseCommand parses "old new ref".
func parseCommand(cmd string) (RefUpdate, error) {
	old, rest, ok := strings.Cut(cmd, " ")
	if !ok || !isObjectID(old) || len(rest) < len(old)+1 || rest[len(old)] != ' ' || !isObjectID(rest[:len(old)]) {
		return RefUpdate{}, fmt.Errorf("%w: %q is not \"old-id new-id ref\"", ErrPush, cmd)
	}
	u := RefUpdate{Old: old, New: rest[:len(old)], Ref: rest[len(old)+1:]}
	if err := checkRefName(u.Ref); err != nil {
		return RefUpdate{}, fmt.Errorf("%w: %v", ErrPush, err)
	}
	return u, nil
}

// isObjectID reports whether s is 40 or 64 lower-case hex digits.
func isObjectID(s string) bool {
	if len(s) != 40 && len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

// objectFormat returns the object-format capability of a capability
// list ("" if none).
func objectFormat(caps string) (string, error) {
	f := ""
	for c := range strings.FieldsSeq(caps) {
		if v, ok := strings.CutPrefix(c, "object-format="); ok {
			if v != "sha1" && v != "sha256" {
				return "", fmt.Errorf("%w: object format %q", ErrPush, v)
			}
			f = v
		}
	}
	return f, nil
}

// checkRefName checks a ref name by the rules of git's
// check_refname_format that matter here: git refuses the others too.
func checkRefName(ref string) error {
	switch {
	case !strings.HasPrefix(ref, "refs/") || len(ref) == len("refs/"):
		return fmt.Errorf("ref %q is not a full ref name starting with refs/", ref)
	case strings.ContainsFunc(ref, func(c rune) bool { return c <= ' ' || c == 0x7f || strings.ContainsRune("~^:?*[\\", c) }):
		return fmt.Errorf("ref %q contains a character git does not allow in ref names", ref)
	case strings.Contains(ref, "..") || strings.Contains(ref, "//") || strings.Contains(ref, "@{") || strings.Contains(ref, "/."):
		return fmt.Errorf("ref %q contains \"..\", \"//\", \"@{\" or a component starting with '.'", ref)
	case strings.HasSuffix(ref, "/") || strings.HasSuffix(ref, ".") || strings.HasSuffix(ref, ".lock") || strings.Contains(ref, ".lock/"):
		return fmt.Errorf("ref %q ends in '/', '.' or \".lock\"", ref)
	}
	return nil
}
