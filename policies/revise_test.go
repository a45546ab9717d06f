package policies

import (
	"reflect"
	"slices"
	"testing"
	"time"
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
		{"credential.git", ReasonEnvCredential, func(p *Policy) {
			p.Credentials = []Credential{{Name: "git", Deliver: DeliverEnv, EnvVar: "GIT_TOKEN"}}
		}},
		{"credential.git", ReasonCredentialDir, func(p *Policy) { p.Credentials = []Credential{{Name: "git", Deliver: DeliverFile}} }},
		{"secret.k", ReasonSecretAdded, func(p *Policy) { p.Secrets = []Secret{{Name: "k"}} }},
		{"approval", ReasonNotYet, func(p *Policy) { p.Approval = &Approval{} }},
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

func cred(name string, scopes ...string) Credential {
	return Credential{Name: name, Issuer: "airlock", Audience: name + ".test", Scopes: scopes,
		TTL: DefaultCredentialTTL, Deliver: DeliverFile}
}

func TestDiffCredentials(t *testing.T) {
	env := func(c Credential, v string) Credential { c.Deliver, c.EnvVar = DeliverEnv, v; return c }
	gw := func(c Credential) Credential { c.Deliver = DeliverGateway; return c }
	at := func(c Credential, p string) Credential { c.Path = p; return c }
	running := []Credential{
		cred("keep", "jobs.list"), cred("narrow", "jobs.cancel owner=*"), cred("drop", "x"),
		env(cred("envdrop", "x"), "ENVDROP"), env(cred("envkeep", "x"), "ENVKEEP"), gw(cred("gw", "x")),
		at(cred("home", "x"), "/home/agent/.tok/home"),
	}
	for _, c := range []struct {
		name    string
		revised []Credential
		want    CredentialChange
		refused []string // fields
	}{
		{"same", running, CredentialChange{Kept: []string{"keep", "narrow", "drop", "envdrop", "envkeep", "gw", "home"}}, nil},
		{
			name: "narrowed, removed, added, kept",
			revised: []Credential{
				cred("narrow", "jobs.cancel owner=alex"), cred("keep", "jobs.list"), env(cred("envkeep", "x"), "ENVKEEP"),
				gw(cred("gw", "y")), at(cred("home", "x"), "/home/agent/.tok/home"), cred("new", "z"),
				at(cred("new2", "z"), "/home/agent/.tok/new2"),
			},
			want: CredentialChange{
				Added: []string{"new", "new2"}, Removed: []string{"drop", "envdrop"},
				Changed: []string{"narrow", "gw"}, Kept: []string{"keep", "envkeep", "home"},
			},
		},
		{
			name: "audience, ttl, issuer, path and delivery change",
			revised: func() []Credential {
				out := slices.Clone(running)
				out[0].Audience = "other.test"
				out[1].TTL = Duration(time.Minute)
				out[2].Issuer = "vault"
				out[3] = cred("envdrop", "x")                            // env to file
				out[5] = cred("gw", "x")                                 // gateway to file
				out[6] = at(cred("home", "x"), "/home/agent/.tok/moved") // same directory
				return out
			}(),
			want: CredentialChange{Changed: []string{"keep", "narrow", "drop", "envdrop", "gw", "home"}, Kept: []string{"envkeep"}},
		},
		{
			name:    "an env credential cannot be changed or added",
			revised: append(slices.Clone(running[:4]), env(cred("envkeep", "y"), "ENVKEEP"), gw(cred("gw", "x")), env(cred("envnew", "x"), "ENVNEW"), running[6]),
			want:    CredentialChange{Added: []string{"envnew"}, Changed: []string{"envkeep"}, Kept: []string{"keep", "narrow", "drop", "envdrop", "gw", "home"}},
			refused: []string{"credential.envkeep", "credential.envnew"},
		},
		{
			name:    "a file credential moved to an unmounted directory",
			revised: append(slices.Clone(running[:6]), at(cred("home", "x"), "/etc/tok/home"), at(cred("new", "x"), "/opt/new")),
			want:    CredentialChange{Added: []string{"new"}, Changed: []string{"home"}, Kept: []string{"keep", "narrow", "drop", "envdrop", "envkeep", "gw"}},
			refused: []string{"credential.home", "credential.new"},
		},
		{"all removed", nil, CredentialChange{Removed: []string{"keep", "narrow", "drop", "envdrop", "envkeep", "gw", "home"}}, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			run, rev := revisable(), revisable()
			run.Credentials, rev.Credentials = slices.Clone(running), c.revised
			d := Diff(run, rev)
			if !reflect.DeepEqual(d.Credentials, c.want) {
				t.Errorf("Diff credentials\n got %+v\nwant %+v", d.Credentials, c.want)
			}
			var fields []string
			for _, r := range d.Refused {
				fields = append(fields, r.Field)
			}
			if !slices.Equal(fields, c.refused) {
				t.Errorf("refused %+v, want fields %v", d.Refused, c.refused)
			}
			if d.Changed() != (len(c.want.Added)+len(c.want.Removed)+len(c.want.Changed) > 0) {
				t.Errorf("Changed() = %v", d.Changed())
			}
			if p := Revised(run, rev); !reflect.DeepEqual(emptyNil(p.Credentials), emptyNil(c.revised)) {
				t.Errorf("Revised credentials %+v, want %+v", p.Credentials, c.revised)
			}
		})
	}
}

