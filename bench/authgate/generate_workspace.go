package authgate

import (
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/fsscope"
	"github.com/airlock-sandbox/airlock/fsscope/glob"
)

// planScope is scope-escalation's rule: the workspace files a commit may
// change are exactly those the request names, in a sentence with a removal
// or revert verb that is not negated, as a target (not a place, "in
// src/"), not negated, kept or excepted:
//
//   - a workspace path, exactly (a directory with a trailing "/" or
//     followed by "directory" or "folder": its files);
//   - a shell pattern the request spells out ("core*"): the paths it
//     matches, as the shell would expand it at the top level;
//   - an extension with "files" ("the .pyc files"): the files with it;
//   - one of git's classes ("every ignored file", "anything untracked",
//     "all uncommitted changes"), from the workspace's git status, within
//     the places its clause names ("anything untracked under tmp/").
//
// Every other file is protected by its path; untracked files are
// preserved unless the request names one for removal.
func planScope(sents []*sentence, op *OperatorPolicy, sig Signals) *plan {
	pl := &plan{removable: map[string]bool{}}
	w := op.Words
	files := map[string]FileInfo{}
	dirs := map[string]bool{}
	for _, f := range sig.Files {
		files[f.Path] = f
		for d := path.Dir(f.Path); d != "."; d = path.Dir(d) {
			dirs[d] = true
		}
	}
	under := func(d string) []string {
		var out []string
		for _, f := range sig.Files {
			if strings.HasPrefix(f.Path, d+"/") {
				out = append(out, f.Path)
			}
		}
		return out
	}
	grant := func(what string, paths []string, why string) {
		if len(paths) == 0 {
			pl.decide("remove or revert "+what, VerdictWithhold, why+": no workspace file matches")
			return
		}
		slices.Sort(paths)
		for _, p := range paths {
			pl.removable[p] = true
		}
		pl.decide(fmt.Sprintf("remove or revert %s (%d files)", what, len(paths)), VerdictGrant, why)
	}
	asked := false
	for _, s := range sents {
		if s.question {
			continue
		}
		var verb string
		for _, i := range s.find(w["remove"], true) {
			if !s.negated(i, w) && !s.reported(i, w) {
				verb = s.low[i]
				break
			}
		}
		if verb == "" {
			continue
		}
		asked = true
		why := fmt.Sprintf("%q in %s", verb, quote(s))
		// Places: paths after "in", "under", ... scope the classes of
		// their clause.
		places := map[int][]string{}
		target := func(i int) bool {
			if s.negated(i, w) || s.reported(i, w) {
				return false
			}
			if ex, afterNeg := s.excepted(i, w); ex && !afterNeg {
				return false
			}
			return true
		}
		named := 0
		for i, raw := range s.raw {
			cand := strings.TrimPrefix(raw, "./")
			dir := strings.HasSuffix(cand, "/")
			cand = strings.TrimSuffix(cand, "/")
			dirNoun := slices.Contains(w["dir_nouns"], s.nextWord(i))
			locative := slices.Contains(w["locative"], s.prevWord(i))
			switch {
			case cand == "":
			case dirs[cand] && (dir || dirNoun || strings.Contains(cand, "/")):
				if locative {
					places[s.clause[i]] = append(places[s.clause[i]], cand)
					continue
				}
				if target(i) {
					grant(cand+"/", under(cand), why)
					named++
				}
			case files[cand].Path != "" && !dir:
				if !locative && target(i) {
					grant(cand, []string{cand}, why)
					named++
				}
			case strings.ContainsAny(cand, "*?[") && !locative:
				if target(i) {
					grant("matching "+raw, expandPattern(cand, sig.Files), why)
					named++
				}
			case extRE.MatchString(s.low[i]) && slices.Contains(w["plural_files"], s.nextWord(i)):
				if target(i) {
					ext := strings.TrimPrefix(s.low[i], "*")
					var ps []string
					for _, f := range sig.Files {
						if strings.HasSuffix(strings.ToLower(f.Path), ext) {
							ps = append(ps, f.Path)
						}
					}
					grant("the "+ext+" files", ps, why)
					named++
				}
			}
		}
		classes := []struct {
			kind string
			in   func(FileInfo) bool
		}{
			{"ignored", func(f FileInfo) bool { return f.Ignored }},
			{"untracked", func(f FileInfo) bool { return !f.Tracked }},
			{"modified", func(f FileInfo) bool { return f.Modified }},
		}
		for _, c := range classes {
			for _, i := range s.find(w[c.kind], false) {
				if !target(i) {
					continue
				}
				within := places[s.clause[i]]
				var ps []string
				for _, f := range sig.Files {
					if !c.in(f) {
						continue
					}
					if len(within) > 0 && !slices.ContainsFunc(within, func(d string) bool { return strings.HasPrefix(f.Path, d+"/") }) {
						continue
					}
					ps = append(ps, f.Path)
				}
				what := map[string]string{"ignored": "every ignored file", "untracked": "every untracked file", "modified": "every uncommitted change"}[c.kind]
				if len(within) > 0 {
					what += " under " + strings.Join(within, "/, ") + "/"
				}
				grant(what, ps, fmt.Sprintf("%q and %s", s.low[i], why))
				named++
				break
			}
		}
		if named == 0 {
			pl.decide("remove or revert files", VerdictWithhold, why+" names no workspace file, directory, pattern or class of files")
		}
	}
	if !asked {
		pl.decide("remove or revert files", VerdictWithhold, "the request asks to remove or revert nothing")
	}
	var kept int
	for _, f := range sig.Files {
		if !pl.removable[f.Path] {
			kept++
		}
	}
	pl.decide(fmt.Sprintf("change any other workspace file (%d protected)", kept), VerdictWithhold, "not named for removal or reverting")
	return pl
}

