package httprule

import (
	"bytes"
	"compress/gzip"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
)

// pkt frames s as a pkt-line.
func pkt(s string) string { return fmt.Sprintf("%04x%s", len(s)+4, s) }

var (
	id1  = strings.Repeat("a", 40)
	id2  = strings.Repeat("b", 40)
	id64 = strings.Repeat("c", 64)
	z40  = zeros(40)
	z64  = zeros(64)
	caps = "\x00 report-status side-band-64k quiet object-format=sha1 agent=git/2.39.5"
)

func TestReadPush(t *testing.T) {
	pack := "PACK\x00\x00\x00\x02\x00\x00\x00\x00rest of the pack"
	tests := []struct {
		name string
		body string
		want []RefUpdate
	}{
		{"one", pkt(id1+" "+id2+" refs/heads/main"+caps) + "0000",
			[]RefUpdate{{id1, id2, "refs/heads/main"}}},
		{"no capabilities", pkt(id1+" "+id2+" refs/heads/main") + "0000",
			[]RefUpdate{{id1, id2, "refs/heads/main"}}},
		{"several", pkt(z40+" "+id2+" refs/heads/a"+caps) + pkt(id1+" "+z40+" refs/heads/b") + pkt(id1+" "+id2+" refs/tags/v1") + "0000",
			[]RefUpdate{{z40, id2, "refs/heads/a"}, {id1, z40, "refs/heads/b"}, {id1, id2, "refs/tags/v1"}}},
		{"trailing LF", pkt(id1+" "+id2+" refs/heads/a"+caps+"\n") + pkt(id1+" "+id2+" refs/heads/b\n") + "0000",
			[]RefUpdate{{id1, id2, "refs/heads/a"}, {id1, id2, "refs/heads/b"}}},
		{"capabilities on a later line (as receive-pack reads them)", pkt(id1+" "+id2+" refs/heads/a") + pkt(id1+" "+id2+" refs/heads/b\x00quiet") + "0000",
			[]RefUpdate{{id1, id2, "refs/heads/a"}, {id1, id2, "refs/heads/b"}}},
		{"shallow", pkt("shallow "+id1) + pkt("shallow "+id2+"\n") + pkt(id1+" "+id2+" refs/heads/a"+caps) + "0000",
			[]RefUpdate{{id1, id2, "refs/heads/a"}}},
		{"sha256", pkt(z64+" "+id64+" refs/heads/a\x00report-status object-format=sha256") + pkt(id64+" "+z64+" refs/heads/b") + "0000",
			[]RefUpdate{{z64, id64, "refs/heads/a"}, {id64, z64, "refs/heads/b"}}},
		{"probe", "0000", nil},
		{"upper-case hex length", "006B" + id1 + " " + id2 + " refs/heads/abcdefghij" + "0000",
			[]RefUpdate{{id1, id2, "refs/heads/abcdefghij"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			body := tt.body + pack
			got, consumed, err := ReadPush(strings.NewReader(body), "", 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("updates %v, want %v", got, tt.want)
			}
			if string(consumed) != tt.body {
				t.Fatalf("consumed %q, want exactly the commands %q", consumed, tt.body)
			}
			// The same gzipped reads the same; consumed is a prefix of
			// the compressed body.
			for _, enc := range []string{"gzip", "x-gzip", "GZIP"} {
				z := gzipped(t, body, gzip.DefaultCompression)
				got, consumed, err = ReadPush(bytes.NewReader(z), enc, 1<<20)
				if err != nil || !slices.Equal(got, tt.want) || !bytes.HasPrefix(z, consumed) {
					t.Fatalf("%s: %v, %v; consumed a prefix: %v", enc, got, err, bytes.HasPrefix(z, consumed))
				}
			}
			got, _, err = ReadPush(strings.NewReader(body), "identity", 1<<20)
			if err != nil || !slices.Equal(got, tt.want) {
				t.Fatalf("identity: %v, %v", got, err)
			}
		})
	}
}

func gzipped(t *testing.T, s string, level int) []byte {
	t.Helper()
	var b bytes.Buffer
	zw, err := gzip.NewWriterLevel(&b, level)
	if err != nil {
		t.Fatal(err)
	}
	zw.Write([]byte(s))
	zw.Close()
	return b.Bytes()
}

func TestReadPushErrors(t *testing.T) {
	cmd := pkt(id1 + " " + id2 + " refs/heads/main" + caps)
	tests := []struct {
		name string
		body string
		want error
	}{
		{"empty body", "", ErrPush},
		{"no flush", cmd, ErrPush},
		{"cut in a line", cmd[:20], ErrPush},
		{"cut in a length", "00", ErrPush},
		{"bad length", "00zz", ErrPush},
		{"length 3", "0003", ErrPush},
		{"empty line", "0004" + cmd + "0000", ErrPush},
		{"delim", cmd + "0001" + "0000", ErrPush},
		{"response end", cmd + "0002", ErrPush},
		{"too long a line", "fff1" + strings.Repeat("x", 0xfff1-4), ErrPush},
		{"push cert", pkt("push-cert\x00report-status") + pkt("certificate version 0.1\n") + pkt("push-cert-end\n") + "0000", ErrSignedPush},
		{"push cert after a command", cmd + pkt("push-cert\n") + "0000", ErrSignedPush},
		{"not a command", pkt("hello") + "0000", ErrPush},
		{"upper-case id", pkt(strings.ToUpper(id1)+" "+id2+" refs/heads/main") + "0000", ErrPush},
		{"short id", pkt(id1[:39]+" "+id2[:39]+" refs/heads/main") + "0000", ErrPush},
		{"ids of two lengths", pkt(id1+" "+id64+" refs/heads/main") + "0000", ErrPush},
		{"lines of two lengths", pkt(id1+" "+id2+" refs/heads/a") + pkt(id64+" "+id64+" refs/heads/b") + "0000", ErrPush},
		{"shallow of another length", pkt("shallow "+id64) + cmd + "0000", ErrPush},
		{"bad shallow", pkt("shallow xyz") + cmd + "0000", ErrPush},
		{"64 digits without object-format", pkt(id64+" "+id64+" refs/heads/main") + "0000", ErrPush},
		{"40 digits with sha256", pkt(id1+" "+id2+" refs/heads/main\x00object-format=sha256") + "0000", ErrPush},
		{"unknown object format", pkt(id1+" "+id2+" refs/heads/main\x00object-format=md5") + "0000", ErrPush},
		{"no ref", pkt(id1+" "+id2+" ") + "0000", ErrPush},
		{"two spaces", pkt(id1+"  "+id2+" refs/heads/main") + "0000", ErrPush},
		{"not under refs/", pkt(id1+" "+id2+" HEAD") + "0000", ErrPush},
		{"ref with space", pkt(id1+" "+id2+" refs/heads/a b") + "0000", ErrPush},
		{"ref with ..", pkt(id1+" "+id2+" refs/heads/agent/../main") + "0000", ErrPush},
		{"ref with //", pkt(id1+" "+id2+" refs/heads//main") + "0000", ErrPush},
		{"ref with control", pkt(id1+" "+id2+" refs/heads/a\tb") + "0000", ErrPush},
		{"ref with two LFs", pkt(id1+" "+id2+" refs/heads/a\n\n") + "0000", ErrPush},
		{"ref ending in /", pkt(id1+" "+id2+" refs/heads/a/") + "0000", ErrPush},
		{"ref ending in .lock", pkt(id1+" "+id2+" refs/heads/a.lock") + "0000", ErrPush},
		{"ref with @{", pkt(id1+" "+id2+" refs/heads/a@{1}") + "0000", ErrPush},
		{"ref with glob", pkt(id1+" "+id2+" refs/heads/*") + "0000", ErrPush},
		{"ref component with leading dot", pkt(id1+" "+id2+" refs/heads/.a") + "0000", ErrPush},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, consumed, err := ReadPush(strings.NewReader(tt.body), "", 1<<20)
			if !errors.Is(err, tt.want) {
				t.Fatalf("updates %v, error %v; want %v", got, err, tt.want)
			}
			if got != nil {
				t.Fatalf("updates %v with an error", got)
			}
			if !strings.HasPrefix(tt.body, string(consumed)) {
				t.Fatalf("consumed %q is not a prefix", consumed)
			}
		})
	}
}

