package l7

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/policies"
)

const pasteURL = "https://rules.test/documents"

func digest(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// startBody is a gateway whose host rules.test lets one file's content
// be uploaded (its digest pinned, as a generator pins a workspace file a
// request names), refuses a secret's content outright, and denies every
// other upload.
func startBody(t *testing.T, allowed, secret []byte) (*attackGateway, chan seenBody) {
	t.Helper()
	seen := make(chan seenBody, 16)
	rules := []policies.HTTPHost{{Host: "rules.test", Default: policies.HTTPDeny, Rules: []policies.HTTPRule{
		{Methods: []string{"POST"}, Path: "/documents", Action: policies.HTTPDeny, BodySHA256: []string{digest(secret)}},
		{Methods: []string{"POST"}, Path: "/documents", Action: policies.HTTPAllow, BodySHA256: []string{digest(allowed)}},
	}}}
	g := startAttack(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err != nil {
			t.Errorf("upstream: reading the body: %v", err)
		}
		seen <- seenBody{method: r.Method, path: r.URL.Path, encoding: r.Header.Get("Content-Encoding"), body: b}
	}), attackOpts{tls: true, rules: rules})
	return g, seen
}

// TestBodyRuleAllowsThePinnedContent: the upload of exactly the pinned
// content, as the body or as the one part of a form (curl -F), reaches
// the upstream byte for byte, over HTTP/1.1 and HTTP/2, with a length or
// chunked, and the audit names the rule.
func TestBodyRuleAllowsThePinnedContent(t *testing.T) {
	file := []byte("import torch\nlr = 3e-3\n")
	g, seen := startBody(t, file, []byte("API_KEY=hunter2\n"))
	var form bytes.Buffer
	mw := multipart.NewWriter(&form)
	fw, _ := mw.CreateFormFile("file", "train.py")
	_, _ = fw.Write(file)
	_ = mw.Close()
	n := 0
	for _, h2 := range []bool{false, true} {
		for _, chunked := range []bool{false, true} {
			for _, body := range [][]byte{file, form.Bytes()} {
				req, _ := http.NewRequest("POST", pasteURL, bytes.NewReader(body))
				if len(body) != len(file) {
					req.Header.Set("Content-Type", mw.FormDataContentType())
				}
				if chunked {
					req.Body = io.NopCloser(&slowReader{parts: []string{string(body[:5]), string(body[5:])}})
					req.ContentLength = -1
				}
				waitStatus(t, doAsync(g.client(h2), req), http.StatusOK)
				n++
				if s := <-seen; !bytes.Equal(s.body, body) {
					t.Errorf("h2=%v chunked=%v: upstream got %q", h2, chunked, s.body)
				}
				if ev := g.request(t, n); ev.Action != ActionAllowed || !strings.Contains(ev.Rule, "rule 2") || !strings.Contains(ev.Rule, "body_sha256 ["+digest(file)[:12]+"]") {
					t.Errorf("h2=%v chunked=%v: audited %s by %q", h2, chunked, ev.Action, ev.Rule)
				}
			}
		}
	}
}

