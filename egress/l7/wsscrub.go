package l7

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
)

// maxScrubFrame bounds a websocket frame the gateway reads whole to scrub
// it: a bound host's frame longer than this ends the stream.
const maxScrubFrame = 4 << 20

// wsScrubConn is the upstream side of a websocket to a host a secret is
// bound to. Reads parse the server's frames (RFC 6455, section 5.2), each
// read whole, and replace the secrets' values in their payloads by the
// placeholders, rewriting the frame's length; writes (the client's frames)
// pass as they are. The upgrade offered no extension, so payloads are not
// compressed; a frame with a reserved bit set, a masked server frame, or
// one longer than maxScrubFrame ends the stream, since it cannot be
// scrubbed. A value split across two frames is not seen.
type wsScrubConn struct {
	io.ReadWriteCloser
	r       *bufio.Reader
	from    [][]byte
	to      [][]byte
	out     []byte
	err     error
	onError func(error)
}

func newWSScrubConn(up io.ReadWriteCloser, secrets []Secret, onError func(error)) *wsScrubConn {
	c := &wsScrubConn{ReadWriteCloser: up, r: bufio.NewReaderSize(up, 32<<10), onError: onError}
	for _, s := range secrets {
		if len(s.Value) > 0 {
			c.from = append(c.from, s.Value)
			c.to = append(c.to, []byte(s.Placeholder))
		}
	}
	return c
}

func (c *wsScrubConn) Read(p []byte) (int, error) {
	for len(c.out) == 0 {
		if c.err != nil {
			return 0, c.err
		}
		if err := c.frame(); err != nil {
			c.err = err
			if c.onError != nil && !errors.Is(err, io.EOF) {
				c.onError(err)
			}
		}
	}
	n := copy(p, c.out)
	c.out = c.out[n:]
	return n, nil
}

// frame reads one server frame and appends it, scrubbed, to out.
func (c *wsScrubConn) frame() error {
	var h [2]byte
	if _, err := io.ReadFull(c.r, h[:]); err != nil {
		return err
	}
	op := h[0] & 0x0f
	switch {
	case h[0]&0x70 != 0:
		return fmt.Errorf("websocket frame with reserved bits %#x from a host a secret is bound to: it cannot be scrubbed", h[0]&0x70)
	case h[1]&0x80 != 0:
		return errors.New("masked websocket frame from the server (RFC 6455 forbids it)")
	}
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var e [2]byte
		if _, err := io.ReadFull(c.r, e[:]); err != nil {
			return unexpected(err)
		}
		n = uint64(binary.BigEndian.Uint16(e[:]))
	case 127:
		var e [8]byte
		if _, err := io.ReadFull(c.r, e[:]); err != nil {
			return unexpected(err)
		}
		n = binary.BigEndian.Uint64(e[:])
	}
	if n > maxScrubFrame {
		return fmt.Errorf("websocket frame of %d bytes from a host a secret is bound to: frames over %d bytes are not relayed, since they are scrubbed whole", n, maxScrubFrame)
	}
	payload := make([]byte, n)
	if _, err := io.ReadFull(c.r, payload); err != nil {
		return unexpected(err)
	}
	for i := range c.from {
		payload = bytes.ReplaceAll(payload, c.from[i], c.to[i])
	}
	if op >= 0x8 && len(payload) > 125 {
		// Control frames carry at most 125 bytes; a scrubbed close
		// reason or ping may have grown past that.
		payload = payload[:125]
	}
	c.out = appendWSHeader(c.out, h[0], len(payload))
	c.out = append(c.out, payload...)
	return nil
}

// appendWSHeader appends an unmasked frame header with first byte b0 and
// a payload of n bytes, in the shortest length encoding.
func appendWSHeader(dst []byte, b0 byte, n int) []byte {
	switch {
	case n < 126:
		return append(dst, b0, byte(n))
	case n < 1<<16:
		return binary.BigEndian.AppendUint16(append(dst, b0, 126), uint16(n))
	}
	return binary.BigEndian.AppendUint64(append(dst, b0, 127), uint64(n))
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