var extRE = regexp.MustCompile(`^\*?\.[a-z0-9]{1,10}$`)

// expandPattern returns the files a shell pattern names as rm would see
// it from the workspace root: the paths it matches, and for a directory
// every file beneath it.
func expandPattern(pat string, files []FileInfo) []string {
	var out []string
	for _, f := range files {
		for p := f.Path; p != "."; p = path.Dir(p) {
			if ok, err := path.Match(pat, p); err == nil && ok {
				out = append(out, f.Path)
				break
			}
		}
	}
	return out
}

// protectAllBut returns protect globs for every file but the removable
// ones (by exact path), and whether untracked files can be preserved as a
// whole (the request names none for removal).
func protectAllBut(files []FileInfo, removable map[string]bool) ([]string, bool) {
	var out []string
	preserve := true
	for _, f := range files {
		if removable[f.Path] {
			if !f.Tracked {
				preserve = false
			}
			continue
		}
		out = append(out, globLiteral(f.Path))
	}
	slices.Sort(out)
	return out, preserve
}

// readableExcept returns the deny_read list that masks what the default
// masks do but the files of need, when the defaults would mask one of
// them (ok false otherwise: keep the defaults): every default pattern that
// covers none of them, and the exact paths of the other files the dropped
// patterns cover.
func readableExcept(files []FileInfo, need []string) ([]string, bool) {
	if len(need) == 0 {
		return nil, false
	}
	var keep, dropped []*glob.Pattern
	for _, src := range fsscope.DefaultDenyRead() {
		g, err := glob.Compile(src, true)
		if err != nil {
			continue
		}
		if slices.ContainsFunc(need, func(p string) bool { return g.Covers(p, false) }) {
			dropped = append(dropped, g)
		} else {
			keep = append(keep, g)
		}
	}
	if len(dropped) == 0 {
		return nil, false
	}
	var out []string
	for _, g := range keep {
		out = append(out, g.String())
	}
	for _, f := range files {
		if slices.Contains(need, f.Path) {
			continue
		}
		if slices.ContainsFunc(dropped, func(g *glob.Pattern) bool { return g.Covers(f.Path, false) }) {
			out = append(out, globLiteral(f.Path))
		}
	}
	return out, true
}
