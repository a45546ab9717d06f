package audit

import (
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
)

type namedString string

func TestEncodingMatchesJSON(t *testing.T) {
	// AppendEvent writes each field of api.AuditEvent by hand: a new
	// field must be added there too.
	if n := reflect.TypeFor[api.AuditEvent]().NumField(); n != 8 {
		t.Fatalf("api.AuditEvent has %d fields; AppendEvent encodes 8", n)
	}
	at := time.Date(2026, 3, 1, 12, 30, 45, 123456789, time.UTC)
	tricky := "a\"b\\c\n\r\t\b\f\x00\x1f<tag>&amp; \u2028\u2029 é 日本 \xff\xfe bad \xed\xa0\x80 end"
	cases := []struct {
		name string
		ev   api.AuditEvent
	}{
		{"zero", api.AuditEvent{}},
		{"minimal", api.AuditEvent{Time: at, Session: "s1", Layer: "session", Action: "started"}},
		{"policy version", api.AuditEvent{Time: at, Session: "s1", Layer: "policy", Action: "revised", PolicyVersion: 12,
			Fields: map[string]any{"added": []string{"a.test"}}}},
		{"dns", api.AuditEvent{Time: at, Session: "s1", Layer: "dns", Action: "allowed", Subject: "api.example.com", Fields: map[string]any{
			"type": "A", "rcode": "NOERROR", "proto": "udp", "rule": "*.example.com:443", "cnames": []string{"edge.cdn.test."},
			"answers": []netip.Addr{netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("2001:db8::1")},
			"ports":   []uint16{443, 8443}, "pin_ttl": uint32(60), "cached": true,
		}}},
		{"dns refused", api.AuditEvent{Time: at, Session: "s1", Layer: "dns", Action: "refused", Subject: "evil.test",
			Reason: "airlock: evil.test is not in the egress allowlist", Fields: map[string]any{"type": "AAAA", "rcode": "REFUSED", "proto": "tcp"}}},
		{"tricky strings", api.AuditEvent{Time: at, Session: tricky, Layer: tricky, Action: tricky, Subject: tricky, Reason: tricky,
			Fields: map[string]any{tricky: tricky, "": "", "<": []string{tricky, ""}}}},
		{"time zones", api.AuditEvent{Time: time.Date(2026, 1, 2, 3, 4, 5, 0, time.FixedZone("x", -(9*3600+30*60))), Session: "s",
			Fields: map[string]any{"expires": time.Date(1, 1, 1, 0, 0, 0, 1, time.FixedZone("y", 5*3600)), "now": time.Now()}}},
		{"numbers", api.AuditEvent{Time: at, Fields: map[string]any{
			"int": -3, "int32": int32(math.MinInt32), "int64": int64(math.MaxInt64), "uint": uint(7), "uint16": uint16(65535),
			"uint32": uint32(math.MaxUint32), "uint64": uint64(math.MaxUint64), "int8": int8(-8), "uint8": uint8(8),
			"float": 1.5, "float_big": 1e21, "float_small": 1e-7, "float32": float32(0.1),
		}}},
		{"nil and empty", api.AuditEvent{Time: at, Fields: map[string]any{
			"nil": nil, "nil_strings": []string(nil), "no_strings": []string{}, "nil_addrs": []netip.Addr(nil), "no_addrs": []netip.Addr{},
			"nil_ports": []uint16(nil), "no_ports": []uint16{}, "zero_addr": netip.Addr{}, "zero_addrs": []netip.Addr{{}},
		}}},
		{"empty fields map", api.AuditEvent{Time: at, Session: "s", Fields: map[string]any{}}},
		{"addresses", api.AuditEvent{Time: at, Fields: map[string]any{
			"v4": netip.MustParseAddr("10.0.0.1"), "v6": netip.MustParseAddr("fe80::1%eth0"), "mapped": netip.MustParseAddr("::ffff:10.0.0.1"),
			"zoned": []netip.Addr{netip.MustParseAddr("fe80::2%<b>")},
		}}},
		{"other types", api.AuditEvent{Time: at, Fields: map[string]any{
			"named": namedString("x<y"), "bytes": []byte("hi"), "ints": []int{1, 2}, "map": map[string]any{"b": 1, "a": "<"},
			"struct": struct {
				A string `json:"a"`
				B int    `json:"b,omitempty"`
			}{A: "&"}, "duration": 3 * time.Second, "ptr": new(int), "bool": false,
		}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			want, err := json.Marshal(tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			got, err := AppendEvent([]byte("prefix"), &tc.ev)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, append([]byte("prefix"), want...)) {
				t.Errorf("AppendEvent:\n got %s\nwant prefix%s", got, want)
			}
		})
	}
}

