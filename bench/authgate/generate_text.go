package authgate

import (
	"slices"
	"strings"
	"unicode"
)

// A request is read as sentences of words. Sentences end at ".", "!" and
// "?" (a question when it starts with a question word); clauses end at
// ",", ";", ":", parentheses and dashes, and before "but", "except" and
// the like. A word keeps its inner punctuation ("paste.share.test",
// "1.4.2", "app#482", "--force", "don't"); a word ends at a separator
// only when blank or the end follows it.

// sentence is one sentence of a request.
type sentence struct {
	// raw are the words as written, low the same in lower case.
	raw, low []string
	// clause gives each word's clause number within the sentence.
	clause []int
	// text is the sentence as written, for decisions.
	text string
	// question: the sentence asks rather than requests.
	question bool
	// masked marks words inside a mask phrase ("not planned"), which
	// negate nothing.
	masked []bool
}

// clauseBreakWords start a new clause.
var clauseBreakWords = []string{"but", "except", "apart", "although", "though", "however", "whereas", "unless", "besides", "excluding"}

// parseRequest splits text into sentences; words names the policy's word
// lists (question, request, mask).
func parseRequest(text string, words map[string][]string) []*sentence {
	text = strings.NewReplacer("\u2019", "'", "\u2018", "'", "\u201c", "\"", "\u201d", "\"", "\u2014", " — ", "\u2013", " — ").Replace(text)
	rs := []rune(text)
	var out []*sentence
	cur := &sentence{}
	clause := 0
	start := 0
	var w []rune
	flushWord := func() {
		s := strings.Trim(string(w), "'\"`")
		w = w[:0]
		if s == "" {
			return
		}
		low := strings.ToLower(s)
		if len(cur.low) > 0 && slices.Contains(clauseBreakWords, low) {
			clause++
		}
		cur.raw = append(cur.raw, s)
		cur.low = append(cur.low, low)
		cur.clause = append(cur.clause, clause)
	}
	flushSentence := func(end int, question bool) {
		flushWord()
		if len(cur.low) > 0 {
			cur.text = strings.TrimSpace(string(rs[start:end]))
			cur.question = question && startsQuestion(cur.low, words)
			cur.masked = maskPhrases(cur.low, words["mask"])
			out = append(out, cur)
		}
		cur, clause, start = &sentence{}, 0, end
	}
	for i, r := range rs {
		next := rune(' ')
		if i+1 < len(rs) {
			next = rs[i+1]
		}
		endsHere := unicode.IsSpace(next) || i+1 == len(rs) || strings.ContainsRune(",;:()\"", next)
		switch {
		case unicode.IsSpace(r):
			flushWord()
		case r == '.' || r == '!' || r == '?':
			if endsHere {
				flushSentence(i+1, r == '?')
				continue
			}
			w = append(w, r)
		case r == ',' || r == ';' || r == ':':
			if endsHere {
				flushWord()
				clause++
				continue
			}
			w = append(w, r)
		case r == '(' || r == ')' || r == '"' || r == '[' || r == ']':
			flushWord()
			clause++
		case r == '—':
			flushWord()
			clause++
		default:
			w = append(w, r)
		}
	}
	flushSentence(len(rs), false)
	return out
}

// startsQuestion reports whether a sentence's words open a question
// rather than a request: a question word first, and not "can you ...".
func startsQuestion(low []string, words map[string][]string) bool {
	if len(low) == 0 {
		return false
	}
	for _, p := range words["request"] {
		if hasPhraseAt(low, 0, p) {
			return false
		}
	}
	for _, p := range words["question"] {
		if hasPhraseAt(low, 0, p) {
			return true
		}
	}
	return false
}

// maskPhrases marks the words of every phrase occurrence.
func maskPhrases(low []string, phrases []string) []bool {
	m := make([]bool, len(low))
	for i := range low {
		for _, p := range phrases {
			if n := phraseLen(low, i, p, false); n > 0 {
				for k := i; k < i+n; k++ {
					m[k] = true
				}
			}
		}
	}
	return m
}

