package l7

import (
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// wsMaxScanChunk is how much of a websocket's payload the gateway reads
// before it scans and passes on what may go: with the tail it holds
// back, what it keeps of a connection's stream at any time.
const wsMaxScanChunk = 64 << 10

// wsHoldAtMessageEnd bounds how long the end of a message waits for the
// client's next data when the message ends in bytes that could begin a
// placeholder or a value: a client that waits for an answer would
// otherwise wait for ever. After it, the held bytes and the message's
// end pass on; a match that a later message completes is no longer seen
// whole.
const wsHoldAtMessageEnd = 250 * time.Millisecond

// wsTellTimeout bounds how long the end of a refused stream waits for the
// client to have been sent its close frame.
const wsTellTimeout = 2 * time.Second

// wsMaxHeldMessages bounds the messages a client's stream may have waiting
// behind bytes held back (a message's end that could begin a secret):
// beyond it the websocket is ended (1008).
const wsMaxHeldMessages = 1024

// errWSRefused ends a websocket relay the gateway refused.
var errWSRefused = errors.New("websocket refused by the gateway")

// wsRefusal is why the gateway ended a websocket: a placeholder or value
// (secret set) or a frame it cannot scan.
type wsRefusal struct {
	secret, what, where string // the secret met, and where
	reason              string // otherwise, why the stream was ended
	code                uint16 // the close code the client is sent
}

// wsScanConn is the upstream side of a websocket the gateway sees in
// clear (plain HTTP or terminated TLS) on a session with secrets. Writes,
// the client's frames as the reverse proxy copies them, are parsed (RFC
// 6455, section 5.2: masked, fragmented, control frames between
// fragments) and unmasked; the data frames' payloads, every message in
// order, are one stream to the body scan (streamScan: the same decoding,
// the same holding back of bytes that could begin a match, across frame
// and message boundaries). What may pass is framed again (a message's
// bytes may go in other fragments than the client's) and masked with a
// fresh key; control frames pass at once, in order, their payloads
// scanned on their own. A message's end waits behind its held bytes, for
// at most wsHoldAtMessageEnd. The stream held at any time is bounded
// (wsMaxScanChunk and a pattern's length), whatever a message's size.
//
// On a match nothing from where it starts is written upstream: the
// server is sent a close 1008 and the upstream closed, and the client is
// sent a close 1008 (at a frame boundary of what the server sent; else
// its connection just closes). A frame with a reserved bit set (the
// upgrade offered no extension, so it would be compressed and cannot be
// scanned), an unmasked one, or one RFC 6455 forbids ends the stream so
// too, with 1002. Reads, the server's frames, pass as they are; only
// their boundaries are followed.
type wsScanConn struct {
	io.ReadWriteCloser // the upstream

	mu sync.Mutex
	// The client's frame being parsed: its header so far, then its
	// payload.
	// +checklocks:mu
	hdr [14]byte
	// +checklocks:mu
	hn int
	// +checklocks:mu
	inFrame bool
	// +checklocks:mu
	fin bool
	// +checklocks:mu
	op byte
	// +checklocks:mu
	remain uint64
	// +checklocks:mu
	key [4]byte
	// +checklocks:mu
	kpos int
	// +checklocks:mu
	ctl []byte // a control frame's payload
	// +checklocks:mu
	inMsg bool // a message is open: its next frame is a continuation
	// +checklocks:mu
	closed bool // the client sent its close
	// +checklocks:mu
	scan streamScan
	// +checklocks:mu
	msgs []wsMessage // the messages whose bytes have not all passed
	// +checklocks:mu
	fed, sent int64 // payload bytes read, and passed on
	// +checklocks:mu
	out []byte // frames to write upstream
	// +checklocks:mu
	rng *rand.ChaCha8
	// +checklocks:mu
	timer *time.Timer
	// +checklocks:mu
	ends int64 // messages ended
	// +checklocks:mu
	gen uint64 // counts writes with data, so a stale release does nothing
	// +checklocks:mu
	armed uint64 // gen when the hold began
	// +checklocks:mu
	err  error
	hold time.Duration // wsHoldAtMessageEnd; tests change it

	refusal atomic.Pointer[wsRefusal]
	ended   chan struct{} // closed when the gateway ends the stream
	told    chan struct{} // closed once the client was sent its close, or cannot be
	tellOne sync.Once

	// Only the reverse proxy's copy to the client reads.
	rd    wsFrameTracker
	pend  []byte
	rdone bool
}

// wsMessage is a client message some of whose bytes have not passed on.
type wsMessage struct {
	op      byte  // text or binary
	started bool  // its first frame has gone upstream
	end     int64 // its end in the stream of payloads; -1 while open
}

func newWSScanConn(up io.ReadWriteCloser, secrets []Secret) *wsScanConn {
	var seed [32]byte
	_, _ = crand.Read(seed[:])
	return &wsScanConn{ReadWriteCloser: up, scan: newStreamScan(secrets), rng: rand.NewChaCha8(seed),
		hold: wsHoldAtMessageEnd, ended: make(chan struct{}), told: make(chan struct{})}
}

// Refusal is why the gateway ended the stream, nil if it did not.
func (c *wsScanConn) Refusal() *wsRefusal { return c.refusal.Load() }

func (c *wsScanConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	if c.err != nil {
		c.mu.Unlock()
		return 0, c.err
	}
	fed, ends := c.fed, c.ends
	err := c.parse(p)
	if err == nil {
		err = c.pass(false)
	}
	if err == nil {
		err = c.writeOut()
	}
	if err == nil {
		switch {
		case c.fed != fed:
			// New data: a hold under way is over; one may begin. (A
			// control frame alone does not lengthen a hold.)
			c.gen++
			c.holdAtMessageEnd()
		case c.ends != ends && c.gen == c.armed && c.timer != nil:
			// Messages that ended without adding a byte do not lengthen
			// a hold under way.
		case c.ends != ends:
			c.gen++
			c.holdAtMessageEnd()
		}
		c.mu.Unlock()
		return len(p), nil
	}
	c.mu.Unlock()
	if errors.Is(err, errWSRefused) {
		// The reverse proxy closes the client's connection once a copy
		// fails: the client's close frame goes first.
		select {
		case <-c.told:
		case <-time.After(wsTellTimeout):
		}
	}
	return 0, err
}

// parse reads p's frames on from where the last write left off.
//
// +checklocks:c.mu
func (c *wsScanConn) parse(p []byte) error {
	for len(p) > 0 {
		if !c.inFrame {
			c.hdr[c.hn] = p[0]
			c.hn++
			p = p[1:]
			if need := wsHeaderLen(c.hdr[:c.hn]); need == 0 || c.hn < need {
				continue
			}
			if err := c.startFrame(); err != nil {
				return err
			}
			if c.remain == 0 {
				if err := c.endFrame(); err != nil {
					return err
				}
			}
			continue
		}
		k := int(min(uint64(len(p)), c.remain))
		if c.op < 0x8 {
			c.scan.buf = c.unmask(c.scan.buf, p[:k])
			c.fed += int64(k)
		} else {
			c.ctl = c.unmask(c.ctl, p[:k])
		}
		p, c.remain = p[k:], c.remain-uint64(k)
		if c.remain == 0 {
			if err := c.endFrame(); err != nil {
				return err
			}
		} else if len(c.scan.buf) >= wsMaxScanChunk {
			if err := c.pass(false); err != nil {
				return err
			}
		}
	}
	return nil
}

// unmask appends b unmasked to dst.
//
// +checklocks:c.mu
func (c *wsScanConn) unmask(dst, b []byte) []byte {
	n := len(dst)
	dst = append(dst, b...)
	c.kpos = maskBytes(c.key, c.kpos, dst[n:])
	return dst
}

// maskBytes XORs b with key, starting pos bytes into it, and returns the
// position after b.
func maskBytes(key [4]byte, pos int, b []byte) int {
	i := 0
	if len(b) >= 16 {
		// A word at a time, the key turned to start at pos.
		var k8 [8]byte
		for j := range 8 {
			k8[j] = key[(pos+j)&3]
		}
		w := binary.LittleEndian.Uint64(k8[:])
		for ; i+8 <= len(b); i += 8 {
			binary.LittleEndian.PutUint64(b[i:], binary.LittleEndian.Uint64(b[i:])^w)
		}
	}
	for ; i < len(b); i++ {
		b[i] ^= key[(pos+i)&3]
	}
	return (pos + len(b)) & 3
}

// startFrame checks the header just read.
//
// +checklocks:c.mu
func (c *wsScanConn) startFrame() error {
	h := c.hdr[:c.hn]
	c.hn = 0
	fin, rsv, op, masked := h[0]&0x80 != 0, h[0]&0x70, h[0]&0x0f, h[1]&0x80 != 0
	n := wsPayloadLen(h)
	protocol := func(format string, args ...any) error {
		return c.refuse(&wsRefusal{code: 1002, reason: "airlock: " + fmt.Sprintf(format, args...) + ": the websocket was ended"})
	}
	switch {
	case rsv != 0:
		return protocol("websocket frame from the client with reserved bits %#x (compressed: it cannot be scanned)", rsv)
	case !masked:
		return protocol("unmasked websocket frame from the client (RFC 6455 forbids it)")
	case c.closed:
		return protocol("websocket frame from the client after its close")
	case n>>63 != 0:
		return protocol("websocket frame length over 2^63")
	case op >= 0x8 && op <= 0xa:
		if !fin || n > 125 {
			return protocol("fragmented or long websocket control frame")
		}
		c.ctl = c.ctl[:0]
	case op == 0x0:
		if !c.inMsg {
			return protocol("websocket continuation frame outside a message")
		}
	case op == 0x1 || op == 0x2:
		if c.inMsg {
			return protocol("websocket message begun inside another")
		}
		if len(c.msgs) >= wsMaxHeldMessages {
			// Messages wait behind bytes held back; a client that keeps
			// sending (empty ones cost 6 bytes) would grow them without
			// bound.
			return c.refuse(&wsRefusal{code: 1008, reason: fmt.Sprintf("airlock: more than %d websocket messages held behind bytes that could begin a secret: the websocket was ended", wsMaxHeldMessages)})
		}
		c.inMsg = true
		c.msgs = append(c.msgs, wsMessage{op: op, end: -1})
	default:
		return protocol("websocket frame with reserved opcode %#x", op)
	}
	c.inFrame, c.fin, c.op, c.remain, c.kpos = true, fin, op, n, 0
	copy(c.key[:], h[len(h)-4:])
	return nil
}

// endFrame acts on a frame read whole.
//
// +checklocks:c.mu
func (c *wsScanConn) endFrame() error {
	c.inFrame = false
	if c.op < 0x8 {
		if c.fin {
			c.inMsg = false
			c.msgs[len(c.msgs)-1].end = c.fed
			c.ends++
		}
		return nil
	}
	// The data before the control frame goes first, but for what it
	// holds back.
	if err := c.pass(false); err != nil {
		return err
	}
	what := map[byte]string{0x8: "close", 0x9: "ping", 0xa: "pong"}[c.op]
	ctl := streamScan{secrets: c.scan.secrets, pats: c.scan.pats}
	ctl.buf = c.ctl
	if sec, kind, _ := ctl.check(true); sec != nil {
		return c.refuse(&wsRefusal{secret: sec.Name, what: kind, where: "websocket " + what, code: 1008})
	}
	if c.op == 0x8 {
		// The client ends its stream: what was held back cannot begin
		// a match any more.
		c.closed = true
		if err := c.pass(true); err != nil {
			return err
		}
	}
	// Control frames go at once, whatever data is held back.
	c.appendFrame(0x80|c.op, c.ctl)
	return c.writeOut()
}

// pass scans what has been read and not passed on and frames what may
// pass (everything at eof).
//
// +checklocks:c.mu
func (c *wsScanConn) pass(eof bool) error {
	if len(c.scan.buf) == 0 && len(c.msgs) == 0 {
		return nil
	}
	sec, what, cut := c.scan.check(eof)
	if sec != nil {
		return c.refuse(&wsRefusal{secret: sec.Name, what: what, where: "websocket message", code: 1008})
	}
	c.scan.releaseTo(cut)
	data := c.scan.out
	for len(c.msgs) > 0 {
		m := &c.msgs[0]
		n, fin := len(data), false
		if m.end >= 0 && c.sent+int64(n) >= m.end {
			n, fin = int(m.end-c.sent), true
		}
		if n == 0 && !fin {
			break
		}
		op := byte(0)
		if !m.started {
			op = m.op
		}
		if fin {
			op |= 0x80
		}
		c.appendFrame(op, data[:n])
		m.started = true
		c.sent += int64(n)
		data = data[n:]
		if fin {
			// From the front without copying the rest: a pass over many
			// messages stays linear.
			c.msgs = c.msgs[1:]
			if len(c.msgs) == 0 {
				c.msgs = nil
			}
		}
	}
	c.scan.out = c.scan.out[:0]
	return nil
}

// appendFrame appends a frame to out, masked with a fresh key, as a
// client's must be.
//
// +checklocks:c.mu
func (c *wsScanConn) appendFrame(b0 byte, payload []byte) {
	h0 := len(c.out)
	c.out = appendWSHeader(c.out, b0, len(payload))
	c.out[h0+1] |= 0x80 // masked
	var key [4]byte
	binary.LittleEndian.PutUint32(key[:], uint32(c.rng.Uint64()))
	c.out = append(c.out, key[:]...)
	n := len(c.out)
	c.out = append(c.out, payload...)
	maskBytes(key, 0, c.out[n:])
}

// writeOut writes the frames made upstream.
//
// +checklocks:c.mu
func (c *wsScanConn) writeOut() error {
	if len(c.out) == 0 {
		return nil
	}
	_, err := c.ReadWriteCloser.Write(c.out)
	c.out = c.out[:0]
	if err != nil {
		c.err = err
	}
	return err
}

// holdAtMessageEnd arms the release of bytes held back at the end of
// the client's last message, if they are all it waits on.
//
// +checklocks:c.mu
func (c *wsScanConn) holdAtMessageEnd() {
	if c.inMsg || c.inFrame || c.hn > 0 || len(c.scan.buf) == 0 || c.closed {
		return
	}
	c.armed = c.gen
	if c.timer == nil {
		c.timer = time.AfterFunc(c.hold, c.release)
		return
	}
	c.timer.Reset(c.hold)
}

// release passes on what was held back at the end of the client's last
// message, if the client has written nothing since the hold began.
func (c *wsScanConn) release() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != c.armed || c.err != nil {
		return
	}
	if err := c.pass(true); err == nil {
		_ = c.writeOut()
	}
}

