package glob

import (
	"errors"
	"strings"
	"testing"
)

func TestList(t *testing.T) {
	tests := []struct {
		name     string
		entries  []string
		fold     bool
		path     string
		isDir    bool
		entry    string
		included bool
	}{
		{name: "included", entries: []string{"refs/heads/**"}, path: "refs/heads/a/b", entry: "refs/heads/**", included: true},
		{name: "no entry matches", entries: []string{"refs/tags/*"}, path: "refs/heads/a", entry: "", included: false},
		{name: "exception after include", entries: []string{"refs/heads/**", "!refs/heads/alex/*-4812-*"}, path: "refs/heads/alex/auth-4812-old", entry: "!refs/heads/alex/*-4812-*", included: false},
		{name: "exception misses", entries: []string{"refs/heads/**", "!refs/heads/alex/*-4812-*"}, path: "refs/heads/alex/auth-active", entry: "refs/heads/**", included: true},
		{name: "exception stays in its element", entries: []string{"refs/heads/**", "!refs/heads/alex/*"}, path: "refs/heads/alex/a/b", entry: "refs/heads/**", included: true},
		{name: "last match wins: included again", entries: []string{"refs/heads/**", "!refs/heads/alex/**", "refs/heads/alex/keep"}, path: "refs/heads/alex/keep", entry: "refs/heads/alex/keep", included: true},
		{name: "last match wins: excepted again", entries: []string{"refs/heads/**", "!refs/heads/alex/**", "refs/heads/alex/keep", "!refs/heads/alex/k*"}, path: "refs/heads/alex/keep", entry: "!refs/heads/alex/k*", included: false},
		{name: "leading exception alone", entries: []string{"!refs/heads/x", "refs/heads/*"}, path: "refs/heads/x", entry: "refs/heads/*", included: true},
		{name: "exception first, nothing after", entries: []string{"!refs/heads/x"}, path: "refs/heads/x", entry: "!refs/heads/x", included: false},
		{name: "escaped bang is literal", entries: []string{`/\!x`}, path: "!x", entry: `/\!x`, included: true},
		{name: "exception folds", entries: []string{"*.pem", "!public.pem"}, fold: true, path: "a/PUBLIC.PEM", entry: "!public.pem", included: false},
		{name: "directory-only exception skips files", entries: []string{"build/**", "!build/", "!build/keep/"}, path: "build/keep", entry: "build/**", included: true},
		{name: "directory-only exception", entries: []string{"build/**", "!build/keep/"}, path: "build/keep", isDir: true, entry: "!build/keep/", included: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := NewList(tt.entries, tt.fold)
			if err != nil {
				t.Fatal(err)
			}
			entry, included := l.Match(tt.path, tt.isDir)
			if entry != tt.entry || included != tt.included {
				t.Errorf("Match(%q) = %q, %v; want %q, %v", tt.path, entry, included, tt.entry, tt.included)
			}
		})
	}
}

func TestListErrors(t *testing.T) {
	for _, entries := range [][]string{{"!"}, {"refs/heads/*", "!"}, {"!a["}, {"!/"}, {""}} {
		if _, err := NewList(entries, false); !errors.Is(err, ErrBadPattern) {
			t.Errorf("NewList(%q) error = %v, want ErrBadPattern", entries, err)
		}
	}
	var empty *List
	if entry, ok := empty.Match("x", false); ok || entry != "" || empty.Len() != 0 {
		t.Error("nil list matched")
	}
	l, err := NewList([]string{"a", "!b"}, false)
	if err != nil || l.Len() != 2 {
		t.Errorf("NewList = %v, %v; want 2 entries", l, err)
	}
}

// FuzzList checks the list against its definition for an entry followed by
// an exception: a path is included when the first matches and the second
// does not.
func FuzzList(f *testing.F) {
	f.Add("refs/heads/**", "refs/heads/alex/*-4812-*", "refs/heads/alex/auth-4812-old", false)
	f.Add("*.pem", "public.pem", "x/public.pem", false)
	f.Add("build/", "build/", "build", true)
	f.Fuzz(func(t *testing.T, include, except, path string, isDir bool) {
		if strings.HasPrefix(include, "!") {
			// In a list that is an exception itself (a literal "!" is
			// written "\!"); the definition below is about an entry and
			// an exception.
			return
		}
		in, err1 := Compile(include, false)
		ex, err2 := Compile(except, false)
		l, err := NewList([]string{include, "!" + except}, false)
		if err1 != nil || err2 != nil {
			if err == nil {
				t.Fatalf("NewList(%q, !%q) accepted an invalid entry", include, except)
			}
			return
		}
		if err != nil {
			t.Fatalf("NewList(%q, !%q): %v", include, except, err)
		}
		want := in.Match(path, isDir) && !ex.Match(path, isDir)
		if _, got := l.Match(path, isDir); got != want {
			t.Errorf("[%q !%q].Match(%q, %v) = %v, want %v", include, except, path, isDir, got, want)
		}
	})
}
