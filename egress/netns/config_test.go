package netns

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestParseUplink(t *testing.T) {
	tests := []struct {
		in      string
		want    Uplink
		wantErr bool
	}{
		{in: "host", want: Uplink{Host: true}},
		{in: "netns:al12-world", want: Uplink{Netns: "al12-world"}},
		{in: "netns:/var/run/netns/w", want: Uplink{Netns: "/var/run/netns/w"}},
		{in: "", wantErr: true},
		{in: "netns:", wantErr: true},
		{in: "netns:../etc", wantErr: true},
		{in: "netns:a/b", wantErr: true},
		{in: "netns:..", wantErr: true},
		{in: "eth0", wantErr: true},
		{in: "Host", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := ParseUplink(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseUplink(%q) = %v, %v; wantErr %v", tt.in, got, err, tt.wantErr)
			}
			if err != nil {
				if !errdefs.IsInvalidArgument(err) {
					t.Errorf("ParseUplink(%q) error %v is not invalid-argument", tt.in, err)
				}
				return
			}
			if got != tt.want {
				t.Errorf("ParseUplink(%q) = %+v, want %+v", tt.in, got, tt.want)
			}
			if again, err := ParseUplink(got.String()); err != nil || again != got {
				t.Errorf("ParseUplink(%q.String()) = %+v, %v; want a round trip", tt.in, again, err)
			}
		})
	}
}

func FuzzParseUplink(f *testing.F) {
	for _, s := range []string{"host", "netns:x", "netns:/run/netns/x", "netns:../x", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		u, err := ParseUplink(s)
		if err != nil {
			return
		}
		if u.Host == (u.Netns != "") {
			t.Fatalf("ParseUplink(%q) = %+v: exactly one of Host and Netns must be set", s, u)
		}
		if u.Netns != "" && !strings.HasPrefix(u.Netns, "/") && strings.Contains(u.Netns, "/") {
			t.Fatalf("ParseUplink(%q) accepted a relative path %q", s, u.Netns)
		}
	})
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Prefix: "al1234", Uplink: Uplink{Netns: "w"}}
	tests := []struct {
		name    string
		mod     func(*Config)
		wantErr string
	}{
		{"defaults", func(*Config) {}, ""},
		{"host uplink", func(c *Config) { c.Uplink = Uplink{Host: true} }, ""},
		{"no uplink", func(c *Config) { c.Uplink = Uplink{} }, "uplink: not configured"},
		{"both uplinks", func(c *Config) { c.Uplink.Host = true }, "both"},
		{"bad prefix", func(c *Config) { c.Prefix = "A" }, "prefix"},
		{"small pool", func(c *Config) { c.Pool = netip.MustParsePrefix("10.0.0.0/31") }, "pool"},
		{"v6 pool as v4", func(c *Config) { c.Pool = netip.MustParsePrefix("fd00::/64") }, "pool"},
		{"v4 pool6", func(c *Config) { c.Pool6 = netip.MustParsePrefix("10.0.0.0/8") }, "pool6"},
		{"overlap", func(c *Config) { c.Uplink.Net = netip.MustParsePrefix("10.213.1.0/30") }, "overlaps"},
		{"overlap6", func(c *Config) { c.Uplink.Net6 = netip.MustParsePrefix("fd0a:213::/126") }, "overlaps"},
		{"small uplink", func(c *Config) { c.Uplink.Net = netip.MustParsePrefix("10.215.0.0/31") }, "uplink net"},
		{"bad never", func(c *Config) { c.Never = []netip.Prefix{{}} }, "never"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := ok
			tt.mod(&c)
			err := c.withDefaults().validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatalf("validate: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !errdefs.IsInvalidArgument(err) {
				t.Fatalf("validate = %v, want an invalid-argument error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestConfigDerived(t *testing.T) {
	c := Config{Prefix: "al1234", Uplink: Uplink{Netns: "w"}, Never: []netip.Prefix{netip.MustParsePrefix("192.168.0.0/16")}}.withDefaults()
	gw4, peer4, gw6, peer6 := c.uplinkAddrs()
	if gw4 != netip.MustParseAddr("10.215.0.1") || peer4 != netip.MustParseAddr("10.215.0.2") ||
		gw6 != netip.MustParseAddr("fd0a:215::1") || peer6 != netip.MustParseAddr("fd0a:215::2") {
		t.Errorf("uplink addresses %v %v %v %v", gw4, peer4, gw6, peer6)
	}
	if got := c.uplinkNetnsPath(); got != "/run/netns/w" {
		t.Errorf("uplinkNetnsPath = %q", got)
	}
	b := c.base()
	for _, p := range []netip.Prefix{c.Pool, c.Pool6, c.Uplink.Net, c.Uplink.Net6, netip.MustParsePrefix("192.168.0.0/16")} {
		found := false
		for _, n := range b.Never {
			found = found || n == p
		}
		if !found {
			t.Errorf("base().Never lacks %v: %v", p, b.Never)
		}
	}
	if err := b.Validate(); err != nil {
		t.Error(err)
	}
}