func TestEncodingErrors(t *testing.T) {
	for name, ev := range map[string]api.AuditEvent{
		"year 10000":        {Time: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
		"field year -1":     {Time: time.Now(), Fields: map[string]any{"t": time.Date(-1, 1, 1, 0, 0, 0, 0, time.UTC)}},
		"unencodable field": {Time: time.Now(), Fields: map[string]any{"c": make(chan int)}},
		"NaN":               {Time: time.Now(), Fields: map[string]any{"f": math.NaN()}},
	} {
		if _, err := json.Marshal(ev); err == nil {
			t.Fatalf("%s: json.Marshal succeeded", name)
		}
		if b, err := AppendEvent(nil, &ev); err == nil {
			t.Errorf("%s: AppendEvent = %s, want an error as json.Marshal gives", name, b)
		}
	}
}

// TestEncodingRandom compares with json.Marshal on random events:
// strings of arbitrary bytes, any time zone, the field types events carry.
func TestEncodingRandom(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	alphabet := []string{"a", "Z", "0", " ", "\"", "\\", "<", ">", "&", "\n", "\x00", "\x1f", "\x7f", "é", "日", "\u2028", "\u2029",
		"\U0001F600", "\xff", "\xc3", "\xed\xa0\x80", "\xf4\x90\x80\x80", "%", "."}
	str := func() string {
		var sb strings.Builder
		for range rng.IntN(12) {
			if rng.IntN(4) == 0 {
				sb.WriteByte(byte(rng.IntN(256)))
				continue
			}
			sb.WriteString(alphabet[rng.IntN(len(alphabet))])
		}
		return sb.String()
	}
	for i := range 5000 {
		ev := api.AuditEvent{
			Time:    time.Unix(rng.Int64N(1<<36)-1<<35, rng.Int64N(1e9)).In(time.FixedZone("z", rng.IntN(2*86400)-86400)),
			Session: str(), Layer: str(), Action: str(), Subject: str(), Reason: str(),
			PolicyVersion: rng.IntN(3),
		}
		if rng.IntN(4) > 0 {
			ev.Fields = map[string]any{}
			for range rng.IntN(6) {
				var v any
				switch rng.IntN(8) {
				case 0:
					v = str()
				case 1:
					v = []string{str(), str()}
				case 2:
					v = rng.Int64() - rng.Int64()
				case 3:
					v = uint32(rng.Uint32())
				case 4:
					v = []netip.Addr{netip.AddrFrom4([4]byte{byte(i), 2, 3, 4}), netip.AddrFrom16([16]byte{15: byte(i)})}
				case 5:
					v = []uint16{uint16(rng.Uint32()), 53}
				case 6:
					v = rng.IntN(2) == 0
				case 7:
					v = rng.Float64() * 1e6
				}
				ev.Fields[str()] = v
			}
		}
		want, werr := json.Marshal(ev)
		got, gerr := AppendEvent(nil, &ev)
		if (werr != nil) != (gerr != nil) {
			t.Fatalf("event %#v: json.Marshal error %v, AppendEvent error %v", ev, werr, gerr)
		}
		if werr == nil && !bytes.Equal(got, want) {
			t.Fatalf("AppendEvent:\n got %s\nwant %s", got, want)
		}
	}
}

// appenderOnly encodes itself; json.Marshal of it fails, so a test passes
// only if AppendEvent used AppendJSON.
type appenderOnly struct{}

func (appenderOnly) AppendJSON(b []byte) []byte { return append(b, `{"self":true}`...) }

func (appenderOnly) MarshalJSON() ([]byte, error) { return nil, errors.New("reflection path taken") }

func TestEncodingAppender(t *testing.T) {
	ev := api.AuditEvent{Session: "s", Fields: map[string]any{"v": appenderOnly{}}}
	b, err := AppendEvent(nil, &ev)
	if err != nil || !strings.Contains(string(b), `"fields":{"v":{"self":true}}`) {
		t.Errorf("AppendEvent: %s, %v", b, err)
	}
}
