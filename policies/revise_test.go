package policies

import (
	"slices"
	"testing"
)

func revisable() *Policy {
	return &Policy{
		Label: "t", Image: "img", Command: []string{"sleep", "1"}, User: "1000:1000",
		Workspaces: []Workspace{{HostPath: "/src", Target: "/workspace", Mode: ModeOverlay}},
		Egress:     &Egress{Allow: []string{"a.test", "B.test:443", "10.0.0.0/8"}, Deny: []string{"x.a.test"}},
	}
}

func TestDiffEgressEntries(t *testing.T) {
	run, rev := revisable(), revisable()
	rev.Command = nil // keeps the running command
	rev.Egress.Allow = []string{"b.test:443", "c.test", "10.0.0.0/8", "c.test"}
	rev.Egress.Deny = nil
	d := Diff(run, rev)
	if len(d.Refused) > 0 {
		t.Fatalf("refused %v", d.Refused)
	}
	if !d.Changed() {
		t.Fatal("Changed() = false")
	}
	for _, c := range []struct {
		name      string
		got, want []string
	}{
		{"allow added", d.Allow.Added, []string{"c.test"}},
		{"allow removed", d.Allow.Removed, []string{"a.test"}},
		{"allow kept", d.Allow.Kept, []string{"b.test:443", "10.0.0.0/8"}},
		{"deny removed", d.Deny.Removed, []string{"x.a.test"}},
		{"deny added", d.Deny.Added, nil},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, c.got, c.want)
		}
	}
	p := Revised(run, rev)
	if !slices.Equal(p.Egress.Allow, rev.Egress.Allow) || p.Egress.Deny != nil || !slices.Equal(p.Command, run.Command) {
		t.Errorf("Revised: %+v %+v", p.Egress, p.Command)
	}
	if run.Egress.Allow[0] != "a.test" {
		t.Error("Revised changed the running policy")
	}
	if d := Diff(run, revisable()); d.Changed() || len(d.Refused) > 0 {
		t.Errorf("same policy: %+v", d)
	}
}

func TestDiffRefusesWhatCannotChange(t *testing.T) {
	for _, c := range []struct {
		field  string
		reason string
		change func(p *Policy)
	}{
		{"image", ReasonFixed, func(p *Policy) { p.Image = "other" }},
		{"user", ReasonFixed, func(p *Policy) { p.User = "0:0" }},
		{"command", ReasonFixed, func(p *Policy) { p.Command = []string{"true"} }},
		{"workspace", ReasonFixed, func(p *Policy) { p.Workspaces[0].Protect = []string{"x"} }},
		{"mount", ReasonFixed, func(p *Policy) { p.Mounts = []Mount{{HostPath: "/m", Target: "/m"}} }},
		{"resources", ReasonNotYet, func(p *Policy) { p.Resources.CPUs = 2 }},
		{"credential", ReasonNotYet, func(p *Policy) { p.Credentials = []Credential{{Name: "git"}} }},
		{"secret", ReasonNotYet, func(p *Policy) { p.Secrets = []Secret{{Name: "k"}} }},
		{"approval", ReasonNotYet, func(p *Policy) { p.Approval = &Approval{} }},
		{"egress.http", ReasonNotYet, func(p *Policy) { p.Egress.HTTP = []HTTPHost{{Host: "a.test"}} }},
		{"egress.ipv6", ReasonNotYet, func(p *Policy) { p.Egress.IPv6 = true }},
		{"egress", ReasonFixed, func(p *Policy) { p.Egress = nil }},
	} {
		rev := revisable()
		c.change(rev)
		rev.Egress = func() *Egress {
			if rev.Egress == nil {
				return nil
			}
			rev.Egress.Allow = append(rev.Egress.Allow, "new.test")
			return rev.Egress
		}()
		d := Diff(revisable(), rev)
		if len(d.Refused) != 1 || d.Refused[0].Field != c.field || !startsWith(d.Refused[0].Reason, c.reason) {
			t.Errorf("%s: refused %+v, want the field with %q", c.field, d.Refused, c.reason)
		}
	}
	rev := revisable()
	rev.Image, rev.User = "other", "0:0"
	if d := Diff(revisable(), rev); len(d.Refused) != 2 || d.Refused[0].Field != "image" || d.Refused[1].Field != "user" {
		t.Errorf("two fields: %+v", d.Refused)
	}
}

func startsWith(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }
