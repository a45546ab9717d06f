package policies

import (
	"path"
	"reflect"
	"slices"
	"strings"
)

// Revision is the difference between a running session's policy and a
// revised one: what a revision (airlock update) would change, and what it
// cannot.
type Revision struct {
	// Allow and Deny are the egress entries added, removed and kept.
	Allow, Deny ListChange
	// HTTP are the hosts of the egress http rules added, removed, changed
	// (their rules or default) and kept; Inspect says egress inspect
	// changed. Both change what the L7 gateway terminates and decides.
	HTTP    ListChange
	Inspect bool
	// Credentials are the credentials added, removed, changed and kept.
	Credentials CredentialChange
	// Secrets are the secrets removed, changed (their source or the hosts
	// they are injected into) and kept. A secret cannot be added.
	Secrets SecretChange
	// Refused are the differences a running session cannot take, one per
	// field, in the policy's field order. A revision with any is refused
	// as a whole.
	Refused []Refusal
}

// ListChange is what a revision does to a list of entries, each in its
// canonical form.
type ListChange struct {
	Added   []string `json:"added,omitempty"`
	Removed []string `json:"removed,omitempty"`
	Kept    []string `json:"kept,omitempty"`
}

// Changed reports whether entries are added or removed.
func (c ListChange) Changed() bool { return len(c.Added) > 0 || len(c.Removed) > 0 }

// CredentialChange is what a revision does to a session's credentials,
// by name, each list in the revised policy's order (Removed in the running
// one's).
type CredentialChange struct {
	// Added are new: minted and delivered.
	Added []string `json:"added,omitempty"`
	// Removed are gone: their tokens are revoked and their files removed.
	Removed []string `json:"removed,omitempty"`
	// Changed differ in issuer, audience, scopes, ttl or delivery: their
	// tokens are revoked and a new one is minted and delivered.
	Changed []string `json:"changed,omitempty"`
	// Kept are the same: their tokens stand.
	Kept []string `json:"kept,omitempty"`
}

// Revises reports whether credentials are added, removed or changed.
func (c CredentialChange) Revises() bool {
	return len(c.Added)+len(c.Removed)+len(c.Changed) > 0
}

// SecretChange is what a revision does to a session's secrets, by name.
type SecretChange struct {
	// Removed are gone: the gateway no longer injects their values, and
	// their placeholders go out as they are.
	Removed []string `json:"removed,omitempty"`
	// Changed have a new source (its value read at the revision) or new
	// hosts to go to.
	Changed []string `json:"changed,omitempty"`
	Kept    []string `json:"kept,omitempty"`
}

// Revises reports whether secrets are removed or changed.
func (c SecretChange) Revises() bool { return len(c.Removed)+len(c.Changed) > 0 }

// Refusal is a field a revision may not change, and why.
type Refusal struct {
	Field  string `json:"field"`
	Reason string `json:"reason"`
}

// Reasons a field cannot be revised.
const (
	// ReasonFixed: the field shaped the sandbox when it was made.
	ReasonFixed = "cannot change on a running session"
	// ReasonNotYet: the field could change live, but airlock does not
	// revise it yet.
	ReasonNotYet = "not revisable yet (a revision changes egress allow, deny, http and inspect, credentials and secrets only)"
	// ReasonEnvCredential: a credential delivered in the environment
	// cannot reach a command that is already running.
	ReasonEnvCredential = "cannot be delivered to a running command's environment (remove the credential to revoke it, or deliver it as a file)"
	// ReasonCredentialDir: the directory of a file credential is mounted
	// when the sandbox is made.
	ReasonCredentialDir = "cannot be delivered: no running file credential's directory holds its path, and credential directories are mounted when the sandbox is made"
	// ReasonSecretAdded: a secret's placeholder reaches the sandbox when
	// it is made.
	ReasonSecretAdded = "cannot be added to a running session: its placeholder reaches the sandbox (environment or file) when the sandbox is made"
	// ReasonSecretDelivery: the same.
	ReasonSecretDelivery = "its env_var and path cannot change on a running session: the placeholder was delivered when the sandbox was made"
)