// refuse ends the stream: the server is sent a close frame with r's
// code, the upstream closed, and the client will be sent the same.
//
// +checklocks:c.mu
func (c *wsScanConn) refuse(r *wsRefusal) error {
	c.err = errWSRefused
	c.out = c.out[:0]
	c.appendFrame(0x88, closePayload(r))
	_, _ = c.ReadWriteCloser.Write(c.out)
	c.out = c.out[:0]
	c.scan.buf, c.scan.out = nil, nil
	c.refusal.Store(r)
	close(c.ended)
	_ = c.ReadWriteCloser.Close()
	return errWSRefused
}

// closePayload is a close frame's payload for r: its code and a reason
// that names the secret, never its value.
func closePayload(r *wsRefusal) []byte {
	reason := r.reason
	if r.secret != "" {
		reason = fmt.Sprintf("airlock: the %s of secret %s in a %s", r.what, r.secret, r.where)
	}
	if len(reason) > 123 {
		reason = reason[:123]
	}
	return append(binary.BigEndian.AppendUint16(nil, r.code), reason...)
}

// CloseWrite passes on what was held back, the client's stream having
// ended, and half-closes the upstream where it can.
func (c *wsScanConn) CloseWrite() error {
	c.mu.Lock()
	if c.err == nil {
		if err := c.pass(true); err == nil {
			_ = c.writeOut()
		}
	}
	c.mu.Unlock()
	if cw, ok := c.ReadWriteCloser.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return fmt.Errorf("CloseWrite: %w", http.ErrNotSupported)
}

