package policies

import (
	"fmt"
	"slices"
	"strconv"

	"github.com/containerd/errdefs"
	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
	"golang.org/x/text/unicode/norm"
)

// Marshal renders p as an HCL manifest that Load decodes back to p. Every
// value p holds is written, defaults included, so that the file says
// exactly what the session gets; zero values are left out (Load reads them
// back as zero), except default_deny_read and read_only, whose default is
// true and which are always written. Sizes are written as FormatSize does
// ("64MiB").
//
// HCL reads quoted strings in Unicode NFC, so a value that is not in NFC
// (an env value, a command argument) comes back normalised. Block labels
// (the session label, host paths, credential and secret names, http hosts)
// are read as written, but hclwrite writes them in NFC, so a label that is
// not in NFC is an errdefs.ErrInvalidArgument error rather than a manifest
// naming another path. An empty method list is left out (a rule without
// method matches any method, as one with an empty list does).
func Marshal(p *Policy) ([]byte, error) {
	if p == nil {
		return nil, fmt.Errorf("marshal manifest: no policy: %w", errdefs.ErrInvalidArgument)
	}
	labels := []string{p.Label}
	for _, w := range p.Workspaces {
		labels = append(labels, w.HostPath)
	}
	for _, m := range p.Mounts {
		labels = append(labels, m.HostPath)
	}
	for _, c := range p.Credentials {
		labels = append(labels, c.Name)
	}
	if p.Egress != nil {
		for _, h := range p.Egress.HTTP {
			labels = append(labels, h.Host)
		}
	}
	for _, s := range p.Secrets {
		labels = append(labels, s.Name)
	}
	for _, l := range labels {
		if !norm.NFC.IsNormalString(l) {
			return nil, fmt.Errorf("marshal manifest: block label %q is not in Unicode NFC, which HCL writes labels in: %w", l, errdefs.ErrInvalidArgument)
		}
	}

	f := hclwrite.NewEmptyFile()
	s := f.Body().AppendNewBlock("session", []string{p.Label}).Body()
	setString(s, "image", p.Image)
	if p.Command != nil {
		setList(s, "command", p.Command)
	}
	if p.Env != nil {
		env := cty.MapValEmpty(cty.String)
		if len(p.Env) > 0 {
			m := make(map[string]cty.Value, len(p.Env))
			for k, v := range p.Env {
				m[k] = cty.StringVal(v)
			}
			env = cty.MapVal(m)
		}
		s.SetAttributeValue("env", env)
	}
	setNonEmpty(s, "user", p.User)
	setNonEmpty(s, "workdir", p.Workdir)
	if p.Timeout != 0 {
		setString(s, "timeout", p.Timeout.String())
	}
	if p.Capabilities != nil {
		setList(s, "capabilities", p.Capabilities)
	}
	if r := p.Resources; r != (Resources{}) {
		b := newBlock(s, "resources")
		if r.CPUs != 0 {
			b.SetAttributeValue("cpus", cty.MustParseNumberVal(strconv.FormatFloat(r.CPUs, 'f', -1, 64)))
		}
		if r.Memory != 0 {
			setString(b, "memory", formatSize(r.Memory))
		}
		if r.Pids != 0 {
			b.SetAttributeValue("pids", cty.NumberIntVal(r.Pids))
		}
		for _, a := range []struct {
			name string
			v    int64
		}{{"disk", r.Disk}, {"log_size", r.LogSize}, {"audit_size", r.AuditSize}} {
			if a.v != 0 {
				setString(b, a.name, formatSize(a.v))
			}
		}
	}
	for _, w := range p.Workspaces {
		b := newBlock(s, "workspace", w.HostPath)
		setString(b, "target", w.Target)
		setNonEmpty(b, "mode", w.Mode)
		if w.DenyRead != nil {
			setList(b, "deny_read", w.DenyRead)
		}
		b.SetAttributeValue("default_deny_read", cty.BoolVal(w.DefaultDenyRead))
		if w.Protect != nil {
			setList(b, "protect", w.Protect)
		}
		if w.PreserveUntracked {
			b.SetAttributeValue("preserve_untracked", cty.True)
		}
		if w.ProtectRefs != nil {
			setList(b, "protect_refs", w.ProtectRefs)
		}
		if w.GitAllow != nil {
			setList(b, "git_allow", w.GitAllow)
		}
		setNonEmpty(b, "on_exit", w.OnExit)
	}
	for _, m := range p.Mounts {
		b := newBlock(s, "mount", m.HostPath)
		setString(b, "target", m.Target)
		b.SetAttributeValue("read_only", cty.BoolVal(m.ReadOnly))
		if m.DenyRead != nil {
			setList(b, "deny_read", m.DenyRead)
		}
		b.SetAttributeValue("default_deny_read", cty.BoolVal(m.DefaultDenyRead))
	}
	if e := p.Egress; e != nil {
		b := newBlock(s, "egress")
		if e.Allow != nil {
			setList(b, "allow", e.Allow)
		}
		if e.Deny != nil {
			setList(b, "deny", e.Deny)
		}
		if e.AllowPrivate != nil {
			setList(b, "allow_private", e.AllowPrivate)
		}
		setNonEmpty(b, "on_block", e.OnBlock)
		if e.IPv6 {
			b.SetAttributeValue("ipv6", cty.True)
		}
		setNonEmpty(b, "l7", e.L7)
		setNonEmpty(b, "inspect", e.Inspect)
		if len(e.L7Ports) > 0 {
			ports := make([]cty.Value, len(e.L7Ports))
			for i, p := range e.L7Ports {
				ports[i] = cty.NumberIntVal(int64(p))
			}
			b.SetAttributeValue("l7_ports", cty.ListVal(ports))
		}
		for _, h := range e.HTTP {
			hb := newBlock(b, "http", h.Host)
			setNonEmpty(hb, "default", h.Default)
			for _, r := range h.Rules {
				rb := newBlock(hb, "rule")
				if len(r.Methods) > 0 {
					setList(rb, "method", r.Methods)
				}
				setNonEmpty(rb, "path", r.Path)
				if r.Refs != nil {
					setList(rb, "refs", r.Refs)
				}
				setNonEmpty(rb, "action", r.Action)
				setNonEmpty(rb, "json_match", r.JSONMatch)
				if len(r.BodySHA256) > 0 {
					setList(rb, "body_sha256", r.BodySHA256)
				}
				for _, m := range r.JSON {
					jb := newBlock(rb, "json", m.Field)
					setList(jb, "values", m.Values)
				}
			}
		}
	}
	for _, c := range p.Credentials {
		b := newBlock(s, "credential", c.Name)
		setNonEmpty(b, "issuer", c.Issuer)
		setString(b, "audience", c.Audience)
		setList(b, "scopes", c.Scopes)
		if c.TTL != 0 {
			setString(b, "ttl", c.TTL.String())
		}
		setNonEmpty(b, "deliver", c.Deliver)
		setNonEmpty(b, "path", c.Path)
		setNonEmpty(b, "env_var", c.EnvVar)
	}
	for _, sc := range p.Secrets {
		b := newBlock(s, "secret", sc.Name)
		setNonEmpty(b, "from", sc.From)
		setNonEmpty(b, "env_var", sc.EnvVar)
		setNonEmpty(b, "path", sc.Path)
		for _, in := range sc.Inject {
			ib := newBlock(b, "inject")
			setNonEmpty(ib, "host", in.Host)
			setNonEmpty(ib, "header", in.Header)
			if in.Bearer {
				ib.SetAttributeValue("bearer", cty.True)
			}
		}
	}
	if a := p.Approval; a != nil {
		b := newBlock(s, "approval")
		if a.Timeout != 0 {
			setString(b, "timeout", a.Timeout.String())
		}
		setNonEmpty(b, "on_timeout", a.OnTimeout)
	}
	if p.Pool != nil {
		newBlock(s, "pool").SetAttributeValue("size", cty.NumberIntVal(int64(p.Pool.Size)))
	}
	return hclwrite.Format(f.Bytes()), nil
}

// newBlock appends a nested block to body, after a blank line.
func newBlock(body *hclwrite.Body, typeName string, labels ...string) *hclwrite.Body {
	body.AppendNewline()
	return body.AppendNewBlock(typeName, slices.Clone(labels)).Body()
}

func setString(body *hclwrite.Body, name, v string) {
	body.SetAttributeValue(name, cty.StringVal(v))
}

func setNonEmpty(body *hclwrite.Body, name, v string) {
	if v != "" {
		setString(body, name, v)
	}
}

// setList writes a list of strings; an empty list is written as [].
func setList(body *hclwrite.Body, name string, vs []string) {
	if len(vs) == 0 {
		body.SetAttributeValue(name, cty.ListValEmpty(cty.String))
		return
	}
	l := make([]cty.Value, len(vs))
	for i, v := range vs {
		l[i] = cty.StringVal(v)
	}
	body.SetAttributeValue(name, cty.ListVal(l))
}
