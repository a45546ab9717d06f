package l7

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"
)

// wsf is one websocket frame as a test writes or reads it: the payload
// unmasked.
type wsf struct {
	fin     bool
	rsv     byte // the three reserved bits, in place (0x70)
	op      byte
	payload []byte
}

func text(s string) wsf           { return wsf{fin: true, op: 0x1, payload: []byte(s)} }
func binaryMsg(s string) wsf      { return wsf{fin: true, op: 0x2, payload: []byte(s)} }
func first(s string) wsf          { return wsf{op: 0x1, payload: []byte(s)} }
func cont(s string, fin bool) wsf { return wsf{fin: fin, op: 0x0, payload: []byte(s)} }
func ping(s string) wsf           { return wsf{fin: true, op: 0x9, payload: []byte(s)} }

// appendWSClientFrame appends f, masked with a random key when mask.
func appendWSClientFrame(dst []byte, f wsf, mask bool) []byte {
	b0 := f.op | f.rsv
	if f.fin {
		b0 |= 0x80
	}
	var m byte
	if mask {
		m = 0x80
	}
	switch n := len(f.payload); {
	case n < 126:
		dst = append(dst, b0, m|byte(n))
	case n < 1<<16:
		dst = binary.BigEndian.AppendUint16(append(dst, b0, m|126), uint16(n))
	default:
		dst = binary.BigEndian.AppendUint64(append(dst, b0, m|127), uint64(n))
	}
	if !mask {
		return append(dst, f.payload...)
	}
	var key [4]byte
	binary.LittleEndian.PutUint32(key[:], rand.Uint32())
	dst = append(dst, key[:]...)
	for i, c := range f.payload {
		dst = append(dst, c^key[i&3])
	}
	return dst
}

// readWSAny reads one frame, masked or not, and unmasks it.
func readWSAny(r *bufio.Reader) (f wsf, masked bool, err error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return f, false, err
	}
	f.fin, f.rsv, f.op, masked = h[0]&0x80 != 0, h[0]&0x70, h[0]&0x0f, h[1]&0x80 != 0
	n := uint64(h[1] & 0x7f)
	switch n {
	case 126:
		var e [2]byte
		if _, err := io.ReadFull(r, e[:]); err != nil {
			return f, masked, err
		}
		n = uint64(binary.BigEndian.Uint16(e[:]))
	case 127:
		var e [8]byte
		if _, err := io.ReadFull(r, e[:]); err != nil {
			return f, masked, err
		}
		n = binary.BigEndian.Uint64(e[:])
	}
	var key [4]byte
	if masked {
		if _, err := io.ReadFull(r, key[:]); err != nil {
			return f, masked, err
		}
	}
	if n > 64<<20 {
		return f, masked, fmt.Errorf("frame of %d bytes", n)
	}
	f.payload = make([]byte, n)
	if _, err := io.ReadFull(r, f.payload); err != nil {
		return f, masked, err
	}
	if masked {
		for i := range f.payload {
			f.payload[i] ^= key[i&3]
		}
	}
	return f, masked, nil
}

// wsSeen is what the world's websocket server got on one connection.
type wsSeen struct {
	ext      string   // the upgrade's Sec-WebSocket-Extensions
	stream   []byte   // every data frame's payload, in order
	msgs     [][]byte // the messages, whole
	ops      []byte   // each message's opcode
	controls []wsf    // pings, pongs and closes
	unmasked int      // frames that came unmasked
	err      error    // what ended the connection, if not a close
	done     chan struct{}
}

// wsWorld is a world host's websocket server: it echoes every message
// whole, answers a ping with a pong and a close with a close, and
// records what it got by the connection's "c" query.
type wsWorld struct {
	discard bool // echo only, record nothing (benchmarks)
	mu      sync.Mutex
	conns   map[string]*wsSeen
}

func newWSWorld() *wsWorld { return &wsWorld{conns: map[string]*wsSeen{}} }

func (w *wsWorld) conn(key string) *wsSeen {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.conns[key]
	if !ok {
		s = &wsSeen{done: make(chan struct{})}
		w.conns[key] = s
	}
	return s
}

