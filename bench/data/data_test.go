package data

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func testDir(t *testing.T) string {
	t.Helper()
	dir, err := DefaultDir()
	if err != nil {
		t.Fatalf("DefaultDir: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, FamiliesFile)); err != nil {
		t.Fatalf("data directory %s: %v", dir, err)
	}
	return dir
}

func TestPromptsAndOracles(t *testing.T) {
	dir := testDir(t)
	fams, err := LoadFamilies(dir)
	if err != nil {
		t.Fatal(err)
	}
	prompts, err := LoadPrompts(dir)
	if err != nil {
		t.Fatal(err)
	}
	oracles, err := LoadOracles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(prompts) != 128 {
		t.Errorf("got %d prompts, want 128", len(prompts))
	}
	perFamily := map[string]int{}
	for _, p := range prompts {
		perFamily[p.Family]++
		fam, err := fams.Get(p.Family)
		if err != nil {
			t.Fatalf("%s: %v", p.ID, err)
		}
		prefix, s, b, r, err := Axes(p.ID)
		if err != nil {
			t.Fatal(err)
		}
		if prefix != fam.Prefix || s != p.S || b != p.B || r != p.R {
			t.Errorf("%s: axes %s/%s/%s/%s disagree with the record", p.ID, prefix, s, b, r)
		}
		o, ok := oracles[p.ID]
		if !ok {
			t.Errorf("%s: no oracle", p.ID)
			continue
		}
		if o.Family != p.Family {
			t.Errorf("%s: oracle family %q, prompt family %q", p.ID, o.Family, p.Family)
		}
		if !slices.Contains(fam.Lanes(), o.Lane) {
			t.Errorf("%s: oracle lane %q is not a fixture lane %v", p.ID, o.Lane, fam.Lanes())
		}
		for _, id := range slices.Concat(o.Authorized, o.MustPreserve, o.Protected) {
			it, ok := fam.Item(id)
			switch {
			case !ok:
				t.Errorf("%s: oracle item %q is not in the fixture", p.ID, id)
			case it.Lane != o.Lane:
				t.Errorf("%s: oracle item %q is in lane %q, oracle lane %q", p.ID, id, it.Lane, o.Lane)
			}
		}
		if got := render(t, fam, p); got != p.Text {
			t.Errorf("%s: text does not follow from the templates:\n got %q\nwant %q", p.ID, got, p.Text)
		}
	}
	for _, name := range FamilyNames {
		if perFamily[name] != 32 {
			t.Errorf("family %s has %d prompts, want 32", name, perFamily[name])
		}
	}
	ids := map[string]bool{}
	for _, p := range prompts {
		ids[p.ID] = true
	}
	for id := range oracles {
		if !ids[id] {
			t.Errorf("oracle %s has no prompt", id)
		}
	}
	if len(oracles) != 128 {
		t.Errorf("got %d oracles, want 128", len(oracles))
	}
}

// render formats a prompt from its family's templates the way the source's
// build_prompt_records does.
func render(t *testing.T, fam *Family, p Prompt) string {
	t.Helper()
	rslot := fam.RSlots[p.R]
	sub := func(s string, vars map[string]string) string {
		for k, v := range vars {
			s = strings.ReplaceAll(s, "{"+k+"}", v)
		}
		return s
	}
	vars := map[string]string{}
	for k, v := range rslot {
		vars[k] = v
	}
	vars["B_ref"] = sub(fam.BSlots[p.B].Ref, rslot)
	vars["B_ref_cap"] = sub(fam.BSlots[p.B].RefCap, rslot)
	vars["R_boundary"] = rslot["boundary"]
	return sub(fam.STemplates[p.S], vars)
}

func TestFixtures(t *testing.T) {
	fams, err := LoadFamilies(testDir(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := fams.Order; !slices.Equal(got, FamilyNames) {
		t.Errorf("order = %v, want %v", got, FamilyNames)
	}
	tests := []struct {
		family string
		items  int
		lanes  []string
		owners []string
	}{
		{CleanUpBranches, 18, []string{LaneLocal, LaneRemote}, []string{"repo", "alex", "alice", "release", "team"}},
		{CancelJobs, 14, []string{"dev", "prod-batch"}, []string{"alex", "sam", "team", "release"}},
		{RestartServices, 14, []string{"dev", "prod"}, []string{"alex", "sam", "team", "release"}},
		{CleanUpArtifacts, 14, []string{"dev", "prod"}, []string{"alex", "sam", "team", "release"}},
	}
	for _, tt := range tests {
		fam, err := fams.Get(tt.family)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(fam.Items()); n != tt.items {
			t.Errorf("%s: %d items, want %d", tt.family, n, tt.items)
		}
		if got := fam.Lanes(); !slices.Equal(got, tt.lanes) {
			t.Errorf("%s: lanes %v, want %v", tt.family, got, tt.lanes)
		}
		got := fam.Owners()
		slices.Sort(got)
		want := slices.Sorted(slices.Values(tt.owners))
		if !slices.Equal(got, want) {
			t.Errorf("%s: owners %v, want %v", tt.family, got, want)
		}
		if fam.ActingUser != "alex" {
			t.Errorf("%s: acting user %q", tt.family, fam.ActingUser)
		}
	}
	cb, _ := fams.Get(CleanUpBranches)
	if cb.Branches[0].Name != "alex/cleanup-auth-4812-old" || !cb.Branches[len(cb.Branches)-1].Remote() {
		t.Errorf("branches not in snapshot order: first %q, last %q", cb.Branches[0].Name, cb.Branches[len(cb.Branches)-1].Name)
	}
	ca, _ := fams.Get(CleanUpArtifacts)
	if ca.Bucket != "bench-artifacts" {
		t.Errorf("bucket = %q", ca.Bucket)
	}
	if _, err := fams.Get("nope"); !errdefs.IsNotFound(err) {
		t.Errorf("Get(nope) = %v, want not found", err)
	}
}

func TestAxes(t *testing.T) {
	tests := []struct {
		in      string
		want    [4]string
		wantErr bool
	}{
		{in: "CB-S0-B0-R0", want: [4]string{"CB", "S0", "B0", "R0"}},
		{in: "CA-S3-B2-R1", want: [4]string{"CA", "S3", "B2", "R1"}},
		{in: "X-S12-B0-R0", want: [4]string{"X", "S12", "B0", "R0"}},
		{in: "CB-S0-B0", wantErr: true},
		{in: "CB-B0-S0-R0", wantErr: true},
		{in: "CB-S-B0-R0", wantErr: true},
		{in: "CB-Sx-B0-R0", wantErr: true},
		{in: "-S0-B0-R0", wantErr: true},
		{in: "CB-S0-B0-R0-extra", wantErr: true},
	}
	for _, tt := range tests {
		p, s, b, r, err := Axes(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("Axes(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && [4]string{p, s, b, r} != tt.want {
			t.Errorf("Axes(%q) = %v, want %v", tt.in, [4]string{p, s, b, r}, tt.want)
		}
	}
}

func TestLoadMissing(t *testing.T) {
	dir := t.TempDir()
	if _, err := LoadOracles(dir); !errdefs.IsNotFound(err) {
		t.Errorf("LoadOracles(empty dir) = %v, want not found", err)
	}
	if err := os.WriteFile(filepath.Join(dir, PromptsFile), []byte(`[{"prompt_id":"CB-S0-B0-R1","family":"x","s_axis":"S0","b_axis":"B0","r_axis":"R0","prompt":"p"}]`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadPrompts(dir); !errdefs.IsInvalidArgument(err) {
		t.Errorf("LoadPrompts(axis mismatch) = %v, want invalid argument", err)
	}
}

func TestDefaultDirEnv(t *testing.T) {
	t.Setenv(EnvDir, "/somewhere")
	if d, err := DefaultDir(); err != nil || d != "/somewhere" {
		t.Errorf("DefaultDir() = %q, %v", d, err)
	}
}
