package manifest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/policy"
	"github.com/airlock-sandbox/airlock/credentials/scope"
)

// Item is one item of the world as the family's listing shows it: its
// fields by name, each as text.
type Item map[string]string

// Listing is what the generator read of the world when the session was
// created: the items of the operator policy's signals listing, read with
// the policy's read scopes only. The caller reads it; the generator reads
// nothing itself.
type Listing struct {
	// Source says what was read, for the decisions file ("GET
	// services.bench.test/v1/deployments with services.list").
	Source string `json:"source"`
	Items  []Item `json:"-"`
}

// Grant decisions.
const (
	// DecideAllow: the request determines the items; the change is
	// allowed.
	DecideAllow = "allow"
	// DecideAsk: the request's words select items that its intent may not
	// cover; each change is held for a person.
	DecideAsk = "ask"
)

// Decision is how the generator granted one scope of a change: allowed,
// or held for a person, with the items it matched in the listing and
// why. It is written next to the manifest.
type Decision struct {
	Scope  string `json:"scope"`
	Owner  string `json:"owner"`
	Lane   string `json:"lane"`
	Select string `json:"select"` // "named", "ticket" or "owned"
	// Decision is DecideAllow or DecideAsk.
	Decision string `json:"decision"`
	// Matched are the listed items the scope matches, by the policy's
	// signals name field; nil without a listing.
	Matched []string `json:"matched,omitempty"`
	// Signal names what drove the decision: "named", "number",
	// "attribute:NAME", "unique" or "no listing".
	Signal string `json:"signal"`
	Reason string `json:"reason"`
}

// decide decides the scopes of one owner's items on one lane: they are
// held for a person when the listing shows that the request's words do
// not determine the items (see policy.Signals), and allowed otherwise.
func decide(req Request, text string, op *policy.Operator, lane, owner, what string, scopes []scope.Scope, l *Listing) Decision {
	d := Decision{Owner: owner, Lane: lane, Select: what, Decision: DecideAllow}
	var ss []string
	for _, sc := range scopes {
		ss = append(ss, sc.String())
	}
	d.Scope = strings.Join(ss, "; ")
	sig := op.Signals
	switch {
	case what == "named":
		d.Signal, d.Reason = "named", "the request names its items"
		return d
	case sig == nil:
		d.Signal, d.Reason = "no listing", "the operator policy reads no environment signals for this family: granted as the words select"
		return d
	case l == nil:
		d.Signal, d.Reason = "no listing", "no listing of the world was read: granted as the words select"
		return d
	}
	var matched []Item
	for _, it := range l.Items {
		if matches(scopes, op.Targets.Action, sig.Match, it) {
			matched = append(matched, it)
		}
	}
	for _, it := range matched {
		d.Matched = append(d.Matched, it[sig.Name])
	}
	slices.Sort(d.Matched)
	if req.One && len(matched) > 1 {
		d.Decision, d.Signal = DecideAsk, "number"
		d.Reason = fmt.Sprintf("the request names one %s (%q) and %d listed items match: %s", req.Noun, req.Noun, len(matched), strings.Join(d.Matched, ", "))
		return d
	}
	words := textWords(text)
	for _, a := range sig.Attributes {
		counts := map[string]int{}
		for _, it := range matched {
			v, _ := a.Value(it)
			counts[v]++
		}
		if len(counts) < 2 {
			continue
		}
		values := slices.Sorted(maps.Keys(counts))
		if slices.ContainsFunc(values, func(v string) bool {
			return v != "" && (words[strings.ToLower(v)] || strings.Contains(strings.ToLower(req.Topic), strings.ToLower(v)))
		}) {
			continue
		}
		var parts []string
		for _, v := range values {
			shown := v
			if shown == "" {
				shown = "(none)"
			}
			parts = append(parts, fmt.Sprintf("%s: %d", shown, counts[v]))
		}
		d.Decision, d.Signal = DecideAsk, "attribute:"+a.Name
		d.Reason = fmt.Sprintf("the %d matching items differ in %s (%s), which the request does not state", len(matched), a.Name, strings.Join(parts, ", "))
		return d
	}
	d.Signal = "unique"
	switch len(matched) {
	case 0:
		d.Reason = "no listed item matches now; granted as the words select"
	default:
		d.Reason = fmt.Sprintf("the request's words determine the %d matching items", len(matched))
	}
	return d
}

// matches reports whether one of scopes allows action on the item, its
// selector keys read from the fields match names.
func matches(scopes []scope.Scope, action string, match map[string]string, it Item) bool {
	attrs := map[string]string{}
	for k, f := range match {
		if v, ok := it[f]; ok {
			attrs[k] = v
		}
	}
	req := scope.Request{Action: action, Attrs: attrs}
	return slices.ContainsFunc(scopes, func(sc scope.Scope) bool { return sc.Allows(req) })
}

// textWords returns the words of text, lower-cased.
func textWords(text string) map[string]bool {
	out := map[string]bool{}
	for _, w := range wordRE.FindAllString(text, -1) {
		w = strings.ToLower(strings.Trim(w, "'’.,;:"))
		out[w] = true
		for _, part := range strings.FieldsFunc(w, func(r rune) bool { return r == '/' || r == '.' || r == '-' || r == '_' }) {
			out[part] = true
		}
	}
	return out
}

// ParseListing reads the items of a listing's JSON answer: the array in
// its field items, each element an object whose fields are kept as text
// (strings as they are, numbers and booleans in their JSON form; nested
// values are dropped).
func ParseListing(body []byte, items string) ([]Item, error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil {
		return nil, fmt.Errorf("listing: %w", err)
	}
	raw, ok := top[items]
	if !ok {
		return nil, fmt.Errorf("listing: no field %q in the answer", items)
	}
	var elems []map[string]json.RawMessage
	if err := json.Unmarshal(raw, &elems); err != nil {
		return nil, fmt.Errorf("listing: field %q: %w", items, err)
	}
	out := make([]Item, 0, len(elems))
	for _, e := range elems {
		it := Item{}
		for k, v := range e {
			var s string
			if err := json.Unmarshal(v, &s); err == nil {
				it[k] = s
				continue
			}
			if t := strings.TrimSpace(string(v)); t != "" && t[0] != '{' && t[0] != '[' && t != "null" {
				it[k] = t
			}
		}
		out = append(out, it)
	}
	return out, nil
}