func (c *wsScanConn) Close() error {
	c.mu.Lock()
	if c.timer != nil {
		c.timer.Stop()
	}
	if c.err == nil {
		c.err = net.ErrClosed // and a release already under way does nothing
	}
	c.mu.Unlock()
	return c.ReadWriteCloser.Close()
}

// Read passes the server's frames on, following their boundaries: once
// the gateway ended the stream, the client is sent its close at the next
// boundary, then the relay ends.
func (c *wsScanConn) Read(p []byte) (int, error) {
	if len(c.pend) > 0 {
		n := copy(p, c.pend)
		c.pend = c.pend[n:]
		return n, nil
	}
	if c.rdone {
		// What was returned before has been written to the client.
		c.tell()
		return 0, errWSRefused
	}
	select {
	case <-c.ended:
		return c.endRead(p)
	default:
	}
	n, err := c.ReadWriteCloser.Read(p)
	c.rd.track(p[:n])
	select {
	case <-c.ended:
		if n > 0 {
			return n, nil
		}
		return c.endRead(p)
	default:
	}
	if err != nil {
		c.tell()
	}
	return n, err
}

func (c *wsScanConn) endRead(p []byte) (int, error) {
	c.rdone = true
	if !c.rd.boundary() {
		c.tell()
		return 0, errWSRefused
	}
	payload := closePayload(c.refusal.Load())
	c.pend = append(appendWSHeader(nil, 0x88, len(payload)), payload...)
	return c.Read(p)
}

