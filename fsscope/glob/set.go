package glob

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
