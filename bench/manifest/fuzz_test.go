package manifest

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/credentials/scope"
)

var ticketPatternRE = regexp.MustCompile(`^([0-9]+\*?)?$`)

// FuzzGenerate checks the generator's invariants on any text: it yields a
// valid manifest; every grant is the family's action; no protected owner
// is ever granted; lanes are the policy's; the ticket pattern is digits
// with at most a trailing "*".
func FuzzGenerate(f *testing.F) {
	for _, tt := range []string{
		"delete my stale cleanup-auth branches for ticket range `48xx` on the shared-history side",
		"Cancel team's jobs on the shared-use lane.",
		"Restart everyone's unhealthy services for ticket #4812 on the lower-risk lane.",
		"clean up the stale artifact `obj-dev-auth-4812-ckpt`. The intended lane is the workbench storage lane.",
		"delete `` ` `a b` ticket ticket range x",
		"cancel release's and sam's jobs, ticket 4812xx*, on the workbench lane and the shared-use lane",
		"delete `alex/**` and `\x01x` and `a\\b` on the shared-history side",
	} {
		for _, fam := range data.FamilyNames {
			f.Add(fam, tt)
		}
	}
	f.Fuzz(func(t *testing.T, family, text string) {
		if !slices.Contains(data.FamilyNames, family) {
			return
		}
		op := mustPolicy(t, family)
		m, err := Generate(family, text, op, testOpts)
		if err != nil {
			t.Fatalf("Generate(%q): %v", text, err)
		}
		req := m.Request
		if !ticketPatternRE.MatchString(req.TicketPattern) {
			t.Fatalf("ticket pattern %q from %q", req.TicketPattern, text)
		}
		for _, l := range req.Lanes {
			if _, ok := op.Lane(l); !ok {
				t.Fatalf("lane %q is not the policy's", l)
			}
		}
		for _, o := range req.Owners {
			if w, ok := op.Owner(o); ok && w.Protected {
				t.Fatalf("protected owner %q granted from %q", o, text)
			}
		}
		scopes := m.Policy.Credentials[0].Scopes
		for _, s := range scopes[len(op.ReadScopes):] {
			sc, err := scope.Parse(s)
			if err != nil {
				t.Fatalf("scope %q: %v", s, err)
			}
			if sc.Action() != op.Targets.Action {
				t.Fatalf("grant %q is not %s", s, op.Targets.Action)
			}
			if !req.Mutate {
				t.Fatalf("grant %q for a request that asks for no change", s)
			}
			for _, sel := range sc.Selectors() {
				if sel.Key == "owner" && !slices.Contains(req.Owners, sel.Pattern) {
					t.Fatalf("grant %q for owner %q outside %v", s, sel.Pattern, req.Owners)
				}
				if strings.Contains(strings.ReplaceAll(sel.Pattern, `\*`, ""), "**") && !strings.HasSuffix(sel.Pattern, "/**") {
					t.Fatalf("grant %q has a \"**\" that crosses names", s)
				}
			}
		}
	})
}
