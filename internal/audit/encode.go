package audit

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/api"
)

// AppendEvent appends the JSON encoding of ev, byte for byte what
// json.Marshal returns for it, without reflection for the fixed fields and
// for the value types events carry; other field values go through
// json.Marshal.
func AppendEvent(b []byte, ev *api.AuditEvent) ([]byte, error) {
	b = append(b, `{"time":"`...)
	b, err := ev.Time.AppendText(b)
	if err != nil {
		return nil, fmt.Errorf("event time: %w", err)
	}
	b = append(b, `","session":`...)
	b = appendJSONString(b, ev.Session)
	b = append(b, `,"layer":`...)
	b = appendJSONString(b, ev.Layer)
	b = append(b, `,"action":`...)
	b = appendJSONString(b, ev.Action)
	if ev.Subject != "" {
		b = append(b, `,"subject":`...)
		b = appendJSONString(b, ev.Subject)
	}
	if ev.Reason != "" {
		b = append(b, `,"reason":`...)
		b = appendJSONString(b, ev.Reason)
	}
	if len(ev.Fields) > 0 {
		b = append(b, `,"fields":{`...)
		var arr [16]string
		keys := arr[:0]
		for k := range ev.Fields {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for i, k := range keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, k)
			b = append(b, ':')
			if b, err = appendJSONValue(b, ev.Fields[k]); err != nil {
				return nil, err
			}
		}
		b = append(b, '}')
	}
	if ev.PolicyVersion != 0 {
		b = append(b, `,"policy_version":`...)
		b = strconv.AppendInt(b, int64(ev.PolicyVersion), 10)
	}
	return append(b, '}'), nil
}

// Appender is a field value that appends its own JSON encoding, byte for
// byte what encoding/json gives for it, so that AppendEvent encodes it
// without reflection.
type Appender interface {
	AppendJSON(b []byte) []byte
}

// AppendString appends s as a JSON string, as encoding/json encodes it:
// for Appender implementations.
func AppendString(b []byte, s string) []byte { return appendJSONString(b, s) }

// AppendAddr appends a's text form (empty for the zero Addr) as a JSON
// string, as encoding/json encodes it: for Appender implementations.
func AppendAddr(b []byte, a netip.Addr) []byte { return appendJSONAddr(b, a) }

// appendJSONValue appends v as encoding/json encodes it.
func appendJSONValue(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
	case Appender:
		return v.AppendJSON(b), nil
	case nil:
		return append(b, "null"...), nil
	case string:
		return appendJSONString(b, v), nil
	case bool:
		return strconv.AppendBool(b, v), nil
	case int:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int32:
		return strconv.AppendInt(b, int64(v), 10), nil
	case int64:
		return strconv.AppendInt(b, v, 10), nil
	case uint:
		return strconv.AppendUint(b, uint64(v), 10), nil
	case uint16:
		return strconv.AppendUint(b, uint64(v), 10), nil
	case uint32:
		return strconv.AppendUint(b, uint64(v), 10), nil
	case uint64:
		return strconv.AppendUint(b, v, 10), nil
	case netip.Addr:
		return appendJSONAddr(b, v), nil
	case time.Time:
		b = append(b, '"')
		b, err := v.AppendText(b)
		if err != nil {
			return nil, err
		}
		return append(b, '"'), nil
	case []string:
		if v == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i, s := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONString(b, s)
		}
		return append(b, ']'), nil
	case []netip.Addr:
		if v == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i, a := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendJSONAddr(b, a)
		}
		return append(b, ']'), nil
	case []uint16:
		if v == nil {
			return append(b, "null"...), nil
		}
		b = append(b, '[')
		for i, p := range v {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendUint(b, uint64(p), 10)
		}
		return append(b, ']'), nil
	}
	j, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return append(b, j...), nil
}

// appendJSONAddr appends a's text form (empty for the zero Addr) as a JSON
// string.
func appendJSONAddr(b []byte, a netip.Addr) []byte {
	if a.Zone() != "" {
		return appendJSONString(b, a.String())
	}
	b = append(b, '"')
	if a.IsValid() {
		b = a.AppendTo(b)
	}
	return append(b, '"')
}

const hexDigits = "0123456789abcdef"

// appendJSONString appends s as a JSON string the way encoding/json does:
// HTML-sensitive characters, U+2028 and U+2029 escaped, invalid UTF-8
// replaced by U+FFFD.
func appendJSONString(b []byte, s string) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); {
		if c := s[i]; c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&' {
				i++
				continue
			}
			b = append(b, s[start:i]...)
			switch c {
			case '\\', '"':
				b = append(b, '\\', c)
			case '\b':
				b = append(b, '\\', 'b')
			case '\f':
				b = append(b, '\\', 'f')
			case '\n':
				b = append(b, '\\', 'n')
			case '\r':
				b = append(b, '\\', 'r')
			case '\t':
				b = append(b, '\\', 't')
			default:
				b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			b = append(b, s[start:i]...)
			b = append(b, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			b = append(b, s[start:i]...)
			b = append(b, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	b = append(b, s[start:]...)
	return append(b, '"')
}
