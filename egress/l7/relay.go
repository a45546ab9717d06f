package l7

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/textproto"
	"strconv"
	"strings"
)

// maxChunkLine bounds a chunk-size line of a chunked request body.
const maxChunkLine = 4096

// relayRequests passes HTTP/1.x requests from br to up as they came, one
// after the other, and checks the host of each as the first one's was: a
// client cannot send a request for another host on a kept-alive
// connection. It returns the bytes written to up, and, when it stopped at
// a request that is refused or that it cannot frame, that request and
// why. A request that asks for a protocol Upgrade is refused: passing the
// rest of the stream on unparsed once the client asks would let it send
// requests for any host after a request the server never upgraded, and
// the gateway does not read the server's answer (101) yet.
func relayRequests(br *bufio.Reader, up io.Writer, check func(Hello) Decision) (n int64, stopped *Hello, reason string, err error) {
	w := &countWriter{w: up}
	for {
		raw, err := readHeaderBlock(br)
		if len(raw) == 0 && errors.Is(err, io.EOF) {
			return w.n, nil, "", nil
		}
		if err != nil {
			return w.n, &Hello{Proto: ProtoHTTP}, "airlock: " + err.Error(), err
		}
		h, hdr, err := parseRequest(bufio.NewReader(bytes.NewReader(trimLeadingCRLF(raw))))
		h.Proto = ProtoHTTP
		if err != nil {
			return w.n, &h, "airlock: " + err.Error(), err
		}
		if d := check(h); !d.Allow {
			return w.n, &h, d.Reason, nil
		}
		if hdr.Get("Upgrade") != "" {
			return w.n, &h, "airlock: protocol upgrades over plain HTTP are refused (the gateway cannot check what follows them); use TLS", nil
		}
		body, err := framing(hdr)
		if err != nil {
			return w.n, &h, "airlock: " + err.Error(), err
		}
		if _, err := w.Write(raw); err != nil {
			return w.n, nil, "", err
		}
		switch {
		case body == chunked:
			err = relayChunked(br, w)
		case body > 0:
			_, err = io.CopyN(w, br, body)
		}
		if err != nil {
			return w.n, nil, "", err
		}
	}
}

const chunked = -1

// framing returns the length of a request's body from its header, or
// chunked (RFC 9112 6.3); requests it could be read differently by
// servers are refused.
func framing(hdr textproto.MIMEHeader) (int64, error) {
	te, cl := hdr.Values("Transfer-Encoding"), hdr.Values("Content-Length")
	if len(te) > 0 {
		if len(cl) > 0 {
			return 0, errors.New("a request with both Transfer-Encoding and Content-Length")
		}
		codings := strings.Split(strings.Join(te, ","), ",")
		if !strings.EqualFold(strings.TrimSpace(codings[len(codings)-1]), "chunked") {
			return 0, fmt.Errorf("a request whose Transfer-Encoding %q does not end in chunked", strings.Join(te, ","))
		}
		return chunked, nil
	}
	var n int64 = 0
	for i, v := range cl {
		for _, f := range strings.Split(v, ",") {
			x, err := strconv.ParseInt(strings.TrimSpace(f), 10, 64)
			if err != nil || x < 0 || strings.TrimSpace(f) != strconv.FormatInt(x, 10) {
				return 0, fmt.Errorf("a request with Content-Length %q", v)
			}
			if i > 0 && x != n {
				return 0, errors.New("a request with differing Content-Length headers")
			}
			n = x
		}
	}
	return n, nil
}

// readHeaderBlock reads a request's line and header fields up to and with
// the empty line that ends them (and any empty lines before the request
// line), at most MaxPeek bytes.
func readHeaderBlock(br *bufio.Reader) ([]byte, error) {
	var raw []byte
	started := false
	lineStart := 0
	for {
		frag, err := br.ReadSlice('\n')
		raw = append(raw, frag...)
		if len(raw) > MaxPeek {
			return raw, ErrPeekTooLong
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			if errors.Is(err, io.EOF) && len(raw) > 0 {
				err = io.ErrUnexpectedEOF
			}
			return raw, err
		}
		line := raw[lineStart:]
		lineStart = len(raw)
		empty := string(line) == "\r\n" || string(line) == "\n"
		switch {
		case empty && started:
			return raw, nil
		case !empty:
			started = true
		}
	}
}

func trimLeadingCRLF(b []byte) []byte {
	for len(b) > 0 && (b[0] == '\r' || b[0] == '\n') {
		b = b[1:]
	}
	return b
}

// relayChunked passes a chunked body on as it came, chunk by chunk, and
// its trailer section.
func relayChunked(br *bufio.Reader, w io.Writer) error {
	line := func() ([]byte, error) {
		b, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) || len(b) > maxChunkLine {
			return nil, errors.New("chunk line too long")
		}
		if errors.Is(err, io.EOF) {
			err = io.ErrUnexpectedEOF
		}
		return b, err
	}
	for {
		l, err := line()
		if err != nil {
			return err
		}
		if _, err := w.Write(l); err != nil {
			return err
		}
		sizeText, _, _ := strings.Cut(strings.TrimRight(string(l), "\r\n"), ";")
		size, err := strconv.ParseInt(strings.TrimSpace(sizeText), 16, 64)
		if err != nil || size < 0 {
			return fmt.Errorf("bad chunk size %q", sizeText)
		}
		if size == 0 {
			// Trailer fields, then the empty line.
			for {
				l, err := line()
				if err != nil {
					return err
				}
				if _, err := w.Write(l); err != nil {
					return err
				}
				if s := string(l); s == "\r\n" || s == "\n" {
					return nil
				}
			}
		}
		if _, err := io.CopyN(w, br, size); err != nil {
			return err
		}
		crlf, err := line()
		if err != nil {
			return err
		}
		if s := string(crlf); s != "\r\n" && s != "\n" {
			return errors.New("chunk data not followed by CRLF")
		}
		if _, err := w.Write(crlf); err != nil {
			return err
		}
	}
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
