package l7

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"strings"
	"testing"
	"testing/iotest"
	"unicode/utf16"
	"unicode/utf8"
)

// chunkReader returns its body in the given sizes, then the rest.
type chunkReader struct {
	b     []byte
	sizes []int
}

func (c *chunkReader) Read(p []byte) (int, error) {
	if len(c.b) == 0 {
		return 0, io.EOF
	}
	n := len(c.b)
	if len(c.sizes) > 0 {
		n, c.sizes = min(c.sizes[0], n), c.sizes[1:]
	}
	n = copy(p, c.b[:n])
	c.b = c.b[n:]
	return n, nil
}

// encodeMixed writes s with each character raw or escaped as a form or a
// JSON body may carry it, at random.
func encodeMixed(rng *rand.Rand, s string) string {
	var b strings.Builder
	for _, r := range s {
		var raw [4]byte
		n := utf8.EncodeRune(raw[:], r)
		switch rng.IntN(6) {
		case 0:
			if r == '\\' {
				b.WriteString(`\\`) // a raw one would escape what follows
				continue
			}
			b.Write(raw[:n])
		case 1:
			for _, c := range raw[:n] {
				fmt.Fprintf(&b, "%%%02X", c)
			}
		case 2:
			for _, c := range raw[:n] {
				fmt.Fprintf(&b, "%%%02x", c)
			}
		case 3, 4:
			format := `\u%04x`
			if rng.IntN(2) == 0 {
				format = `\u%04X`
			}
			if r1, r2 := utf16.EncodeRune(r); r1 != utf8.RuneError {
				fmt.Fprintf(&b, format+format, r1, r2) // a surrogate pair
			} else {
				fmt.Fprintf(&b, format, r)
			}
		default:
			switch r {
			case '/', '"', '\\':
				b.WriteString(`\` + string(r))
			default:
				b.WriteRune(r)
			}
		}
	}
	return b.String()
}

// matchStart is where, in body, the first placeholder or guarded value
// starts, raw or decoded: no byte from there on may pass on.
func matchStart(body []byte, secrets []Secret) int {
	start := len(body)
	dec, off, _ := decodeEscapes(body)
	dec2, off2, _ := decodeEscapes(dec) // a JSON document in a form field
	for _, sec := range secrets {
		for _, p := range [][]byte{[]byte(sec.Placeholder), sec.Value} {
			if len(p) == 0 {
				continue
			}
			if i := bytes.Index(body, p); i >= 0 {
				start = min(start, i)
			}
			if i := bytes.Index(dec, p); i >= 0 {
				start = min(start, off[i])
			}
			if i := bytes.Index(dec2, p); i >= 0 {
				start = min(start, off[off2[i]])
			}
		}
	}
	return start
}

func encodedSplitSecrets() []Secret {
	return append(guardedSecrets(),
		Secret{Name: "odd", Placeholder: "AIRLOCK_PLACEHOLDER_odd_42", Value: []byte(`k/e"y\x-0042`)},
		Secret{Name: "accent", Placeholder: "AIRLOCK_PLACEHOLDER_accent_7", Value: []byte("pässwört-9931")},
		Secret{Name: "astral", Placeholder: "AIRLOCK_PLACEHOLDER_astral_3", Value: []byte("key\U0001F600-77\U0001D11E8")},
	)
}

// TestScanReaderEscapesEveryChunking: an escaped value or placeholder,
// characters escaped at random in both ways, is found however the body's
// reads cut it (a byte at a time, halves, at every point, at random), and
// nothing from the start of the match on passes on before.
func TestScanReaderEscapesEveryChunking(t *testing.T) {
	secrets := encodedSplitSecrets()
	rng := rand.New(rand.NewPCG(1, 2))
	check := func(body []byte, r io.Reader, how string) {
		t.Helper()
		s := newScanReader(io.NopCloser(r), secrets, nil)
		out, err := io.ReadAll(s)
		if !errors.Is(err, errPlaceholderInBody) {
			t.Errorf("%s %q: %v, want the secret found", how, body, err)
			return
		}
		if ms := matchStart(body, secrets); len(out) > ms {
			t.Errorf("%s %q: passed on %q, past the match's start at %d", how, body, out, ms)
		}
	}
	for i := range 400 {
		sec := secrets[i%len(secrets)]
		pat := string(sec.Value)
		if i%3 == 0 {
			pat = sec.Placeholder
		}
		prefix := []string{"x=", `{"k":"`, "a=%41%", `\\`, `\u00`, "", "%", `"\\u0041`}[rng.IntN(8)]
		body := []byte(prefix + encodeMixed(rng, pat) + []string{"", "&z=1", `"}`, "%2", `\`}[rng.IntN(5)])
		check(body, iotest.OneByteReader(bytes.NewReader(body)), "one byte")
		check(body, iotest.HalfReader(bytes.NewReader(body)), "halves")
		for cut := 1; cut < len(body); cut++ {
			check(body, &chunkReader{b: body, sizes: []int{cut}}, fmt.Sprintf("cut at %d", cut))
		}
		var sizes []int
		for range 20 {
			sizes = append(sizes, 1+rng.IntN(7))
		}
		check(body, &chunkReader{b: body, sizes: sizes}, fmt.Sprint("chunks ", sizes))
	}
	// A long body with an escape cut at the end of every chunk.
	var b strings.Builder
	for range 5000 {
		b.WriteString(`abc\u00`)
		b.WriteString("41%4")
		b.WriteString("2")
	}
	b.WriteString(encodeMixed(rng, string(secrets[1].Value)))
	body := []byte(b.String())
	var sizes []int
	for range 5000 {
		sizes = append(sizes, 7, 3, 1)
	}
	check(body, &chunkReader{b: body, sizes: sizes}, "partial escapes")
	check(body, iotest.OneByteReader(bytes.NewReader(body)), "partial escapes, one byte")
}

// TestScanReaderSmallReads: a body that arrives a byte at a time (a frame
// or a chunk per byte) costs the gateway memory in proportion to it, not
// a read buffer per byte.
func TestScanReaderSmallReads(t *testing.T) {
	body := bytes.Repeat([]byte(`{"a":"b\n%41"}`), 4<<10)
	for name, open := range map[string]func(io.Reader) io.Reader{
		"scan":  func(r io.Reader) io.Reader { return newScanReader(io.NopCloser(r), encodedSplitSecrets(), nil) },
		"scrub": func(r io.Reader) io.Reader { return newScrubber(io.NopCloser(r), encodedSplitSecrets(), nil) },
	} {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		out, err := io.ReadAll(open(iotest.OneByteReader(bytes.NewReader(body))))
		runtime.ReadMemStats(&after)
		if err != nil || !bytes.Equal(out, body) {
			t.Fatalf("%s: %v", name, err)
		}
		if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 1024*uint64(len(body)) {
			t.Errorf("%s: %d bytes allocated for a body of %d read a byte at a time", name, alloc, len(body))
		}
	}
}

// TestScanReaderEscapesTwice: a JSON document carried in a form field
// (a chat service's `blocks=` or `payload=` parameter) is decoded twice by
// the service, the form's escapes and then the JSON string's: a value
// written `%5Cu0072...` reaches it whole. The scanner decodes twice too,
// however the reads cut the body, and passes nothing on from the start of
// the match.
func TestScanReaderEscapesTwice(t *testing.T) {
	secrets := encodedSplitSecrets()
	rng := rand.New(rand.NewPCG(3, 4))
	twice := func(s string) string {
		var b strings.Builder
		for _, c := range []byte(s) {
			switch rng.IntN(4) {
			case 0:
				fmt.Fprintf(&b, "%%5Cu%04x", c) // the JSON escape, its backslash form-escaped
			case 1:
				for _, x := range []byte(fmt.Sprintf(`\u%04x`, c)) {
					fmt.Fprintf(&b, "%%%02X", x) // every byte of it form-escaped
				}
			case 2:
				fmt.Fprintf(&b, "%%%02X", c)
			default:
				b.WriteByte(c)
			}
		}
		return b.String()
	}
	for i := range 120 {
		sec := secrets[i%2]
		pat := string(sec.Value)
		if i%3 == 0 {
			pat = sec.Placeholder
		}
		body := []byte("payload=%7B%22text%22%3A%22" + twice(pat) + "%22%7D")
		for _, r := range []struct {
			how string
			r   io.Reader
		}{
			{"whole", bytes.NewReader(body)},
			{"one byte", iotest.OneByteReader(bytes.NewReader(body))},
			{"halves", iotest.HalfReader(bytes.NewReader(body))},
			{"cut", &chunkReader{b: body, sizes: []int{1 + rng.IntN(len(body)-1)}}},
		} {
			s := newScanReader(io.NopCloser(r.r), secrets, nil)
			out, err := io.ReadAll(s)
			if !errors.Is(err, errPlaceholderInBody) {
				t.Errorf("%s %q: %v, want the secret found", r.how, body, err)
				continue
			}
			if ms := matchStart(body, secrets); len(out) > ms {
				t.Errorf("%s %q: passed on %q, past the match's start at %d", r.how, body, out, ms)
			}
		}
	}
}