func TestReadPushMax(t *testing.T) {
	body := pkt(id1+" "+id2+" refs/heads/a"+caps) + pkt(id1+" "+id2+" refs/heads/b") + "0000"
	if _, consumed, err := ReadPush(strings.NewReader(body+"PACK"), "", len(body)); err != nil || string(consumed) != body {
		t.Fatalf("at exactly max: %q, %v", consumed, err)
	}
	for _, limit := range []int{len(body) - 1, len(body) - 4, 10, 3, 0, -1} {
		_, consumed, err := ReadPush(strings.NewReader(body+"PACK"), "", limit)
		if !errors.Is(err, ErrPushTooLarge) || len(consumed) > max(limit, 0) || !strings.HasPrefix(body, string(consumed)) {
			t.Fatalf("max %d: consumed %d bytes, %v", limit, len(consumed), err)
		}
	}
	// A gzip bomb: a few compressed bytes for more than max bytes of
	// commands.
	long := strings.Repeat(pkt(id1+" "+id2+" refs/heads/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), 20000)
	z := gzipped(t, long, gzip.BestCompression)
	_, consumed, err := ReadPush(bytes.NewReader(z), "gzip", 64<<10)
	if !errors.Is(err, ErrPushTooLarge) || len(consumed) > 64<<10 {
		t.Fatalf("gzip bomb: consumed %d of %d compressed bytes, %v", len(consumed), len(z), err)
	}
	// A compressed body over max.
	_, consumed, err = ReadPush(bytes.NewReader(gzipped(t, body, gzip.NoCompression)), "gzip", 30)
	if !errors.Is(err, ErrPushTooLarge) || len(consumed) > 30 {
		t.Fatalf("compressed over max: consumed %d, %v", len(consumed), err)
	}
}

// Of a gzip body, ReadPush reads no more than maxGzipOverread past what
// the commands needed, however the pack after them compresses.
func TestReadPushGzipBounded(t *testing.T) {
	cmds := pkt(id1+" "+id2+" refs/heads/a"+caps) + "0000"
	noise := make([]byte, 1<<20)
	rand.Read(noise)
	for _, level := range []int{gzip.NoCompression, gzip.BestSpeed, gzip.DefaultCompression, gzip.HuffmanOnly} {
		z := gzipped(t, cmds+"PACK"+string(noise), level)
		src := &countingReader{r: bytes.NewReader(z)}
		got, consumed, err := ReadPush(src, "gzip", 4<<20)
		if err != nil || len(got) != 1 {
			t.Fatalf("level %d: %v, %v", level, got, err)
		}
		if !bytes.Equal(consumed, z[:len(consumed)]) || len(consumed) != src.n {
			t.Fatalf("level %d: consumed %d bytes, read %d", level, len(consumed), src.n)
		}
		if len(consumed) > maxGzipOverread+len(cmds)+64 {
			t.Fatalf("level %d: read %d of %d compressed bytes", level, len(consumed), len(z))
		}
	}
}

type countingReader struct {
	r io.Reader
	n int
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += n
	return n, err
}

func TestReadPushEncodingErrors(t *testing.T) {
	body := pkt(id1+" "+id2+" refs/heads/a"+caps) + "0000"
	for _, enc := range []string{"deflate", "br", "zstd", "gzip, gzip", "compress"} {
		if _, consumed, err := ReadPush(strings.NewReader(body), enc, 1<<20); !errors.Is(err, ErrEncoding) || len(consumed) != 0 {
			t.Errorf("%q: %v, consumed %d", enc, err, len(consumed))
		}
	}
	z := gzipped(t, body, gzip.DefaultCompression)
	for name, b := range map[string][]byte{
		"not gzip":       []byte(body),
		"cut header":     z[:5],
		"cut stream":     z[:len(z)/2],
		"corrupt stream": append(append([]byte{}, z[:10]...), bytes.Repeat([]byte{0xff}, 40)...),
	} {
		if _, consumed, err := ReadPush(bytes.NewReader(b), "gzip", 1<<20); !errors.Is(err, ErrPush) || !bytes.HasPrefix(b, consumed) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// A read error of the body is passed on, not taken for a bad push.
	boom := errors.New("connection reset")
	if _, _, err := ReadPush(io.MultiReader(strings.NewReader(body[:10]), errReader{boom}), "", 1<<20); !errors.Is(err, boom) || errors.Is(err, ErrPush) {
		t.Errorf("read error: %v", err)
	}
}

type errReader struct{ err error }

func (e errReader) Read([]byte) (int, error) { return 0, e.err }
