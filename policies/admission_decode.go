package policies

import (
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
)

var (
	admissionFileSchema = &hcl.BodySchema{
		Blocks: []hcl.BlockHeaderSchema{{Type: "admission"}},
	}
	admissionSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "host_paths", Required: true}, {Name: "read_only_paths"}, {Name: "volume_paths"},
			{Name: "users"}, {Name: "groups"}, {Name: "capabilities"}, {Name: "secret_sources"},
		},
		Blocks: []hcl.BlockHeaderSchema{{Type: "limits"}, {Type: "secret_source", LabelNames: []string{"from"}}, {Type: "git_source", LabelNames: []string{"url"}}},
	}
	gitSourceSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "push_branches"}, {Name: "token_file"}, {Name: "username"}, {Name: "namespaces"}, {Name: "ssh_key_file"}, {Name: "known_hosts"}},
	}
	secretSourceSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "hosts", Required: true}},
	}
	limitsSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "cpus"}, {Name: "memory"}, {Name: "pids"}, {Name: "disk"}, {Name: "log_size"}, {Name: "audit_size"}, {Name: "timeout"}, {Name: "sessions"},
		},
	}
)

// LoadAdmissionFile reads and decodes an admission policy file (see
// DecodeAdmission). A bad file yields a *DiagnosticsError; a file that
// cannot be read yields the os error.
func LoadAdmissionFile(path string) (*Admission, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read admission policy: %w", err)
	}
	a, diags := DecodeAdmission(path, src)
	if diags.HasErrors() {
		return nil, diags
	}
	return a, nil
}

// DecodeAdmission decodes an admission policy: one `admission { ... }`
// block (the same block a daemon configuration file will hold), with
// host_paths required and every other attribute defaulting to the
// built-in policy's value. It returns the policy, or nil when there are
// errors, and every diagnostic (with file:line), or nil when there are none.
func DecodeAdmission(filename string, src []byte) (*Admission, *DiagnosticsError) {
	parser := hclparse.NewParser()
	a, diags := decodeAdmission(parser, filename, src)
	return withDiagnostics(parser, a, diags)
}

// literalDecoder decodes files whose values are literals (no variables
// or functions): admission policies and daemon configurations.
func literalDecoder(diags hcl.Diagnostics) *decoder {
	return &decoder{
		diags:    diags,
		declared: map[string]bool{},
		unset:    map[string]bool{},
		ranges:   map[string]hcl.Range{},
		failed:   map[string]bool{},
		literal:  true,
	}
}

func decodeAdmission(parser *hclparse.Parser, filename string, src []byte) (*Admission, hcl.Diagnostics) {
	file, diags := parser.ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, diags
	}
	d := literalDecoder(diags)
	content, cdiags := file.Body.Content(admissionFileSchema)
	d.diags = append(d.diags, cdiags...)
	blocks := content.Blocks
	if len(blocks) == 0 {
		if !cdiags.HasErrors() {
			d.errorf(file.Body.MissingItemRange(), "Missing admission block",
				`An admission policy is one block, as in admission { host_paths = ["/srv/agents"] }; see examples/airlockd/admission.hcl.`)
		}
		return nil, d.diags
	}
	for _, b := range blocks[1:] {
		d.errorf(b.DefRange, "Duplicate admission block", "An admission policy has one admission block; the first is at %s. Merge the two.", blocks[0].DefRange)
	}
	a := d.admission(blocks[0], filename)
	sortDiags(d.diags)
	if d.diags.HasErrors() {
		return nil, d.diags
	}
	return a, d.diags
}