// Changed reports whether the revision changes anything.
func (r Revision) Changed() bool {
	return r.Allow.Changed() || r.Deny.Changed() || r.HTTP.Changed() || r.Inspect ||
		r.Credentials.Revises() || r.Secrets.Revises()
}

// L7Changed reports whether the revision changes what the L7 gateway
// decides beyond the names it lets through: http rules, inspect, secrets.
func (r Revision) L7Changed() bool {
	return r.HTTP.Changed() || r.Inspect || r.Secrets.Revises()
}

// Diff compares a running session's policy with a revised one, both
// validated with defaults applied (as admission leaves them). A revised
// policy without a command keeps the running command; its pool and
// terminal settings are not compared (they concern creating a session).
func Diff(running, revised *Policy) Revision {
	var r Revision
	refuse := func(field, reason string) { r.Refused = append(r.Refused, Refusal{Field: field, Reason: reason}) }
	differ := func(a, b any) bool { return !reflect.DeepEqual(a, b) }
	if running.Label != revised.Label {
		refuse("label", ReasonNotYet)
	}
	if running.Image != revised.Image {
		refuse("image", ReasonFixed)
	}
	if len(revised.Command) > 0 && !slices.Equal(running.Command, revised.Command) {
		refuse("command", ReasonFixed+": its command is running")
	}
	if differ(emptyNil(running.Env), emptyNil(revised.Env)) {
		refuse("env", ReasonFixed+": its command is running")
	}
	if running.User != revised.User {
		refuse("user", ReasonFixed)
	}
	if running.Workdir != revised.Workdir {
		refuse("workdir", ReasonFixed+": its command is running")
	}
	if running.Timeout != revised.Timeout {
		refuse("timeout", ReasonNotYet)
	}
	if !slices.Equal(running.Capabilities, revised.Capabilities) {
		refuse("capabilities", ReasonFixed)
	}
	if running.Resources != revised.Resources {
		refuse("resources", ReasonNotYet)
	}
	if differ(running.Workspaces, revised.Workspaces) {
		refuse("workspace", ReasonFixed+" (its mounts are made; protect and deny_read are "+ReasonNotYet+")")
	}
	if differ(running.Mounts, revised.Mounts) {
		refuse("mount", ReasonFixed)
	}
	switch {
	case (running.Egress == nil) != (revised.Egress == nil):
		refuse("egress", ReasonFixed+": its network namespace is made with the session (add or remove entries instead)")
	case running.Egress != nil:
		for _, f := range EgressUnrevisable(running.Egress, revised.Egress) {
			refuse("egress."+f, ReasonNotYet)
		}
		r.Allow = listChange(running.Egress.Allow, revised.Egress.Allow)
		r.Deny = listChange(running.Egress.Deny, revised.Egress.Deny)
		r.HTTP = httpChange(running.Egress.HTTP, revised.Egress.HTTP)
		r.Inspect = running.Egress.Inspect != revised.Egress.Inspect
	}
	var credRefused []Refusal
	r.Credentials, credRefused = credentialChange(running.Credentials, revised.Credentials)
	r.Refused = append(r.Refused, credRefused...)
	var secretRefused []Refusal
	r.Secrets, secretRefused = secretChange(running.Secrets, revised.Secrets)
	r.Refused = append(r.Refused, secretRefused...)
	// A secret that now takes a kept credential's token gets a fresh
	// one: the token is handed to the gateway only as it is minted.
	for _, name := range r.Secrets.Changed {
		sec := secretNamed(revised.Secrets, name)
		old := secretNamed(running.Secrets, name)
		cred, ok := strings.CutPrefix(sec.From, "credential:")
		if !ok || sec.From == old.From {
			continue
		}
		if i := slices.Index(r.Credentials.Kept, cred); i >= 0 {
			r.Credentials.Kept = slices.Delete(r.Credentials.Kept, i, i+1)
			r.Credentials.Changed = append(r.Credentials.Changed, cred)
		}
	}
	if differ(running.Approval, revised.Approval) {
		refuse("approval", ReasonNotYet)
	}
	return r
}