// wait returns what the server got on connection key once it ended.
func (w *wsWorld) wait(t *testing.T, key string) *wsSeen {
	t.Helper()
	s := w.conn(key)
	select {
	case <-s.done:
	case <-time.After(10 * time.Second):
		t.Fatalf("the world's websocket %s did not end", key)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return s
}

func (w *wsWorld) ServeHTTP(rw http.ResponseWriter, r *http.Request) {
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		http.Error(rw, "no upgrade", http.StatusBadRequest)
		return
	}
	s := &wsSeen{done: make(chan struct{})}
	if !w.discard {
		s = w.conn(r.URL.Query().Get("c"))
	}
	defer close(s.done)
	w.mu.Lock()
	s.ext = r.Header.Get("Sec-WebSocket-Extensions")
	w.mu.Unlock()
	c, brw, err := http.NewResponseController(rw).Hijack()
	if err != nil {
		return
	}
	defer c.Close()
	sum := sha1.Sum([]byte(r.Header.Get("Sec-WebSocket-Key") + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	fmt.Fprintf(brw, "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: %s\r\n\r\n", base64.StdEncoding.EncodeToString(sum[:]))
	brw.Flush()
	var msg []byte
	var op byte
	sentClose := false
	for {
		f, masked, err := readWSAny(brw.Reader)
		w.mu.Lock()
		if err != nil {
			s.err = err
			w.mu.Unlock()
			return
		}
		if !masked {
			s.unmasked++
		}
		var out []byte
		switch {
		case f.op >= 0x8:
			s.controls = append(s.controls, f)
			switch f.op {
			case 0x8:
				if !sentClose {
					out = appendWSClientFrame(nil, f, false)
				}
			case 0x9:
				out = appendWSClientFrame(nil, wsf{fin: true, op: 0xa, payload: f.payload}, false)
			}
		default:
			if f.op != 0 {
				op = f.op
			}
			if !w.discard {
				s.stream = append(s.stream, f.payload...)
			}
			msg = append(msg, f.payload...)
			if f.fin {
				if !w.discard {
					s.msgs = append(s.msgs, msg)
					s.ops = append(s.ops, op)
				}
				out = appendWSClientFrame(nil, wsf{fin: true, op: op, payload: msg}, false)
				if op == 0x1 && string(msg) == "close-me" {
					// The server closes: the client answers with its
					// own close.
					out = appendWSClientFrame(nil, wsf{fin: true, op: 0x8, payload: []byte("\x03\xe8bye")}, false)
					sentClose = true
				}
				msg = nil
			}
		}
		w.mu.Unlock()
		if out != nil {
			brw.Write(out)
			brw.Flush()
		}
		if f.op == 0x8 {
			return
		}
	}
}

// wsClient is the sandbox's side of a websocket through the gateway.
type wsClient struct {
	rw io.ReadWriteCloser
	r  *bufio.Reader
}

// dialWS upgrades url (through the gateway, as a sandbox) to a
// websocket, offering exts if not empty.
func dialWS(t testing.TB, c *http.Client, url, exts string) *wsClient {
	t.Helper()
	req := mustReq("GET", url)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "websocket")
	req.Header.Set("Sec-WebSocket-Version", "13")
	req.Header.Set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
	if exts != "" {
		req.Header.Set("Sec-WebSocket-Extensions", exts)
	}
	resp, err := c.Transport.RoundTrip(req)
	if err != nil {
		t.Fatalf("upgrade %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("upgrade %s: %d %s", url, resp.StatusCode, b)
	}
	rw := resp.Body.(io.ReadWriteCloser)
	t.Cleanup(func() { rw.Close() })
	return &wsClient{rw: rw, r: bufio.NewReaderSize(rw, 64<<10)}
}

// send writes frames, masked, in one write each.
func (c *wsClient) send(frames ...wsf) error {
	for _, f := range frames {
		if _, err := c.rw.Write(appendWSClientFrame(nil, f, true)); err != nil {
			return err
		}
	}
	return nil
}

// until reads the server's frames until a close (whose code it returns)
// or an error (code 0), and returns the messages before it.
func (c *wsClient) until(t *testing.T) (msgs []wsf, code int, reason string) {
	t.Helper()
	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			c.rw.Close()
		}
	}()
	var cur *wsf
	for {
		f, masked, err := readWSAny(c.r)
		if err != nil {
			return msgs, 0, err.Error()
		}
		if masked {
			t.Errorf("a masked frame from the server side")
		}
		switch {
		case f.op == 0x8:
			if len(f.payload) >= 2 {
				return msgs, int(binary.BigEndian.Uint16(f.payload)), string(f.payload[2:])
			}
			return msgs, 1005, ""
		case f.op >= 0x9:
			msgs = append(msgs, f)
		default:
			if f.op != 0 || cur == nil {
				cur = &wsf{op: f.op}
			}
			cur.payload = append(cur.payload, f.payload...)
			if f.fin {
				cur.fin = true
				msgs = append(msgs, *cur)
				cur = nil
			}
		}
	}
}

// wsAttacks are the sandbox's ways to send a placeholder or a guarded
// value out in a websocket's frames: each list of frames carries one.
func wsAttacks() []struct {
	name   string
	frames []wsf
} {
	ph := testPlaceholder                   // API_KEY's, bound to allowed.test
	val := "rpt_prod_7f3a9c1e5b2d"          // prod-deploy's value, guarded
	phEsc := `{"k":"\u0061` + ph[1:] + `"}` // 'a' escaped as JSON
	var oneByte []wsf
	for i := range len(ph) {
		f := cont(ph[i:i+1], i == len(ph)-1)
		if i == 0 {
			f.op = 0x1
		}
		oneByte = append(oneByte, f)
	}
	var oneByteMsgs []wsf
	for i := range len(val) {
		oneByteMsgs = append(oneByteMsgs, text(val[i:i+1]))
	}
	return []struct {
		name   string
		frames []wsf
	}{
		{"a: the placeholder in a text frame", []wsf{text("hello " + ph + " bye")}},
		{"b: split across two fragments", []wsf{first(`{"k":"` + ph[:10]), cont(ph[10:]+`"}`, true)}},
		{"b: split across two messages", []wsf{text(`{"k":"` + ph[:17]), text(ph[17:] + `"}`)}},
		{"b: fragments with a ping between", []wsf{first(ph[:5]), ping("are you there"), cont(ph[5:], true)}},
		{"c: JSON-escaped", []wsf{text(phEsc)}},
		{"c: JSON escape cut across fragments", []wsf{first(`{"k":"\u00`), cont(`61`+ph[1:]+`"}`, true)}},
		{"c: percent-escaped", []wsf{text("k=%61" + ph[1:])}},
		{"c: percent-escaped value, every character", []wsf{text("t=" + pctEscape(val))}},
		{"d: a guarded value", []wsf{text(`{"token":"` + val + `"}`)}},
		{"d: the bound secret's value", []wsf{text(testSecret)}},
		{"e: in a binary frame", []wsf{binaryMsg("\x00\x01" + val + "\xff")}},
		{"e: binary, fragmented", []wsf{{op: 0x2, payload: []byte(val[:4])}, {fin: true, payload: []byte(val[4:])}}},
		{"f: one byte per frame", oneByte},
		{"f: one byte per message", oneByteMsgs},
		{"a ping carrying it", []wsf{ping(ph)}},
	}
}

func pctEscape(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		fmt.Fprintf(&b, "%%%02X", s[i])
	}
	return b.String()
}

// wsScanModes are the websockets the gateway sees in clear: a terminated
// TLS host, TLS to the host a secret is bound to, and plain HTTP.
var wsScanModes = []struct {
	name, url string
	tls       bool
}{
	{"terminated TLS", "https://rules.test/ws", true},
	{"TLS to a bound host", "https://allowed.test/ws", true},
	{"plain HTTP", "http://rules.test/ws", false},
}