// admission decodes an admission block over the built-in policy.
func (d *decoder) admission(b *hcl.Block, filename string) *Admission {
	a := DefaultAdmission()
	a.Source = filename
	root := fieldPath{}
	d.ranges[""] = b.DefRange
	c, bdiags := b.Body.Content(admissionSchema)
	d.diags = append(d.diags, bdiags...)
	attrs := c.Attributes

	d.strList(attrs, "host_paths", root, &a.HostPaths)
	d.strList(attrs, "read_only_paths", root, &a.ReadOnlyPaths)
	for _, list := range []struct {
		name  string
		paths []string
	}{{"host_paths", a.HostPaths}, {"read_only_paths", a.ReadOnlyPaths}} {
		if _, ok := attrs[list.name]; !ok {
			continue
		}
		for i, p := range list.paths {
			if reason := checkRootPath(p); reason != "" {
				d.errorf(d.rangeOf(root.field(list.name).index(i)), "Invalid host path root",
					"%s. Name a host directory, such as %q; a workspace or mount may name it or anything beneath it.", reason, "/srv/agents")
			}
		}
	}
	d.strList(attrs, "volume_paths", root, &a.VolumePaths)
	for i, p := range a.VolumePaths {
		at := d.rangeOf(root.field("volume_paths").index(i))
		if reason := checkRootPath(p); reason != "" {
			d.errorf(at, "Invalid volume path root",
				"%s. Name the host directory the node's local or hostPath PersistentVolumes are made under, such as %q.", reason, "/srv/airlock/volumes")
			continue
		}
		for _, list := range []struct {
			name  string
			paths []string
		}{{"host_paths", a.HostPaths}, {"read_only_paths", a.ReadOnlyPaths}} {
			for _, h := range list.paths {
				v, hc := filepath.Clean(p), filepath.Clean(h)
				if v == hc || within(hc, v) || within(v, hc) {
					d.errorf(at, "Volume path overlaps a host path",
						"%q overlaps %s entry %q: a directory under both could be named as any session's host_path, and a volume's directory is its claim's alone. Keep the volumes' directories apart from the admitted host paths.", p, list.name, h)
				}
			}
		}
	}
	if _, ok := attrs["users"]; ok {
		a.Users = d.idRanges(attrs, "users", root)
	}
	if _, ok := attrs["groups"]; ok {
		a.Groups = d.idRanges(attrs, "groups", root)
	}
	if _, ok := attrs["capabilities"]; ok {
		var caps []string
		d.strList(attrs, "capabilities", root, &caps)
		a.Capabilities = nil
		for i, cp := range caps {
			canon := NormalizeCapability(cp)
			if !isKnownCapability(canon) {
				d.errorf(d.rangeOf(root.field("capabilities").index(i)), "Unknown capability",
					"%q is not a Linux capability. Use a name such as CAP_NET_BIND_SERVICE (see capabilities(7)).", cp)
				continue
			}
			if !slices.Contains(a.Capabilities, canon) {
				a.Capabilities = append(a.Capabilities, canon)
			}
		}
	}
	if attr, ok := attrs["secret_sources"]; ok {
		d.errorf(attr.NameRange, "secret_sources was replaced",
			`Write one secret_source block per source, naming the hosts it may be injected into, as in secret_source "file:/etc/airlock/secrets/anthropic" { hosts = ["api.anthropic.com"] }: a source admitted for every host lets any caller have its value sent to a host of the caller's choosing.`)
	}
	if blocks := c.Blocks.OfType("secret_source"); len(blocks) > 0 {
		a.SecretSources = []SecretSource{}
		seen := map[string]hcl.Range{}
		for i, b := range blocks {
			at := root.field("secret_source").index(i)
			src := b.Labels[0]
			if reason := checkSecretSourceGlob(src); reason != "" {
				d.errorf(b.LabelRanges[0], "Invalid secret source",
					"%s. Write \"file:\" and an absolute path glob, such as %q, or \"env:\" and a variable name or glob, such as %q.", reason, "file:/etc/airlock/secrets/anthropic", "env:ANTHROPIC_API_KEY")
				continue
			}
			if prev, ok := seen[src]; ok {
				d.errorf(b.LabelRanges[0], "Duplicate secret source", "Merge the two blocks' hosts. The other is at %s.", prev)
				continue
			}
			seen[src] = b.LabelRanges[0]
			bc, bdiags := b.Body.Content(secretSourceSchema)
			d.diags = append(d.diags, bdiags...)
			var hosts []string
			d.strList(bc.Attributes, "hosts", at, &hosts)
			ss := SecretSource{From: src}
			for j, h := range hosts {
				if reason := checkAdmittedHost(src, h); reason != "" {
					d.errorf(d.rangeOf(at.field("hosts").index(j)), "Invalid secret source host",
						"%s. Write a host name (\"api.anthropic.com\"), the names under a domain (\"*.corp.test\"), or %q (the name of the directory holding the file, for file sources).", reason, DirHost)
					continue
				}
				if !slices.Contains(ss.Hosts, h) {
					ss.Hosts = append(ss.Hosts, h)
				}
			}
			if attr, ok := bc.Attributes["hosts"]; ok && len(hosts) == 0 {
				d.errorf(attr.Expr.Range(), "Empty hosts", "Name at least one host the source may be injected into, or remove the block.")
			}
			a.SecretSources = append(a.SecretSources, ss)
		}
	}
	if blocks := c.Blocks.OfType("git_source"); len(blocks) > 0 {
		type seenBlock struct {
			namespaces []string
			at         hcl.Range
		}
		seen := map[string][]seenBlock{}
		for i, b := range blocks {
			at := root.field("git_source").index(i)
			g := b.Labels[0]
			if reason := checkGitSourceGlob(g); reason != "" {
				d.errorf(b.LabelRanges[0], "Invalid git source",
					"%s. Write an http, https or ssh URL glob whose host (and for ssh, user) is named, such as %q or %q (\"*\" does not cross '/').", reason, "https://git.corp.test/agents/*", "ssh://git@git.corp.test/agents/*")
				continue
			}
			bc, bdiags := b.Body.Content(gitSourceSchema)
			d.diags = append(d.diags, bdiags...)
			gs := GitSource{URL: g}
			var namespaces []string
			d.strList(bc.Attributes, "namespaces", at, &namespaces)
			for j, ns := range namespaces {
				if !isNamespaceName(ns) {
					d.errorf(d.rangeOf(at.field("namespaces").index(j)), "Invalid namespace", "%q is not a Kubernetes namespace name (lower-case letters, digits and '-', at most 63). Name namespaces exactly: no globs.", ns)
					continue
				}
				if !slices.Contains(gs.Namespaces, ns) {
					gs.Namespaces = append(gs.Namespaces, ns)
				}
			}
			if attr, ok := bc.Attributes["namespaces"]; ok && len(namespaces) == 0 {
				d.errorf(attr.Expr.Range(), "Empty namespaces", "Name at least one namespace, or leave namespaces out for every namespace.")
			}
			// One block per repository and namespace: the first that
			// matched would give its token and push branches, the other
			// never.
			dup := false
			for _, prev := range seen[g] {
				if len(prev.namespaces) == 0 || len(gs.Namespaces) == 0 || slices.ContainsFunc(gs.Namespaces, func(ns string) bool { return slices.Contains(prev.namespaces, ns) }) {
					d.errorf(b.LabelRanges[0], "Duplicate git source", "Another block for %q admits some of the same namespaces (no namespaces: every one). Merge them, or give each its own namespaces. The other is at %s.", g, prev.at)
					dup = true
					break
				}
			}
			if dup {
				continue
			}
			seen[g] = append(seen[g], seenBlock{gs.Namespaces, b.LabelRanges[0]})
			var branches []string
			d.strList(bc.Attributes, "push_branches", at, &branches)
			for j, br := range branches {
				if _, err := path.Match(br, ""); err != nil {
					d.errorf(d.rangeOf(at.field("push_branches").index(j)), "Invalid push branch", "%q is not a valid glob. Write branch names or globs such as %q.", br, "airlock/*")
					continue
				}
				if reason := CheckBranch(strings.NewReplacer("*", "x", "?", "x", "[", "x", "]", "x").Replace(br)); reason != "" {
					d.errorf(d.rangeOf(at.field("push_branches").index(j)), "Invalid push branch", "%s. Write branch names or globs such as %q.", reason, "airlock/*")
					continue
				}
				if !slices.Contains(gs.PushBranches, br) {
					gs.PushBranches = append(gs.PushBranches, br)
				}
			}
			d.str(bc.Attributes, "token_file", at, &gs.TokenFile)
			if gs.TokenFile != "" {
				if reason := checkRootPath(gs.TokenFile); reason != "" && !strings.Contains(reason, "is protected") {
					d.errorf(d.rangeOf(at.field("token_file")), "Invalid token file", "%s. Name the file holding the token by its absolute path, such as %q.", reason, "/etc/airlock/git/corp.token")
				}
			}
			d.str(bc.Attributes, "username", at, &gs.Username)
			d.str(bc.Attributes, "ssh_key_file", at, &gs.SSHKeyFile)
			d.str(bc.Attributes, "known_hosts", at, &gs.KnownHosts)
			if strings.HasPrefix(g, "ssh://") {
				d.sshGitSource(b, bc.Attributes, at, &gs)
				a.GitSources = append(a.GitSources, gs)
				continue
			}
			for _, name := range []string{"ssh_key_file", "known_hosts"} {
				if _, ok := bc.Attributes[name]; ok {
					d.errorf(d.rangeOf(at.field(name)), "SSH setting for an http source", "%s is for ssh:// sources, which authenticate with the node's key; an http or https source authenticates with token_file (and username).", name)
				}
			}
			switch {
			case gs.Username != "" && gs.TokenFile == "":
				d.errorf(d.rangeOf(at.field("username")), "Username without a token", "username goes with token_file; set both, or neither for a repository that needs no credentials.")
			case strings.ContainsAny(gs.Username, ":\r\n") || strings.ContainsFunc(gs.Username, func(c rune) bool { return c < ' ' || c == 0x7f }):
				d.errorf(d.rangeOf(at.field("username")), "Invalid username", "A username may not hold ':' or control characters.")
			case gs.TokenFile != "" && gs.Username == "":
				gs.Username = DefaultGitUsername
			}
			a.GitSources = append(a.GitSources, gs)
		}
	}
	if lb := d.single(c.Blocks.OfType("limits")); lb != nil {
		at := root.field("limits")
		d.ranges[at.String()] = lb.DefRange
		lc, ldiags := lb.Body.Content(limitsSchema)
		d.diags = append(d.diags, ldiags...)
		la := lc.Attributes
		l := &a.Limits
		d.float(la, "cpus", at, &l.CPUs)
		if l.CPUs > MaxCPUs {
			d.errorf(d.rangeOf(at.field("cpus")), "Invalid cpus", "cpus %v is above the most a session can have, %d.", l.CPUs, MaxCPUs)
		}
		d.size(la, "memory", at, &l.Memory)
		if l.Memory > 0 && l.Memory < MinMemory {
			d.errorf(d.rangeOf(at.field("memory")), "Invalid memory", "memory %s is below the least a session can have, %s.", formatSize(l.Memory), formatSize(MinMemory))
		}
		d.integer(la, "pids", at, &l.Pids)
		d.size(la, "disk", at, &l.Disk)
		if l.Disk > 0 && l.Disk < MinDisk {
			d.errorf(d.rangeOf(at.field("disk")), "Invalid disk", "disk %s is below the least a session can have, %s.", formatSize(l.Disk), formatSize(MinDisk))
		}
		d.size(la, "log_size", at, &l.LogSize)
		if l.LogSize > 0 && l.LogSize < MinLogSize {
			d.errorf(d.rangeOf(at.field("log_size")), "Invalid log_size", "log_size %s is below the least a session can have, %s.", formatSize(l.LogSize), formatSize(MinLogSize))
		}
		d.size(la, "audit_size", at, &l.AuditSize)
		if l.AuditSize > 0 && l.AuditSize < MinAuditSize {
			d.errorf(d.rangeOf(at.field("audit_size")), "Invalid audit_size", "audit_size %s is below the least a session can have, %s.", formatSize(l.AuditSize), formatSize(MinAuditSize))
		}
		d.duration(la, "timeout", at, &l.Timeout)
		var n int64
		d.integer(la, "sessions", at, &n)
		if n > 0 {
			if n > math.MaxInt32 {
				d.errorf(d.rangeOf(at.field("sessions")), "Invalid sessions", "sessions %d is too large.", n)
			} else {
				l.Sessions = int(n)
			}
		}
	}
	return a
}

