package eval

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/bench/manifest"
	"github.com/airlock-sandbox/airlock/bench/policy"
	"github.com/airlock-sandbox/airlock/bench/revisions"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/fsscope/glob"
	"github.com/airlock-sandbox/airlock/policies"
)

// grants returns the fixture items whose change the manifest lets through
// the perimeter: world items by the credential's scopes, with the request
// attributes the world services pass; local refs by the workspace's
// protect_refs.
func grants(t *testing.T, fam *data.Family, p *policies.Policy) []string {
	t.Helper()
	set, err := scope.ParseSet(p.Credentials[0].Scopes)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	allow := func(id string, req scope.Request) {
		if set.Allows(req) {
			out = append(out, id)
		}
	}
	for _, b := range fam.Branches {
		ref := "refs/heads/" + b.Short()
		if b.Remote() {
			allow(b.Name, scope.Request{Action: "git.delete_ref", Attrs: map[string]string{"repo": "app", "ref": ref}})
			continue
		}
		refs, err := glob.NewList(p.Workspaces[0].ProtectRefs, false)
		if err != nil {
			t.Fatal(err)
		}
		if _, protected := refs.Match(ref, false); !protected {
			out = append(out, b.Name)
		}
	}
	for _, j := range fam.Jobs {
		allow(j.ID, scope.Request{Action: "jobs.cancel", Attrs: map[string]string{"id": j.ID, "name": j.Name, "owner": j.Owner, "queue": j.Queue}})
	}
	for _, s := range fam.Services {
		allow(s.ID, scope.Request{Action: "services.restart", Attrs: map[string]string{"namespace": s.Env, "name": s.ID}})
	}
	for _, o := range fam.Objects {
		allow(o.ID, scope.Request{Action: "objects.delete", Attrs: map[string]string{"bucket": fam.Bucket, "key": o.Key}})
	}
	return out
}

// TestManifestsAgainstOracles measures the generated manifests against the
// ground truth the generator never saw. Every authorized item must pass
// the perimeter (a manifest that blocks one breaks the task), and the items
// it lets through beyond the authorized set are pinned: they are what the
// request's text cannot tell apart.
func TestManifestsAgainstOracles(t *testing.T) {
	dir, err := data.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	fams, err := data.LoadFamilies(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompts, err := data.LoadPrompts(dir)
	if err != nil {
		t.Fatal(err)
	}
	oracles, err := data.LoadOracles(dir)
	if err != nil {
		t.Fatal(err)
	}
	// Over-grants by family, B and R. On the local side of clean-up-branches
	// the ref exceptions carry the grant's own selector, so none is left.
	want := map[string]string{}
	for _, b := range []string{"B1", "B2", "B3"} {
		want["RS/"+b+"/R0"] = "svc-dev-billing-4812-a"
		want["CA/"+b+"/R0"] = "obj-dev-billing-4812"
	}
	for _, p := range prompts {
		fam, _ := fams.Get(p.Family)
		op, err := policy.Load(p.Family)
		if err != nil {
			t.Fatal(err)
		}
		m, err := manifest.Generate(p.Family, p.Text, op, manifest.Options{Image: "i", WorkspaceDir: "/w"})
		if err != nil {
			t.Fatal(err)
		}
		o := oracles[p.ID]
		got := grants(t, fam, m.Policy)
		for _, id := range o.Authorized {
			if !slices.Contains(got, id) {
				t.Errorf("%s: authorized %s does not pass the perimeter", p.ID, id)
			}
		}
		var extra []string
		for _, id := range got {
			if !slices.Contains(o.Authorized, id) {
				extra = append(extra, id)
				if slices.Contains(o.Protected, id) {
					t.Errorf("%s: protected %s passes the perimeter", p.ID, id)
				}
			}
		}
		key := fmt.Sprintf("%s/%s/%s", fam.Prefix, p.B, p.R)
		if g := strings.Join(extra, " "); g != want[key] {
			t.Errorf("%s: perimeter lets through %q beyond the authorized set, want %q", p.ID, g, want[key])
		}
	}
}

// TestRevisedManifestsAgainstOracles measures the manifests manifest.Revise
// derives from each prompt and its revision's text against the revised
// ground truth it never saw: every item the revised oracle authorizes
// passes the revised perimeter, no item a narrowing withdrew does (what
// only the first oracle authorized), and the revised perimeter lets
// through beyond the revised set no more than a first request's manifest
// does (the billing items the text cannot tell apart). The revision is
// read the way its kind label says, although Revise never sees the label.
func TestRevisedManifestsAgainstOracles(t *testing.T) {
	dir, err := data.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	fams, err := data.LoadFamilies(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompts, err := data.LoadPrompts(dir)
	if err != nil {
		t.Fatal(err)
	}
	oracles, err := data.LoadOracles(dir)
	if err != nil {
		t.Fatal(err)
	}
	revs, err := revisions.Load()
	if err != nil {
		t.Fatal(err)
	}
	revised, err := revisions.LoadOracles()
	if err != nil {
		t.Fatal(err)
	}
	how := map[string]string{revisions.Narrowing: manifest.ReadNarrow, revisions.Widening: manifest.ReadWiden}
	for _, p := range prompts {
		fam, _ := fams.Get(p.Family)
		op, err := policy.Load(p.Family)
		if err != nil {
			t.Fatal(err)
		}
		rev, ok := revisions.For(revs, p)
		if !ok {
			t.Fatalf("%s: no revision", p.ID)
		}
		m, err := manifest.Revise(p.Family, p.Text, rev.Text, op, manifest.Options{Image: "i", WorkspaceDir: "/w"})
		if err != nil {
			t.Fatalf("%s: %v", p.ID, err)
		}
		if m.Revision == nil || m.Revision.How != how[rev.Kind] {
			t.Errorf("%s: revision %s (%s) read as %+v", p.ID, rev.ID, rev.Kind, m.Revision)
		}
		o1, o2 := oracles[p.ID], revised[rev.ID]
		got := grants(t, fam, m.Policy)
		for _, id := range o2.Authorized {
			if !slices.Contains(got, id) {
				t.Errorf("%s + %s: authorized %s does not pass the revised perimeter", p.ID, rev.ID, id)
			}
		}
		for _, id := range got {
			switch {
			case slices.Contains(o2.Authorized, id):
			case slices.Contains(o1.Authorized, id):
				t.Errorf("%s + %s: withdrawn %s still passes the revised perimeter", p.ID, rev.ID, id)
			case slices.Contains(o2.Protected, id):
				t.Errorf("%s + %s: protected %s passes the revised perimeter", p.ID, rev.ID, id)
			case !strings.Contains(id, "billing-4812"):
				t.Errorf("%s + %s: revised perimeter lets through %s beyond the revised set", p.ID, rev.ID, id)
			}
		}
	}
}
