package httprule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/policies"
)

// ErrAmbiguousJSON is the error of ParseJSON for a body that parsers of
// JSON may read differently, so that what a rule checked may not be what
// the server acts on: the gateway refuses such a request outright.
var ErrAmbiguousJSON = errors.New("ambiguous JSON body")

// jsonCond is a compiled `json "FIELD" { values = [...] }` condition.
type jsonCond struct {
	field  string
	values []glob
}

// compileJSON checks and compiles a rule's json conditions.
func compileJSON(ms []policies.HTTPJSONMatch) ([]jsonCond, error) {
	var out []jsonCond
	for _, m := range ms {
		if !policies.IsPlainJSONKey(m.Field) {
			return nil, fmt.Errorf("json field %q is not a plain JSON key (a letter or '_', then letters, digits, '_' or '-')", m.Field)
		}
		for _, prev := range out {
			if strings.EqualFold(prev.field, m.Field) {
				return nil, fmt.Errorf("json field %q is named twice (fields are compared without regard to case)", m.Field)
			}
		}
		if len(m.Values) == 0 {
			return nil, fmt.Errorf("json field %q has no values", m.Field)
		}
		c := jsonCond{field: m.Field}
		for _, v := range m.Values {
			if v == "" {
				return nil, fmt.Errorf("json field %q: an empty value pattern", m.Field)
			}
			g, err := compileGlob(v)
			if err != nil {
				return nil, fmt.Errorf("json field %q value %w", m.Field, err)
			}
			c.values = append(c.values, g)
		}
		out = append(out, c)
	}
	return out, nil
}

// matchValue matches one string of a field against the condition: true
// if one of its globs matches. A value that is not a normal "/"-separated
// name (an empty segment other than a trailing one, a "." or ".."
// segment) is ambiguous (a server may clean it to a name the globs would
// read otherwise): it matches no allow rule and every deny or ask rule.
func (c *jsonCond) matchValue(v string, allow bool) bool {
	if !normalValue(v) {
		return !allow
	}
	for _, g := range c.values {
		if g.match(v) {
			return true
		}
	}
	return false
}

func normalValue(v string) bool {
	segs := strings.Split(v, "/")
	for i, s := range segs {
		if s == "." || s == ".." || s == "" && i < len(segs)-1 {
			return false
		}
	}
	return true
}

// matchJSON applies a rule's json conditions to r. A deny or ask rule
// fails closed: it matches a body the gateway could not read
// (Request.JSONOpaque) and one in which a named field holds another type
// than strings (ParseJSON maps it to nil), since a service may read a
// target out of either and a later rule must not let it through. Else
// an allow rule matches only a JSON object in which every named field
// holds a string or a non-empty array of strings, every string of which
// matches its field's globs; a deny or ask rule matches a JSON object in
// which any string of any named field matches its field's globs (a
// field missing does not keep the others from matching). A deny or ask
// rule with json_match = "every" matches as an allow rule does, and
// fails open: what it does not match falls through.
func (cr *rule) matchJSON(r Request) bool {
	every := cr.every
	if !r.JSONBody {
		return r.JSONOpaque && !every
	}
	if !every {
		for _, c := range cr.json {
			if vals, ok := r.JSON[c.field]; ok && vals == nil {
				return true
			}
		}
	}
	for _, c := range cr.json {
		if every && len(r.JSON[c.field]) == 0 {
			return false
		}
	}
	for i := range cr.json {
		c := &cr.json[i]
		for _, v := range r.JSON[c.field] {
			if c.matchValue(v, every) != every {
				return !every
			}
		}
	}
	return every
}

// NeedsJSON reports whether a rule of the block with json conditions
// could match a request of this method and (normalized) path, so that
// the gateway must read its body (ParseJSON) before Decide. Decide's
// answer for any other request does not depend on its body.
func (h *Host) NeedsJSON(method, path string) bool {
	if h == nil || len(h.jsonFields) == 0 {
		return false
	}
	method = strings.ToUpper(method)
	for i := range h.rules {
		cr := &h.rules[i]
		if len(cr.json) > 0 && cr.matchesRequestLine(method, path) {
			return true
		}
	}
	return false
}

// HasJSON reports whether the block has a rule with json conditions.
func (h *Host) HasJSON() bool { return h != nil && len(h.jsonFields) > 0 }