// idRanges decodes a list of "N" or "N-M" uid or gid ranges.
func (d *decoder) idRanges(attrs hcl.Attributes, name string, at fieldPath) []IDRange {
	var raw []string
	d.strList(attrs, name, at, &raw)
	out := []IDRange{}
	for i, s := range raw {
		r, reason := parseIDRange(s)
		if reason != "" {
			d.errorf(d.rangeOf(at.field(name).index(i)), "Invalid id range",
				"%s. Write a numeric id such as \"1000\" or an inclusive range such as \"1000-1999\"; names are not resolved.", reason)
			continue
		}
		out = append(out, r)
	}
	return out
}

func parseIDRange(s string) (IDRange, string) {
	first, last, isRange := strings.Cut(strings.TrimSpace(s), "-")
	a, ok := parseID(strings.TrimSpace(first))
	if !ok {
		return IDRange{}, fmt.Sprintf("%q is not a numeric id or range", s)
	}
	b := a
	if isRange {
		if b, ok = parseID(strings.TrimSpace(last)); !ok {
			return IDRange{}, fmt.Sprintf("%q is not a numeric id or range", s)
		}
		if b < a {
			return IDRange{}, fmt.Sprintf("%q ends before it starts", s)
		}
	}
	return IDRange{First: a, Last: b}, ""
}

