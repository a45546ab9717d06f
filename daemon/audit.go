package daemon

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// auditFile is the name of a session's audit log: one JSON event per line.
const auditFile = "audit.jsonl"

// maxAuditLine bounds one event of the log when it is read.
const maxAuditLine = 4 << 20

// Audit returns a session's audit events in order.
func (d *Daemon) Audit(ctx context.Context, id string) ([]api.AuditEvent, error) {
	evs := []api.AuditEvent{}
	n := 0
	err := d.AuditEach(ctx, id, func(raw json.RawMessage) error {
		n++
		var ev api.AuditEvent
		if err := json.Unmarshal(raw, &ev); err != nil {
			return fmt.Errorf("audit event %d: %w", n, err)
		}
		evs = append(evs, ev)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return evs, nil
}

// AuditEach calls fn with each of a session's audit events in order, as
// the JSON encoding of an api.AuditEvent; raw is valid only during the call.
// It sees every event emitted before it was called, and none emitted after
// it began, and it holds one event in memory at a time. It stops at fn's
// first error and returns it. Errors before the first call of fn (an
// unknown session, an unreadable log) are returned before any call.
func (d *Daemon) AuditEach(ctx context.Context, id string, fn func(raw json.RawMessage) error) error {
	s, err := d.get(id)
	if err != nil {
		return err
	}
	f, err := os.Open(filepath.Join(s.dir, auditFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	default:
		defer f.Close()
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if err := eachAuditLine(ctx, io.LimitReader(f, st.Size()), fn); err != nil {
			return err
		}
	}
	// Blocked connections of a live network are counted in the kernel;
	// they reach the log when the network is removed.
	var b []byte
	for _, ev := range append(d.egress.Drops(ctx, id), s.liveOutputDropped()...) {
		if b, err = appendAuditEvent(b[:0], &ev); err != nil {
			return err
		}
		if err := fn(b); err != nil {
			return err
		}
	}
	return nil
}

// eachAuditLine calls fn with each complete line of r, checking that it is
// valid JSON. A last line without a newline is an event still being
// written, and is left out.
func eachAuditLine(ctx context.Context, r io.Reader, fn func(json.RawMessage) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxAuditLine)
	sc.Split(func(data []byte, atEOF bool) (int, []byte, error) {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			return i + 1, data[:i], nil
		}
		if atEOF {
			return len(data), nil, nil
		}
		return 0, nil, nil
	})
	for n := 1; sc.Scan(); n++ {
		if n%1024 == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		line := sc.Bytes()
		if !json.Valid(line) {
			return fmt.Errorf("audit log line %d: not a JSON event", n)
		}
		if err := fn(line); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("audit log: %w", err)
	}
	return nil
}

// handleAudit streams the session's events as a JSON array, one event per
// line, in constant memory. An error after the array has begun aborts the
// response, so that a client never takes a cut-off array for the whole log.
func (d *Daemon) handleAudit(w http.ResponseWriter, r *http.Request) {
	var bw *bufio.Writer
	err := d.AuditEach(r.Context(), r.PathValue("id"), func(raw json.RawMessage) error {
		sep := ",\n"
		if bw == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			bw = bufio.NewWriterSize(w, 32<<10)
			sep = "[\n"
		}
		_, _ = bw.WriteString(sep)
		_, err := bw.Write(raw)
		return err
	})
	switch {
	case err != nil && bw == nil:
		writeError(w, r, err)
	case err != nil:
		if r.Context().Err() == nil {
			log.G(r.Context()).Error("audit: read aborted", "session", r.PathValue("id"), "error", err)
		}
		panic(http.ErrAbortHandler)
	case bw == nil:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "[]\n")
	default:
		_, _ = bw.WriteString("\n]\n")
		_ = bw.Flush()
	}
}

// appendAuditEvent appends the JSON encoding of ev, byte for byte what
// json.Marshal returns for it, without reflection for the fixed fields and
// for the value types events carry; other field values go through
// json.Marshal.
func appendAuditEvent(b []byte, ev *api.AuditEvent) ([]byte, error) {
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
	return append(b, '}'), nil
}

// appendJSONValue appends v as encoding/json encodes it.
func appendJSONValue(b []byte, v any) ([]byte, error) {
	switch v := v.(type) {
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
