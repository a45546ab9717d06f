package credentials

import (
	"encoding/hex"
	"strings"
	"testing"
)

// FuzzParseExecOutput checks that parsing an issuer's output never panics
// and that its errors never quote the credential.
func FuzzParseExecOutput(f *testing.F) {
	f.Add([]byte("0123456789abcdef"), `,"expires_at":"2030-01-01T00:00:00Z"}`)
	f.Add([]byte("0123456789abcdef"), `}`)
	f.Add([]byte("0123456789abcdef"), `,"env":{"A":1}}`)
	f.Add([]byte("0123456789abcdef"), `, `)
	f.Add([]byte("0123456789abcdef"), `} {"token": 5}`)
	f.Fuzz(func(t *testing.T, secretBytes []byte, rest string) {
		if len(secretBytes) < 8 {
			return
		}
		secret := hex.EncodeToString(secretBytes)
		in := `{"token":"` + secret + `"` + rest
		out, err := parseExecOutput([]byte(in))
		if err == nil {
			if out.Token == "" || out.ExpiresAt == "" {
				t.Fatalf("parseExecOutput(%q) accepted output without token or expiry", in)
			}
			return
		}
		if strings.Contains(err.Error(), secret) {
			t.Fatalf("error %q quotes the credential", err)
		}
	})
}
