package l7

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"
)

// wsRecorder is an upstream that records what the gateway writes.
type wsRecorder struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	closed bool
}

func (r *wsRecorder) Read([]byte) (int, error) { return 0, io.EOF }

func (r *wsRecorder) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.buf.Write(p)
}

func (r *wsRecorder) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.closed = true
	return nil
}

// frames parses what the gateway wrote: every frame must be masked.
func (r *wsRecorder) frames(t testing.TB) []wsf {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	br := bufio.NewReader(bytes.NewReader(r.buf.Bytes()))
	var out []wsf
	for {
		f, masked, err := readWSAny(br)
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatalf("the gateway wrote a broken frame after %d: %v", len(out), err)
		}
		if !masked {
			t.Fatalf("the gateway wrote frame %d unmasked", len(out))
		}
		out = append(out, f)
	}
}

// newTestWSScan is a wsScanConn over a recorder, with no client side to
// tell (a refusal returns at once) and a hold at a message's end longer
// than any test.
func newTestWSScan(secrets []Secret) (*wsScanConn, *wsRecorder) {
	rec := &wsRecorder{}
	c := newWSScanConn(rec, secrets)
	c.tell()
	c.hold = time.Hour
	return c, rec
}

// feed writes wire to c in chunks of the given sizes (the rest at the
// end), and reports whether c refused it.
func feed(c *wsScanConn, wire []byte, sizes []int) bool {
	for len(wire) > 0 {
		n := len(wire)
		if len(sizes) > 0 {
			n, sizes = min(sizes[0], n), sizes[1:]
		}
		if _, err := c.Write(wire[:n]); err != nil {
			return errors.Is(err, errWSRefused)
		}
		wire = wire[n:]
	}
	return false
}

func wireOf(frames []wsf) []byte {
	var b []byte
	for _, f := range frames {
		b = appendWSClientFrame(b, f, true)
	}
	return b
}

