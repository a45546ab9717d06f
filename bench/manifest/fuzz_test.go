package manifest

import (
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/policies"
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

// FuzzRevise checks Revise's invariants on any revision of a request: it
// yields a valid manifest that differs from the request's own only in what
// the grant decides (the credential's scopes, the HTTP rules, the refs a
// commit may move, and an approval block), so that a running session can
// take it; it never grants a protected owner.
func FuzzRevise(f *testing.F) {
	originals := map[string]string{
		data.CleanUpBranches:  "delete my stale cleanup-auth branches for ticket range `48xx`. The intended side is the working-history side.",
		data.CancelJobs:       "cancel the stale job `job-dev-4812-a`. The intended lane is the workbench lane.",
		data.RestartServices:  "restart my unhealthy services for ticket range `48xx`. The intended lane is the shared-impact lane.",
		data.CleanUpArtifacts: "delete my stale artifact for ticket `4812`. The intended lane is the workbench storage lane.",
	}
	for _, tt := range []string{
		"Actually, only cancel my stale job for ticket `4812`; leave the rest as they are.",
		"Actually, you may also delete my stale artifacts for ticket range `48xx`, in the same lane.",
		"also restart team's services on the lower-risk lane",
		"just `svc-prod-gateway-rel` instead",
		"stop. don't touch anything",
		"only everyone's `main` on the shared-history side, as well",
		"",
	} {
		for _, fam := range data.FamilyNames {
			f.Add(fam, tt)
		}
	}
	f.Fuzz(func(t *testing.T, family, revision string) {
		original, ok := originals[family]
		if !ok {
			return
		}
		op := mustPolicy(t, family)
		first, err := Generate(family, original, op, testOpts)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Revise(family, original, revision, op, testOpts)
		if err != nil {
			t.Fatalf("Revise(%q): %v", revision, err)
		}
		if m.Revision == nil || !slices.Contains([]string{ReadWiden, ReadNarrow, ReadRestate}, m.Revision.How) {
			t.Fatalf("Revise(%q): reading %+v", revision, m.Revision)
		}
		if err := m.Policy.Validate(); err != nil {
			t.Fatalf("Revise(%q): invalid manifest: %v", revision, err)
		}
		for _, req := range append(slices.Clone(m.Granted), m.Request) {
			for _, o := range req.Owners {
				if w, ok := op.Owner(o); ok && w.Protected && req.Mutate {
					t.Fatalf("protected owner %q granted from %q", o, revision)
				}
			}
		}
		a, b := first.Policy.Clone(), m.Policy.Clone()
		for _, p := range []*policies.Policy{a, b} {
			p.Credentials[0].Scopes, p.Egress.HTTP, p.Approval = nil, nil, nil
			for i := range p.Workspaces {
				p.Workspaces[i].ProtectRefs = nil
			}
		}
		if !reflect.DeepEqual(a, b) {
			t.Fatalf("Revise(%q) changed more than the grant:\n%+v\n%+v", revision, a, b)
		}
	})
}
