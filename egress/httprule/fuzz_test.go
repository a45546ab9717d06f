package httprule

import (
	"bytes"
	"compress/gzip"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzNormalizePath: exactly one of a path or an error; a path is
// normal (no empty, "." or ".." segment, nothing NormalizePath refuses,
// no percent-encoded triplet) and, short of characters only encoding
// could give it, its own normal form.
func FuzzNormalizePath(f *testing.F) {
	for _, s := range []string{"/", "/a/b", "/x/../admin", "//admin", "/%61dmin", "/admin%2Fx", "/admin/./x", "/a%2F..%2Fb", "/a//../b", "/100%25", "/a;b", "/%C0%AF", "/caf%C3%A9"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := NormalizePath(raw)
		if (p == "") == (err == nil) {
			t.Fatalf("NormalizePath(%q) = %q, %v", raw, p, err)
		}
		if err != nil {
			return
		}
		segs := strings.Split(p[1:], "/")
		for i, s := range segs {
			if s == "." || s == ".." || s == "" && i < len(segs)-1 {
				t.Fatalf("NormalizePath(%q) = %q: segment %q", raw, p, s)
			}
		}
		if !strings.HasPrefix(p, "/") || !utf8.ValidString(p) || hasEncoded(p) {
			t.Fatalf("NormalizePath(%q) = %q", raw, p)
		}
		for i := 0; i < len(p); i++ {
			if forbidden(p[i]) != "" && p[i] != ' ' {
				t.Fatalf("NormalizePath(%q) = %q holds %q", raw, p, p[i])
			}
		}
		if !strings.ContainsAny(p, "% ?#") {
			if again, err := NormalizePath(p); again != p {
				t.Fatalf("NormalizePath(%q) = %q, but NormalizePath(%q) = %q, %v", raw, p, p, again, err)
			}
		}
	})
}

// FuzzReadPush: consumed is a prefix of the body and never longer than
// max; updates come only without an error and are well formed; of a
// plain body, consumed ends at the flush-pkt and reads the same alone.
func FuzzReadPush(f *testing.F) {
	cmd := pkt(id1+" "+id2+" refs/heads/main"+caps) + pkt(z40+" "+id2+" refs/heads/agent/x") + "0000PACK..."
	for _, s := range []string{cmd, "0000", pkt("shallow "+id1) + cmd, pkt("push-cert\x00x") + "0000", pkt(z64+" "+id64+" refs/heads/a\x00object-format=sha256") + "0000"} {
		f.Add([]byte(s), uint8(0), uint16(1000))
		f.Add([]byte(s), uint8(1), uint16(1000))
	}
	f.Fuzz(func(t *testing.T, data []byte, mode uint8, limit uint16) {
		body, enc := data, ""
		switch mode % 3 {
		case 1: // data, gzipped
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(data)
			zw.Close()
			body, enc = b.Bytes(), "gzip"
		case 2: // data, taken for gzip
			enc = "gzip"
		}
		max := int(limit)
		updates, consumed, err := ReadPush(bytes.NewReader(body), enc, max)
		if !bytes.HasPrefix(body, consumed) || len(consumed) > max {
			t.Fatalf("consumed %d bytes of %d, max %d; a prefix: %v", len(consumed), len(body), max, bytes.HasPrefix(body, consumed))
		}
		if err != nil {
			if updates != nil {
				t.Fatalf("updates %v with error %v", updates, err)
			}
			return
		}
		for _, u := range updates {
			if !isObjectID(u.Old) || len(u.New) != len(u.Old) || !isObjectID(u.New) || len(u.Old) != len(updates[0].Old) || checkRefName(u.Ref) != nil {
				t.Fatalf("malformed update %+v", u)
			}
		}
		if enc == "" {
			if !bytes.HasSuffix(consumed, []byte("0000")) {
				t.Fatalf("consumed %q does not end with a flush-pkt", consumed)
			}
			again, _, err := ReadPush(bytes.NewReader(consumed), "", len(consumed))
			if err != nil || !slices.Equal(again, updates) {
				t.Fatalf("consumed alone: %v, %v; want %v", again, err, updates)
			}
		}
	})
}
