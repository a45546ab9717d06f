package agent

import (
	"strings"
	"testing"
)

// TestShown checks what status shows of a held request's fields, which
// are the sandbox's text: format and other unprintable characters
// escaped, the length bounded.
func TestShown(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/x/deploy", "/x/deploy"},
		{"/x/naïve/日本", "/x/naïve/日本"},
		{"/x/review-config\u202edorp-yolped", `/x/review-config\u202Edorp-yolped`},
		{"/x/a\u200bb\u2066c\u00add", `/x/a\u200Bb\u2066c\u00ADd`},
		{"/x/\x1b[2J\x7f", `/x/\u001B[2J\u007F`},
	} {
		if got := shown(tc.in, 512); got != tc.want {
			t.Errorf("shown(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := shown(strings.Repeat("\u202e", 1000), 64)
	if len(long) > 64 || !strings.HasPrefix(long, `\u202E\u202E`) || !strings.HasSuffix(long, "…") {
		t.Errorf("shown of 1,000 overrides, cut to 64 bytes: %q (%d bytes)", long, len(long))
	}
}