// Revised is running with the revision's egress entries and credentials:
// the policy a revision that Diff refused nothing of installs.
func Revised(running, revised *Policy) *Policy {
	p := running.Clone()
	if p.Egress != nil && revised.Egress != nil {
		p.Egress.Allow = slices.Clone(revised.Egress.Allow)
		p.Egress.Deny = slices.Clone(revised.Egress.Deny)
	}
	if p.Egress != nil && revised.Egress != nil {
		r := revised.Clone()
		p.Egress.HTTP, p.Egress.Inspect = r.Egress.HTTP, r.Egress.Inspect
	}
	r := revised.Clone()
	p.Credentials, p.Secrets = r.Credentials, r.Secrets
	return p
}

// httpChange compares the http host blocks of two egress blocks by host:
// a host whose rules or default differ is both removed and added (its
// block is replaced as a whole).
func httpChange(running, revised []HTTPHost) ListChange {
	before := map[string]HTTPHost{}
	for _, h := range running {
		before[h.Host] = h
	}
	var c ListChange
	after := map[string]bool{}
	for _, h := range revised {
		after[h.Host] = true
		old, ok := before[h.Host]
		switch {
		case ok && reflect.DeepEqual(old, h):
			c.Kept = append(c.Kept, h.Host)
		case ok:
			c.Removed = append(c.Removed, h.Host)
			c.Added = append(c.Added, h.Host)
		default:
			c.Added = append(c.Added, h.Host)
		}
	}
	for _, h := range running {
		if !after[h.Host] {
			c.Removed = append(c.Removed, h.Host)
		}
	}
	return c
}

// secretChange classifies the secrets of a revision by name, refusing
// those a running session cannot take: an added secret, and one whose
// placeholder would be delivered elsewhere (env_var, path).
func secretChange(running, revised []Secret) (SecretChange, []Refusal) {
	var c SecretChange
	var refused []Refusal
	after := map[string]bool{}
	for _, sec := range revised {
		after[sec.Name] = true
		old, ok := findSecret(running, sec.Name)
		switch {
		case !ok:
			refused = append(refused, Refusal{Field: "secret." + sec.Name, Reason: ReasonSecretAdded})
		case old.EnvVar != sec.EnvVar || old.Path != sec.Path:
			refused = append(refused, Refusal{Field: "secret." + sec.Name, Reason: ReasonSecretDelivery})
		case reflect.DeepEqual(emptyNil(old.Inject), emptyNil(sec.Inject)) && old.From == sec.From:
			c.Kept = append(c.Kept, sec.Name)
		default:
			c.Changed = append(c.Changed, sec.Name)
		}
	}
	for _, sec := range running {
		if !after[sec.Name] {
			c.Removed = append(c.Removed, sec.Name)
		}
	}
	return c, refused
}

func findSecret(secrets []Secret, name string) (Secret, bool) {
	for _, s := range secrets {
		if s.Name == name {
			return s, true
		}
	}
	return Secret{}, false
}

func secretNamed(secrets []Secret, name string) Secret {
	s, _ := findSecret(secrets, name)
	return s
}

