package nft

import (
	"bytes"
	"net/netip"
	"slices"
	"testing"
	"time"
)

func TestPinKey(t *testing.T) {
	tests := []struct {
		addr string
		port uint16
		want []byte
	}{
		{"10.214.0.10", 80, []byte{10, 214, 0, 10, 0, 80, 0, 0}},
		{"10.214.0.10", 443, []byte{10, 214, 0, 10, 1, 187, 0, 0}},
		{"fd0a::1", 8443, append(netip.MustParseAddr("fd0a::1").AsSlice(), 0x20, 0xfb, 0, 0)},
	}
	for _, tt := range tests {
		got := PinKey(netip.MustParseAddr(tt.addr), tt.port)
		if !bytes.Equal(got, tt.want) {
			t.Errorf("PinKey(%s, %d) = %x, want %x", tt.addr, tt.port, got, tt.want)
		}
		p, err := decodePin(got)
		if err != nil || p.Addr != netip.MustParseAddr(tt.addr) || p.Port != tt.port {
			t.Errorf("decodePin(PinKey(%s, %d)) = %+v, %v", tt.addr, tt.port, p, err)
		}
	}
}

func TestPinElements(t *testing.T) {
	x := netip.MustParseAddr("10.0.0.1")
	x6 := netip.MustParseAddr("fd00::1")
	mapped := netip.MustParseAddr("::ffff:10.0.0.2")
	pin4, any4, pin6, any6 := PinElements([]Pinning{
		{Addr: x, Port: 80, Expires: time.Second},
		{Addr: x, Expires: time.Minute},
		{Addr: x6, Port: 443, Expires: time.Second},
		{Addr: x6, Expires: time.Second},
		{Addr: mapped, Port: 80, Expires: time.Second},
		{}, // invalid: skipped
	})
	if len(pin4) != 2 || len(any4) != 1 || len(pin6) != 1 || len(any6) != 1 {
		t.Fatalf("PinElements split %d/%d/%d/%d, want 2/1/1/1", len(pin4), len(any4), len(pin6), len(any6))
	}
	if !bytes.Equal(pin4[1].Key, PinKey(netip.MustParseAddr("10.0.0.2"), 80)) {
		t.Errorf("IPv4-mapped address not unmapped: %x", pin4[1].Key)
	}
	if any4[0].Timeout != time.Minute || !bytes.Equal(any4[0].Key, x.AsSlice()) {
		t.Errorf("any4 = %+v", any4[0])
	}
}

func TestDropKey(t *testing.T) {
	tests := []struct {
		addr  string
		proto byte
		port  uint16
		want  Drop
	}{
		{"10.214.0.10", protoTCP, 81, Drop{Proto: "tcp", Port: 81}},
		{"10.214.0.1", protoUDP, 53, Drop{Proto: "udp", Port: 53}},
		{"10.214.0.10", protoICMP, 0, Drop{Proto: "icmp"}},
		{"fd0a:214::10", protoTCP, 80, Drop{Proto: "tcp", Port: 80}},
		{"fd0a:214::10", protoICMPv6, 0, Drop{Proto: "icmpv6"}},
		{"10.0.0.1", 47, 0, Drop{Proto: "47"}},
	}
	for _, tt := range tests {
		a := netip.MustParseAddr(tt.addr)
		key := DropKey(a, tt.proto, tt.port)
		if want := a.BitLen()/8 + 8; len(key) != want {
			t.Errorf("DropKey(%s) has %d bytes, want %d", tt.addr, len(key), want)
		}
		got, err := DecodeDropKey(key)
		tt.want.Dst = a
		if err != nil || got != tt.want {
			t.Errorf("DecodeDropKey(DropKey(%s, %d, %d)) = %+v, %v; want %+v", tt.addr, tt.proto, tt.port, got, err, tt.want)
		}
	}
	for _, bad := range [][]byte{nil, make([]byte, 4), make([]byte, 13), make([]byte, 23), make([]byte, 25)} {
		if d, err := DecodeDropKey(bad); err == nil {
			t.Errorf("DecodeDropKey(%d bytes) = %+v, want an error", len(bad), d)
		}
	}
}

// FuzzDecodeDropKey: whatever the kernel hands back, decoding either fails
// or yields an address of the right family that encodes back to the key's
// meaningful bytes.
func FuzzDecodeDropKey(f *testing.F) {
	f.Add(DropKey(netip.MustParseAddr("10.0.0.1"), protoTCP, 443))
	f.Add(DropKey(netip.MustParseAddr("fd00::1"), protoUDP, 53))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, key []byte) {
		d, err := DecodeDropKey(key)
		if err != nil {
			if d != (Drop{}) {
				t.Fatalf("error %v with a non-zero Drop %+v", err, d)
			}
			return
		}
		if !d.Dst.IsValid() || d.Dst.BitLen()/8+8 != len(key) {
			t.Fatalf("DecodeDropKey(%x) = %+v: address does not match the key length", key, d)
		}
		n := d.Dst.BitLen() / 8
		re := DropKey(d.Dst, key[n], d.Port)
		// Padding bytes are not meaningful; compare the fields.
		if !bytes.Equal(re[:n+1], key[:n+1]) || !bytes.Equal(re[n+4:n+6], key[n+4:n+6]) {
			t.Fatalf("DropKey(DecodeDropKey(%x)) = %x", key, re)
		}
	})
}

