package httprule

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"mime/multipart"
	"slices"
	"strings"
	"testing"
)

func sha(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:])
}

// TestFormDigestsCurl: the body curl -F file=@x sends (built here by Go's
// multipart writer, which frames it the same way) gives its parts'
// digests, in order.
func TestFormDigestsCurl(t *testing.T) {
	var b bytes.Buffer
	mw := multipart.NewWriter(&b)
	fw, _ := mw.CreateFormFile("file", "train_amp.py")
	fw.Write([]byte("scaler = GradScaler()\n\r\n--not the boundary\n"))
	fw, _ = mw.CreateFormFile("second", "notes.txt")
	fw.Write(nil)
	mw.Close()
	got, ok := FormDigests(mw.FormDataContentType(), b.Bytes())
	want := []string{sha("scaler = GradScaler()\n\r\n--not the boundary\n"), sha("")}
	if !ok || !slices.Equal(got, want) {
		t.Fatalf("FormDigests = %v, %v; want %v", got, ok, want)
	}
	// curl's own framing: no CRLF after the closing delimiter.
	body := "--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.py\"\r\nContent-Type: text/x-python\r\n\r\nprint(1)\n\r\n--xyz--"
	for _, ct := range []string{`multipart/form-data; boundary="xyz"`, "multipart/form-data; boundary=xyz", "Multipart/Form-Data;boundary=xyz"} {
		if got, ok := FormDigests(ct, []byte(body)); !ok || !slices.Equal(got, []string{sha("print(1)\n")}) {
			t.Errorf("curl's framing, %s: %v %v", ct, got, ok)
		}
	}
}

// TestFormDigestsStrict: a form that carries bytes besides its parts'
// contents, names and content types, or that servers may split
// differently, has no part digests: each of these bodies would let data
// ride beside a pinned file.
func TestFormDigestsStrict(t *testing.T) {
	const ct = "multipart/form-data; boundary=B"
	part := "Content-Disposition: form-data; name=\"file\"; filename=\"a.py\"\r\n\r\nprint(1)\n"
	good := "--B\r\n" + part + "\r\n--B--\r\n"
	if _, ok := FormDigests(ct, []byte(good)); !ok {
		t.Fatal("the well-formed form was not read")
	}
	for _, tt := range []struct{ name, ct, body string }{
		{"a preamble", ct, "SECRET\r\n" + good},
		{"an epilogue", ct, good + "SECRET"},
		{"no closing delimiter", ct, "--B\r\n" + part},
		{"bare LF lines", ct, strings.ReplaceAll(good, "\r\n", "\n")},
		{"another header", ct, "--B\r\nX-Data: SECRET\r\n" + part + "\r\n--B--"},
		{"a transfer encoding", ct, "--B\r\nContent-Transfer-Encoding: base64\r\n" + part + "\r\n--B--"},
		{"two dispositions", ct, "--B\r\nContent-Disposition: form-data; name=\"x\"\r\n" + part + "\r\n--B--"},
		{"a folded header", ct, "--B\r\nContent-Type: text/plain\r\n SECRET\r\n" + part + "\r\n--B--"},
		{"another disposition parameter", ct, "--B\r\nContent-Disposition: form-data; name=\"f\"; x=\"SECRET\"\r\n\r\nx\r\n--B--"},
		{"no name", ct, "--B\r\nContent-Disposition: form-data; filename=\"a\"\r\n\r\nx\r\n--B--"},
		{"attachment", ct, "--B\r\nContent-Disposition: attachment; name=\"a\"\r\n\r\nx\r\n--B--"},
		{"a long filename", ct, "--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"" + strings.Repeat("S", 256) + "\"\r\n\r\nx\r\n--B--"},
		{"a longer delimiter inside", ct, "--B\r\n" + part + "\r\n--BSECRET\r\n--B--"},
		{"text after the closing delimiter", ct, "--B\r\n" + part + "\r\n--B--SECRET"},
		{"two boundaries", "multipart/form-data; boundary=B; boundary=C", good},
		{"another parameter", "multipart/form-data; boundary=B; charset=SECRET", good},
		{"a boundary too long", "multipart/form-data; boundary=" + strings.Repeat("b", 71), good},
		{"not a form", "multipart/mixed; boundary=B", good},
		{"no boundary", "multipart/form-data", good},
		{"too many parts", ct, "--B\r\n" + strings.Repeat(part+"\r\n--B\r\n", maxFormParts) + part + "\r\n--B--"},
		{"a control character", ct, "--B\r\nContent-Disposition: form-data; name=\"f\x00\"\r\n\r\nx\r\n--B--"},
		// Parsers read these differently from Go's mime package.
		{"an RFC 2231 boundary beside a plain one", "multipart/form-data; boundary*=utf-8''B; boundary=zz", good},
		{"a backslash in a quoted boundary", `multipart/form-data; boundary="B\:"`, good},
		{"mismatched quotes", `multipart/form-data; boundary="B`, good},
		{"an orphan continuation", ct, "--B\r\nContent-Disposition: form-data; name=\"f\"; filename*1=\"" + strings.Repeat("S", 900) + "\"\r\n\r\nx\r\n--B--"},
		{"an encoded filename", ct, "--B\r\nContent-Disposition: form-data; name=\"f\"; filename*=iso-8859-1''" + strings.Repeat("S", 900) + "\r\n\r\nx\r\n--B--"},
		{"a non-ASCII filename", ct, "--B\r\nContent-Disposition: form-data; name=\"f\"; filename=\"caf\xc3\xa9\"\r\n\r\nx\r\n--B--"},
		{"a header name folded by Unicode", ct, "--B\r\nContent-D\xc4\xb0sposition: form-data; name=\"f\"\r\n\r\nx\r\n--B--"},
	} {
		if d, ok := FormDigests(tt.ct, []byte(tt.body)); ok {
			t.Errorf("%s: read as a form with parts %v", tt.name, d)
		}
	}
}