// credentialChange classifies the credentials of a revision by name, and
// refuses those a running session cannot take: a credential added or
// changed to be delivered in the environment (the command's environment
// was fixed when it started), and a file credential whose directory no
// running file credential uses (the sandbox's credential directories were
// mounted when it was made). A removed credential is always taken: its
// tokens are revoked, even one in the command's environment, where the
// variable stays but no longer verifies.
func credentialChange(running, revised []Credential) (CredentialChange, []Refusal) {
	var c CredentialChange
	var refused []Refusal
	before := map[string]Credential{}
	dirs := map[string]bool{}
	for _, cr := range running {
		before[cr.Name] = cr
		if deliveredAsFile(cr) {
			dirs[path.Dir(cr.SandboxPath())] = true
		}
	}
	after := map[string]bool{}
	for _, cr := range revised {
		after[cr.Name] = true
		old, ok := before[cr.Name]
		switch {
		case ok && sameCredential(old, cr):
			c.Kept = append(c.Kept, cr.Name)
			continue
		case ok:
			c.Changed = append(c.Changed, cr.Name)
		default:
			c.Added = append(c.Added, cr.Name)
		}
		switch {
		case cr.Deliver == DeliverEnv:
			refused = append(refused, Refusal{Field: "credential." + cr.Name, Reason: ReasonEnvCredential})
		case deliveredAsFile(cr) && !dirs[path.Dir(cr.SandboxPath())]:
			refused = append(refused, Refusal{Field: "credential." + cr.Name, Reason: ReasonCredentialDir})
		}
	}
	for _, cr := range running {
		if !after[cr.Name] {
			c.Removed = append(c.Removed, cr.Name)
		}
	}
	return c, refused
}

// deliveredAsFile reports whether c is written into the sandbox.
func deliveredAsFile(c Credential) bool {
	return c.Deliver != DeliverEnv && c.Deliver != DeliverGateway
}

// sameCredential reports whether a and b would mint the same token and
// deliver it the same way.
func sameCredential(a, b Credential) bool {
	return a.Issuer == b.Issuer && a.Audience == b.Audience && slices.Equal(a.Scopes, b.Scopes) &&
		a.TTL == b.TTL && a.Deliver == b.Deliver && a.EnvVar == b.EnvVar &&
		(!deliveredAsFile(a) || a.SandboxPath() == b.SandboxPath())
}

// EgressUnrevisable names the attributes of egress blocks a and b that
// differ and that a revision cannot change: all but allow, deny, http and
// inspect.
func EgressUnrevisable(a, b *Egress) []string {
	if a == nil || b == nil {
		return nil
	}
	var out []string
	if !slices.Equal(a.AllowPrivate, b.AllowPrivate) {
		out = append(out, "allow_private")
	}
	if a.OnBlock != b.OnBlock {
		out = append(out, "on_block")
	}
	if a.IPv6 != b.IPv6 {
		out = append(out, "ipv6")
	}
	if a.L7 != b.L7 {
		out = append(out, "l7")
	}
	if !slices.Equal(a.L7Ports, b.L7Ports) {
		out = append(out, "l7_ports")
	}
	return out
}

// listChange compares two lists of egress entries by their canonical
// forms (an entry that does not parse is compared as written).
func listChange(running, revised []string) ListChange {
	canon := func(s string) string {
		if r, err := ParseEgressRule(s); err == nil {
			return r.String()
		}
		return s
	}
	before, after := map[string]bool{}, map[string]bool{}
	for _, s := range running {
		before[canon(s)] = true
	}
	var c ListChange
	for _, s := range revised {
		s = canon(s)
		if after[s] {
			continue
		}
		after[s] = true
		if before[s] {
			c.Kept = append(c.Kept, s)
		} else {
			c.Added = append(c.Added, s)
		}
	}
	for _, s := range running {
		s = canon(s)
		if !after[s] && !slices.Contains(c.Removed, s) {
			c.Removed = append(c.Removed, s)
		}
	}
	return c
}

// emptyNil is v, or nil when v is an empty map or slice: a field left out
// and one given empty are the same.
func emptyNil(v any) any {
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Map, reflect.Slice:
		if rv.Len() == 0 {
			return nil
		}
	}
	return v
}
