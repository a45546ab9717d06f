package glob

import (
	"fmt"
	"strings"
)

// Set is a list of patterns compiled with the same folding.
type Set struct {
	fold bool
	pats []*Pattern
}

// NewSet compiles every pattern; it fails on the first invalid one.
func NewSet(patterns []string, fold bool) (*Set, error) {
	s := &Set{fold: fold, pats: make([]*Pattern, 0, len(patterns))}
	for _, src := range patterns {
		p, err := Compile(src, fold)
		if err != nil {
			return nil, err
		}
		s.pats = append(s.pats, p)
	}
	return s, nil
}

// Len returns the number of patterns.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return len(s.pats)
}

// Match returns the first pattern matching the path itself.
func (s *Set) Match(path string, isDir bool) (pattern string, ok bool) {
	if s == nil || len(s.pats) == 0 {
		return "", false
	}
	names := splitPath(path, s.fold)
	for _, p := range s.pats {
		if p.dirOnly && !isDir {
			continue
		}
		if p.matchElems(names) {
			return p.src, true
		}
	}
	return "", false
}

// Covers returns the first pattern matching the path or one of its parents.
func (s *Set) Covers(path string, isDir bool) (pattern string, ok bool) {
	if s == nil || len(s.pats) == 0 {
		return "", false
	}
	names := splitPath(path, s.fold)
	for _, p := range s.pats {
		if p.covers(names, isDir) {
			return p.src, true
		}
	}
	return "", false
}

// List is an ordered list of patterns with exceptions, read the way git
// reads a .gitignore file: an entry starting with "!" is an exception that
// excludes what the rest of the entry matches, and the last entry that
// matches a path decides. An exception therefore only takes effect after an
// entry that includes the path, and a later entry can include it again. A
// literal leading "!" is written "\!".
type List struct {
	fold    bool
	entries []listEntry
}

type listEntry struct {
	src    string // as written, "!" included
	pat    *Pattern
	except bool
}

// NewList compiles every entry of an ordered list; it fails on the first
// invalid one, and on an exception with no pattern after its "!".
func NewList(entries []string, fold bool) (*List, error) {
	l := &List{fold: fold, entries: make([]listEntry, 0, len(entries))}
	for _, src := range entries {
		e := listEntry{src: src}
		pat := src
		if rest, ok := strings.CutPrefix(src, "!"); ok {
			if rest == "" {
				return nil, fmt.Errorf(`%w "!": an exception needs a pattern after "!"`, ErrBadPattern)
			}
			e.except, pat = true, rest
		}
		p, err := Compile(pat, fold)
		if err != nil {
			return nil, err
		}
		e.pat = p
		l.entries = append(l.entries, e)
	}
	return l, nil
}

// Len returns the number of entries, exceptions included.
func (l *List) Len() int {
	if l == nil {
		return 0
	}
	return len(l.entries)
}

// Match returns the last entry matching the path itself, as written ("!"
// included for an exception, "" when none matches), and whether that entry
// includes the path: true when it is not an exception.
func (l *List) Match(path string, isDir bool) (entry string, included bool) {
	if l.Len() == 0 {
		return "", false
	}
	names := splitPath(path, l.fold)
	for i := len(l.entries) - 1; i >= 0; i-- {
		e := &l.entries[i]
		if e.pat.dirOnly && !isDir {
			continue
		}
		if e.pat.matchElems(names) {
			return e.src, !e.except
		}
	}
	return "", false
}
