package manifest

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/policy"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/egress/httprule"
	"github.com/airlock-sandbox/airlock/policies"
)

// anyRef matches every ref a push can update.
const anyRef = "refs/**"

// httpRules returns the egress `http` blocks of the family's hosts, from
// the policy's http section and the request's grant (the canonical scopes
// of its change, without the read scopes: allow those allowed outright,
// ask those held for a person), one block per host, all with the same
// rules, in this order (the first rule that matches decides):
//
//  1. with push: a push that updates one of the protected refs is denied;
//     one whose every updated ref matches the ref selector of a held
//     scope is asked about; one whose every updated ref matches that of
//     an allowed scope is allowed; one whose refs are matched by held and
//     allowed scopes together is asked about; any other push that updates
//     a ref is denied. The rules see refs, not whether an update deletes or moves
//     its ref: the credential checks that (git.delete_ref). A push of no
//     ref updates (git's "0000" probe before a large push) matches none
//     of them and goes to the default.
//  2. the read routes, allowed for every request of the family.
//  3. for each held scope, then each allowed one, each change route,
//     asked about or allowed, its path's placeholders replaced by the
//     scope's selectors: a cancel of job-dev-48*-a may use
//     POST /v1/jobs/job-dev-48*-a/cancel, not
//     POST /v1/jobs/job-prod-shared/cancel. A route that carries its
//     targets in a JSON body (a bulk restart's "names") gets, per scope,
//     json conditions on the body fields that name them, the scope's
//     selector: an allowed scope's one rule allows a body whose every
//     target in every field it matches; where the grant holds scopes for
//     a person, one rule per route (json_match = "every", before the
//     allowed ones) asks about a body every target of which some scope
//     of the grant matches, so that a body naming anything else, or one
//     the gateway cannot read, is refused by the default outright, not
//     put to a person (the credential would refuse it, all or none).
//     A body no rule matches goes to the default,
//     except on a route whose body may name a prefix of its targets (a
//     recursive delete): there a held scope's rule also asks about every
//     prefix of its glob (else a prefix such as "dev/alex/b" would reach
//     a held item through the credential, which holds it, without
//     asking), and after every json rule the route itself is allowed,
//     the service checking each target against the credential (all or
//     none).
//
// A request no rule matches is decided by the section's default. A
// selector with no path glob equivalent (an escaped "*") leaves its
// placeholder at the section's any value, and a note says so: the
// gateway then allows more than the credential, which still checks.
func httpRules(allow, ask []string, op *policy.Operator) ([]policies.HTTPHost, []string, error) {
	h := op.HTTP
	if h == nil {
		return nil, nil, nil
	}
	parse := func(grant []string) ([]scope.Scope, error) {
		var out []scope.Scope
		for _, g := range grant {
			sc, err := scope.Parse(g)
			if err != nil {
				return nil, fmt.Errorf("operator policy %q: grant %q: %w", op.Family, g, err)
			}
			out = append(out, sc)
		}
		return out, nil
	}
	allowed, err := parse(allow)
	if err != nil {
		return nil, nil, err
	}
	held, err := parse(ask)
	if err != nil {
		return nil, nil, err
	}
	var rules []policies.HTTPRule
	add := func(r policies.HTTPRule) {
		// A rule that matches what an earlier one matches never decides.
		if !slices.ContainsFunc(rules, func(o policies.HTTPRule) bool {
			return o.Path == r.Path && slices.Equal(o.Methods, r.Methods) && slices.Equal(o.Refs, r.Refs) && o.JSONMatch == r.JSONMatch &&
				slices.EqualFunc(o.JSON, r.JSON, func(a, b policies.HTTPJSONMatch) bool { return a.Field == b.Field && slices.Equal(a.Values, b.Values) })
		}) {
			rules = append(rules, r)
		}
	}
	var notes []string
	glob := func(sc scope.Scope, key string) string {
		g, note := selectorGlob(sc, key, h.Any[key])
		if note != "" && !slices.Contains(notes, note) {
			notes = append(notes, note)
		}
		return g
	}
	// expand fills a template's placeholders with sc's selector globs.
	expand := func(sc scope.Scope, tmpl string) (string, error) {
		vars := map[string]string{}
		for _, k := range policy.Placeholders(tmpl) {
			vars[k] = glob(sc, k)
		}
		v, err := policy.Expand(tmpl, vars)
		if err != nil {
			return "", fmt.Errorf("operator policy %q: %w", op.Family, err)
		}
		return v, nil
	}

	if p := h.Push; p != nil {
		if len(p.Protected) > 0 {
			add(policies.HTTPRule{Refs: slices.Clone(p.Protected), Action: policies.HTTPDeny})
		}
		refs := func(scopes []scope.Scope) []string {
			var out []string
			for _, sc := range scopes {
				if g := glob(sc, refKey); !slices.Contains(out, g) {
					out = append(out, g)
				}
			}
			return out
		}
		askRefs, allowRefs := refs(held), refs(allowed)
		if len(askRefs) > 0 {
			add(policies.HTTPRule{Refs: askRefs, Action: policies.HTTPAsk})
		}
		if len(allowRefs) > 0 {
			add(policies.HTTPRule{Refs: allowRefs, Action: policies.HTTPAllow})
		}
		if len(askRefs) > 0 && len(allowRefs) > 0 {
			// A push of held and allowed refs together is asked about.
			add(policies.HTTPRule{Refs: slices.Concat(askRefs, allowRefs), Action: policies.HTTPAsk})
		}
		add(policies.HTTPRule{Refs: []string{anyRef}, Action: policies.HTTPDeny})
	}
	for _, r := range h.Read {
		add(policies.HTTPRule{Methods: slices.Clone(r.Methods), Path: r.Path, Action: policies.HTTPAllow})
	}
	// A bulk route with held scopes is asked about only when every target
	// its body names is granted (held or allowed), at least as the
	// rules see it: one that names anything else is refused outright by
	// the default rather than put to a person (the credential would
	// refuse it, all or none). Its prefixes aside, a recursive delete
	// cannot be so resolved (below).
	if len(held) > 0 {
		type bulk struct {
			rule   policies.HTTPRule
			values map[string][]string
			held   bool
		}
		var order []string
		byPath := map[string]*bulk{}
		for _, side := range []struct {
			scopes []scope.Scope
			held   bool
		}{{held, true}, {allowed, false}} {
			for _, sc := range side.scopes {
				for _, r := range h.Change {
					if len(r.JSON) == 0 || len(r.Prefixes) > 0 {
						continue
					}
					path, err := expand(sc, r.Path)
					if err != nil {
						return nil, nil, err
					}
					key := strings.Join(r.Methods, ",") + " " + path
					b := byPath[key]
					if b == nil {
						b = &bulk{rule: policies.HTTPRule{Methods: slices.Clone(r.Methods), Path: path, Action: policies.HTTPAsk, JSONMatch: policies.JSONMatchEvery},
							values: map[string][]string{}}
						byPath[key] = b
						order = append(order, key)
					}
					b.held = b.held || side.held
					for field, tmpl := range r.JSON {
						v, err := expand(sc, tmpl)
						if err != nil {
							return nil, nil, err
						}
						if !slices.Contains(b.values[field], v) {
							b.values[field] = append(b.values[field], v)
						}
					}
				}
			}
		}
		for _, key := range order {
			b := byPath[key]
			if !b.held {
				continue
			}
			for _, field := range slices.Sorted(maps.Keys(b.values)) {
				b.rule.JSON = append(b.rule.JSON, policies.HTTPJSONMatch{Field: field, Values: b.values[field]})
			}
			add(b.rule)
		}
	}

	// A route whose body may name a prefix of its targets is, after its
	// json rules, left to the credential.
	var prefixed []policies.HTTPRule
	for _, side := range []struct {
		scopes []scope.Scope
		action string
	}{{held, policies.HTTPAsk}, {allowed, policies.HTTPAllow}} {
		for _, sc := range side.scopes {
			for _, r := range h.Change {
				path, err := expand(sc, r.Path)
				if err != nil {
					return nil, nil, err
				}
				if len(r.JSON) == 0 {
					add(policies.HTTPRule{Methods: slices.Clone(r.Methods), Path: path, Action: side.action})
					continue
				}
				// The targets travel in the body: a held scope asks
				// about a body any field of which names one of its
				// targets (one rule per field); an allowed scope allows
				// a body only if every field's targets are its own (one
				// rule with a condition per field, all of which must
				// hold: a rule per field would allow a body by one field
				// whatever the others name).
				allowRule := policies.HTTPRule{Methods: slices.Clone(r.Methods), Path: path, Action: side.action}
				for _, field := range slices.Sorted(maps.Keys(r.JSON)) {
					tmpl := r.JSON[field]
					v, err := expand(sc, tmpl)
					if err != nil {
						return nil, nil, err
					}
					values := []string{v}
					if side.action == policies.HTTPAsk && slices.Contains(r.Prefixes, field) {
						// A prefix reaches a held item when it is a
						// prefix of one: held too.
						values = append(prefixGlobs(v), v)
					}
					m := policies.HTTPJSONMatch{Field: field, Values: values}
					if side.action == policies.HTTPAsk && len(r.Prefixes) == 0 {
						continue // the bulk rule above
					}
					if side.action == policies.HTTPAllow {
						allowRule.JSON = append(allowRule.JSON, m)
						continue
					}
					add(policies.HTTPRule{Methods: slices.Clone(r.Methods), Path: path, Action: side.action,
						JSON: []policies.HTTPJSONMatch{m}})
				}
				if side.action == policies.HTTPAllow {
					add(allowRule)
				}
				if len(r.Prefixes) > 0 {
					prefixed = append(prefixed, policies.HTTPRule{Methods: slices.Clone(r.Methods), Path: path, Action: policies.HTTPAllow})
				}
			}
		}
	}

	for _, r := range prefixed {
		add(r)
	}

	var blocks []policies.HTTPHost
	for _, host := range op.Service.Hosts {
		blocks = append(blocks, policies.HTTPHost{Host: host, Rules: slices.Clone(rules), Default: h.Default})
	}
	// Checked as the gateway will compile them, so that a bad selector
	// fails here rather than denying every request of the session.
	if _, err := httprule.Compile(blocks); err != nil {
		return nil, nil, fmt.Errorf("operator policy %q: http rules: %w", op.Family, err)
	}
	return blocks, notes, nil
}

