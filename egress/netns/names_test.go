package netns

import (
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestValidatePrefix(t *testing.T) {
	tests := []struct {
		in      string
		wantErr bool
	}{
		{"al1a2b", false},
		{"a", false},
		{"abcdefghij", false},
		{"abcdefghijk", true}, // 11 bytes: "<prefix>-up" would not fit
		{"", true},
		{"1abc", true},
		{"Al12", true},
		{"al-12", true},
		{"al/12", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			err := ValidatePrefix(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ValidatePrefix(%q) = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if err != nil && !errdefs.IsInvalidArgument(err) {
				t.Errorf("ValidatePrefix(%q) = %v, want an invalid-argument error", tt.in, err)
			}
			if err == nil {
				for _, name := range []string{uplinkPeerName(tt.in), sessionIfaceName(sessionKey("x"))} {
					if len(name) > 15 {
						t.Errorf("interface name %q is longer than 15 bytes", name)
					}
				}
			}
		})
	}
}

func TestPrefixFor(t *testing.T) {
	a, b := PrefixFor("/var/lib/airlock"), PrefixFor("/var/lib/airlock/")
	if a != b {
		t.Errorf("PrefixFor differs for the same directory: %q %q", a, b)
	}
	if c := PrefixFor("/tmp/other"); c == a {
		t.Errorf("PrefixFor(%q) = PrefixFor(%q) = %q", "/tmp/other", "/var/lib/airlock", c)
	}
	if err := ValidatePrefix(a); err != nil {
		t.Errorf("PrefixFor returned an invalid prefix: %v", err)
	}
}

func TestValidateID(t *testing.T) {
	tests := []struct {
		in      string
		wantErr bool
	}{
		{"abc", false},
		{"fix-flaky_test.1", false},
		{"A1", false},
		{strings.Repeat("a", 76), false},
		{strings.Repeat("a", 77), true},
		{"", true},
		{"-abc", true},
		{"abc-", true},
		{"a..b", true},
		{"a/b", true},
		{"a b", true},
		{"..", true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			if err := ValidateID(tt.in); (err != nil) != tt.wantErr {
				t.Errorf("ValidateID(%q) = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
		})
	}
}

func TestSessionNames(t *testing.T) {
	seen := map[string]string{}
	for _, id := range []string{"a", "b", "session-1", "session-2", strings.Repeat("z", 76)} {
		key := sessionKey(id)
		if o, ok := seen[key]; ok {
			t.Fatalf("ids %q and %q share key %s", o, id, key)
		}
		seen[key] = id
		if sessionKey(id) != key {
			t.Errorf("sessionKey(%q) is not deterministic", id)
		}
		iface := sessionIfaceName(key)
		if len(iface) > 15 {
			t.Errorf("interface %q longer than 15 bytes", iface)
		}
		if k, ok := keyFromIface(iface); !ok || k != key {
			t.Errorf("keyFromIface(%q) = %q, %v; want %q", iface, k, ok, key)
		}
		ns := sessionNetnsName("al1234", key)
		if k, ok := keyFromNetnsName("al1234", ns); !ok || k != key {
			t.Errorf("keyFromNetnsName(%q) = %q, %v; want %q", ns, k, ok, key)
		}
		if _, ok := keyFromNetnsName("al9999", ns); ok {
			t.Errorf("keyFromNetnsName matched %q under another prefix", ns)
		}
	}
	for _, name := range []string{"uplink", "lo", "s-", "s-123", "s-0123456789a", "s-ABCDEF0123", "x-0123456789"} {
		if k, ok := keyFromIface(name); ok {
			t.Errorf("keyFromIface(%q) = %q; want no match", name, k)
		}
	}
	for _, name := range []string{"al1234-gw", "al1234-world", "al1234-s-", "al1234-s-zzzzzzzzzz", "al12345-s-0123456789"} {
		if k, ok := keyFromNetnsName("al1234", name); ok {
			t.Errorf("keyFromNetnsName(%q) = %q; want no match", name, k)
		}
	}
}