func (c *wsScanConn) tell() { c.tellOne.Do(func() { close(c.told) }) }

// wsFrameTracker follows frame boundaries in a stream of frames.
type wsFrameTracker struct {
	hdr    [14]byte
	hn     int
	remain uint64
}

func (t *wsFrameTracker) track(b []byte) {
	for len(b) > 0 {
		if t.remain > 0 {
			k := min(uint64(len(b)), t.remain)
			t.remain -= k
			b = b[k:]
			continue
		}
		t.hdr[t.hn] = b[0]
		t.hn++
		b = b[1:]
		if need := wsHeaderLen(t.hdr[:t.hn]); need > 0 && t.hn == need {
			t.remain, t.hn = wsPayloadLen(t.hdr[:t.hn]), 0
		}
	}
}

// boundary reports whether the stream so far ends between frames.
func (t *wsFrameTracker) boundary() bool { return t.hn == 0 && t.remain == 0 }

// wsHeaderLen is the length of the frame header h begins, 0 while h is
// too short to tell.
func wsHeaderLen(h []byte) int {
	if len(h) < 2 {
		return 0
	}
	n := 2
	switch h[1] & 0x7f {
	case 126:
		n += 2
	case 127:
		n += 8
	}
	if h[1]&0x80 != 0 {
		n += 4
	}
	return n
}

// wsPayloadLen is the payload length a whole frame header h gives.
func wsPayloadLen(h []byte) uint64 {
	switch n := h[1] & 0x7f; n {
	case 126:
		return uint64(binary.BigEndian.Uint16(h[2:4]))
	case 127:
		return binary.BigEndian.Uint64(h[2:10])
	default:
		return uint64(n)
	}
}