// ParseJSON reads body, a request's whole body, for the block's json
// conditions. It returns the fields the block's rules name that hold a
// string or an array of strings (as decoded: escapes undone), and
// whether body is a JSON object at all; a field that is null is left
// out, and one of another type (number, boolean, object, an array
// holding anything but strings) maps to nil, so that no allow rule
// naming it matches and every deny or ask rule naming it does.
//
// A body that is not a JSON object (empty, another JSON value, not JSON
// and not starting with '{') is no error: isObject is false and no rule
// with json conditions matches it, unless the gateway marks it opaque
// (Request.JSONOpaque: it is not empty). A body that JSON parsers may read
// differently returns an error wrapping ErrAmbiguousJSON, which the
// gateway answers with a refusal:
//
//   - a key equal to a named field without regard to case (Unicode simple
//     folding, as strings.EqualFold and Go's encoding/json compare keys)
//     appearing more than once, or spelled in another case: servers take
//     the first, the last, or the one in their case;
//   - a body starting with '{' that is not exactly one JSON object:
//     trailing data after it (Go's json.Decoder reads the first value and
//     stops), comments, trailing commas, NaN (lenient parsers accept
//     them), a byte order mark before it, nesting deeper than
//     encoding/json reads (10000);
//   - invalid UTF-8 anywhere, or U+FFFD in a named field's strings (what
//     a lone surrogate escape such as "\ud800" decodes to in Go, while
//     other parsers keep the surrogate).
func (h *Host) ParseJSON(body []byte) (fields map[string][]string, isObject bool, err error) {
	const ws = " \t\r\n"
	start := bytes.TrimLeft(body, ws)
	bom := bytes.HasPrefix(start, []byte("\xef\xbb\xbf"))
	if bom {
		start = bytes.TrimLeft(start[3:], ws)
	}
	if len(start) == 0 || start[0] != '{' {
		return nil, false, nil
	}
	ambiguous := func(format string, a ...any) (map[string][]string, bool, error) {
		return nil, true, fmt.Errorf("%w: %s", ErrAmbiguousJSON, fmt.Sprintf(format, a...))
	}
	switch {
	case bom:
		return ambiguous("a byte order mark before the object")
	case !utf8.Valid(body):
		return ambiguous("invalid UTF-8")
	case !json.Valid(body):
		return ambiguous("not exactly one valid JSON object (trailing data, syntax only lenient parsers accept, or nesting deeper than encoding/json reads)")
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil { // '{', as json.Valid checked
		return ambiguous("%v", err)
	}
	fields = map[string][]string{}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ambiguous("%v", err)
		}
		key, _ := tok.(string)
		named := ""
		for _, f := range h.jsonFields {
			if !strings.EqualFold(key, f) {
				continue
			}
			if key != f {
				return ambiguous("key %q differs from the field %q only in case", key, f)
			}
			if seen[f] {
				return ambiguous("key %q appears more than once", key)
			}
			seen[f], named = true, f
		}
		vals, ok, err := readStrings(dec)
		if err != nil {
			return ambiguous("%v", err)
		}
		if named == "" || vals == nil && ok {
			continue // not named, or null
		}
		if !ok {
			fields[named] = nil
			continue
		}
		for _, v := range vals {
			if strings.ContainsRune(v, utf8.RuneError) {
				return ambiguous("field %q holds U+FFFD, which a lone surrogate escape decodes to", named)
			}
		}
		fields[named] = vals
	}
	return fields, true, nil
}

// readStrings reads the next value of dec: its strings and true if it is
// a string or an array of strings, nil and true if it is null, else it
// skips the value whole.
func readStrings(dec *json.Decoder) ([]string, bool, error) {
	tok, err := dec.Token()
	if err != nil {
		return nil, false, err
	}
	switch t := tok.(type) {
	case nil:
		return nil, true, nil
	case string:
		return []string{t}, true, nil
	case json.Delim:
		if t == '{' {
			return nil, false, skip(dec, 1)
		}
	default:
		return nil, false, nil
	}
	vals := []string{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, false, err
		}
		switch t := tok.(type) {
		case string:
			vals = append(vals, t)
		case json.Delim: // '{' or '[': the array holds more than strings
			if err := skip(dec, 2); err != nil {
				return nil, false, err
			}
			return nil, false, nil
		default:
			if err := skip(dec, 1); err != nil {
				return nil, false, err
			}
			return nil, false, nil
		}
	}
	if _, err := dec.Token(); err != nil { // ']'
		return nil, false, err
	}
	return vals, true, nil
}

// skip reads tokens until depth open arrays or objects are closed.
func skip(dec *json.Decoder, depth int) error {
	for depth > 0 {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		if d, ok := tok.(json.Delim); ok {
			if d == '{' || d == '[' {
				depth++
			} else {
				depth--
			}
		}
	}
	return nil
}