// TestAttackSecretInWebsocket: after an upgrade the sandbox sends a
// placeholder or a guarded value out in the websocket's frames, on hosts
// the gateway sees in clear (terminated TLS, a host a secret is bound to
// or not, and plain HTTP), where the same value in a request body is
// refused. Each is found: the server never sees it (nor anything from
// where it starts), the sandbox gets a close 1008, and the request is
// audited as an exfiltration naming the secret, never its value.
func TestAttackSecretInWebsocket(t *testing.T) {

	for _, mode := range wsScanModes {
		t.Run(mode.name, func(t *testing.T) {
			world := newWSWorld()
			g := startAttack(t, world, attackOpts{tls: mode.tls, secrets: guardedSecrets()})
			for i, tc := range wsAttacks() {
				key := fmt.Sprint(i)
				ws := dialWS(t, g.client(false), mode.url+"?c="+key, "")
				sent := wsStream(tc.frames)
				if err := ws.send(append(tc.frames, text("end"), wsf{fin: true, op: 0x8, payload: []byte{0x03, 0xe8}})...); err != nil {
					t.Logf("%s: send: %v", tc.name, err)
				}
				_, code, reason := ws.until(t)
				ws.rw.Close()
				seen := world.wait(t, key)
				ev := g.request(t, i+1)
				t.Logf("%s: server got %q, controls %d, close %d %q; audit %s %q", tc.name, seen.stream, len(seen.controls), code, reason, ev.Action, ev.Reason)
				if leaked := wsLeak(seen); leaked != "" {
					t.Errorf("%s: %s reached the world's server: stream %q, controls %v", tc.name, leaked, seen.stream, seen.controls)
				}
				if code != 1008 {
					t.Errorf("%s: the sandbox got close %d %q, want 1008", tc.name, code, reason)
				}
				if ms := matchStart(sent, guardedSecrets()); !bytes.HasPrefix(sent, seen.stream) || len(seen.stream) > ms {
					t.Errorf("%s: the server got %q of %q, past the match's start at %d", tc.name, seen.stream, sent, ms)
				}
				if ev.Action != ActionExfiltration || !strings.Contains(ev.Reason, "of secret ") || !strings.Contains(ev.Reason, "websocket") {
					t.Errorf("%s: audited %s %q, want an exfiltration in a websocket naming the secret", tc.name, ev.Action, ev.Reason)
				}
				if strings.Contains(ev.Reason, testSecret) || strings.Contains(ev.Reason, "rpt_prod_7f3a9c1e5b2d") {
					t.Errorf("%s: the audit carries the value: %q", tc.name, ev.Reason)
				}
			}
		})
	}
}

// wsStream is the data frames' payloads of frames, in order.
func wsStream(frames []wsf) []byte {
	var b []byte
	for _, f := range frames {
		if f.op < 0x8 {
			b = append(b, f.payload...)
		}
	}
	return b
}

// wsLeak says which placeholder or value the server got, decoded as the
// body scanner decodes, in its data stream or a control frame.
func wsLeak(s *wsSeen) string {
	all := [][]byte{s.stream}
	for _, c := range s.controls {
		all = append(all, c.payload)
	}
	for _, b := range all {
		if ms := matchStart(b, guardedSecrets()); ms < len(b) {
			return fmt.Sprintf("a secret (from %q)", b[ms:])
		}
	}
	return ""
}

// next reads the server's frames to the next data message (fragments
// put together), counting the pongs before it; a close is returned as
// a message.
func (c *wsClient) next(t *testing.T) (msg wsf, pongs int) {
	t.Helper()
	for {
		f, _, err := readWSAny(c.r)
		if err != nil {
			t.Fatalf("reading the echo: %v", err)
		}
		switch {
		case f.op == 0xa:
			pongs++
			continue
		case f.op == 0x8:
			return f, pongs
		case f.op != 0:
			msg = wsf{op: f.op}
		}
		msg.payload = append(msg.payload, f.payload...)
		if f.fin {
			msg.fin = true
			return msg, pongs
		}
	}
}

