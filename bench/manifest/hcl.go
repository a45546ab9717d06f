package manifest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/policies"
)

// Write writes p as dir/PROMPTID.hcl and returns the file's path. The file
// decodes with policies.Load to p with defaults applied.
func Write(dir, promptID string, p *policies.Policy) (string, error) {
	if promptID == "" || strings.ContainsAny(promptID, `/\`) || promptID == "." || promptID == ".." {
		return "", fmt.Errorf("write manifest: %q is not a file name: %w", promptID, errdefs.ErrInvalidArgument)
	}
	src, err := Marshal(p)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("write manifest: %w", err)
	}
	path := filepath.Join(dir, promptID+".hcl")
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, src, 0o644); err != nil {
		return "", fmt.Errorf("write manifest: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return "", fmt.Errorf("write manifest: %w", err)
	}
	return path, nil
}

// Marshal renders p as an HCL manifest. Every value p holds is written,
// including defaults, so that the file says exactly what the session gets.
func Marshal(p *policies.Policy) ([]byte, error) {
	if p == nil {
		return nil, fmt.Errorf("marshal manifest: no policy: %w", errdefs.ErrInvalidArgument)
	}
	var w hclWriter
	w.line(0, "session %s {", quote(p.Label))
	w.attr(1, "image", quote(p.Image))
	if p.Command != nil {
		w.attr(1, "command", list(p.Command))
	}
	if p.Env != nil {
		keys := slices.Sorted(func(yield func(string) bool) {
			for k := range p.Env {
				if !yield(k) {
					return
				}
			}
		})
		if len(keys) == 0 {
			w.attr(1, "env", "{}")
		} else {
			w.line(1, "env = {")
			for _, k := range keys {
				w.line(2, "%s = %s", quote(k), quote(p.Env[k]))
			}
			w.line(1, "}")
		}
	}
	if p.User != "" {
		w.attr(1, "user", quote(p.User))
	}
	if p.Workdir != "" {
		w.attr(1, "workdir", quote(p.Workdir))
	}
	if p.Timeout != 0 {
		w.attr(1, "timeout", quote(p.Timeout.String()))
	}
	if p.Capabilities != nil {
		w.attr(1, "capabilities", list(p.Capabilities))
	}
	if r := p.Resources; r != (policies.Resources{}) {
		w.blank()
		w.line(1, "resources {")
		if r.CPUs != 0 {
			w.attr(2, "cpus", strconv.FormatFloat(r.CPUs, 'f', -1, 64))
		}
		if r.Memory != 0 {
			w.attr(2, "memory", strconv.FormatInt(r.Memory, 10))
		}
		if r.Pids != 0 {
			w.attr(2, "pids", strconv.FormatInt(r.Pids, 10))
		}
		if r.Disk != 0 {
			w.attr(2, "disk", strconv.FormatInt(r.Disk, 10))
		}
		w.line(1, "}")
	}
	for _, ws := range p.Workspaces {
		w.blank()
		w.line(1, "workspace %s {", quote(ws.HostPath))
		w.attr(2, "target", quote(ws.Target))
		if ws.Mode != "" {
			w.attr(2, "mode", quote(ws.Mode))
		}
		if ws.DenyRead != nil {
			w.attr(2, "deny_read", list(ws.DenyRead))
		}
		w.attr(2, "default_deny_read", strconv.FormatBool(ws.DefaultDenyRead))
		if ws.Protect != nil {
			w.attr(2, "protect", list(ws.Protect))
		}
		if ws.PreserveUntracked {
			w.attr(2, "preserve_untracked", "true")
		}
		if ws.ProtectRefs != nil {
			w.attr(2, "protect_refs", list(ws.ProtectRefs))
		}
		if ws.OnExit != "" {
			w.attr(2, "on_exit", quote(ws.OnExit))
		}
		w.line(1, "}")
	}
	for _, m := range p.Mounts {
		w.blank()
		w.line(1, "mount %s {", quote(m.HostPath))
		w.attr(2, "target", quote(m.Target))
		w.attr(2, "read_only", strconv.FormatBool(m.ReadOnly))
		if m.DenyRead != nil {
			w.attr(2, "deny_read", list(m.DenyRead))
		}
		w.attr(2, "default_deny_read", strconv.FormatBool(m.DefaultDenyRead))
		w.line(1, "}")
	}
	if e := p.Egress; e != nil {
		w.blank()
		w.line(1, "egress {")
		if e.Allow != nil {
			w.attr(2, "allow", list(e.Allow))
		}
		if e.Deny != nil {
			w.attr(2, "deny", list(e.Deny))
		}
		if e.OnBlock != "" {
			w.attr(2, "on_block", quote(e.OnBlock))
		}
		if e.IPv6 {
			w.attr(2, "ipv6", "true")
		}
		w.line(1, "}")
	}
	for _, c := range p.Credentials {
		w.blank()
		w.line(1, "credential %s {", quote(c.Name))
		if c.Issuer != "" {
			w.attr(2, "issuer", quote(c.Issuer))
		}
		w.attr(2, "audience", quote(c.Audience))
		if len(c.Scopes) <= 1 {
			w.attr(2, "scopes", list(c.Scopes))
		} else {
			w.line(2, "scopes = [")
			for _, s := range c.Scopes {
				w.line(3, "%s,", quote(s))
			}
			w.line(2, "]")
		}
		if c.TTL != 0 {
			w.attr(2, "ttl", quote(c.TTL.String()))
		}
		if c.Deliver != "" {
			w.attr(2, "deliver", quote(c.Deliver))
		}
		if c.Path != "" {
			w.attr(2, "path", quote(c.Path))
		}
		if c.EnvVar != "" {
			w.attr(2, "env_var", quote(c.EnvVar))
		}
		w.line(1, "}")
	}
	w.line(0, "}")
	return w.buf.Bytes(), nil
}

type hclWriter struct {
	buf bytes.Buffer
}

func (w *hclWriter) line(indent int, format string, args ...any) {
	w.buf.WriteString(strings.Repeat("  ", indent))
	fmt.Fprintf(&w.buf, format, args...)
	w.buf.WriteByte('\n')
}

func (w *hclWriter) attr(indent int, name, value string) {
	w.line(indent, "%s = %s", name, value)
}

func (w *hclWriter) blank() { w.buf.WriteByte('\n') }

func list(vs []string) string {
	q := make([]string, len(vs))
	for i, v := range vs {
		q[i] = quote(v)
	}
	return "[" + strings.Join(q, ", ") + "]"
}

// quote writes s as an HCL quoted template that evaluates to s: the
// escapes HCL knows, and "${" and "%{" doubled so they stay literal.
func quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			// Invalid UTF-8 cannot be represented; write the replacement
			// character, which is what HCL would read anyway.
			b.WriteString(`\uFFFD`)
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case (r == '$' || r == '%') && strings.HasPrefix(s[i+size:], "{"):
			b.WriteRune(r)
			b.WriteRune(r)
		case !unicode.IsPrint(r):
			if r > 0xFFFF {
				fmt.Fprintf(&b, `\U%08X`, r)
			} else {
				fmt.Fprintf(&b, `\u%04X`, r)
			}
		default:
			b.WriteRune(r)
		}
		i += size
	}
	b.WriteByte('"')
	return b.String()
}
