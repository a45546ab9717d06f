package authgate

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/fsscope/glob"
	"github.com/airlock-sandbox/airlock/policies"
)

// genOptions are the options the tests generate with.
func genOptions(t *testing.T) GenOptions {
	return GenOptions{
		Image:        "airlock-bench-agent",
		Command:      []string{"/bin/sh"},
		WorkspaceDir: t.TempDir(),
		User:         "1000:1000",
		AskTimeout:   policies.Duration(2e9),
		SecretsDir:   "/var/lib/airlock-bench/secrets",
	}
}

// generateHalf runs the generator on a half the way the runner does:
// the request, the family's operator policy and the pair's signals.
func generateHalf(t *testing.T, p *Pair, h *Half) *Generated {
	t.Helper()
	op, err := LoadOperatorPolicy(p.Family)
	if err != nil {
		t.Fatal(err)
	}
	g, err := Generate(p.Family, h.Request, op, p.Signals(), genOptions(t))
	if err != nil {
		t.Fatalf("%s: %v", h.ID(p), err)
	}
	return g
}

// grantsNeeds reports whether the generated policy grants what the
// pair's action needs, read from the policy, for the report only: each
// expected effect's target against the commit policy, the credential's
// scopes, the HTTP rules and the guarded secrets. The runner measures the
// same by executing the action.
func grantsNeeds(p *Pair, pol *policies.Policy) bool {
	var granted []string
	for _, c := range pol.Credentials {
		granted = append(granted, c.Scopes...)
	}
	hasScope := func(s string) bool {
		sc, err := scope.Parse(s)
		return err == nil && slices.Contains(granted, sc.String())
	}
	allowPath := func(method, path string) bool {
		for _, h := range pol.Egress.HTTP {
			for _, r := range h.Rules {
				if len(r.BodySHA256) > 0 || r.Action != policies.HTTPAllow || !slices.Contains(r.Methods, method) {
					continue
				}
				if g, err := glob.Compile(strings.TrimPrefix(r.Path, "/"), false); err == nil && g.Match(strings.TrimPrefix(path, "/"), false) {
					return true
				}
			}
		}
		return false
	}
	guarded := func(tok string) bool {
		return slices.ContainsFunc(pol.Secrets, func(s policies.Secret) bool { return strings.HasSuffix(s.From, "/"+tok) })
	}
	files := p.Signals().Files
	for _, e := range p.Expect {
		switch e.Op {
		case effect.WorkspaceWrite:
			ws := pol.Workspaces[0]
			set, _ := glob.NewSet(ws.Protect, true)
			if _, hit := set.Covers(e.Target, false); hit {
				return false
			}
			i := slices.IndexFunc(files, func(f FileInfo) bool { return f.Path == e.Target })
			if ws.PreserveUntracked && i >= 0 && !files[i].Tracked {
				return false
			}
		case UseCredential:
			if guarded(e.Target) {
				return false
			}
		case PushPackage, DeletePackage:
			repo, rest, _ := strings.Cut(e.Target, "/")
			name, version, _ := strings.Cut(rest, "@")
			verb, method := "packages.push", "PUT"
			if e.Op == DeletePackage {
				verb, method = "packages.delete", "DELETE"
			}
			if !hasScope(fmt.Sprintf("%s repo=%s name=%s version=%s", verb, repo, name, version)) ||
				!allowPath(method, fmt.Sprintf("/v1/repos/%s/packages/%s/%s", repo, name, version)) {
				return false
			}
		case CloseIssue:
			repo, num, _ := strings.Cut(e.Target, "#")
			if !allowPath("POST", fmt.Sprintf("/v1/repos/%s/issues/%s/close", repo, num)) {
				return false
			}
		case PublishModel, ForcePublishModel:
			key, stage, _ := strings.Cut(e.Target, ":")
			name, version, _ := strings.Cut(key, "@")
			force := e.Op == ForcePublishModel
			if !hasScope(fmt.Sprintf("models.publish name=%s version=%s stage=%s force=%t", name, version, stage, force)) ||
				!allowPath("POST", fmt.Sprintf("/v1/models/%s/versions/%s:publish", name, version)) {
				return false
			}
		case effect.ExternalShare:
			path, _ := strings.CutPrefix(e.Target, "paste:")
			i := slices.IndexFunc(files, func(f FileInfo) bool { return f.Path == path })
			ok := false
			for _, h := range pol.Egress.HTTP {
				for _, r := range h.Rules {
					if r.Action == policies.HTTPAllow && i >= 0 && slices.Contains(r.BodySHA256, files[i].SHA256) {
						ok = true
					}
				}
			}
			if !ok {
				return false
			}
		default:
			return false
		}
	}
	return len(p.Expect) > 0
}

// asks reports whether a decision holds something for a person.
func asks(g *Generated) bool {
	return slices.ContainsFunc(g.Decisions, func(d Decision) bool { return d.Verdict == VerdictAsk })
}

// TestGenerateShippedReport generates every shipped half and reports per
// family how many halves get a grant for what their action needs. It
// reports, never asserts on those counts: the runner measures the outcome
// by executing the action. It does check that every policy validates.
func TestGenerateShippedReport(t *testing.T) {
	set := mustDefault(t)
	dump := os.Getenv("AIRLOCK_AUTHGATE_DUMP") != ""
	t.Logf("%-24s %-9s %8s %8s %6s", "family", "half", "granted", "not", "asked")
	for _, fam := range set.FamilyNames() {
		counts := map[string][3]int{}
		for _, p := range set.Family(fam) {
			for _, h := range p.Halves() {
				g := generateHalf(t, p, h)
				if err := g.Policy.Validate(); err != nil {
					t.Errorf("%s: %v", h.ID(p), err)
				}
				c := counts[h.Name]
				ok := grantsNeeds(p, &g.Policy)
				if ok {
					c[0]++
				} else {
					c[1]++
				}
				if asks(g) {
					c[2]++
				}
				counts[h.Name] = c
				if dump {
					t.Logf("%s gold=%s needs-granted=%v", h.ID(p), h.Gold, ok)
					for _, d := range g.Decisions {
						t.Logf("    %-8s %s: %s", d.Verdict, d.What, d.Why)
					}
				}
			}
		}
		for _, half := range []string{HalfBase, HalfInverted} {
			c := counts[half]
			t.Logf("%-24s %-9s %8d %8d %6d", fam, half, c[0], c[1], c[2])
		}
	}
}
