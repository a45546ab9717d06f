package manifest

import (
	"regexp"
	"slices"

	"github.com/airlock-sandbox/airlock/bench/policy"
)

// How a revision is read: it widens the request ("you may also ..."),
// narrows it ("only ...", "just ...", "instead"), or restates it.
const (
	ReadWiden   = "widen"
	ReadNarrow  = "narrow"
	ReadRestate = "restate"
)

var (
	widenRE  = regexp.MustCompile(`(?i)\b(also|as well|in addition)\b`)
	narrowRE = regexp.MustCompile(`(?i)\b(only|just|instead)\b`)
)

// RevisionReading is how Revise read a revision: the words that decided
// how it combines with the request, and what it states.
type RevisionReading struct {
	// How is ReadWiden, ReadNarrow or ReadRestate; Marker the words that
	// said so.
	How    string `json:"how"`
	Marker string `json:"marker,omitempty"`
	// Stated is what the revision's own text states (Extract); Inherited
	// lists what it leaves to the request it revises.
	Stated    Request  `json:"stated"`
	Inherited []string `json:"inherited,omitempty"`
}

// Revise derives the manifest of a request revised midway, from the
// request's text and the revision's text (what the person said next), and
// the family's operator policy: like Generate, it reads no oracle, no
// action and no label (not even the revision's kind: how it combines with
// the request is read from its words).
//
// The revision is read with Extract. What it does not state it takes from
// the request: the lanes when it names none, the change asked for when it
// asks for none, whose items when it names no items' owner, the selector
// (named items, ticket, topic) when it selects nothing. Then:
//
//   - "also", "as well", "in addition" widen: the grant is the union of the
//     request's grant and the revision's;
//   - "only", "just", "instead" narrow, and anything else restates: the
//     grant is the revision's alone.
//
// opts are the request's: the revised manifest differs from the first
// only where the grant differs (credential scopes, HTTP rules,
// protect_refs), so that a running session can take it. An approval block
// the first manifest had stays (Options.KeepApproval).
func Revise(family, original, revision string, op *policy.Operator, opts Options) (*Manifest, error) {
	if err := checkInputs(family, op, opts); err != nil {
		return nil, err
	}
	first := withDefaultLane(Extract(original, op), op)
	stated := Extract(revision, op)
	rev := stated
	var inherited []string
	if len(rev.Lanes) == 0 {
		rev.Lanes = slices.Clone(first.Lanes)
		inherited = append(inherited, "lanes")
	}
	if !rev.Mutate {
		rev.Mutate, rev.Verb = first.Mutate, first.Verb
		inherited = append(inherited, "change")
	}
	if rev.Noun == "" && rev.Determiner == "" {
		rev.Determiner, rev.Owners, rev.Noun, rev.One = first.Determiner, slices.Clone(first.Owners), first.Noun, first.One
		inherited = append(inherited, "owners")
	}
	if len(rev.IDs) == 0 && rev.Ticket == "" && rev.Topic == "" {
		rev.IDs, rev.Ticket, rev.TicketPattern, rev.Topic = slices.Clone(first.IDs), first.Ticket, first.TicketPattern, first.Topic
		inherited = append(inherited, "selector")
	}
	reading := &RevisionReading{How: ReadRestate, Stated: stated, Inherited: inherited}
	parts := []part{{rev, original + "\n" + revision}}
	switch {
	case widenRE.MatchString(revision):
		reading.How, reading.Marker = ReadWiden, widenRE.FindString(revision)
		parts = append([]part{{first, original}}, parts...)
	case narrowRE.MatchString(revision):
		reading.How, reading.Marker = ReadNarrow, narrowRE.FindString(revision)
	}
	rev.Notes = append(rev.Notes, "revision read as "+reading.How)
	parts[len(parts)-1].req = rev
	opts.KeepApproval = opts.AskTimeout > 0 && firstHasApproval(family, first, original, op, opts)
	m, err := build(family, parts, op, opts)
	if err != nil {
		return nil, err
	}
	m.Revision = reading
	return m, nil
}

// firstHasApproval reports whether the request's own manifest holds a
// request for a person (and so has an approval block).
func firstHasApproval(family string, first Request, text string, op *policy.Operator, opts Options) bool {
	m, err := build(family, []part{{first, text}}, op, opts)
	return err == nil && m.Policy.Approval != nil
}