// TestWebsocketEchoScanned: on a session with secrets, whose websockets
// the gateway reads and scans, ordinary traffic passes unchanged: text
// and binary messages of every length encoding (0, 125, 126, 65535,
// 65536 bytes, 1 MiB), a message fragmented at random with pings
// between its fragments (every ping answered), a message that ends in
// the first bytes of a placeholder (held back, then passed at the end of
// the hold), and the close handshake both ways. The server is not
// offered the client's compression extension.
func TestWebsocketEchoScanned(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	line := `{"type":"delta","text":"the quick brown fox \"jumps\" over 100% of dogs\n"}` + "\n"
	for _, mode := range wsScanModes {
		t.Run(mode.name, func(t *testing.T) {
			world := newWSWorld()
			g := startAttack(t, world, attackOpts{tls: mode.tls, secrets: guardedSecrets()})
			ws := dialWS(t, g.client(false), mode.url+"?c=echo", "permessage-deflate; client_max_window_bits")
			echo := func(name string, frames []wsf, want wsf, pings int) time.Duration {
				t.Helper()
				start := time.Now()
				if err := ws.send(frames...); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				got, pongs := ws.next(t)
				if got.op != want.op || !bytes.Equal(got.payload, want.payload) {
					t.Fatalf("%s: echoed op %#x, %d bytes, want op %#x, %d bytes (equal: %v)", name, got.op, len(got.payload), want.op, len(want.payload), bytes.Equal(got.payload, want.payload))
				}
				if pongs != pings {
					t.Errorf("%s: %d pongs for %d pings", name, pongs, pings)
				}
				return time.Since(start)
			}
			for _, n := range []int{0, 125, 126, 65535, 65536, 1 << 20} {
				txt := []byte(strings.Repeat(line, n/len(line)+1)[:n])
				echo(fmt.Sprintf("text of %d bytes", n), []wsf{{fin: true, op: 0x1, payload: txt}}, wsf{op: 0x1, payload: txt}, 0)
				bin := make([]byte, n)
				for i := range bin {
					bin[i] = byte(rng.Uint32())
				}
				echo(fmt.Sprintf("binary of %d bytes", n), []wsf{{fin: true, op: 0x2, payload: bin}}, wsf{op: 0x2, payload: bin}, 0)
			}
			// A message of 200 KiB in fragments of random sizes (empty
			// ones too), a ping after each of some.
			big := []byte(strings.Repeat(line, 200<<10/len(line)))
			var frames []wsf
			pings := 0
			for rest := big; len(rest) > 0 || len(frames) == 0; {
				k := min(len(rest), []int{0, 1, 7, 125, 126, 4096, 65536, 70000}[rng.IntN(8)])
				f := wsf{op: 0x0, payload: rest[:k]}
				if len(frames) == 0 {
					f.op = 0x1
				}
				rest = rest[k:]
				f.fin = len(rest) == 0
				frames = append(frames, f)
				if !f.fin && rng.IntN(3) == 0 {
					frames = append(frames, ping(fmt.Sprint("p", pings)))
					pings++
				}
			}
			echo("fragmented with pings", frames, wsf{op: 0x1, payload: big}, pings)
			// The end of a message that could begin a placeholder
			// waits for more, for at most the hold.
			if d := echo("ending in a placeholder's start", []wsf{text("see " + testPlaceholder[:7])}, wsf{op: 0x1, payload: []byte("see " + testPlaceholder[:7])}, 0); d < wsHoldAtMessageEnd*4/5 {
				t.Errorf("a message ending in a placeholder's start came back after %v, before the hold of %v", d, wsHoldAtMessageEnd)
			}
			// The server closes; the client answers.
			if err := ws.send(text("close-me")); err != nil {
				t.Fatal(err)
			}
			if got, _ := ws.next(t); got.op != 0x8 || string(got.payload[2:]) != "bye" {
				t.Fatalf("the server's close: %+v", got)
			}
			ws.send(wsf{fin: true, op: 0x8, payload: []byte{0x03, 0xe8}})
			seen := world.wait(t, "echo")
			if seen.ext != "" {
				t.Errorf("the server was offered %q: compressed frames cannot be scanned", seen.ext)
			}
			if seen.unmasked != 0 {
				t.Errorf("%d frames reached the server unmasked", seen.unmasked)
			}
			if c := seen.controls[len(seen.controls)-1]; c.op != 0x8 || binary.BigEndian.Uint16(c.payload) != 1000 {
				t.Errorf("the client's answer to the server's close reached it as %+v", c)
			}
			ws.rw.Close()
			if ev := g.request(t, 1); ev.Action != ActionAllowed {
				t.Errorf("the websocket's request was audited %s %q", ev.Action, ev.Reason)
			}

			// The client closes; the server answers.
			ws = dialWS(t, g.client(false), mode.url+"?c=client-closes", "")
			echo("before the close", []wsf{text("hello")}, wsf{op: 0x1, payload: []byte("hello")}, 0)
			ws.send(wsf{fin: true, op: 0x8, payload: []byte("\x03\xe8done")})
			if got, _ := ws.next(t); got.op != 0x8 || string(got.payload) != "\x03\xe8done" {
				t.Errorf("the server's answer to the client's close: %+v", got)
			}
			world.wait(t, "client-closes")
		})
	}
}

