package allowlist

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestParseRule(t *testing.T) {
	tests := []struct {
		in      string
		want    Rule
		canon   string // String(); "" means same as in
		wantErr string
	}{
		{in: "example.test", want: Rule{Kind: Exact, Name: "example.test."}},
		{in: "Example.TEST.", want: Rule{Kind: Exact, Name: "example.test."}, canon: "example.test"},
		{in: "*.corp.test", want: Rule{Kind: Wildcard, Name: "corp.test."}},
		{in: "api.example.test:443", want: Rule{Kind: Exact, Name: "api.example.test.", Port: 443}},
		{in: "*.githubusercontent.com:443", want: Rule{Kind: Wildcard, Name: "githubusercontent.com.", Port: 443}},
		{in: "localhost:8080", want: Rule{Kind: Exact, Name: "localhost.", Port: 8080}},
		{in: "10.0.0.0/8", want: Rule{Kind: Prefix, Prefix: netip.MustParsePrefix("10.0.0.0/8")}},
		{in: "10.0.0.1", want: Rule{Kind: Prefix, Prefix: netip.MustParsePrefix("10.0.0.1/32")}},
		{in: "10.0.0.0/8:443", want: Rule{Kind: Prefix, Prefix: netip.MustParsePrefix("10.0.0.0/8"), Port: 443}},
		{in: "10.0.0.1:22", want: Rule{Kind: Prefix, Prefix: netip.MustParsePrefix("10.0.0.1/32"), Port: 22}},
		{in: "2001:db8::/32", want: Rule{Kind: Prefix, Prefix: netip.MustParsePrefix("2001:db8::/32")}},
		{in: "::1", want: Rule{Kind: Prefix, Prefix: netip.MustParsePrefix("::1/128")}},
		{in: "[::1]:443", want: Rule{Kind: Prefix, Prefix: netip.MustParsePrefix("::1/128"), Port: 443}},
		{in: "[2001:db8::/32]:443", want: Rule{Kind: Prefix, Prefix: netip.MustParsePrefix("2001:db8::/32"), Port: 443}},
		{in: "[2001:db8::]", want: Rule{Kind: Prefix, Prefix: netip.MustParsePrefix("2001:db8::/128")}, canon: "2001:db8::"},
		{in: "65535.test:65535", want: Rule{Kind: Exact, Name: "65535.test.", Port: 65535}},

		{in: "", wantErr: "empty name"},
		{in: " example.test", wantErr: "white space"},
		{in: "*", wantErr: "wildcard must be a whole leading label"},
		{in: "*.", wantErr: "root name"},
		{in: "*.*.corp.test", wantErr: "wildcard must be a whole leading label"},
		{in: "a.*.corp.test", wantErr: "wildcard must be a whole leading label"},
		{in: "foo*.corp.test", wantErr: "wildcard must be a whole leading label"},
		{in: ".", wantErr: "root name"},
		{in: "example.test:0", wantErr: "want 1-65535"},
		{in: "example.test:65536", wantErr: "want 1-65535"},
		{in: "example.test:+1", wantErr: "invalid port"},
		{in: "example.test:", wantErr: "invalid port"},
		{in: "example.test:http", wantErr: "invalid port"},
		{in: ":443", wantErr: "empty name"},
		{in: "a..test", wantErr: "empty label"},
		{in: "10.0.0.1/8", wantErr: "host bits set; did you mean 10.0.0.0/8"},
		{in: "10.0.0.0/33", wantErr: "invalid prefix"},
		{in: "1.2.3", wantErr: "invalid address"},
		{in: "1.2.3.4.5", wantErr: "invalid address"},
		{in: "[10.0.0.1]:443", wantErr: "IPv6 addresses only"},
		{in: "[::1", wantErr: "missing ']'"},
		{in: "[::1]443", wantErr: "unexpected"},
		{in: "[::1]:0", wantErr: "want 1-65535"},
		{in: "fe80::1%eth0", wantErr: "zone"},
		{in: "exa mple.test", wantErr: "invalid character"},
		{in: "evil\x00.test", wantErr: "control character"},
	}
	for _, test := range tests {
		t.Run(test.in, func(t *testing.T) {
			got, err := ParseRule(test.in)
			if test.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), test.wantErr) {
					t.Fatalf("ParseRule(%q) = %+v, %v; want error containing %q", test.in, got, err, test.wantErr)
				}
				if !errdefs.IsInvalidArgument(err) {
					t.Errorf("ParseRule(%q) error %v is not ErrInvalidArgument", test.in, err)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRule(%q) error: %v", test.in, err)
			}
			if got != test.want {
				t.Fatalf("ParseRule(%q) got %+v, want %+v", test.in, got, test.want)
			}
			canon := test.canon
			if canon == "" {
				canon = test.in
			}
			if s := got.String(); s != canon {
				t.Errorf("ParseRule(%q).String() = %q, want %q", test.in, s, canon)
			}
			again, err := ParseRule(got.String())
			if err != nil || again != got {
				t.Errorf("ParseRule(String()) round trip: %+v, %v", again, err)
			}
		})
	}
}

