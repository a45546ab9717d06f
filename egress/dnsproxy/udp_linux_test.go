package dnsproxy

import (
	"net/netip"
	"syscall"
	"testing"
)

func TestParsePktinfo(t *testing.T) {
	v4 := putCmsg(make([]byte, 64), syscall.IPPROTO_IP, syscall.IP_PKTINFO, syscall.SizeofInet4Pktinfo)
	copy(v4[syscall.CmsgLen(0)+8:], []byte{127, 0, 0, 2}) // ipi_addr
	copy(v4[syscall.CmsgLen(0)+4:], []byte{127, 0, 0, 9}) // ipi_spec_dst: not the destination
	v6 := putCmsg(make([]byte, 64), syscall.IPPROTO_IPV6, syscall.IPV6_PKTINFO, syscall.SizeofInet6Pktinfo)
	mapped := netip.MustParseAddr("::ffff:127.0.0.2").As16()
	copy(v6[syscall.CmsgLen(0):], mapped[:])
	for _, tc := range []struct {
		name string
		oob  []byte
		want netip.Addr
	}{
		{"none", nil, netip.Addr{}},
		{"ipv4", v4, netip.MustParseAddr("127.0.0.2")},
		{"ipv6", v6, netip.MustParseAddr("::ffff:127.0.0.2")},
		{"both, ipv6 first", append(append([]byte{}, v6...), v4...), netip.MustParseAddr("::ffff:127.0.0.2")},
		{"both, ipv4 first", append(append([]byte{}, v4...), v6...), netip.MustParseAddr("::ffff:127.0.0.2")},
		{"truncated", v4[:syscall.CmsgLen(0)+4], netip.Addr{}},
	} {
		if got := parsePktinfo(tc.oob).dst; got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

func FuzzParsePktinfo(f *testing.F) {
	f.Add([]byte{})
	f.Add(make([]byte, 64))
	f.Add(putCmsg(make([]byte, 64), 0, 8, 12))
	f.Add(putCmsg(make([]byte, 64), 41, 50, 20))
	f.Fuzz(func(t *testing.T, oob []byte) {
		_ = parsePktinfo(oob) // must not panic
	})
}
