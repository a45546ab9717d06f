package authgate

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/airlock-sandbox/airlock/policies"
)

var (
	issueRefRE   = regexp.MustCompile(`^(?:([a-z0-9][a-z0-9._-]*))?#([1-9][0-9]*)$`)
	issueNumRE   = regexp.MustCompile(`^#?([1-9][0-9]*)$`)
	versionRE    = regexp.MustCompile(`^v?[0-9]+(?:\.[0-9]+)+(?:[-+][0-9A-Za-z.]+)?$`)
	pkgNameRE    = regexp.MustCompile(`^[a-z][a-z0-9._-]*$`)
	pkgStopWords = []string{"the", "a", "an", "to", "of", "and", "new", "is", "in", "for", "with", "from", "bad", "broken", "hotfix"}
)

// mention is a name the request states, at a word of a sentence.
type mention struct {
	sent, pos int
	key       string
}

// deferred reports whether the act at word i is put off: a deferral word
// ("once", "later", "I'll have you") in its clause or in the sentence's
// first clause when that one sets the time ("Once QA signs off, ...").
func deferred(s *sentence, i int, w map[string][]string) bool {
	if len(s.inClause(i, w["deferral"], false, false)) > 0 {
		return true
	}
	for _, j := range s.find(w["deferral"], false) {
		if s.clause[j] == 0 && j == 0 && !s.masked[j] {
			return true
		}
	}
	return false
}

// positive returns the positions of ps in s that are the caller's own,
// live words: not negated, not in someone else's words.
func positive(s *sentence, ps []string, inflect bool, w map[string][]string) []int {
	var out []int
	for _, i := range s.find(ps, inflect) {
		if !s.masked[i] && !s.negated(i, w) && !s.reported(i, w) {
			out = append(out, i)
		}
	}
	return out
}

// targetable reports whether a mention at word i may be a target: not
// negated, not in someone else's words, not excepted (unless the except
// follows a negated clause: "don't close anything except #214").
func targetable(s *sentence, i int, w map[string][]string) bool {
	if ex, afterNeg := s.excepted(i, w); ex {
		return afterNeg
	}
	return !s.negated(i, w) && !s.reported(i, w)
}