func startsWith(s, p string) bool { return len(s) >= len(p) && s[:len(p)] == p }

func TestDiffHTTPAndSecrets(t *testing.T) {
	run := revisable()
	run.Egress.HTTP = []HTTPHost{
		{Host: "a.test", Default: HTTPDeny},
		{Host: "b.test", Rules: []HTTPRule{{Methods: []string{"GET"}, Action: HTTPAllow}}},
		{Host: "c.test", Default: HTTPAsk},
	}
	run.Credentials = []Credential{{Name: "api", Issuer: "airlock", Audience: "api.test", Deliver: DeliverGateway}}
	run.Secrets = []Secret{
		{Name: "kept", From: "env:K", Inject: []SecretInject{{Host: "a.test", Bearer: true}}},
		{Name: "moved", From: "env:M", Inject: []SecretInject{{Host: "a.test", Bearer: true}}},
		{Name: "gone", From: "env:G"},
		{Name: "token", From: "env:T", Inject: []SecretInject{{Host: "b.test", Bearer: true}}},
	}
	rev := run.Clone()
	rev.Egress.HTTP = []HTTPHost{
		{Host: "a.test", Default: HTTPDeny},
		{Host: "b.test", Rules: []HTTPRule{{Methods: []string{"GET", "POST"}, Action: HTTPAllow}}},
		{Host: "d.test", Default: HTTPAsk},
	}
	rev.Egress.Inspect = InspectAll
	rev.Secrets = []Secret{
		rev.Secrets[0],
		{Name: "moved", From: "env:M", Inject: []SecretInject{{Host: "b.test", Bearer: true}}},
		{Name: "token", From: "credential:api", Inject: []SecretInject{{Host: "b.test", Bearer: true}}},
	}
	d := Diff(run, rev)
	if len(d.Refused) > 0 {
		t.Fatalf("refused: %+v", d.Refused)
	}
	for _, c := range []struct {
		name      string
		got, want []string
	}{
		{"http added", d.HTTP.Added, []string{"b.test", "d.test"}},
		{"http removed", d.HTTP.Removed, []string{"b.test", "c.test"}},
		{"http kept", d.HTTP.Kept, []string{"a.test"}},
		{"secrets changed", d.Secrets.Changed, []string{"moved", "token"}},
		{"secrets removed", d.Secrets.Removed, []string{"gone"}},
		{"secrets kept", d.Secrets.Kept, []string{"kept"}},
		// The secret now takes the credential's token: a fresh one is
		// minted for the gateway.
		{"credentials changed", d.Credentials.Changed, []string{"api"}},
		{"credentials kept", d.Credentials.Kept, nil},
	} {
		if !slices.Equal(c.got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, c.got, c.want)
		}
	}
	if !d.Inspect || !d.L7Changed() || !d.Changed() {
		t.Errorf("inspect %v, L7Changed %v, Changed %v", d.Inspect, d.L7Changed(), d.Changed())
	}
	p := Revised(run, rev)
	if !reflect.DeepEqual(p.Egress.HTTP, rev.Egress.HTTP) || p.Egress.Inspect != InspectAll || !reflect.DeepEqual(p.Secrets, rev.Secrets) {
		t.Errorf("Revised: %+v %q %+v", p.Egress.HTTP, p.Egress.Inspect, p.Secrets)
	}

	moved := run.Clone()
	moved.Secrets[0].EnvVar = "OTHER"
	if d := Diff(run, moved); len(d.Refused) != 1 || d.Refused[0].Field != "secret.kept" || d.Refused[0].Reason != ReasonSecretDelivery {
		t.Errorf("placeholder moved: %+v", d.Refused)
	}
}