// hostileFrames puts pat, escaped at random as encodeMixed does, between
// a prefix and a suffix, in a stream cut into random messages and
// fragments (empty ones too) with pings between.
func hostileFrames(rng *rand.Rand, pat string) []wsf {
	prefix := []string{"x=", `{"k":"`, "a=%41%", `\\`, `\u00`, "", "%", `"\\u0041`}[rng.IntN(8)]
	stream := []byte(prefix + encodeMixed(rng, pat) + []string{"", "&z=1", `"}`, "%2", `\`}[rng.IntN(5)])
	var frames []wsf
	open := false
	for len(stream) > 0 {
		k := min(len(stream), rng.IntN(6))
		f := wsf{op: 0x0, payload: stream[:k]}
		if !open {
			f.op = byte(1 + rng.IntN(2))
			open = true
		}
		stream = stream[k:]
		if len(stream) == 0 || rng.IntN(3) == 0 {
			f.fin, open = true, false
		}
		frames = append(frames, f)
		if rng.IntN(4) == 0 {
			frames = append(frames, ping("p"))
		}
	}
	if open {
		frames = append(frames, wsf{fin: true, op: 0x0})
	}
	return frames
}

// TestWSScanEveryCut: a hostile stream of frames (the attacks of
// TestAttackSecretInWebsocket, and placeholders and values escaped at
// random, in random messages and fragments with pings between) is
// refused however the client's writes cut it (at every point, a byte at
// a time, at random), and nothing from where the match starts is passed
// upstream: what went is a prefix of the client's payload stream, in
// masked frames, ending with a close 1008.
func TestWSScanEveryCut(t *testing.T) {
	secrets := encodedSplitSecrets()
	rng := rand.New(rand.NewPCG(3, 4))
	var cases [][]wsf
	for _, a := range wsAttacks() {
		cases = append(cases, a.frames)
	}
	for i := range 100 {
		sec := secrets[i%len(secrets)]
		pat := string(sec.Value)
		if i%3 == 0 {
			pat = sec.Placeholder
		}
		cases = append(cases, hostileFrames(rng, pat))
	}
	for _, frames := range cases {
		wire := wireOf(frames)
		sent := wsStream(frames)
		ms := matchStart(sent, secrets)
		check := func(how string, sizes []int) {
			t.Helper()
			c, rec := newTestWSScan(secrets)
			refused := feed(c, wire, sizes)
			c.Close()
			if !refused {
				t.Fatalf("%s %q: not refused", how, sent)
			}
			if r := c.Refusal(); r == nil || r.secret == "" || r.code != 1008 {
				t.Fatalf("%s %q: refusal %+v", how, sent, r)
			}
			got := rec.frames(t)
			if len(got) == 0 || got[len(got)-1].op != 0x8 {
				t.Fatalf("%s %q: the server was not sent a close", how, sent)
			}
			if passed := wsStream(got); !bytes.HasPrefix(sent, passed) || len(passed) > ms {
				t.Fatalf("%s %q: passed on %q, past the match's start at %d", how, sent, passed, ms)
			}
			if !rec.closed {
				t.Fatalf("%s: the upstream was left open", how)
			}
		}
		check("one write", nil)
		ones := make([]int, len(wire))
		for i := range ones {
			ones[i] = 1
		}
		check("a byte a write", ones)
		for cut := 1; cut < len(wire); cut++ {
			check(fmt.Sprint("cut at ", cut), []int{cut})
		}
		var sizes []int
		for range 30 {
			sizes = append(sizes, 1+rng.IntN(9))
		}
		check(fmt.Sprint("writes of ", sizes), sizes)
	}
}

// TestWSScanPassesEveryCut: ordinary messages, in random fragments with
// pings between and written in random chunks, reach the server as they
// were sent (each message's type and bytes, the pings in order, the
// close last), and the scan holds a bounded tail, not a message: a 1 MiB
// message streams through.
func TestWSScanPassesEveryCut(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	line := `{"text":"a 100% ordinary \"line\"\n"} `
	for i := range 200 {
		var frames []wsf
		var want []wsf
		for range 1 + rng.IntN(4) {
			var payload []byte
			op := byte(1 + rng.IntN(2))
			if op == 1 {
				long := strings.Repeat(line, 40)
				payload = []byte(long[:rng.IntN(len(long)/(1+rng.IntN(8)))])
			} else {
				payload = make([]byte, rng.IntN(3000))
				for j := range payload {
					payload[j] = byte(rng.Uint32())
				}
			}
			want = append(want, wsf{op: op, payload: payload})
			first := true
			for rest := payload; first || len(rest) > 0; {
				k := min(len(rest), rng.IntN(700))
				f := wsf{op: 0, payload: rest[:k]}
				if first {
					f.op, first = op, false
				}
				rest = rest[k:]
				f.fin = len(rest) == 0
				frames = append(frames, f)
				if rng.IntN(3) == 0 {
					frames = append(frames, ping(fmt.Sprint("ping ", len(frames))))
				}
			}
		}
		frames = append(frames, wsf{fin: true, op: 0x8, payload: []byte("\x03\xe8")})
		wire := wireOf(frames)
		var sizes []int
		for range 50 {
			sizes = append(sizes, 1+rng.IntN(1+rng.IntN(2000)))
		}
		c, rec := newTestWSScan(guardedSecrets())
		if feed(c, wire, sizes) {
			t.Fatalf("case %d refused: %+v", i, c.Refusal())
		}
		c.Close()
		var got, controls, wantControls []wsf
		for _, f := range frames {
			if f.op >= 0x8 {
				wantControls = append(wantControls, f)
			}
		}
		var cur *wsf
		for _, f := range rec.frames(t) {
			switch {
			case f.op >= 0x8:
				controls = append(controls, f)
				continue
			case f.op != 0:
				cur = &wsf{op: f.op}
			case cur == nil:
				t.Fatalf("case %d: a continuation outside a message", i)
			}
			cur.payload = append(cur.payload, f.payload...)
			if f.fin {
				got = append(got, wsf{op: cur.op, payload: cur.payload})
				cur = nil
			}
		}
		if len(got) != len(want) {
			t.Fatalf("case %d: %d messages reached the server, want %d", i, len(got), len(want))
		}
		for j := range want {
			if got[j].op != want[j].op || !bytes.Equal(got[j].payload, want[j].payload) {
				t.Fatalf("case %d: message %d changed: op %#x %q, want %#x %q", i, j, got[j].op, got[j].payload, want[j].op, want[j].payload)
			}
		}
		if len(controls) != len(wantControls) || controls[len(controls)-1].op != 0x8 {
			t.Fatalf("case %d: controls %v, want %v", i, controls, wantControls)
		}
		for j := range controls {
			if controls[j].op != wantControls[j].op || !bytes.Equal(controls[j].payload, wantControls[j].payload) {
				t.Fatalf("case %d: control %d is %v, want %v", i, j, controls[j], wantControls[j])
			}
		}
	}

	// 1 MiB in one frame, written 32 KiB at a time: after each write all
	// but a short tail has gone upstream.
	c, rec := newTestWSScan(guardedSecrets())
	msg := []byte(strings.Repeat(line, (1<<20)/len(line)+1)[:1<<20])
	wire := appendWSClientFrame(nil, wsf{fin: true, op: 0x1, payload: msg}, true)
	for off := 0; off < len(wire); off += 32 << 10 {
		if _, err := c.Write(wire[off:min(off+32<<10, len(wire))]); err != nil {
			t.Fatal(err)
		}
		c.mu.Lock()
		held, fed := len(c.scan.buf), c.fed
		c.mu.Unlock()
		rec.mu.Lock()
		up := rec.buf.Len()
		rec.mu.Unlock()
		if held > 1024 || int64(up) < fed-1024 {
			t.Fatalf("after %d bytes: %d held, %d written upstream", fed, held, up)
		}
	}
	c.Close()
	if got := rec.frames(t); !bytes.Equal(wsStream(got), msg) || !got[len(got)-1].fin {
		t.Fatalf("the 1 MiB message did not pass whole")
	}
}

// FuzzWSScan: whatever the client writes, cut anywhere, the gateway
// passes on only masked frames whose payloads are a prefix of the
// client's data frames' payloads, and never one from where a
// placeholder or value starts in them.
func FuzzWSScan(f *testing.F) {
	for _, a := range wsAttacks() {
		f.Add(wireOf(a.frames), uint16(3))
	}
	f.Add(wireOf([]wsf{first("x"), ping("p"), cont("y", true), text("")}), uint16(5))
	secrets := encodedSplitSecrets()
	f.Fuzz(func(t *testing.T, wire []byte, cut uint16) {
		sent := clientStream(wire)
		c, rec := newTestWSScan(secrets)
		refused := feed(c, wire, []int{int(cut)%(len(wire)+1) + 1})
		c.Close()
		got := rec.frames(t)
		passed := wsStream(got)
		if !bytes.HasPrefix(sent, passed) {
			t.Fatalf("passed on %q, not a prefix of %q", passed, sent)
		}
		if ms := matchStart(sent, secrets); ms < len(sent) && len(passed) > ms {
			t.Fatalf("passed on %q, past the match's start at %d in %q", passed, ms, sent)
		}
		if r := c.Refusal(); refused != (r != nil) {
			t.Fatalf("refused %v, refusal %+v", refused, r)
		}
	})
}

// clientStream is the payloads of wire's data frames, unmasked, as far as
// wire goes (a last frame's part too) and up to the client's close,
// which ends its stream: what the gateway may pass on of it at most.
func clientStream(wire []byte) []byte {
	var out []byte
	for len(wire) >= 2 {
		op, masked, n := wire[0]&0x0f, wire[1]&0x80 != 0, uint64(wire[1]&0x7f)
		h := 2
		switch n {
		case 126:
			if len(wire) < 4 {
				return out
			}
			n, h = uint64(wire[2])<<8|uint64(wire[3]), 4
		case 127:
			if len(wire) < 10 {
				return out
			}
			n, h = 0, 10
			for _, c := range wire[2:10] {
				n = n<<8 | uint64(c)
			}
		}
		var key [4]byte
		if masked {
			if len(wire) < h+4 {
				return out
			}
			copy(key[:], wire[h:h+4])
			h += 4
		}
		wire = wire[h:]
		k := int(min(n, uint64(len(wire))))
		if op == 0x8 {
			return out
		}
		if op < 0x8 {
			for i, c := range wire[:k] {
				out = append(out, c^key[i&3])
			}
		}
		wire = wire[k:]
	}
	return out
}

// TestWSScanHoldAtMessageEnd: a message whose last bytes could begin a
// placeholder has its end held until the client's next data, for at
// most the hold; pings meanwhile do not lengthen it, and the message
// then passes whole.
func TestWSScanHoldAtMessageEnd(t *testing.T) {
	c, rec := newTestWSScan(guardedSecrets())
	c.mu.Lock()
	c.hold = 100 * time.Millisecond
	c.mu.Unlock()
	msg := "see " + testPlaceholder[:9]
	if _, err := c.Write(appendWSClientFrame(nil, text(msg), true)); err != nil {
		t.Fatal(err)
	}
	if got := wsStream(rec.frames(t)); string(got) != "see " {
		t.Fatalf("before the hold's end the server got %q, want the bytes before the held tail", got)
	}
	start := time.Now()
	for time.Since(start) < 400*time.Millisecond {
		if _, err := c.Write(appendWSClientFrame(nil, ping("keepalive"), true)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	c.Close()
	var data []wsf
	for _, f := range rec.frames(t) {
		if f.op < 0x8 {
			data = append(data, f)
		}
	}
	if string(wsStream(data)) != msg || !data[len(data)-1].fin {
		t.Fatalf("after the hold, with pings, the server got %q (ended: %v), want %q whole", wsStream(data), data[len(data)-1].fin, msg)
	}
}