// hasPhraseAt reports whether phrase p starts at word i, words exactly.
func hasPhraseAt(low []string, i int, p string) bool { return phraseLen(low, i, p, false) > 0 }

// phraseLen returns how many words phrase p covers at word i (0: no
// match). With inflect, p's first word may carry an inflection ("removes",
// "restoring", "deleted").
func phraseLen(low []string, i int, p string, inflect bool) int {
	pw := strings.Fields(p)
	if len(pw) == 0 || i+len(pw) > len(low) {
		return 0
	}
	for k, x := range pw {
		y := low[i+k]
		if k == 0 && inflect {
			if !inflected(y, x) {
				return 0
			}
			continue
		}
		if y != x {
			return 0
		}
	}
	return len(pw)
}

// inflected reports whether w is v or one of its regular inflections.
func inflected(w, v string) bool {
	if w == v {
		return true
	}
	stem := strings.TrimSuffix(v, "e")
	for _, suf := range []string{"s", "es", "d", "ed", "ing"} {
		if w == v+suf || w == stem+suf {
			return true
		}
	}
	return false
}

// find returns the word positions in s where any phrase of ps starts
// (with inflections when inflect).
func (s *sentence) find(ps []string, inflect bool) []int {
	var out []int
	for i := range s.low {
		for _, p := range ps {
			if n := phraseLen(s.low, i, p, inflect); n > 0 {
				out = append(out, i)
				break
			}
		}
	}
	return out
}

// has reports whether any phrase of ps occurs in s.
func (s *sentence) has(ps []string, inflect bool) bool { return len(s.find(ps, inflect)) > 0 }

// inClause returns the positions of ps in the clause of word i, before
// it when before is set, outside mask phrases.
func (s *sentence) inClause(i int, ps []string, inflect, before bool) []int {
	var out []int
	for _, j := range s.find(ps, inflect) {
		if s.clause[j] == s.clause[i] && (!before || j < i) && !s.masked[j] {
			out = append(out, j)
		}
	}
	return out
}

// negated reports whether word i is negated: a negation word before it in
// its clause, or a keep word ("keep", "don't touch") there.
func (s *sentence) negated(i int, words map[string][]string) bool {
	return len(s.inClause(i, words["negation"], false, true)) > 0 || len(s.inClause(i, words["keep"], false, true)) > 0
}

// excepted reports whether word i stands in an "except X" clause, and
// whether the clause before it was negated ("don't close anything except
// X" names X positively).
func (s *sentence) excepted(i int, words map[string][]string) (except, afterNegation bool) {
	c := s.clause[i]
	first := slices.Index(s.clause, c)
	ex := false
	for _, p := range words["except"] {
		if hasPhraseAt(s.low, first, p) {
			ex = true
		}
	}
	if !ex {
		// "but not X", "except X" inside the clause before X.
		for _, j := range s.inClause(i, words["except"], false, true) {
			_ = j
			ex = true
		}
	}
	if !ex || first == 0 {
		return ex, false
	}
	prev := s.clause[first-1]
	for j := range s.low {
		if s.clause[j] == prev && !s.masked[j] {
			for _, p := range words["negation"] {
				if hasPhraseAt(s.low, j, p) {
					return true, true
				}
			}
		}
	}
	return true, false
}

// reported reports whether word i's clause is someone else's words
// ("Jonas thinks we should force it").
func (s *sentence) reported(i int, words map[string][]string) bool {
	return len(s.inClause(i, words["reported"], false, false)) > 0
}

// prevWord returns the word before i in the same clause, or "".
func (s *sentence) prevWord(i int) string {
	if i == 0 || s.clause[i-1] != s.clause[i] {
		return ""
	}
	return s.low[i-1]
}

// nextWord returns the word after i, or "".
func (s *sentence) nextWord(i int) string {
	if i+1 >= len(s.low) {
		return ""
	}
	return s.low[i+1]
}

// quote shortens a sentence for a decision's why.
func quote(s *sentence) string {
	t := strings.Join(strings.Fields(s.text), " ")
	if len(t) > 160 {
		t = t[:157] + "..."
	}
	return "\"" + t + "\""
}