func TestMergeRanges(t *testing.T) {
	p := netip.MustParsePrefix
	a := netip.MustParseAddr
	tests := []struct {
		name string
		in   []netip.Prefix
		want []Range
	}{
		{"empty", nil, nil},
		{"one", []netip.Prefix{p("10.0.0.0/8")}, []Range{{a("10.0.0.0"), a("10.255.255.255")}}},
		{"contained", []netip.Prefix{p("10.0.0.0/8"), p("10.1.0.0/16")}, []Range{{a("10.0.0.0"), a("10.255.255.255")}}},
		{"adjacent", []netip.Prefix{p("224.0.0.0/4"), p("240.0.0.0/4")}, []Range{{a("224.0.0.0"), a("255.255.255.255")}}},
		{"unsorted, disjoint", []netip.Prefix{p("169.254.0.0/16"), p("127.0.0.0/8")},
			[]Range{{a("127.0.0.0"), a("127.255.255.255")}, {a("169.254.0.0"), a("169.254.255.255")}}},
		{"unmasked", []netip.Prefix{p("10.213.7.9/16")}, []Range{{a("10.213.0.0"), a("10.213.255.255")}}},
		{"v6 hosts", []netip.Prefix{p("::1/128"), p("::/128")}, []Range{{a("::"), a("::1")}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := MergeRanges(tt.in); !slices.Equal(got, tt.want) {
				t.Errorf("MergeRanges(%v) = %v, want %v", tt.in, got, tt.want)
			}
		})
	}
}

func TestIntervalElements(t *testing.T) {
	els := IntervalElements([]netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("240.0.0.0/4")})
	// 10/8: start and end; 240/4 runs to the last address: start only.
	if len(els) != 3 {
		t.Fatalf("IntervalElements = %+v, want 3 elements", els)
	}
	if !bytes.Equal(els[0].Key, []byte{10, 0, 0, 0}) || els[0].IntervalEnd ||
		!bytes.Equal(els[1].Key, []byte{11, 0, 0, 0}) || !els[1].IntervalEnd ||
		!bytes.Equal(els[2].Key, []byte{240, 0, 0, 0}) || els[2].IntervalEnd {
		t.Errorf("IntervalElements = %+v", els)
	}
}

func TestDropStatsSince(t *testing.T) {
	x := netip.MustParseAddr("10.0.0.1")
	y := netip.MustParseAddr("10.0.0.2")
	prev := DropStats{Dests: []Drop{{Dst: x, Port: 80, Proto: "tcp", Packets: 2, Bytes: 120}}}
	cur := DropStats{Dests: []Drop{
		{Dst: x, Port: 80, Proto: "tcp", Packets: 3, Bytes: 180},
		{Dst: x, Port: 80, Proto: "udp", Packets: 1, Bytes: 40},
		{Dst: y, Port: 443, Proto: "tcp", Packets: 0},
	}}
	got := cur.Since(prev)
	want := []Drop{
		{Dst: x, Port: 80, Proto: "tcp", Packets: 1, Bytes: 60},
		{Dst: x, Port: 80, Proto: "udp", Packets: 1, Bytes: 40},
	}
	if !slices.Equal(got, want) {
		t.Errorf("Since = %v, want %v", got, want)
	}
	if got := cur.Since(cur); len(got) != 0 {
		t.Errorf("Since(itself) = %v, want nothing", got)
	}
	if d, ok := cur.Find(y, 443, "tcp"); !ok || d.Dst != y {
		t.Errorf("Find = %v, %v", d, ok)
	}
}

func TestValidate(t *testing.T) {
	good := Session{Name: "s-0123456789", Addr4: netip.MustParseAddr("10.213.0.3")}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]Session{
		"no name":      {Addr4: good.Addr4},
		"long name":    {Name: "s-0123456789abcdef", Addr4: good.Addr4},
		"v6 as v4":     {Name: "s-1", Addr4: netip.MustParseAddr("fd00::1")},
		"v4 as v6":     {Name: "s-1", Addr4: good.Addr4, Addr6: netip.MustParseAddr("10.0.0.1")},
		"invalid rule": {Name: "s-1", Addr4: good.Addr4, Allow: []Rule{{}}},
		"mapped rule":  {Name: "s-1", Addr4: good.Addr4, Deny: []Rule{{Prefix: netip.MustParsePrefix("::ffff:10.0.0.0/104")}}},
	} {
		if err := s.Validate(); err == nil {
			t.Errorf("%s: Validate succeeded", name)
		}
	}
	base := Base{Table: "al1", SessionIfacePrefix: "s-", Uplink: "uplink", DNSPort: 53}
	if err := base.Validate(); err != nil {
		t.Fatal(err)
	}
	for name, b := range map[string]Base{
		"no table":  {SessionIfacePrefix: "s-", Uplink: "uplink", DNSPort: 53},
		"no uplink": {Table: "a", SessionIfacePrefix: "s-", DNSPort: 53},
		"port 0":    {Table: "a", SessionIfacePrefix: "s-", Uplink: "uplink"},
		"bad never": {Table: "a", SessionIfacePrefix: "s-", Uplink: "uplink", DNSPort: 53, Never: []netip.Prefix{{}}},
	} {
		if err := b.Validate(); err == nil {
			t.Errorf("%s: Validate succeeded", name)
		}
	}
}

func TestPrefixMask(t *testing.T) {
	for _, tt := range []struct {
		p    string
		want []byte
	}{
		{"10.0.0.0/8", []byte{0xff, 0, 0, 0}},
		{"10.213.0.0/17", []byte{0xff, 0xff, 0x80, 0}},
		{"0.0.0.0/0", []byte{0, 0, 0, 0}},
		{"1.2.3.4/32", []byte{0xff, 0xff, 0xff, 0xff}},
	} {
		if got := prefixMask(netip.MustParsePrefix(tt.p)); !bytes.Equal(got, tt.want) {
			t.Errorf("prefixMask(%s) = %x, want %x", tt.p, got, tt.want)
		}
	}
}
