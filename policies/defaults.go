package policies

import (
	"maps"
	"path"
	"slices"
	"time"
)

// More defaults and limits, beside those declared with the types.
const (
	// DefaultIssuer mints credentials with the daemon's own key.
	DefaultIssuer = "airlock"
	// DefaultCredentialTTL is a credential's lifetime when ttl is left out.
	DefaultCredentialTTL = Duration(15 * time.Minute)
	// MaxCredentialTTL is the longest lifetime a manifest may ask for.
	MaxCredentialTTL = Duration(12 * time.Hour)
	// CredentialDir holds file-delivered credentials inside the sandbox:
	// a credential without a path is written to CredentialDir/NAME
	// (Credential.SandboxPath). It is the one declaration of this path;
	// bench/clients keeps a copy for its static sandbox binary, and a test
	// holds the two equal.
	CredentialDir = "/run/airlock/credentials"
	// MinMemory is the smallest memory limit a session may have.
	MinMemory = 16 << 20
	// MinDisk is the smallest disk quota a session may have.
	MinDisk = 1 << 20
	// MaxCPUs bounds resources.cpus.
	MaxCPUs = 1024
	// DefaultLogSize caps a session's recorded output (stdout and stderr
	// together); output beyond it is dropped, and the log and the audit
	// say how much.
	DefaultLogSize = 64 << 20
	// DefaultAuditSize caps a session's audit log; events beyond it are
	// counted, not written.
	DefaultAuditSize = 16 << 20
	// MinLogSize and MinAuditSize are the smallest caps a manifest may
	// set; MaxLogSize and MaxAuditSize the largest.
	MinLogSize   = 4 << 10
	MinAuditSize = 64 << 10
	MaxLogSize   = 16 << 30
	MaxAuditSize = 4 << 30
)

// FormatSize renders n bytes with the largest binary unit that divides it,
// as a manifest would write it ("64MiB").
func FormatSize(n int64) string { return formatSize(n) }

// ApplyDefaults fills every value the manifest left out (the zero value)
// with its default: user, workdir, timeout, resources, workspace mode and
// on_exit, egress on_block, credential issuer, ttl, delivery and path, a
// secret's env_var (its name, when it sets neither env_var nor path), and
// an approval block's timeout and on_timeout. Like l7, an egress block's
// inspect and an http block's default stay empty, which means their
// defaults (InspectRules, HTTPAllow).
// Booleans whose default is true (default_deny_read, a mount's read_only)
// cannot be told apart from an explicit false and are set by the decoder
// instead.
func (p *Policy) ApplyDefaults() {
	if p.User == "" {
		p.User = DefaultUser
	}
	if p.Workdir == "" {
		p.Workdir = DefaultWorkdir
	}
	if p.Timeout == 0 {
		p.Timeout = DefaultTimeout
	}
	if p.Resources.CPUs == 0 {
		p.Resources.CPUs = DefaultCPUs
	}
	if p.Resources.Memory == 0 {
		p.Resources.Memory = DefaultMemory
	}
	if p.Resources.Pids == 0 {
		p.Resources.Pids = DefaultPids
	}
	if p.Resources.LogSize == 0 {
		p.Resources.LogSize = DefaultLogSize
	}
	if p.Resources.AuditSize == 0 {
		p.Resources.AuditSize = DefaultAuditSize
	}
	for i := range p.Workspaces {
		w := &p.Workspaces[i]
		if w.Mode == "" {
			w.Mode = ModeOverlay
		}
		if w.OnExit == "" {
			w.OnExit = OnExitReview
		}
	}
	if p.Egress != nil && p.Egress.OnBlock == "" {
		p.Egress.OnBlock = OnBlockReject
	}
	for i := range p.Credentials {
		c := &p.Credentials[i]
		if c.Issuer == "" {
			c.Issuer = DefaultIssuer
		}
		if c.TTL == 0 {
			c.TTL = DefaultCredentialTTL
		}
		if c.Deliver == "" {
			c.Deliver = DeliverFile
		}
		if c.Deliver == DeliverFile && c.Name != "" {
			c.Path = c.SandboxPath()
		}
	}
	for i := range p.Secrets {
		s := &p.Secrets[i]
		if s.EnvVar == "" && s.Path == "" {
			s.EnvVar = s.Name
		}
	}
	if a := p.Approval; a != nil {
		if a.Timeout == 0 {
			a.Timeout = DefaultApprovalTimeout
		}
		if a.OnTimeout == "" {
			a.OnTimeout = OnTimeoutDeny
		}
	}
}

// SandboxPath is where a file-delivered credential appears inside the
// sandbox: its path, or CredentialDir/NAME when the manifest left it out.
func (c Credential) SandboxPath() string {
	if c.Path != "" {
		return c.Path
	}
	return path.Join(CredentialDir, c.Name)
}

// WithDefaults returns a deep copy of p with ApplyDefaults applied; p is
// not modified.
func (p *Policy) WithDefaults() *Policy {
	c := p.Clone()
	c.ApplyDefaults()
	return c
}

// Clone returns a deep copy of p.
func (p *Policy) Clone() *Policy {
	if p == nil {
		return nil
	}
	c := *p
	c.Command = slices.Clone(p.Command)
	c.Env = maps.Clone(p.Env)
	c.Capabilities = slices.Clone(p.Capabilities)
	c.Workspaces = slices.Clone(p.Workspaces)
	for i := range c.Workspaces {
		w := &c.Workspaces[i]
		w.DenyRead = slices.Clone(w.DenyRead)
		w.Protect = slices.Clone(w.Protect)
		w.ProtectRefs = slices.Clone(w.ProtectRefs)
		w.GitAllow = slices.Clone(w.GitAllow)
	}
	c.Mounts = slices.Clone(p.Mounts)
	for i := range c.Mounts {
		c.Mounts[i].DenyRead = slices.Clone(c.Mounts[i].DenyRead)
	}
	if p.Egress != nil {
		e := *p.Egress
		e.Allow = slices.Clone(e.Allow)
		e.Deny = slices.Clone(e.Deny)
		e.AllowPrivate = slices.Clone(e.AllowPrivate)
		e.L7Ports = slices.Clone(e.L7Ports)
		e.HTTP = slices.Clone(e.HTTP)
		for i := range e.HTTP {
			h := &e.HTTP[i]
			h.Rules = slices.Clone(h.Rules)
			for j := range h.Rules {
				h.Rules[j].Methods = slices.Clone(h.Rules[j].Methods)
				h.Rules[j].Refs = slices.Clone(h.Rules[j].Refs)
				h.Rules[j].JSON = slices.Clone(h.Rules[j].JSON)
				h.Rules[j].BodySHA256 = slices.Clone(h.Rules[j].BodySHA256)
				for k := range h.Rules[j].JSON {
					h.Rules[j].JSON[k].Values = slices.Clone(h.Rules[j].JSON[k].Values)
				}
			}
		}
		c.Egress = &e
	}
	c.Credentials = slices.Clone(p.Credentials)
	for i := range c.Credentials {
		c.Credentials[i].Scopes = slices.Clone(c.Credentials[i].Scopes)
	}
	c.Secrets = slices.Clone(p.Secrets)
	for i := range c.Secrets {
		c.Secrets[i].Inject = slices.Clone(c.Secrets[i].Inject)
	}
	if p.Approval != nil {
		a := *p.Approval
		c.Approval = &a
	}
	if p.Pool != nil {
		pl := *p.Pool
		c.Pool = &pl
	}
	return &c
}