// TestWebsocketCompressedRefused: a client frame with a reserved bit set
// (permessage-deflate's RSV1, which the gateway did not let the server
// offer) cannot be scanned: it ends the stream with a close 1002, audited
// as refused, and none of it reaches the server.
func TestWebsocketCompressedRefused(t *testing.T) {
	world := newWSWorld()
	g := startAttack(t, world, attackOpts{tls: true, secrets: guardedSecrets()})
	ws := dialWS(t, g.client(false), "https://rules.test/ws?c=rsv", "permessage-deflate")
	ws.send(text("fine"), wsf{fin: true, rsv: 0x40, op: 0x1, payload: []byte("\xf2\x48\xcd\xc9\xc9\x07\x00")}, text("after"))
	msgs, code, reason := ws.until(t)
	ws.rw.Close()
	seen := world.wait(t, "rsv")
	if code != 1002 || !strings.Contains(reason, "reserved bits") {
		t.Errorf("the sandbox got close %d %q, want 1002 naming the reserved bits", code, reason)
	}
	// The echo of the first may or may not be back before the close.
	if len(msgs) > 1 || len(msgs) == 1 && string(msgs[0].payload) != "fine" || string(seen.stream) != "fine" {
		t.Errorf("the sandbox got %v back, the server got %q: want only the message before", msgs, seen.stream)
	}
	if ev := g.request(t, 1); ev.Action != ActionRefused || !strings.Contains(ev.Reason, "reserved bits") {
		t.Errorf("audited %s %q, want refused for the reserved bits", ev.Action, ev.Reason)
	}
}

// TestWebsocketIdleClosedScanned: a scanned websocket (a session with
// secrets) on which nothing moves either way is closed after the idle
// timeout, as one passed unread is (TestWebsocketIdleClosed), and its
// request audited so.
func TestWebsocketIdleClosedScanned(t *testing.T) {
	const idle = 400 * time.Millisecond
	world := newWSWorld()
	g := startAttack(t, world, attackOpts{tls: true, secrets: guardedSecrets(), idleTimeout: idle})
	ws := dialWS(t, g.client(false), "https://rules.test/ws?c=idle", "")
	if err := ws.send(text("hello")); err != nil {
		t.Fatal(err)
	}
	if got, _ := ws.next(t); string(got.payload) != "hello" {
		t.Fatalf("echo: %q", got.payload)
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() { _, err := ws.r.ReadByte(); done <- err }()
	select {
	case <-done:
		if d := time.Since(start); d < idle/2 || d > 6*idle {
			t.Errorf("an idle scanned websocket closed after %v, want about %v", d, idle)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an idle scanned websocket is still open after 5 s")
	}
	world.wait(t, "idle")
	if ev := g.request(t, 1); !strings.Contains(ev.Reason, "idle both ways") || ev.Action != ActionAllowed {
		t.Errorf("the idle websocket's request: %s %q", ev.Action, ev.Reason)
	}
}