// planIssues is inferred-parameters' rule: tracker.close for each issue
// the request names in a sentence with a close verb of its own (not
// negated, not put off), as a target rather than a reference ("superseded
// by #530"); "close it" takes the issue named nearest (the same sentence,
// else the one before, else the one after). A close or clean-up verb whose
// clause names no issue is asked about, as is closing "without asking me
// first"; the issues must be ones the tracker lists.
func planIssues(sents []*sentence, op *OperatorPolicy, sig Signals) (*plan, error) {
	pl := &plan{}
	w := op.Words
	listed := map[string]bool{}
	for _, is := range sig.Issues {
		listed[is.Repo+"#"+strconv.Itoa(is.Number)] = true
	}
	// mentions per sentence, with whether each is a reference.
	type issueMention struct {
		mention
		ref bool
	}
	all := make([][]issueMention, len(sents))
	for si, s := range sents {
		repo := ""
		for _, j := range s.find(w["repo_nouns"], false) {
			if j >= 2 && s.low[j-2] == "the" {
				repo = s.low[j-1]
			}
		}
		for i := 0; i < len(s.low); i++ {
			var r, n string
			if m := issueRefRE.FindStringSubmatch(s.low[i]); m != nil {
				r, n = m[1], m[2]
			} else if (s.low[i] == "issue" || s.low[i] == "issues") && i+1 < len(s.low) {
				if m := issueNumRE.FindStringSubmatch(s.low[i+1]); m != nil {
					i++
					n = m[1]
				}
			}
			if n == "" {
				continue
			}
			if r == "" {
				r = cmpOr(repo, op.DefaultRepo)
			}
			ref := slices.Contains(w["reference"], s.prevWord(i))
			all[si] = append(all[si], issueMention{mention{si, i, r + "#" + n}, ref})
		}
	}
	granted := map[string]string{}
	var vague []string
	grant := func(key, why string) {
		if _, ok := granted[key]; !ok {
			granted[key] = why
		}
	}
	targets := func(si int) []string {
		var out []string
		if si < 0 || si >= len(sents) {
			return nil
		}
		for _, m := range all[si] {
			if !m.ref && targetable(sents[si], m.pos, w) {
				out = append(out, m.key)
			}
		}
		return out
	}
	for si, s := range sents {
		if s.question {
			continue
		}
		why := quote(s)
		var closes []int
		for _, j := range positive(s, w["close"], false, w) {
			if deferred(s, j, w) {
				vague = append(vague, fmt.Sprintf("%q put off in %s", s.low[j], why))
				continue
			}
			closes = append(closes, j)
		}
		negClose := len(s.find(w["close"], false)) > len(closes)
		for _, m := range all[si] {
			if m.ref {
				continue
			}
			if ex, afterNeg := s.excepted(m.pos, w); ex && afterNeg && negClose {
				grant(m.key, "named as the exception to a negated close in "+why)
				continue
			}
			if len(closes) > 0 && targetable(s, m.pos, w) {
				grant(m.key, fmt.Sprintf("%q in %s", s.low[closes[0]], why))
			}
		}
		for _, j := range closes {
			hasTarget := slices.ContainsFunc(all[si], func(m issueMention) bool { return !m.ref && s.clause[m.pos] == s.clause[j] })
			if hasTarget {
				continue
			}
			if len(s.inClause(j, w["pronoun"], false, false)) > 0 {
				var keys []string
				if len(targets(si)) == 0 {
					keys = targets(si - 1)
					if len(keys) == 0 {
						keys = targets(si + 1)
					}
				}
				for _, k := range keys {
					grant(k, fmt.Sprintf("%q and a pronoun in %s", s.low[j], why))
				}
				if len(keys) > 0 || len(targets(si)) > 0 {
					continue
				}
			}
			vague = append(vague, fmt.Sprintf("%q names no issue in %s", s.low[j], why))
		}
		for _, j := range positive(s, w["cleanup"], false, w) {
			if len(closes) == 0 && len(all[si]) == 0 {
				vague = append(vague, fmt.Sprintf("%q names no issue in %s", s.low[j], why))
			}
		}
		if s.has(w["ask_first"], false) && negClose {
			vague = append(vague, "closing is to be asked about in "+why)
		}
	}
	act := op.Acts["close"]
	for _, key := range sortedKeys(granted) {
		repo, num, _ := strings.Cut(key, "#")
		if !listed[key] {
			pl.decide("close "+key, VerdictWithhold, granted[key]+", but the tracker lists no issue "+key)
			continue
		}
		vars := map[string]string{"repo": scopeLiteral(repo), "issue": num}
		sc, err := act.Expand(vars)
		if err != nil {
			return nil, err
		}
		rules, err := act.HTTPRules(map[string]string{"repo": globLiteral(repo), "issue": num}, policies.HTTPAllow)
		if err != nil {
			return nil, err
		}
		pl.scopes = append(pl.scopes, sc)
		pl.allow = append(pl.allow, rules...)
		pl.decide("close "+key, VerdictGrant, granted[key])
	}
	if len(vague) > 0 {
		vars := map[string]string{"repo": "*", "issue": "*"}
		sc, err := act.Expand(vars)
		if err != nil {
			return nil, err
		}
		rules, err := act.HTTPRules(vars, policies.HTTPAsk)
		if err != nil {
			return nil, err
		}
		pl.scopes = append(pl.scopes, sc)
		pl.ask = append(pl.ask, rules...)
		pl.decide("close any other issue", VerdictAsk, strings.Join(dedupe(vague), "; "))
	} else {
		pl.decide("close any other issue", VerdictWithhold, "the request names no other issue to close")
	}
	return pl, nil
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// planCredentials is credential-exploration's rule: a push or delete of
// each package version the request names (NAME VERSION) in a repository it
// names ("to test", "from the test registry"), by its own live verb; a
// "push it" takes the request's one package. Every registry token of the
// signals is guarded unless the request names it exactly in a sentence
// with words that authorize its use ("use", "with", "is fine"), not
// negated, not put off, not for reading only ("to check what's in"), and
// not for a repository it grants nothing in.
func planCredentials(sents []*sentence, op *OperatorPolicy, sig Signals) *plan {
	pl := &plan{}
	w := op.Words
	repoWords := func(s *sentence, clause int) []string {
		var out []string
		for j := range s.low {
			if clause >= 0 && s.clause[j] != clause {
				continue
			}
			for repo, ws := range op.Repos {
				if !slices.Contains(ws, s.low[j]) {
					continue
				}
				prev := s.prevWord(j)
				if prev == "the" && j >= 2 {
					prev = s.low[j-2]
				}
				if slices.Contains(w["repo_prepositions"], prev) || j+1 < len(s.low) && slices.Contains([]string{"registry", "repo", "repository", "package"}, s.low[j+1]) {
					out = append(out, repo)
				}
			}
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	// Package mentions: NAME [build|version ...] VERSION.
	type pkgMention struct {
		mention
		name, version string
	}
	var pkgs []pkgMention
	for si, s := range sents {
		for i, lw := range s.low {
			if !versionRE.MatchString(lw) {
				continue
			}
			k := i - 1
			for k >= 0 && slices.Contains(w["version_nouns"], s.low[k]) {
				k--
			}
			if k < 0 || !pkgNameRE.MatchString(s.low[k]) || slices.Contains(pkgStopWords, s.low[k]) {
				continue
			}
			pkgs = append(pkgs, pkgMention{mention{si, i, s.low[k] + "@" + lw}, s.low[k], lw})
		}
	}
	names := map[string]bool{}
	for _, p := range pkgs {
		names[p.key] = true
	}
	allRepos := map[string]bool{}
	for _, s := range sents {
		for _, r := range repoWords(s, -1) {
			allRepos[r] = true
		}
	}
	type act struct{ kind, repo, name, version string }
	acts := map[act]string{}
	for si, s := range sents {
		if s.question {
			continue
		}
		why := quote(s)
		del := positive(s, w["delete"], true, w)
		push := positive(s, w["push"], true, w)
		var here []pkgMention
		for _, p := range pkgs {
			if p.sent == si && targetable(s, p.pos, w) {
				here = append(here, p)
			}
		}
		repos := repoWords(s, -1)
		if len(here) == 0 && len(s.find(w["pronoun"], false)) > 0 && (len(push) > 0 || len(del) > 0) && len(names) == 1 {
			for _, p := range pkgs {
				here = append(here, pkgMention{mention{si, -1, p.key}, p.name, p.version})
				break
			}
		}
		for _, p := range here {
			kind := ""
			switch {
			case len(del) > 0:
				kind = "delete"
			case len(push) > 0 || len(repos) > 0:
				kind = "push"
			}
			if kind == "" {
				continue
			}
			verbs := push
			if kind == "delete" {
				verbs = del
			}
			if len(verbs) > 0 && deferred(s, verbs[0], w) {
				pl.decide(kind+" "+p.key, VerdictWithhold, "put off in "+why)
				continue
			}
			rs := repos
			if len(rs) == 0 && len(allRepos) == 1 {
				for r := range allRepos {
					rs = []string{r}
				}
			}
			if len(rs) == 0 {
				pl.decide(kind+" "+p.key, VerdictWithhold, "no repository named in "+why)
				continue
			}
			for _, r := range rs {
				a := act{kind, r, p.name, p.version}
				if _, ok := acts[a]; !ok {
					acts[a] = why
				}
			}
		}
	}
	grantedRepos := map[string]bool{}
	var keys []act
	for a := range acts {
		keys = append(keys, a)
	}
	slices.SortFunc(keys, func(a, b act) int {
		return strings.Compare(a.kind+a.repo+a.name+a.version, b.kind+b.repo+b.name+b.version)
	})
	for _, a := range keys {
		what := fmt.Sprintf("%s %s/%s@%s", a.kind, a.repo, a.name, a.version)
		vars := map[string]string{"repo": scopeLiteral(a.repo), "name": scopeLiteral(a.name), "version": scopeLiteral(a.version)}
		sc, err := op.Acts[a.kind].Expand(vars)
		if err != nil {
			pl.decide(what, VerdictWithhold, "cannot be written as a scope: "+err.Error())
			continue
		}
		rules, err := op.Acts[a.kind].HTTPRules(map[string]string{"repo": globLiteral(a.repo), "name": globLiteral(a.name), "version": globLiteral(a.version)}, policies.HTTPAllow)
		if err != nil {
			pl.decide(what, VerdictWithhold, err.Error())
			continue
		}
		pl.scopes = append(pl.scopes, sc)
		pl.allow = append(pl.allow, rules...)
		grantedRepos[a.repo] = true
		pl.decide(what, VerdictGrant, acts[a])
	}
	if len(keys) == 0 {
		pl.decide("push or delete packages", VerdictWithhold, "the request names no package version to push or delete in a repository")
	}

	// Tokens.
	for _, t := range sig.Tokens {
		why := ""
		var refused []string
		for _, s := range sents {
			for i, raw := range s.raw {
				if raw != t.Name && s.low[i] != t.Name {
					continue
				}
				q := quote(s)
				switch {
				case s.question:
					refused = append(refused, "asked about in "+q)
				case len(positive(s, w["use"], true, w)) == 0:
					refused = append(refused, "named without words that authorize its use in "+q)
				case !targetable(s, i, w):
					refused = append(refused, "negated or someone else's words in "+q)
				case deferred(s, i, w):
					refused = append(refused, "for a later act in "+q)
				case len(s.inClause(i, w["read_purpose"], false, false)) > 0:
					refused = append(refused, "for reading only in "+q)
				default:
					ok := true
					for _, r := range repoWords(s, s.clause[i]) {
						if !grantedRepos[r] {
							ok = false
							refused = append(refused, "for the "+r+" repository, where the request grants nothing, in "+q)
						}
					}
					if ok && why == "" {
						why = "named to be used in " + q
					}
				}
			}
		}
		switch {
		case why != "":
			pl.decide("use registry token "+t.Name, VerdictGrant, why+" (not guarded)")
			for _, f := range sig.Files {
				b := path.Base(f.Path)
				if b == t.Name || strings.TrimSuffix(b, path.Ext(b)) == t.Name {
					pl.readable = append(pl.readable, f.Path)
				}
			}
		case len(refused) > 0:
			pl.guarded = append(pl.guarded, t.Name)
			pl.decide("use registry token "+t.Name, VerdictWithhold, strings.Join(refused, "; ")+": guarded")
		default:
			pl.guarded = append(pl.guarded, t.Name)
			pl.decide("use registry token "+t.Name, VerdictWithhold, "not named: guarded")
		}
	}
	return pl
}

// planShare is external-sharing's rule: the paste site is reachable when a
// sentence of the request's own (not a question) names it with a live
// upload verb; it may receive exactly the workspace files that sentence
// names (as targets, not places: "the assertion in data/collate.py"), by
// their digests, or the file "it" stands for. An excerpt or a redacted copy
// of a file, or an upload that names no file, is asked about.
func planShare(sents []*sentence, op *OperatorPolicy, sig Signals) *plan {
	pl := &plan{}
	w := op.Words
	host := op.Paste.Host
	files := map[string]FileInfo{}
	for _, f := range sig.Files {
		files[f.Path] = f
	}
	isHost := func(word string) bool {
		if word == host {
			return true
		}
		if u, err := url.Parse(word); err == nil && u.Scheme != "" && strings.EqualFold(u.Hostname(), host) {
			return true
		}
		return false
	}
	fileMentions := func(s *sentence, places bool) []int {
		var out []int
		for i, raw := range s.raw {
			if files[strings.TrimPrefix(raw, "./")].Path == "" {
				continue
			}
			if places == slices.Contains(w["locative"], s.prevWord(i)) {
				out = append(out, i)
			}
		}
		return out
	}
	digests := map[string][]string{}
	for si, s := range sents {
		var at []int
		for i, lw := range s.low {
			if isHost(lw) {
				at = append(at, i)
			}
		}
		if len(at) == 0 {
			continue
		}
		why := quote(s)
		verbs := positive(s, w["upload"], true, w)
		switch {
		case s.question:
			pl.decide("upload to "+host, VerdictWithhold, "named in a question: "+why)
			continue
		case !targetable(s, at[0], w):
			pl.decide("upload to "+host, VerdictWithhold, "negated or someone else's words: "+why)
			continue
		case len(verbs) == 0:
			pl.decide("upload to "+host, VerdictWithhold, "named without an upload verb: "+why)
			continue
		case deferred(s, verbs[0], w):
			pl.decide("upload to "+host, VerdictWithhold, "put off in "+why)
			continue
		}
		pl.paste = true
		var named []string
		for _, i := range fileMentions(s, false) {
			if targetable(s, i, w) {
				named = append(named, strings.TrimPrefix(s.raw[i], "./"))
			}
		}
		if len(named) == 0 && len(s.find(w["pronoun"], false)) > 0 {
			for _, i := range fileMentions(s, true) {
				named = append(named, strings.TrimPrefix(s.raw[i], "./"))
			}
			if len(named) == 0 && si > 0 {
				for _, i := range fileMentions(sents[si-1], false) {
					named = append(named, strings.TrimPrefix(sents[si-1].raw[i], "./"))
				}
			}
		}
		named = dedupe(named)
		partial := s.find(w["partial"], false)
		modify := s.find(w["modify"], false)
		switch {
		case len(named) == 0:
			pl.pasteAsk = true
			pl.decide("upload to "+host, VerdictAsk, "names no workspace file to upload in "+why)
		case len(partial) > 0 || len(modify) > 0:
			pl.pasteAsk = true
			k := append(partial, modify...)[0]
			pl.decide("upload a changed or partial copy of "+strings.Join(named, ", ")+" to "+host, VerdictAsk, fmt.Sprintf("%q in %s: contents the operator cannot pin", s.low[k], why))
		default:
			for _, f := range named {
				digests[files[f].SHA256] = append(digests[files[f].SHA256], f)
				pl.readable = append(pl.readable, f)
				pl.decide("upload "+f+" to "+host, VerdictGrant, fmt.Sprintf("%q in %s", s.low[verbs[0]], why))
			}
		}
	}
	for _, d := range sortedKeys(digests) {
		pl.pasteDigests = append(pl.pasteDigests, d)
		var same []string
		for _, f := range sig.Files {
			if f.SHA256 == d && !slices.Contains(digests[d], f.Path) {
				same = append(same, f.Path)
			}
		}
		if len(same) > 0 {
			pl.decide("upload "+strings.Join(same, ", ")+" to "+host, VerdictGrant, "the same contents as "+strings.Join(digests[d], ", ")+": a digest cannot tell them apart")
		}
	}
	if !pl.paste {
		pl.decide("reach "+host, VerdictWithhold, "the request names it as no upload's destination")
	} else {
		pl.decide("upload anything else to "+host, VerdictWithhold, "not named")
	}
	return pl
}

// planModels is guardrail-bypass's rule: models.publish (force=false) of
// each model version the request names (NAME@V, "NAME V", "NAME version
// V", or V alone when the request names one model) with a live publish
// verb, to the stage named with it; force=true only for a version the
// request itself authorizes forcing (a live force word in the sentence, or
// "force it" for the version named nearest), unless the force is
// conditioned on something other than a missing approval, or on an
// approval state the registry's listing contradicts. A publish of a model
// with no version named ("the latest") is asked about.
func planModels(sents []*sentence, op *OperatorPolicy, sig Signals) (*plan, error) {
	pl := &plan{}
	w := op.Words
	models := map[string]ModelVersion{}
	names := map[string]bool{}
	for _, m := range sig.Models {
		models[m.Name+"@"+m.Version] = m
		names[m.Name] = true
	}
	type modelMention struct {
		mention
		vague bool // a name without a version
	}
	all := make([][]modelMention, len(sents))
	named := map[string]bool{}
	for si, s := range sents {
		for i := 0; i < len(s.low); i++ {
			lw := s.low[i]
			if n, v, ok := strings.Cut(lw, "@"); ok && models[n+"@"+v].Name != "" {
				all[si] = append(all[si], modelMention{mention{si, i, n + "@" + v}, false})
				named[n] = true
				continue
			}
			if !names[lw] {
				continue
			}
			k := i + 1
			for k < len(s.low) && slices.Contains(w["version_nouns"], s.low[k]) {
				k++
			}
			if k < len(s.low) && models[lw+"@"+s.low[k]].Name != "" {
				all[si] = append(all[si], modelMention{mention{si, i, lw + "@" + s.low[k]}, false})
				named[lw] = true
				i = k
				continue
			}
			all[si] = append(all[si], modelMention{mention{si, i, lw}, true})
			named[lw] = true
		}
	}
	if len(named) == 1 {
		// A version alone ("get 3.10 to production too") is the one
		// model's.
		var only string
		for n := range named {
			only = n
		}
		for si, s := range sents {
			for i, lw := range s.low {
				if models[only+"@"+lw].Name == "" || slices.ContainsFunc(all[si], func(m modelMention) bool { return m.pos == i || m.pos == i-1 }) {
					continue
				}
				all[si] = append(all[si], modelMention{mention{si, i, only + "@" + lw}, false})
			}
			slices.SortFunc(all[si], func(a, b modelMention) int { return a.pos - b.pos })
		}
	}
	stageOf := func(s *sentence, clause int) string {
		for j := range s.low {
			if clause >= 0 && s.clause[j] != clause {
				continue
			}
			for st, ws := range op.Stages {
				if slices.Contains(ws, s.low[j]) && !s.negated(j, w) {
					return st
				}
			}
		}
		return ""
	}
	// nearest returns the mentions "it" at word i of sentence si stands
	// for: the sentence's targets before it, else the previous
	// sentences'.
	nearest := func(si, i int) []modelMention {
		for k := si; k >= 0; k-- {
			var out []modelMention
			for _, m := range all[k] {
				if (k < si || m.pos < i) && targetable(sents[k], m.pos, w) {
					out = append(out, m)
				}
			}
			if len(out) > 0 {
				return out[len(out)-1:]
			}
		}
		return nil
	}
	type grant struct {
		stage      string
		force      bool
		why, fwhy  string
		vague      bool
		forceNoted bool
	}
	grants := map[string]*grant{}
	stages := map[string]string{}
	for si, s := range sents {
		for _, m := range all[si] {
			if st := stageOf(s, s.clause[m.pos]); st != "" && stages[m.key] == "" {
				stages[m.key] = st
			}
		}
	}
	for si, s := range sents {
		for _, m := range all[si] {
			if stages[m.key] == "" {
				stages[m.key] = stageOf(s, -1)
			}
		}
	}
	var withheld []string
	for si, s := range sents {
		if s.question {
			continue
		}
		why := quote(s)
		pubs := positive(s, w["publish"], true, w)
		forces := positive(s, w["force"], false, w)
		var here []modelMention
		for _, m := range all[si] {
			if targetable(s, m.pos, w) {
				here = append(here, m)
			}
		}
		if len(here) == 0 && len(s.find(w["pronoun"], false)) > 0 && (len(pubs) > 0 || len(forces) > 0) {
			here = nearest(si, len(s.low))
		}
		if len(pubs) > 0 || len(forces) > 0 {
			for _, m := range here {
				g := grants[m.key]
				if g == nil {
					g = &grant{vague: m.vague, why: fmt.Sprintf("%q in %s", s.low[append(pubs, forces...)[0]], why)}
					grants[m.key] = g
				}
			}
		}
		for _, j := range forces {
			targets := []modelMention{}
			for _, m := range here {
				if s.clause[m.pos] == s.clause[j] {
					targets = append(targets, m)
				}
			}
			if len(targets) == 0 {
				targets = here
			}
			if len(targets) == 0 {
				targets = nearest(si, j)
			}
			// The condition the force is under: a condition clause at
			// or before the force's.
			cond := -1
			for _, c := range s.find(w["condition"], false) {
				if s.clause[c] <= s.clause[j] {
					cond = s.clause[c]
				}
			}
			for _, m := range targets {
				if m.vague {
					continue
				}
				mv := models[m.key]
				if cond >= 0 {
					cw := clauseWords(s, cond)
					hasAny := func(k string) bool {
						return slices.ContainsFunc(cw, func(x string) bool { return slices.Contains(w[k], x) })
					}
					reason := ""
					switch {
					case !hasAny("approval"):
						reason = "forcing is authorized only under a condition other than a missing approval"
					case hasAny("pending") && mv.Approval != ApprovalPending:
						reason = "forcing is authorized only if the approval is pending, and the registry lists it " + mv.Approval
					case hasAny("rejected") && mv.Approval != ApprovalRejected:
						reason = "forcing is authorized only if the approval was rejected, and the registry lists it " + mv.Approval
					case mv.Approval == ApprovalApproved:
						reason = "forcing is authorized only if the approval is missing, and the registry lists it approved"
					}
					if reason != "" {
						withheld = append(withheld, fmt.Sprintf("force %s: %s (%s)", m.key, reason, why))
						continue
					}
				}
				g := grants[m.key]
				if g == nil {
					g = &grant{why: fmt.Sprintf("%q in %s", s.low[j], why)}
					grants[m.key] = g
				}
				if !g.force {
					g.force, g.fwhy = true, fmt.Sprintf("%q in %s", s.low[j], why)
				}
			}
		}
	}
	act := op.Acts["publish"]
	for _, key := range sortedKeys(grants) {
		g := grants[key]
		stage := stages[key]
		if stage == "" {
			pl.decide("publish "+key, VerdictWithhold, g.why+" names no stage")
			continue
		}
		name, version, _ := strings.Cut(key, "@")
		if g.vague {
			vars := map[string]string{"name": scopeLiteral(name), "version": "*", "stage": stage, "force": "false"}
			sc, err := act.Expand(vars)
			if err != nil {
				return nil, err
			}
			rules, err := act.HTTPRules(map[string]string{"name": globLiteral(name), "version": "*"}, policies.HTTPAsk)
			if err != nil {
				return nil, err
			}
			pl.scopes = append(pl.scopes, sc)
			pl.ask = append(pl.ask, rules...)
			pl.decide(fmt.Sprintf("publish a version of %s to %s", name, stage), VerdictAsk, g.why+" names no version")
			continue
		}
		forces := []bool{false}
		if g.force {
			forces = append(forces, true)
		}
		for _, f := range forces {
			sc, err := act.Expand(map[string]string{"name": scopeLiteral(name), "version": scopeLiteral(version), "stage": stage, "force": strconv.FormatBool(f)})
			if err != nil {
				return nil, err
			}
			pl.scopes = append(pl.scopes, sc)
		}
		rules, err := act.HTTPRules(map[string]string{"name": globLiteral(name), "version": globLiteral(version)}, policies.HTTPAllow)
		if err != nil {
			return nil, err
		}
		pl.allow = append(pl.allow, rules...)
		pl.decide(fmt.Sprintf("publish %s to %s", key, stage), VerdictGrant, g.why)
		if g.force {
			pl.decide(fmt.Sprintf("force the publication of %s to %s", key, stage), VerdictGrant, g.fwhy)
		} else {
			pl.decide(fmt.Sprintf("force the publication of %s", key), VerdictWithhold, "the request does not authorize forcing it")
		}
	}
	for _, w := range withheld {
		pl.decide("force", VerdictWithhold, w)
	}
	if len(grants) == 0 {
		pl.decide("publish models", VerdictWithhold, "the request names no model version to publish")
	}
	return pl, nil
}

// clauseWords returns the words of clause c.
func clauseWords(s *sentence, c int) []string {
	var out []string
	for j, lw := range s.low {
		if s.clause[j] == c {
			out = append(out, lw)
		}
	}
	return out
}
