package policy

import (
	"slices"
	"strings"
	"testing"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/bench/data"
)

func loadFamilies(t *testing.T) *data.Families {
	t.Helper()
	dir, err := data.DefaultDir()
	if err != nil {
		t.Fatal(err)
	}
	fams, err := data.LoadFamilies(dir)
	if err != nil {
		t.Fatal(err)
	}
	return fams
}

// TestPoliciesMatchFamilies checks each shipped policy against the
// environment it describes: the lane phrases are exactly the lane texts of
// the family's R slots, the caller is the acting user, every fixture owner
// is known, and every host is in the world's zone.
func TestPoliciesMatchFamilies(t *testing.T) {
	fams := loadFamilies(t)
	all, err := LoadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(all) != len(data.FamilyNames) {
		t.Errorf("got %d policies, want %d", len(all), len(data.FamilyNames))
	}
	for _, fam := range fams.All() {
		t.Run(fam.Name, func(t *testing.T) {
			op, ok := all[fam.Name]
			if !ok {
				t.Fatalf("no policy")
			}
			if op.Caller != fam.ActingUser {
				t.Errorf("caller %q, acting user %q", op.Caller, fam.ActingUser)
			}
			var phrases []string
			for _, l := range op.Lanes {
				phrases = append(phrases, l.Phrases...)
			}
			var slotLanes []string
			for _, r := range fam.RSlots {
				slotLanes = append(slotLanes, r["lane"])
			}
			slices.Sort(phrases)
			slices.Sort(slotLanes)
			if !slices.Equal(phrases, slotLanes) {
				t.Errorf("lane phrases %q, R-slot lanes %q", phrases, slotLanes)
			}
			fixtureLanes := fam.Lanes()
			for _, l := range op.Lanes {
				if !slices.Contains(fixtureLanes, l.Name) {
					t.Errorf("lane %q is not a lane of the fixture %v", l.Name, fixtureLanes)
				}
			}
			for _, owner := range fam.Owners() {
				if owner == "repo" {
					continue // main's owner; main is protected by name
				}
				if _, ok := op.Owner(owner); !ok {
					t.Errorf("fixture owner %q is unknown to the policy", owner)
				}
			}
			for _, it := range fam.Items() {
				w, ok := op.Owner(it.Owner)
				if ok && w.Protected && !it.Protected && it.Owner != op.Caller {
					t.Errorf("owner %q is protected but its item %s is not marked protected", it.Owner, it.ID)
				}
			}
			for _, h := range op.Service.Hosts {
				if !strings.HasSuffix(h, ".test") {
					t.Errorf("host %q is outside the world's zone", h)
				}
			}
			for id, key := range op.IDIndex {
				i := slices.IndexFunc(fam.Objects, func(o data.Object) bool { return o.ID == id })
				if i < 0 || fam.Objects[i].Key != key {
					t.Errorf("id_index %s = %q does not match the bucket", id, key)
				}
			}
		})
	}
}

func TestLoadUnknown(t *testing.T) {
	if _, err := Load("nope"); !errdefs.IsNotFound(err) {
		t.Errorf("Load(nope) = %v, want not found", err)
	}
}

func TestValidate(t *testing.T) {
	base, err := Load(data.CancelJobs)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		modify func(o *Operator)
		want   string
	}{
		{"valid", func(*Operator) {}, ""},
		{"no caller", func(o *Operator) { o.Caller = "" }, "caller is empty"},
		{"caller unknown", func(o *Operator) { o.Caller = "zed" }, "not among the owners"},
		{"bad read scope", func(o *Operator) { o.ReadScopes = []string{"jobs.lst"} }, "unknown action"},
		{"unknown selector key", func(o *Operator) { o.Targets.Owned = "owner={owner} colour=red" }, "not passed by the service"},
		{"missing lane var", func(o *Operator) { o.Targets.Owned = "owner={owner} queue={partition}" }, "no value for partition"},
		{"duplicate phrase", func(o *Operator) { o.Lanes[1].Phrases = []string{"Workbench lane"} }, "names both lane"},
		{"bad where", func(o *Operator) { o.Lanes[0].Where = "moon" }, `where is "moon"`},
		{"workspace lane without owner refs", func(o *Operator) { o.Lanes[0].Where = WhereWorkspace }, "no owner_refs"},
		{"bad default lane", func(o *Operator) { o.DefaultLane = "nope" }, "default_lane"},
		{"no service", func(o *Operator) { o.Service = Service{} }, "service needs"},
		{"ticket next to a wildcard", func(o *Operator) { o.Targets.Ticket = "owner={owner} queue={queue} id=job-{ticket}*" }, "next to"},
		{"http default ask", func(o *Operator) { o.HTTP.Default = "ask" }, `default "ask"`},
		{"http route without a why", func(o *Operator) { o.HTTP.Read[0].Why = "" }, "needs methods and a why"},
		{"http read placeholder", func(o *Operator) { o.HTTP.Read[0].Path = "/v1/jobs/{id}" }, "has placeholders"},
		{"http placeholder not a selector key", func(o *Operator) { o.HTTP.Change[1].Path = "/v1/jobs/{job}/cancel" }, "not a selector key"},
		{"http placeholder without any", func(o *Operator) { delete(o.HTTP.Any, "id") }, "has no value in any"},
		{"http path the gateway refuses", func(o *Operator) { o.HTTP.Change[1].Path = "/v1//jobs/{id}" }, "empty segment"},
		{"http lower-case method", func(o *Operator) { o.HTTP.Read[0].Methods = []string{"get"} }, "upper-case"},
		{"http push without refs", func(o *Operator) { o.HTTP.Push = &Push{Why: "x"} }, "selects no ref"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o := clone(t, base)
			tt.modify(o)
			err := o.Validate()
			switch {
			case tt.want == "" && err != nil:
				t.Fatalf("Validate() = %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.want)
			case err != nil && !errdefs.IsInvalidArgument(err):
				t.Fatalf("Validate() = %v, not invalid argument", err)
			}
		})
	}
}

func clone(t *testing.T, o *Operator) *Operator {
	t.Helper()
	b, err := Source(o.Family)
	if err != nil {
		t.Fatal(err)
	}
	c, err := parse("clone.json", b)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestExpand(t *testing.T) {
	tests := []struct {
		tmpl    string
		vars    map[string]string
		want    string
		wantErr bool
	}{
		{"owner={owner} queue={queue}", map[string]string{"owner": "alex", "queue": "dev"}, "owner=alex queue=dev", false},
		{"id=job-{env}-{ticket}-{tag}", map[string]string{"env": "dev", "ticket": "48*", "tag": "a"}, "id=job-dev-48*-a", false},
		{"no placeholders", nil, "no placeholders", false},
		{"x={missing}", map[string]string{}, "", true},
		{"{Upper} stays", nil, "{Upper} stays", false},
	}
	for _, tt := range tests {
		got, err := Expand(tt.tmpl, tt.vars)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("Expand(%q) = %q, %v; want %q, error %v", tt.tmpl, got, err, tt.want, tt.wantErr)
		}
	}
	if got := Placeholders("a={x} b={y} c={x}"); !slices.Equal(got, []string{"x", "y"}) {
		t.Errorf("Placeholders = %v", got)
	}
}

func TestUnknownFieldRejected(t *testing.T) {
	b, _ := Source(data.CancelJobs)
	bad := strings.Replace(string(b), `"caller"`, `"callr"`, 1)
	if _, err := parse("x.json", []byte(bad)); !errdefs.IsInvalidArgument(err) {
		t.Errorf("parse with unknown field = %v, want invalid argument", err)
	}
}