// isNamespaceName reports whether s is a Kubernetes namespace name (an
// RFC 1123 label).
func isNamespaceName(s string) bool {
	if s == "" || len(s) > 63 || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for _, c := range s {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// sshGitSource checks the settings of gs, the git_source block b for ssh
// URLs: the node's key and the host keys it trusts, both required; no
// token or username (the user is the URL's).
func (d *decoder) sshGitSource(b *hcl.Block, attrs hcl.Attributes, at fieldPath, gs *GitSource) {
	for _, name := range []string{"token_file", "username"} {
		if _, ok := attrs[name]; ok {
			d.errorf(d.rangeOf(at.field(name)), "HTTP setting for an ssh source", "%s is for http and https sources; an ssh source authenticates with ssh_key_file, as the user its URL names (ssh://USER@HOST/PATH).", name)
		}
	}
	for _, f := range []struct {
		name, value, summary, what, example string
	}{
		{"ssh_key_file", gs.SSHKeyFile, "Invalid SSH key file", "the node's private key", "/etc/airlock/git/id_ed25519"},
		{"known_hosts", gs.KnownHosts, "Invalid known hosts file", "the host keys the node trusts (no host is trusted on first use)", "/etc/airlock/git/known_hosts"},
	} {
		if _, ok := attrs[f.name]; !ok {
			d.errorf(b.DefRange, "Missing "+f.name, "An ssh source names %s: set %s to the absolute path of the file, such as %q.", f.what, f.name, f.example)
			continue
		}
		reason := checkRootPath(f.value)
		if strings.Contains(reason, "is protected") {
			reason = ""
		}
		if reason == "" {
			reason = checkSSHPath(f.value)
		}
		if reason != "" {
			d.errorf(d.rangeOf(at.field(f.name)), f.summary, "%s. Name the file holding %s by its absolute path, such as %q.", reason, f.what, f.example)
		}
	}
}

// checkRootPath checks a host_paths or read_only_paths entry.
func checkRootPath(p string) string {
	switch {
	case p == "":
		return "the path is empty"
	case strings.ContainsRune(p, 0):
		return "the path contains a NUL character"
	case !filepath.IsAbs(p):
		return fmt.Sprintf("%q is not an absolute path", p)
	case filepath.Clean(p) != p && filepath.Clean(p)+"/" != p:
		return fmt.Sprintf("%q is not a clean path (write %q)", p, filepath.Clean(p))
	}
	clean := filepath.Clean(p)
	for _, q := range ProtectedHostPaths {
		// An ancestor of a protected path (such as /var) is a fine root:
		// what is beneath it is admitted, protected paths excepted.
		if clean == q || within(q, clean) {
			return fmt.Sprintf("%q is protected: nothing under it is admitted whatever the policy says", p)
		}
	}
	return ""
}

// checkSecretSourceGlob checks a secret_sources entry: "env:" and a glob of
// variable names, or "file:" and a glob of absolute, clean paths.
func checkSecretSourceGlob(s string) string {
	kind, glob, _ := strings.Cut(s, ":")
	if _, err := path.Match(s, ""); err != nil {
		return fmt.Sprintf("%q is not a valid glob", s)
	}
	switch kind {
	case "env":
		if glob == "" || strings.ContainsFunc(glob, func(c rune) bool {
			return !(c == '_' || c == '*' || c == '?' || c == '[' || c == ']' || c == '-' || c == '!' || c == '^' || 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9')
		}) {
			return fmt.Sprintf("%q does not name environment variables", s)
		}
	case "file":
		switch {
		case strings.ContainsRune(glob, 0) || !strings.HasPrefix(glob, "/"):
			return fmt.Sprintf("%q is not an absolute path", s)
		case path.Clean(glob) != glob || glob == "/":
			return fmt.Sprintf("%q is not a clean path to files", s)
		case strings.ContainsAny(strings.SplitN(glob[1:], "/", 2)[0], `*?[\`):
			// Workspaces and mounts are kept out of a source's fixed
			// directory (see Admission.secretDirs): it must have one.
			return fmt.Sprintf("%q has a glob in its first directory: name the directory the files are in, as in \"file:/etc/airlock/secrets/*/*\"", s)
		}
	default:
		return fmt.Sprintf("%q is neither env:VAR nor file:/PATH", s)
	}
	return ""
}

// checkAdmittedHost checks a host of a secret_source block for the source
// glob src.
func checkAdmittedHost(src, h string) string {
	if h == DirHost {
		if !strings.HasPrefix(src, "file:") {
			return fmt.Sprintf("%q names the directory holding a file, and %q is not a file source", h, src)
		}
		return ""
	}
	name, _, reason := parseHostName(h, true)
	switch {
	case reason != "":
		return fmt.Sprintf("%q is not a host name: %s", h, reason)
	case strings.TrimPrefix(h, "*.") != name:
		return fmt.Sprintf("%q is not written in canonical form (lower case, no trailing dot)", h)
	}
	return ""
}

// String renders the policy for the daemon's log.
func (a *Admission) String() string {
	l := a.Limits
	return fmt.Sprintf("%s: host paths %s, read-only %s, volume paths %s, users %s, groups %s, capabilities %s, secret sources %s, limits cpus=%v memory=%s pids=%d disk=%s log_size=%s audit_size=%s timeout=%s sessions=%s",
		a.Source, listOrNone(a.HostPaths), listOrNone(a.ReadOnlyPaths), listOrNone(a.VolumePaths), rangesString(a.Users), rangesString(a.Groups),
		listOrNone(a.Capabilities), a.secretSourcesString(), l.CPUs, formatSize(l.Memory), l.Pids, formatSize(l.Disk), formatSize(l.LogSize), formatSize(l.AuditSize), l.Timeout, strconv.Itoa(l.Sessions))
}