func TestMatchName(t *testing.T) {
	type want struct {
		allowed bool
		ports   []uint16
		rule    string
	}
	tests := []struct {
		name        string
		allow, deny []string
		cases       map[FQDN]want
	}{
		{
			name:  "wildcard matches on label boundaries only",
			allow: []string{"*.corp.test"},
			cases: map[FQDN]want{
				"a.corp.test.":          {allowed: true, rule: "*.corp.test"},
				"b.a.corp.test.":        {allowed: true, rule: "*.corp.test"},
				"corp.test.":            {},
				"corp.test.evil.test.":  {},
				"evilcorp.test.":        {},
				"a.evilcorp.test.":      {},
				"test.":                 {},
				"a.corp.test.evil.":     {},
				"x.a.corp.test.attack.": {},
			},
		},
		{
			name:  "exact does not cover subdomains",
			allow: []string{"git.corp.test"},
			cases: map[FQDN]want{
				"git.corp.test.":      {allowed: true, rule: "git.corp.test"},
				"a.git.corp.test.":    {},
				"corp.test.":          {},
				"git.corp.test.evil.": {},
			},
		},
		{
			name:  "exact and wildcard together",
			allow: []string{"corp.test", "*.corp.test"},
			cases: map[FQDN]want{
				"corp.test.":   {allowed: true, rule: "corp.test"},
				"a.corp.test.": {allowed: true, rule: "*.corp.test"},
			},
		},
		{
			name:  "ports unite across matching entries, most specific names the rule",
			allow: []string{"api.example.test:443", "*.example.test:80", "api.example.test:8443", "*.test:80"},
			cases: map[FQDN]want{
				"api.example.test.":   {allowed: true, ports: []uint16{80, 443, 8443}, rule: "api.example.test:443"},
				"www.example.test.":   {allowed: true, ports: []uint16{80}, rule: "*.example.test:80"},
				"other.test.":         {allowed: true, ports: []uint16{80}, rule: "*.test:80"},
				"example.test.":       {allowed: true, ports: []uint16{80}, rule: "*.test:80"},
				"api.example.test2.":  {},
				"api.example.test.x.": {},
			},
		},
		{
			name:  "an all-ports entry absorbs port entries",
			allow: []string{"a.test:443", "*.test"},
			cases: map[FQDN]want{
				"a.test.": {allowed: true, rule: "a.test:443"},
				"b.test.": {allowed: true, rule: "*.test"},
			},
		},
		{
			name:  "deny wins over allow",
			allow: []string{"*.corp.test"},
			deny:  []string{"secrets.corp.test", "*.internal.corp.test"},
			cases: map[FQDN]want{
				"a.corp.test.":             {allowed: true, rule: "*.corp.test"},
				"secrets.corp.test.":       {rule: "secrets.corp.test"},
				"x.secrets.corp.test.":     {allowed: true, rule: "*.corp.test"},
				"internal.corp.test.":      {allowed: true, rule: "*.corp.test"},
				"db.internal.corp.test.":   {rule: "*.internal.corp.test"},
				"a.b.internal.corp.test.":  {rule: "*.internal.corp.test"},
				"internalx.corp.test.":     {allowed: true, rule: "*.corp.test"},
				"internal.corp.test.evil.": {},
			},
		},
		{
			name:  "deny wins even when exact allow is more specific",
			allow: []string{"git.corp.test"},
			deny:  []string{"*.corp.test"},
			cases: map[FQDN]want{
				"git.corp.test.": {rule: "*.corp.test"},
			},
		},
		{
			name:  "deny ports subtract from allowed ports",
			allow: []string{"db.test:5432", "db.test:443"},
			deny:  []string{"db.test:5432"},
			cases: map[FQDN]want{
				"db.test.": {allowed: true, ports: []uint16{443}, rule: "db.test:443"},
			},
		},
		{
			name:  "deny ports taking every allowed port deny the name",
			allow: []string{"db.test:5432"},
			deny:  []string{"*.test:5432"},
			cases: map[FQDN]want{
				"db.test.": {rule: "*.test:5432"},
			},
		},
		{
			name:  "deny ports against an all-ports allow fail closed",
			allow: []string{"*.corp.test"},
			deny:  []string{"db.corp.test:5432"},
			cases: map[FQDN]want{
				"db.corp.test.":  {rule: "db.corp.test:5432"},
				"web.corp.test.": {allowed: true, rule: "*.corp.test"},
			},
		},
		{
			name:  "deny only",
			deny:  []string{"evil.test"},
			cases: map[FQDN]want{"evil.test.": {rule: "evil.test"}, "good.test.": {}},
		},
		{
			name:  "empty list denies everything",
			cases: map[FQDN]want{"example.test.": {}, ".": {}},
		},
		{
			name:  "CIDRs match no names",
			allow: []string{"10.0.0.0/8", "1.2.3.4"},
			cases: map[FQDN]want{"1.2.3.4.": {}, "10.in-addr.arpa.": {}},
		},
		{
			name:  "root is never allowed",
			allow: []string{"*.test"},
			cases: map[FQDN]want{".": {}, "": {}},
		},
	}
	for _, test := range tests {
		t.Run(test.name, func(t *testing.T) {
			l, err := Compile(test.allow, test.deny)
			if err != nil {
				t.Fatal(err)
			}
			for name, w := range test.cases {
				got := l.MatchName(name)
				if got.Allowed != w.allowed || !slices.Equal(got.Ports, w.ports) || got.Rule != w.rule {
					t.Errorf("MatchName(%q) = %+v, want %+v", name, got, w)
				}
			}
		})
	}
}

