package policies

import (
	"net/netip"
	"testing"
)

func TestParseEgressRule(t *testing.T) {
	tests := []struct {
		in      string
		want    EgressRule
		str     string
		wantErr bool
	}{
		{in: "api.anthropic.com", want: EgressRule{Name: "api.anthropic.com"}},
		{in: "API.Anthropic.COM.", want: EgressRule{Name: "api.anthropic.com"}, str: "api.anthropic.com"},
		{in: "api.anthropic.com:443", want: EgressRule{Name: "api.anthropic.com", Port: 443}},
		{in: "*.githubusercontent.com", want: EgressRule{Name: "githubusercontent.com", Wildcard: true}},
		{in: "*.githubusercontent.com:443", want: EgressRule{Name: "githubusercontent.com", Wildcard: true, Port: 443}},
		{in: "git.corp.test", want: EgressRule{Name: "git.corp.test"}},
		{in: "localhost", want: EgressRule{Name: "localhost"}},
		{in: "_acme.x-y.test", want: EgressRule{Name: "_acme.x-y.test"}},
		{in: "10.0.0.0/8", want: EgressRule{Prefix: netip.MustParsePrefix("10.0.0.0/8")}},
		{in: "10.0.0.0/8:443", want: EgressRule{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Port: 443}},
		{in: "192.0.2.7", want: EgressRule{Prefix: netip.MustParsePrefix("192.0.2.7/32")}, str: "192.0.2.7/32"},
		{in: "192.0.2.7:53", want: EgressRule{Prefix: netip.MustParsePrefix("192.0.2.7/32"), Port: 53}, str: "192.0.2.7/32:53"},
		{in: "2001:db8::/32", want: EgressRule{Prefix: netip.MustParsePrefix("2001:db8::/32")}},
		{in: "2001:db8::1", want: EgressRule{Prefix: netip.MustParsePrefix("2001:db8::1/128")}, str: "2001:db8::1/128"},
		{in: "[2001:db8::/32]:443", want: EgressRule{Prefix: netip.MustParsePrefix("2001:db8::/32"), Port: 443}},
		{in: "[::1]:53", want: EgressRule{Prefix: netip.MustParsePrefix("::1/128"), Port: 53}, str: "[::1/128]:53"},
		{in: "a.test:65535", want: EgressRule{Name: "a.test", Port: 65535}},

		{in: "", wantErr: true},
		{in: "*", wantErr: true},
		{in: "*.", wantErr: true},
		{in: "*.*.a.test", wantErr: true},
		{in: "a.*.test", wantErr: true},
		{in: "foo*.test", wantErr: true},
		{in: "a..test", wantErr: true},
		{in: ".a.test", wantErr: true},
		{in: "-a.test", wantErr: true},
		{in: "a-.test", wantErr: true},
		{in: "a b.test", wantErr: true},
		{in: "ünicode.test", wantErr: true},
		{in: "https://a.test", wantErr: true},
		{in: "a.test/path", wantErr: true},
		{in: "a.test:", wantErr: true},
		{in: "a.test:0", wantErr: true},
		{in: "a.test:65536", wantErr: true},
		{in: "a.test:+80", wantErr: true},
		{in: "a.test:http", wantErr: true},
		{in: "1.2.3", wantErr: true},
		{in: "1.2.3.256", wantErr: true},
		{in: "a.123", wantErr: true},
		{in: "10.0.0.1/8", wantErr: true},
		{in: "10.0.0.0/33", wantErr: true},
		{in: "[10.0.0.1]:80", wantErr: true},
		{in: "[2001:db8::1", wantErr: true},
		{in: "[2001:db8::1]80", wantErr: true},
		{in: "[2001:db8::1]:", wantErr: true},
		{in: "fe80::1%eth0", wantErr: true},
		{in: "2001:db8::1/64", wantErr: true},
		{in: "a.test:443:443", wantErr: true},
		{in: string(make([]byte, 254)), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseEgressRule(tt.in)
			if tt.wantErr {
				if err == nil {
					t.Fatalf("ParseEgressRule(%q) = %+v, want error", tt.in, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseEgressRule(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("ParseEgressRule(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			str := tt.str
			if str == "" {
				str = tt.in
			}
			if got.String() != str {
				t.Errorf("String() = %q, want %q", got.String(), str)
			}
			again, err := ParseEgressRule(got.String())
			if err != nil || again != got {
				t.Errorf("ParseEgressRule(String()) = %+v, %v; want %+v", again, err, got)
			}
		})
	}
}

func TestParseSize(t *testing.T) {
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "0", want: 0},
		{in: "4096", want: 4096},
		{in: "10B", want: 10},
		{in: "1KiB", want: 1024},
		{in: "512MiB", want: 512 << 20},
		{in: "4GiB", want: 4 << 30},
		{in: "2TiB", want: 2 << 40},
		{in: "1KB", want: 1000},
		{in: "5MB", want: 5e6},
		{in: "2GB", want: 2e9},
		{in: "1.5GiB", want: 3 << 29},
		{in: "0.5KB", want: 500},
		{in: "4 gib", want: 4 << 30},
		{in: " 1mib ", want: 1 << 20},
		{in: "1.0000000001B", want: 1},
		{in: "8388607TiB", want: 8388607 << 40},

		{in: "", wantErr: true},
		{in: "GiB", wantErr: true},
		{in: "-1GiB", wantErr: true},
		{in: "1.GiB", wantErr: true},
		{in: ".5GiB", wantErr: true},
		{in: "1.2.3GiB", wantErr: true},
		{in: "4GiBs", wantErr: true},
		{in: "4Gi", wantErr: true},
		{in: "4 G B", wantErr: true},
		{in: "1e3", wantErr: true},
		{in: "8388608TiB", wantErr: true},
		{in: "99999999999999999999", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ParseSize(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func TestNormalizeCapability(t *testing.T) {
	for in, want := range map[string]string{
		"CAP_CHOWN":            "CAP_CHOWN",
		"chown":                "CAP_CHOWN",
		"net_bind_service":     "CAP_NET_BIND_SERVICE",
		"Cap_Sys_Admin":        "CAP_SYS_ADMIN",
		" checkpoint_restore ": "CAP_CHECKPOINT_RESTORE",
		"":                     "",
	} {
		if got := NormalizeCapability(in); got != want {
			t.Errorf("NormalizeCapability(%q) = %q, want %q", in, got, want)
		}
	}
	caps := KnownCapabilities()
	if len(caps) != 41 || caps[0] != "CAP_CHOWN" || caps[40] != "CAP_CHECKPOINT_RESTORE" {
		t.Errorf("KnownCapabilities() = %q", caps)
	}
}
