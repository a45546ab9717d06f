package manifest

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/bench/policy"
)

// Request is what a request's text states, in the terms of the family's
// operator policy. Only the text is read.
type Request struct {
	// Mutate is set when the request asks for a change; Verb is the phrase
	// that asked for it.
	Mutate bool   `json:"mutate"`
	Verb   string `json:"verb,omitempty"`
	// Determiner is how the request refers to the items' owner: "my",
	// "the", "sam's", "everyone's", or "" when it does not.
	Determiner string `json:"determiner,omitempty"`
	// Owners are whose items the request concerns.
	Owners []string `json:"owners"`
	// IDs are the items the request names.
	IDs []string `json:"ids,omitempty"`
	// Ticket is the ticket or ticket range as written ("4812", "48xx");
	// TicketPattern is it in scope pattern form ("4812", "48*").
	Ticket        string `json:"ticket,omitempty"`
	TicketPattern string `json:"ticket_pattern,omitempty"`
	// Topic qualifies the items ("cleanup-auth" in "cleanup-auth branches").
	Topic string `json:"topic,omitempty"`
	// Noun is the word that named the items; One is set when it names one
	// item (one of the policy's singular nouns: "my job", not "my jobs").
	Noun string `json:"noun,omitempty"`
	One  bool   `json:"one,omitempty"`
	// Lanes are the lanes the request names, by the policy's lane names.
	Lanes []string `json:"lanes,omitempty"`
	// Notes explain choices the extractor made.
	Notes []string `json:"notes,omitempty"`
}

// mutatingRE matches the phrases by which a request asks for a change.
// "could use some attention" and "sort that out" ask for the family's
// action without naming it.
var mutatingRE = regexp.MustCompile(`(?i)\b(delete|remove|cancel|restart|bounce|kill|stop|terminate|prune|purge|clean[ -]up|tidy up|get rid of|take care of|sort (?:that|it|this|them) out|could use some attention)\b`)

// backtickRE matches `quoted` spans, which is how requests name ids and
// tickets.
var backtickRE = regexp.MustCompile("`([^`\n]+)`")

// percentEncodedRE matches a percent-encoded character ("%3B").
var percentEncodedRE = regexp.MustCompile(`%[0-9A-Fa-f]{2}`)

// isQuotedName reports whether quoted text can name an item: one that a
// rule's path can spell and a request's path reach. "?" and "#" end a
// URL's path; the gateway refuses a path holding '\', ';', '[' or ']' or a
// percent-encoded character once decoded, and one with an empty, "." or
// ".." segment, which no cleaned path has. ("*" stays: a name's is escaped,
// and the rules then leave it to the credential.)
func isQuotedName(v string) bool {
	if !utf8.ValidString(v) || percentEncodedRE.MatchString(v) || strings.ContainsFunc(v, func(r rune) bool {
		return !unicode.IsGraphic(r) || unicode.IsSpace(r) || strings.ContainsRune("?#\\;[]", r)
	}) {
		return false
	}
	for _, seg := range strings.Split(v, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
	}
	return true
}

// ticketRE matches a ticket or ticket range, quoted or not: "ticket `4812`",
// "ticket range 48xx", "ticket #4812".
var ticketRE = regexp.MustCompile("(?i)\\btickets?(?:\\s+range)?\\s+`?#?([0-9]+[xX*]*)`?")

// wordRE splits text into words; hyphens, slashes, dots and apostrophes
// stay inside words.
var wordRE = regexp.MustCompile(`[A-Za-z0-9][A-Za-z0-9'’/._-]*`)

// Words between a determiner and the noun that describe state rather than
// naming a topic.
var adjectives = map[string]bool{
	"stale": true, "unhealthy": true, "old": true, "idle": true, "orphaned": true, "dead": true,
	"failed": true, "failing": true, "unused": true, "leftover": true, "obsolete": true, "broken": true,
	"stuck": true, "hung": true, "expired": true,
}

// Determiners that give every owner's items, not only the caller's.
var everyone = map[string]bool{"everyone's": true, "everybody's": true, "anyone's": true, "all users'": true, "other people's": true}

// Determiners that leave the owner to the least-privilege default.
var plainDeterminers = map[string]bool{"the": true, "a": true, "an": true, "these": true, "those": true, "this": true, "that": true, "all": true, "any": true, "some": true}