func TestNilList(t *testing.T) {
	var l *List
	if d := l.MatchName("example.test."); d.Allowed {
		t.Errorf("nil list allowed %+v", d)
	}
	if c := l.CIDRs(); c != nil {
		t.Errorf("nil list CIDRs = %v", c)
	}
	if _, denied := l.AddrDenied(netip.MustParseAddr("10.0.0.1")); denied {
		t.Error("nil list denied an address")
	}
}

func TestCompileErrors(t *testing.T) {
	_, err := Compile([]string{"ok.test", "bad..test", "10.0.0.1/8"}, []string{"*"})
	if err == nil {
		t.Fatal("Compile accepted invalid entries")
	}
	if !errdefs.IsInvalidArgument(err) {
		t.Errorf("error class: %v", err)
	}
	for _, want := range []string{`allow[1] "bad..test"`, `allow[2] "10.0.0.1/8"`, `deny[0] "*"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	if strings.Contains(err.Error(), "ok.test") {
		t.Errorf("error %q mentions a valid entry", err)
	}
}

func TestCIDRs(t *testing.T) {
	l := MustCompile(
		[]string{"10.0.0.0/8:443", "example.test", "[2001:db8::/32]:22", "192.0.2.1"},
		[]string{"10.1.0.0/16", "10.2.0.0/16:443", "::ffff:198.51.100.0/120"},
	)
	got := l.CIDRs()
	want := []AddrRule{
		{Prefix: netip.MustParsePrefix("10.0.0.0/8"), Port: 443},
		{Prefix: netip.MustParsePrefix("2001:db8::/32"), Port: 22},
		{Prefix: netip.MustParsePrefix("192.0.2.1/32")},
		{Prefix: netip.MustParsePrefix("10.1.0.0/16"), Deny: true},
		{Prefix: netip.MustParsePrefix("10.2.0.0/16"), Port: 443, Deny: true},
		{Prefix: netip.MustParsePrefix("::ffff:198.51.100.0/120"), Deny: true},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("CIDRs() = %v\nwant %v", got, want)
	}
	for _, test := range []struct {
		addr   string
		denied bool
		rule   string
	}{
		{"10.1.2.3", true, "10.1.0.0/16"},
		{"::ffff:10.1.2.3", true, "10.1.0.0/16"},
		{"10.2.2.3", false, ""}, // port-scoped deny is the packet filter's
		{"10.3.2.3", false, ""},
		{"::ffff:198.51.100.7", true, "::ffff:198.51.100.0/120"},
		{"2001:db8::1", false, ""},
	} {
		rule, denied := l.AddrDenied(netip.MustParseAddr(test.addr))
		if denied != test.denied || rule != test.rule {
			t.Errorf("AddrDenied(%s) = %q, %v; want %q, %v", test.addr, rule, denied, test.rule, test.denied)
		}
	}
	if s := l.String(); !strings.Contains(s, "allow example.test") || !strings.Contains(s, "deny 10.2.0.0/16:443") {
		t.Errorf("String() = %q", s)
	}
}

func TestMatchNameAllocs(t *testing.T) {
	l := MustCompile([]string{"*.corp.test", "api.example.test:443"}, []string{"*.secret.corp.test"})
	for _, name := range []FQDN{"a.b.c.corp.test.", "api.example.test.", "nope.example.test.", "x.secret.corp.test."} {
		allocs := testing.AllocsPerRun(100, func() { l.MatchName(name) })
		if allocs != 0 {
			t.Errorf("MatchName(%q) allocates %v times", name, allocs)
		}
	}
}

// FuzzMatchName checks MatchName against a slow reference built from
// Rule.MatchName, for lists made of fuzzed entries.
func FuzzMatchName(f *testing.F) {
	f.Add("*.corp.test", "a.corp.test", "evilcorp.test", "a.corp.test")
	f.Add("*.corp.test", "corp.test", "corp.test.evil.test", "b.a.corp.test")
	f.Add("x.test:443", "*.test:80", "y.x.test", "x.test")
	f.Add("*.a.test", "b.a.test:22", "*.b.a.test", "c.b.a.test")
	f.Fuzz(func(t *testing.T, e1, e2, e3, query string) {
		var rules []Rule
		var allow, deny []string
		for i, e := range []string{e1, e2, e3} {
			r, err := ParseRule(e)
			if err != nil {
				continue
			}
			if again, err := ParseRule(r.String()); err != nil || again != r {
				t.Fatalf("ParseRule(%q).String() = %q does not round-trip: %+v, %v", e, r.String(), again, err)
			}
			rules = append(rules, r)
			if i == 2 {
				deny = append(deny, e)
			} else {
				allow = append(allow, e)
			}
		}
		l, err := Compile(allow, deny)
		if err != nil {
			t.Fatalf("Compile(%q, %q) after ParseRule accepted them: %v", allow, deny, err)
		}
		name, err := ToFQDN(query)
		if err != nil {
			return
		}
		got := l.MatchName(name)

		// Reference: union of allowed ports, deny rules subtract, fail closed.
		var ref entry
		for i, r := range rules {
			if !r.MatchName(name) {
				continue
			}
			if i == len(rules)-1 && len(deny) == 1 {
				ref.deny.add(r.Port)
			} else {
				ref.allow.add(r.Port)
				ref.allowRules = append(ref.allowRules, textRule{port: r.Port, text: r.String()})
			}
		}
		want := decide(&ref)
		if got.Allowed != want.Allowed || !slices.Equal(got.Ports, want.Ports) {
			t.Fatalf("allow %q deny %q: MatchName(%q) = %+v, reference %+v", allow, deny, name, got, want)
		}
		if got.Allowed {
			matched := false
			for _, r := range rules {
				if r.String() == got.Rule && r.MatchName(name) {
					matched = true
				}
			}
			if !matched {
				t.Fatalf("MatchName(%q).Rule = %q names no matching entry", name, got.Rule)
			}
		}
	})
}

func BenchmarkMatchName(b *testing.B) {
	var allow []string
	for i := range 200 {
		allow = append(allow, fmt.Sprintf("host%d.example%d.test:443", i, i%20), fmt.Sprintf("*.svc%d.corp.test", i))
	}
	l := MustCompile(allow, []string{"*.secret.svc7.corp.test", "10.0.0.0/8"})
	for _, name := range []FQDN{
		"host17.example17.test.",
		"a.b.c.d.svc42.corp.test.",
		"x.secret.svc7.corp.test.",
		"nothing.here.evil.test.",
		"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.evil.test.",
	} {
		b.Run(string(name), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				l.MatchName(name)
			}
		})
	}
}

func BenchmarkToFQDN(b *testing.B) {
	for _, in := range []string{"api.example.test.", "API.Example.Test", strings.Repeat("abcdefgh.", 20)} {
		b.Run(in, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				_, _ = ToFQDN(in)
			}
		})
	}
}