// selectorGlob returns the glob of the egress `http` rules that covers
// every value the selector of sc on key matches; any when sc has no such
// selector, or when it cannot be written as one (then with a note).
//
// The two grammars agree within a segment ("*" never crosses "/"); a
// scope's "**" crosses "/" anywhere, the rules' only as a whole segment,
// so a segment holding "**" becomes "**", which covers it and more. An
// escaped "*" or "\" has no equivalent, nor has an empty, "." or ".."
// segment (no cleaned path has one).
func selectorGlob(sc scope.Scope, key, any string) (string, string) {
	var pat string
	for _, sel := range sc.Selectors() {
		if sel.Key == key {
			pat = sel.Pattern
		}
	}
	if pat == "" {
		return any, ""
	}
	widen := func(why string) (string, string) {
		return any, fmt.Sprintf("http rules: %s=%s %s; the rule allows %s=%s and leaves the rest to the credential", key, pat, why, key, any)
	}
	if strings.ContainsRune(pat, '\\') {
		return widen("holds an escape, which path globs do not have")
	}
	segs := strings.Split(pat, "/")
	for i, s := range segs {
		switch {
		case s == "" || s == "." || s == "..":
			return widen("has an empty, \".\" or \"..\" segment")
		case strings.Contains(s, "**"):
			segs[i] = "**"
		}
	}
	return strings.Join(segs, "/"), ""
}

// prefixGlobs returns globs matching every proper prefix of a string the
// glob g matches, one per "/"-separated segment of g up to its first
// "**", which covers every prefix through it: for "dev/alex/*-4812/**",
// "*", "dev/*", "dev/alex/*" and "dev/alex/*-4812/**"; for "dev/**/x",
// "*" and "dev/**" (each "*" also matching the segment's own beginning).
// They match more than the prefixes (any first segment), which only
// holds more.
func prefixGlobs(g string) []string {
	segs := strings.Split(g, "/")
	var out []string
	for i := range segs {
		if segs[i] == "**" {
			// Everything below: any prefix through it is covered.
			out = append(out, strings.Join(segs[:i+1], "/"))
			break
		}
		out = append(out, strings.Join(append(slices.Clone(segs[:i]), "*"), "/"))
	}
	return out
}