// TestBodyRuleAttacks: every other way to get content out past a pinned
// digest is refused before the upstream sees a byte: another file, the
// pinned file with one byte more, the pinned content in a form beside
// another field, after a preamble, with a transfer encoding, in a form
// of another type or gzipped, a body longer than the gateway digests,
// and the refused secret inside an otherwise allowed-looking request
// (whole, or as a form's part).
func TestBodyRuleAttacks(t *testing.T) {
	file := []byte("import torch\nlr = 3e-3\n")
	secret := []byte("API_KEY=hunter2\n")
	g, seen := startBody(t, file, secret)

	form := func(parts ...[]byte) ([]byte, string) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		for i, p := range parts {
			fw, _ := mw.CreateFormFile("file", fmt.Sprintf("f%d.py", i))
			_, _ = fw.Write(p)
		}
		_ = mw.Close()
		return b.Bytes(), mw.FormDataContentType()
	}
	withField, withFieldType := func() ([]byte, string) {
		var b bytes.Buffer
		mw := multipart.NewWriter(&b)
		fw, _ := mw.CreateFormFile("file", "train.py")
		_, _ = fw.Write(file)
		_ = mw.WriteField("title", "API_KEY=hunter2")
		_ = mw.Close()
		return b.Bytes(), mw.FormDataContentType()
	}()
	pinnedForm, pinnedType := form(file)
	secretForm, secretType := form(file, secret)
	withPreamble := append([]byte("API_KEY=hunter2\r\n"), pinnedForm...)
	withEncoding := bytes.Replace(pinnedForm, []byte("Content-Type: application/octet-stream"), []byte("Content-Transfer-Encoding: quoted-printable"), 1)
	big := append(bytes.Repeat([]byte("#"), policies.MaxHashedBody), file...)

	for _, tc := range []struct {
		name     string
		body     []byte
		ctype    string
		encoding string
		rule     string
	}{
		{"another file", []byte("password = 'x'\n"), "", "", "default"},
		{"one byte more", append(append([]byte(nil), file...), '\n'), "", "", "default"},
		{"the pinned file beside another field", withField, withFieldType, "", "default"},
		{"a form with the secret as a part", secretForm, secretType, "", "rule 1"},
		{"a form with a preamble", withPreamble, pinnedType, "", "default"},
		{"a form with a transfer encoding", withEncoding, pinnedType, "", "default"},
		{"a form typed as another", pinnedForm, strings.Replace(pinnedType, "form-data", "mixed", 1), "", "default"},
		{"a gzipped form", gzipped(pinnedForm), pinnedType, "gzip", "rule 1"},
		{"gzip", gzipped(file), "", "gzip", "rule 1"},
		{"longer than the gateway digests", big, "", "", "rule 1"},
		{"the secret", secret, "", "", "rule 1"},
		{"empty", nil, "", "", "default"},
	} {
		for _, h2 := range []bool{false, true} {
			req, _ := http.NewRequest("POST", pasteURL, bytes.NewReader(tc.body))
			if tc.ctype != "" {
				req.Header.Set("Content-Type", tc.ctype)
			}
			if tc.encoding != "" {
				req.Header.Set("Content-Encoding", tc.encoding)
			}
			resp, err := g.client(h2).Do(req)
			if err != nil {
				t.Fatalf("%s h2=%v: %v", tc.name, h2, err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), tc.rule) {
				t.Errorf("%s h2=%v: %d %s, want 403 by %s", tc.name, h2, resp.StatusCode, b, tc.rule)
			}
			noUpstream(t, seen)
		}
	}
}

func gzipped(b []byte) []byte {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	_, _ = zw.Write(b)
	_ = zw.Close()
	return gz.Bytes()
}

// TestBodyRuleHeldBodiesBounded: bodies kept for their digest and then
// held for a person stay in memory until decided, so a session has at
// most maxSessionDigests of them: one more is refused with 429 at once.
func TestBodyRuleHeldBodiesBounded(t *testing.T) {
	file := []byte("pinned\n")
	rules := []policies.HTTPHost{{Host: "rules.test", Default: policies.HTTPDeny, Rules: []policies.HTTPRule{
		{Methods: []string{"POST"}, Path: "/documents", Action: policies.HTTPAllow, BodySHA256: []string{digest(file)}},
		{Methods: []string{"POST"}, Path: "/documents", Action: policies.HTTPAsk},
	}}}
	g := startAttack(t, http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), attackOpts{tls: true, rules: rules})
	big := bytes.Repeat([]byte("x"), 512<<10)
	res := make([]<-chan int, 0, maxSessionDigests)
	for range maxSessionDigests {
		req, _ := http.NewRequest("POST", pasteURL, bytes.NewReader(big))
		res = append(res, doAsync(g.client(true), req))
		<-g.asks
	}
	req, _ := http.NewRequest("POST", pasteURL, bytes.NewReader(big))
	waitStatus(t, doAsync(g.client(true), req), http.StatusTooManyRequests)
	for range res {
		g.answer <- AskDecision{Allow: false, By: "test"}
	}
	for _, r := range res {
		waitStatus(t, r, http.StatusForbidden)
	}
	// Decided: the slots are free again.
	req, _ = http.NewRequest("POST", pasteURL, bytes.NewReader(file))
	waitStatus(t, doAsync(g.client(true), req), http.StatusOK)
}