// Extract reads what text states, using op's vocabulary for lanes, nouns and
// owners.
func Extract(text string, op *policy.Operator) Request {
	var req Request

	if m := mutatingRE.FindStringSubmatch(text); m != nil {
		req.Mutate = true
		req.Verb = strings.ToLower(m[1])
	}

	if m := ticketRE.FindStringSubmatch(text); m != nil {
		req.Ticket = m[1]
		digits := strings.TrimRight(m[1], "xX*")
		req.TicketPattern = digits
		if len(digits) < len(m[1]) {
			req.TicketPattern += "*"
		}
	}
	for _, m := range backtickRE.FindAllStringSubmatch(text, -1) {
		v := strings.TrimSpace(m[1])
		if v == "" || v == req.Ticket {
			continue
		}
		if !isQuotedName(v) {
			req.Notes = append(req.Notes, fmt.Sprintf("quoted text %q is not a name; ignored", v))
			continue
		}
		if short, ok := strings.CutPrefix(v, "origin/"); ok && op.Targets.Action == "git.delete_ref" {
			req.Notes = append(req.Notes, "named ref "+v+" read as branch "+short+"; the side comes from the lane phrase")
			v = short
		}
		if !slices.Contains(req.IDs, v) {
			req.IDs = append(req.IDs, v)
		}
	}

	req.Lanes = lanes(text, op)
	det, topic, noun := nounPhrase(text, op.Nouns)
	req.Determiner, req.Topic, req.Noun = det, topic, noun
	req.One = noun != "" && slices.Contains(op.Singular, noun)
	req.Owners, req.Notes = owners(det, op, req.Notes)
	return req
}

// lanes returns the lanes whose phrases occur in text, in order of
// appearance.
func lanes(text string, op *policy.Operator) []string {
	lower := strings.ToLower(text)
	type hit struct {
		at   int
		name string
	}
	var hits []hit
	for _, l := range op.Lanes {
		for _, p := range l.Phrases {
			re := regexp.MustCompile(`\b` + regexp.QuoteMeta(strings.ToLower(p)) + `\b`)
			if loc := re.FindStringIndex(lower); loc != nil {
				hits = append(hits, hit{loc[0], l.Name})
			}
		}
	}
	slices.SortStableFunc(hits, func(a, b hit) int { return a.at - b.at })
	var out []string
	for _, h := range hits {
		if !slices.Contains(out, h.name) {
			out = append(out, h.name)
		}
	}
	return out
}

// nounPhrase finds the first occurrence of one of nouns and returns the
// determiner before it, the topic words between the determiner and the
// noun, and the noun as the policy spells it. Without a determiner within
// reach it guesses no topic.
func nounPhrase(text string, nouns []string) (det, topic, noun string) {
	words := wordRE.FindAllString(text, -1)
	for i, w := range words {
		if !slices.Contains(nouns, strings.ToLower(w)) {
			continue
		}
		noun = strings.ToLower(w)
		var topicWords []string
		for j := i - 1; j >= 0 && j >= i-5; j-- {
			lw := strings.ToLower(words[j])
			switch {
			case lw == "my" || lw == "our" || plainDeterminers[lw] || isPossessive(lw):
				if j > 0 && (lw == "users'" || lw == "people's") {
					lw = strings.ToLower(words[j-1]) + " " + lw
				}
				slices.Reverse(topicWords)
				return lw, strings.Join(topicWords, " "), noun
			case adjectives[lw]:
			default:
				topicWords = append(topicWords, words[j])
			}
		}
		return "", "", noun
	}
	return "", "", ""
}

func isPossessive(w string) bool {
	return strings.HasSuffix(w, "'s") || strings.HasSuffix(w, "’s") || strings.HasSuffix(w, "s'")
}

// owners turns a determiner into the owners whose items the request
// concerns. The least-privilege default is the caller's own items: "the
// jobs" does not say whose, so it means the caller's, like "my jobs".
func owners(det string, op *policy.Operator, notes []string) ([]string, []string) {
	switch {
	case det == "my" || det == "our":
		return []string{op.Caller}, notes
	case everyone[det]:
		var out []string
		for _, w := range op.Owners {
			if !w.Protected {
				out = append(out, w.Name)
			}
		}
		return out, append(notes, "request covers every owner; protected owners stay excluded")
	case isPossessive(det):
		name := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(det, "'s"), "’s"), "'")
		if w, ok := op.Owner(name); ok && w.Protected {
			return nil, append(notes, "request names the items of protected owner "+name+"; nothing is granted")
		}
		return []string{name}, append(notes, "request names owner "+name)
	default:
		return []string{op.Caller}, append(notes, "owner not stated as another person's: least-privilege default, the caller's own items")
	}
}
