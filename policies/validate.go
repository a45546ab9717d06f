package policies

import (
	"cmp"
	"fmt"
	"math"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"

	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/containerd/errdefs"
)

// ValidationError lists what is wrong with a Policy. Each problem names the
// field by its JSON path, e.g.
// `workspaces[0].mode: "overlayy" is not one of overlay, ro, rw`.
type ValidationError struct {
	Problems []string
}

func (e *ValidationError) Error() string {
	return "invalid policy: " + strings.Join(e.Problems, "; ")
}

// Unwrap classifies the error as errdefs.ErrInvalidArgument.
func (e *ValidationError) Unwrap() error { return errdefs.ErrInvalidArgument }

// Validate checks p with the same rules the decoder applies to a manifest.
// Zero values that ApplyDefaults would fill are accepted. It returns a
// *ValidationError, or nil when p is valid.
func (p *Policy) Validate() error {
	if p == nil {
		return &ValidationError{Problems: []string{"the policy is missing"}}
	}
	var out []string
	for _, pr := range p.check() {
		if !pr.warning {
			out = append(out, pr.String())
		}
	}
	if len(out) == 0 {
		return nil
	}
	return &ValidationError{Problems: out}
}

// fieldPath names a Policy field by its JSON spelling, one segment per
// step: "workspaces", "[0]", "mode".
type fieldPath []string

func (fp fieldPath) String() string {
	var b strings.Builder
	for _, s := range fp {
		if b.Len() > 0 && !strings.HasPrefix(s, "[") {
			b.WriteByte('.')
		}
		b.WriteString(s)
	}
	return b.String()
}

func (fp fieldPath) field(name string) fieldPath { return append(slices.Clip(fp), name) }
func (fp fieldPath) index(i int) fieldPath {
	return append(slices.Clip(fp), "["+strconv.Itoa(i)+"]")
}
func (fp fieldPath) key(k string) fieldPath {
	return append(slices.Clip(fp), "["+strconv.Quote(k)+"]")
}

// problem is one broken rule. Validate renders it as "path: msg"; the
// decoder renders it as a diagnostic titled summary, with msg and hint as
// the detail, pointing at the source range of path.
type problem struct {
	path    fieldPath
	warning bool
	summary string
	msg     string
	hint    string
	// related is the field a duplicate collides with.
	related fieldPath
}

func (p problem) String() string { return p.path.String() + ": " + p.msg }

// detail is the diagnostic text: what is wrong, then how to fix it.
func (p problem) detail() string {
	d := sentence(p.msg)
	if p.hint != "" {
		d += " " + sentence(p.hint)
	}
	return d
}

// sentence ends s with a full stop unless it ends with punctuation.
func sentence(s string) string {
	if s == "" || strings.ContainsAny(s[len(s)-1:], ".!?") {
		return s
	}
	return s + "."
}

type checker struct {
	problems []problem
}

func (c *checker) add(at fieldPath, summary, hint, format string, args ...any) {
	c.problems = append(c.problems, problem{path: at, summary: summary, msg: fmt.Sprintf(format, args...), hint: hint})
}

// addDup records a problem at at that collides with the field related.
func (c *checker) addDup(at, related fieldPath, summary, hint, format string, args ...any) {
	c.add(at, summary, hint, format, args...)
	c.problems[len(c.problems)-1].related = related
}

func (c *checker) warn(at fieldPath, summary, hint, format string, args ...any) {
	c.problems = append(c.problems, problem{path: at, warning: true, summary: summary, msg: fmt.Sprintf(format, args...), hint: hint})
}

// check applies every rule to p and returns the problems in field order.
func (p *Policy) check() []problem {
	var c checker
	root := fieldPath{}
	if p.Label == "" {
		c.add(root.field("label"), "Empty session label", `Name the session, as in session "fix-flaky-test" { ... }`, "the session label is empty")
	} else if hasControl(p.Label) {
		c.add(root.field("label"), "Invalid session label", "Use printable characters only", "the session label %q contains control characters", p.Label)
	}
	switch {
	case p.Image == "":
		c.add(root.field("image"), "Missing image", `Set image to a reference known to the daemon's image store, such as image = "airlock/agent:bookworm"`, "a session needs an image")
	case strings.ContainsFunc(p.Image, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
		c.add(root.field("image"), "Invalid image", `Write a single reference such as "airlock/agent:bookworm"`, "%q is not an image reference: it contains whitespace", p.Image)
	}
	for i, a := range p.Command {
		if strings.ContainsRune(a, 0) {
			c.add(root.field("command").index(i), "Invalid command", "Remove the NUL character", "argument %d contains a NUL character", i)
		}
	}
	for _, k := range sortedKeys(p.Env) {
		at := root.field("env").key(k)
		if reason := checkEnvName(k); reason != "" {
			c.add(at, "Invalid environment variable", "Use a name without '=' or NUL, such as GOFLAGS", "%s", reason)
		}
		if strings.ContainsRune(p.Env[k], 0) {
			c.add(at, "Invalid environment variable", "Remove the NUL character", "the value of %s contains a NUL character", k)
		}
	}
	if p.User != "" {
		uid, reason := checkUser(p.User)
		switch {
		case reason != "":
			c.add(root.field("user"), "Invalid user", `Write a numeric "uid" or "uid:gid", such as "1000" or "1000:1000"; names are not resolved`, "%s", reason)
		case uid == 0:
			c.warn(root.field("user"), "Session runs as root", `Run as an unprivileged uid such as "1000:1000" unless the command needs root`, "user %q is uid 0", p.User)
		}
	}
	if p.Workdir != "" {
		if reason := checkSandboxPath(p.Workdir); reason != "" {
			c.add(root.field("workdir"), "Invalid workdir", `Use an absolute path inside the sandbox, such as "/workspace"`, "%s", reason)
		}
	}
	if p.Timeout < 0 {
		c.add(root.field("timeout"), "Invalid timeout", `Use a positive duration such as "30m", or leave timeout out for the default (30m)`, "timeout %s is negative", p.Timeout)
	}
	c.capabilities(root.field("capabilities"), p.Capabilities)
	c.resources(root.field("resources"), p.Resources)

	targets := map[string]fieldPath{}
	for i, w := range p.Workspaces {
		c.workspace(root.field("workspaces").index(i), w, targets)
	}
	for i, m := range p.Mounts {
		c.mount(root.field("mounts").index(i), m, targets)
	}
	if p.Egress != nil {
		c.egress(root.field("egress"), p.Egress)
		c.gateway(root.field("egress"), p.Egress, newEgressNames(p.Egress))
		c.addressBesideChecked(root.field("egress"), p)
	}
	c.credentials(root.field("credentials"), p.Credentials, p.Env, p.Secrets)
	c.secrets(root.field("secrets"), p, targets)
	if p.Approval != nil {
		c.approval(root.field("approval"), p.Approval, p.Egress.asks())
	}
	if p.Pool != nil {
		c.pool(root.field("pool"), p.Pool)
	}
	return c.problems
}

func (c *checker) capabilities(at fieldPath, caps []string) {
	seen := map[string]int{}
	for i, name := range caps {
		at := at.index(i)
		canon := NormalizeCapability(name)
		switch {
		case !isKnownCapability(canon):
			c.add(at, "Unknown capability", "Use a Linux capability name such as CAP_NET_BIND_SERVICE (see capabilities(7))", "%q is not a Linux capability", name)
			continue
		case canon != name:
			c.add(at, "Capability not in canonical form", fmt.Sprintf("Write %q", canon), "%q is not written in canonical form", name)
			continue
		}
		if j, ok := seen[canon]; ok {
			c.add(at, "Duplicate capability", "List each capability once", "%s is already listed at capabilities[%d]", canon, j)
			continue
		}
		seen[canon] = i
		if escapeCapabilities[canon] {
			c.warn(at, "Capability weakens the sandbox", "Grant it only if the session cannot work without it", "%s commonly lets a process escape or weaken a container sandbox", canon)
		}
	}
}

func (c *checker) resources(at fieldPath, r Resources) {
	switch {
	case math.IsNaN(r.CPUs) || math.IsInf(r.CPUs, 0) || r.CPUs < 0 || r.CPUs > MaxCPUs:
		c.add(at.field("cpus"), "Invalid cpus", fmt.Sprintf("Use a positive number of CPUs up to %d, such as 2 or 0.5", MaxCPUs), "cpus %v is out of range", r.CPUs)
	}
	if r.Memory < 0 || r.Memory > 0 && r.Memory < MinMemory {
		c.add(at.field("memory"), "Invalid memory", fmt.Sprintf(`Use at least %s, such as "4GiB"`, formatSize(MinMemory)), "memory %d bytes is below the minimum %s", r.Memory, formatSize(MinMemory))
	}
	if r.Pids < 0 {
		c.add(at.field("pids"), "Invalid pids", "Use a positive process limit such as 512", "pids %d is negative", r.Pids)
	}
	if r.Disk < 0 || r.Disk > 0 && r.Disk < MinDisk {
		c.add(at.field("disk"), "Invalid disk", fmt.Sprintf(`Use at least %s, such as "2GiB"`, formatSize(MinDisk)), "disk %d bytes is below the minimum %s", r.Disk, formatSize(MinDisk))
	}
	if r.LogSize < 0 || r.LogSize > 0 && (r.LogSize < MinLogSize || r.LogSize > MaxLogSize) {
		c.add(at.field("log_size"), "Invalid log_size", fmt.Sprintf(`Use %s to %s, such as "64MiB"`, formatSize(MinLogSize), formatSize(MaxLogSize)), "log_size %d bytes is out of range", r.LogSize)
	}
	if r.AuditSize < 0 || r.AuditSize > 0 && (r.AuditSize < MinAuditSize || r.AuditSize > MaxAuditSize) {
		c.add(at.field("audit_size"), "Invalid audit_size", fmt.Sprintf(`Use %s to %s, such as "16MiB"`, formatSize(MinAuditSize), formatSize(MaxAuditSize)), "audit_size %d bytes is out of range", r.AuditSize)
	}
}

func (c *checker) workspace(at fieldPath, w Workspace, targets map[string]fieldPath) {
	c.hostPath(at.field("host_path"), w.HostPath, "workspace")
	c.target(at.field("target"), w.Target, targets)
	overlay := w.Mode == "" || w.Mode == ModeOverlay
	switch w.Mode {
	case "", ModeOverlay, ModeRO:
	case ModeRW:
		c.warn(at.field("mode"), "Workspace is writable", `Use mode = "overlay" to review changes before they reach the host`, "with mode %q the session's writes reach the host directory directly, and deny_read masks only what exists when the session starts: a file the host creates during the session is readable", ModeRW)
	default:
		c.add(at.field("mode"), "Invalid mode", `Use "overlay" (copy-on-write, the default), "ro" (read-only) or "rw" (writes reach the host)`, "%q is not one of overlay, ro, rw", w.Mode)
	}
	switch w.OnExit {
	case "", OnExitReview:
	case OnExitCommit, OnExitDiscard:
		if !overlay && isKnownMode(w.Mode) {
			c.add(at.field("on_exit"), "on_exit needs an overlay workspace", `Remove on_exit, or set mode = "overlay"`, "on_exit %q has no effect with mode %q: only overlay workspaces are committed or discarded", w.OnExit, w.Mode)
		}
	default:
		c.add(at.field("on_exit"), "Invalid on_exit", `Use "review" (keep the changes for airlock diff/commit, the default), "commit" or "discard"`, "%q is not one of review, commit, discard", w.OnExit)
	}
	if !overlay && isKnownMode(w.Mode) {
		commitOnly := `Remove it, or set mode = "overlay": these rules are enforced when an overlay is committed`
		if len(w.Protect) > 0 {
			c.add(at.field("protect"), "protect needs an overlay workspace", commitOnly, "protect has no effect with mode %q", w.Mode)
		}
		if len(w.ProtectRefs) > 0 {
			c.add(at.field("protect_refs"), "protect_refs needs an overlay workspace", commitOnly, "protect_refs has no effect with mode %q", w.Mode)
		}
		if len(w.GitAllow) > 0 {
			c.add(at.field("git_allow"), "git_allow needs an overlay workspace", commitOnly, "git_allow has no effect with mode %q", w.Mode)
		}
		if w.PreserveUntracked {
			c.add(at.field("preserve_untracked"), "preserve_untracked needs an overlay workspace", commitOnly, "preserve_untracked has no effect with mode %q", w.Mode)
		}
	}
	c.denyRead(at, w.DenyRead, w.DefaultDenyRead, "workspace")
	for i, g := range w.Protect {
		if reason := checkAnchoredGlob(g); reason != "" {
			c.add(at.field("protect").index(i), "Invalid protect pattern", `Use a glob relative to the workspace root, such as ".github/**" (at any depth without a slash; "/package.json" for the top-level file only)`, "%s", reason)
		}
	}
	for i, g := range w.GitAllow {
		if reason := checkGlob(g); reason != "" {
			c.add(at.field("git_allow").index(i), "Invalid git_allow pattern", `Use a glob relative to the workspace root, such as "vendor/lib/.git" or ".git/info/attributes"`, "%s", reason)
		}
	}
	for i, r := range w.ProtectRefs {
		if reason := checkRefEntry(r); reason != "" {
			c.add(at.field("protect_refs").index(i), "Invalid protect_refs pattern", `Use a full ref name or glob, such as "refs/heads/main" or "refs/tags/*", or "!" and one to except the refs it matches, such as "!refs/heads/alex/*"`, "%s", reason)
		}
	}
}

// denyRead checks the deny_read patterns of a workspace or mount (what
// names the directory they are relative to).
func (c *checker) denyRead(at fieldPath, patterns []string, defaults bool, what string) {
	for i, g := range patterns {
		if reason := checkGlob(g); reason != "" {
			c.add(at.field("deny_read").index(i), "Invalid deny_read pattern", fmt.Sprintf(`Use a glob relative to the %s, such as "**/.env*" or "secrets/**"`, what), "%s", reason)
		}
	}
	if !defaults {
		c.warn(at.field("default_deny_read"), "Credential files are readable", "Keep default_deny_read = true unless the session must read them", "default_deny_read is off: .env files, private keys, .netrc, package-registry and cloud credential files in the %s are readable", what)
	}
}

func isKnownMode(m string) bool { return m == ModeOverlay || m == ModeRO || m == ModeRW }

func (c *checker) mount(at fieldPath, m Mount, targets map[string]fieldPath) {
	c.hostPath(at.field("host_path"), m.HostPath, "mount")
	c.target(at.field("target"), m.Target, targets)
	c.denyRead(at, m.DenyRead, m.DefaultDenyRead, "mounted directory")
}

func (c *checker) hostPath(at fieldPath, p, kind string) {
	hint := fmt.Sprintf(`Name a host directory in the label, as in %s "/srv/src/app" { ... }; relative paths resolve against the manifest's directory`, kind)
	switch {
	case p == "":
		c.add(at, "Missing host path", hint, "the host path is empty")
	case strings.ContainsRune(p, 0):
		c.add(at, "Invalid host path", hint, "the host path contains a NUL character")
	case !filepath.IsAbs(p):
		c.add(at, "Relative host path", hint, "%q is not an absolute path", p)
	}
}

// reservedTargets are sandbox paths the runtime manages; nothing may be
// mounted on or beneath them.
var reservedTargets = []string{"/proc", "/sys", "/dev"}

func (c *checker) target(at fieldPath, t string, targets map[string]fieldPath) {
	const hint = `Use an absolute path inside the sandbox, such as target = "/workspace"`
	if t == "" {
		c.add(at, "Missing target", hint, "a target is required")
		return
	}
	if reason := checkSandboxPath(t); reason != "" {
		c.add(at, "Invalid target", hint, "%s", reason)
		return
	}
	clean := path.Clean(t)
	if clean == "/" {
		c.add(at, "Invalid target", hint, "target %q would replace the sandbox's root filesystem", t)
		return
	}
	for _, r := range reservedTargets {
		if clean == r || strings.HasPrefix(clean, r+"/") {
			c.add(at, "Invalid target", hint, "target %q is under %s, which the runtime manages", t, r)
			return
		}
	}
	if prev, ok := targets[clean]; ok {
		c.addDup(at, prev, "Duplicate target", "Give each workspace and mount its own target", "target %q is already used by %s", t, prev[:len(prev)-1])
		return
	}
	targets[clean] = at
}

var (
	credentialNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)
	envVarNameRE     = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
)

func (c *checker) credentials(at fieldPath, creds []Credential, env map[string]string, secrets []Secret) {
	names := map[string]fieldPath{}
	paths := map[string]fieldPath{}
	vars := map[string]fieldPath{}
	for i, cr := range creds {
		at := at.index(i)
		dupName := false
		switch {
		case !credentialNameRE.MatchString(cr.Name):
			c.add(at.field("name"), "Invalid credential name", `Use letters, digits, '.', '_' and '-' (at most 64), starting with a letter or digit, as in credential "git" { ... }`, "%q is not a valid credential name", cr.Name)
		default:
			if prev, ok := names[cr.Name]; ok {
				c.addDup(at.field("name"), prev.field("name"), "Duplicate credential", "Give each credential block its own name", "credential %q is already declared at %s", cr.Name, prev)
				dupName = true
			} else {
				names[cr.Name] = at
			}
		}
		if cr.Issuer != "" && !credentialNameRE.MatchString(cr.Issuer) {
			c.add(at.field("issuer"), "Invalid issuer", `Use "airlock" (the default) or the name of an issuer configured in the daemon`, "%q is not a valid issuer name", cr.Issuer)
		}
		switch {
		case cr.Audience == "":
			c.add(at.field("audience"), "Missing audience", `Name the service the token is for, as in audience = "git.corp.test"`, "a credential needs an audience")
		case strings.ContainsFunc(cr.Audience, func(r rune) bool { return unicode.IsSpace(r) || unicode.IsControl(r) }):
			c.add(at.field("audience"), "Invalid audience", `Name the service the token is for, as in audience = "git.corp.test"`, "audience %q contains whitespace", cr.Audience)
		}
		if len(cr.Scopes) == 0 {
			c.add(at.field("scopes"), "Missing scopes", `List what the token may do, as in scopes = ["git.push repo=app ref=refs/heads/agent/*"]`, "a credential without scopes authorizes nothing")
		}
		for j, s := range cr.Scopes {
			if strings.TrimSpace(s) == "" || hasControl(s) {
				c.add(at.field("scopes").index(j), "Invalid scope", "Write each scope as printable text, such as \"git.fetch repo=app\"", "scope %q is empty or contains control characters", s)
				continue
			}
			if cr.Issuer == "" || cr.Issuer == DefaultIssuer {
				c.builtinScope(at.field("scopes").index(j), s)
			}
		}
		switch {
		case cr.TTL < 0:
			c.add(at.field("ttl"), "Invalid ttl", `Use a positive duration such as "15m"`, "ttl %s is negative", cr.TTL)
		case cr.TTL > MaxCredentialTTL:
			c.add(at.field("ttl"), "Invalid ttl", fmt.Sprintf("Use at most %s", MaxCredentialTTL), "ttl %s is longer than the maximum %s", cr.TTL, MaxCredentialTTL)
		}
		switch cr.Deliver {
		case "", DeliverFile:
			if cr.EnvVar != "" {
				c.add(at.field("env_var"), "env_var needs deliver = \"env\"", `Remove env_var, or set deliver = "env"`, "env_var is only used when the credential is delivered in the environment")
			}
			if cr.Path != "" {
				pathHint := fmt.Sprintf("Use an absolute file path inside the sandbox, or leave path out for %s/NAME", CredentialDir)
				if reason := checkSandboxPath(cr.Path); reason != "" {
					c.add(at.field("path"), "Invalid credential path", pathHint, "%s", reason)
				} else if clean := path.Clean(cr.Path); clean != cr.Path || clean == "/" {
					c.add(at.field("path"), "Invalid credential path", pathHint, "%q does not name a file", cr.Path)
				} else if prev, ok := paths[path.Clean(cr.Path)]; ok && !dupName {
					c.addDup(at.field("path"), prev.field("path"), "Conflicting credential delivery", "Give each credential its own path", "path %q is already used by %s", cr.Path, prev)
				} else {
					paths[path.Clean(cr.Path)] = at
				}
			}
		case DeliverEnv:
			c.warn(at.field("deliver"), "Credential in the environment", `Prefer deliver = "file": environment variables are inherited by every child process and readable in /proc`, "credential %q is delivered in an environment variable", cr.Name)
			if cr.Path != "" {
				c.add(at.field("path"), "path needs deliver = \"file\"", `Remove path, or set deliver = "file"`, "path is only used when the credential is delivered as a file")
			}
			switch {
			case cr.EnvVar == "":
				c.add(at.field("env_var"), "Missing env_var", `Name the variable, as in env_var = "GIT_TOKEN"`, `deliver = "env" needs env_var`)
			case !envVarNameRE.MatchString(cr.EnvVar):
				c.add(at.field("env_var"), "Invalid env_var", "Use letters, digits and '_', not starting with a digit, such as GIT_TOKEN", "%q is not a valid environment variable name", cr.EnvVar)
			default:
				if _, ok := env[cr.EnvVar]; ok {
					c.addDup(at.field("env_var"), fieldPath{"env"}.key(cr.EnvVar), "Conflicting credential delivery", "Remove the variable from env, or choose another env_var", "env_var %q is also set in the session's env", cr.EnvVar)
				} else if prev, ok := vars[cr.EnvVar]; ok {
					c.addDup(at.field("env_var"), prev.field("env_var"), "Conflicting credential delivery", "Give each credential its own env_var", "env_var %q is already used by %s", cr.EnvVar, prev)
				} else {
					vars[cr.EnvVar] = at
				}
			}
		case DeliverGateway:
			if cr.Path != "" {
				c.add(at.field("path"), "path needs deliver = \"file\"", `Remove path: a gateway credential never enters the sandbox`, "path is only used when the credential is delivered as a file")
			}
			if cr.EnvVar != "" {
				c.add(at.field("env_var"), "env_var needs deliver = \"env\"", `Remove env_var: a gateway credential never enters the sandbox`, "env_var is only used when the credential is delivered in the environment")
			}
			if !slices.ContainsFunc(secrets, func(s Secret) bool { return s.From == "credential:"+cr.Name }) {
				c.warn(at.field("deliver"), "Gateway credential no secret uses", fmt.Sprintf(`Add secret "NAME" { from = "credential:%s" ... } to say where the gateway injects it`, cr.Name), "credential %q is minted but goes nowhere", cr.Name)
			}
		default:
			c.add(at.field("deliver"), "Invalid deliver", `Use "file" (the default), "env" or "gateway"`, "%q is not one of file, env, gateway", cr.Deliver)
		}
	}
}

func (c *checker) pool(at fieldPath, pl *Pool) {
	hint := fmt.Sprintf("Use a whole number from 0 to %d; 0 keeps no sandbox prepared", MaxPoolSize)
	switch {
	case pl.Size < 0:
		c.add(at.field("size"), "Invalid pool size", hint, "size %d is negative", pl.Size)
	case pl.Size > MaxPoolSize:
		c.add(at.field("size"), "Invalid pool size", hint, "size %d is larger than the maximum %d", pl.Size, MaxPoolSize)
	}
}

func (c *checker) egress(at fieldPath, e *Egress) {
	for _, list := range []struct {
		name    string
		entries []string
	}{{"allow", e.Allow}, {"deny", e.Deny}} {
		for i, s := range list.entries {
			r, reason := parseEgressRule(s)
			if reason != "" {
				c.add(at.field(list.name).index(i), "Invalid egress entry", egressHint, "%q is not a valid egress entry: %s", s, reason)
				continue
			}
			if list.name == "allow" && !e.IPv6 && !r.IsName() && r.Prefix.Addr().Is6() && !r.Prefix.Addr().Is4In6() {
				c.warn(at.field(list.name).index(i), "IPv6 entry without ipv6", "Set ipv6 = true to allow IPv6 traffic", "%q has no effect while ipv6 = false", s)
			}
		}
	}
	for i, s := range e.AllowPrivate {
		at := at.field("allow_private").index(i)
		pfx, reason := ParsePrivateRange(s)
		if reason != "" {
			c.add(at, "Invalid allow_private entry", allowPrivateHint, "%q: %s", s, reason)
			continue
		}
		if !e.IPv6 && pfx.Addr().Is6() {
			c.warn(at, "IPv6 entry without ipv6", "Set ipv6 = true to allow IPv6 traffic", "%q has no effect while ipv6 = false", s)
		}
	}
	switch e.OnBlock {
	case "", OnBlockReject, OnBlockDrop:
	default:
		c.add(at.field("on_block"), "Invalid on_block", `Use "reject" (fail fast, the default) or "drop" (silently discard)`, "%q is not one of reject, drop", e.OnBlock)
	}
	switch e.L7 {
	case "", L7Off, L7Check:
	default:
		c.add(at.field("l7"), "Invalid l7", `Use "off" (layers 3-4 only, the default) or "check" (bind SNI and Host to the DNS pins)`, "%q is not one of off, check", e.L7)
	}
	if len(e.L7Ports) > 0 {
		if !e.L7Enabled() {
			c.add(at.field("l7_ports"), "l7_ports without the L7 gateway", `Set l7 = "check" in this egress block, or remove l7_ports`, "l7_ports names the ports the L7 gateway checks, and l7 is %q", cmp.Or(e.L7, L7Off))
		}
		seen := map[uint16]bool{}
		for _, p := range e.L7Ports {
			if p == 0 {
				c.add(at.field("l7_ports"), "Invalid l7_ports", "Use port numbers from 1 to 65535", "0 is not a port")
			}
			if seen[p] {
				c.add(at.field("l7_ports"), "Invalid l7_ports", "List each port once", "port %d is listed twice", p)
			}
			seen[p] = true
		}
		if len(e.L7Ports) > 32 {
			c.add(at.field("l7_ports"), "Invalid l7_ports", "List at most 32 ports", "%d ports", len(e.L7Ports))
		}
	}
}

// checkUser parses "uid" or "uid:gid" and returns the uid, or a reason.
func checkUser(s string) (uint32, string) {
	uid, _, ok := parseUserIDs(s)
	if !ok {
		return 0, fmt.Sprintf("user %q is not a numeric uid or uid:gid", s)
	}
	return uid, ""
}

// UserIDs returns the uid and gid the session's processes run as: User
// parsed, DefaultUser when it is empty, the gid the uid when it is left
// out. It is the one parser of User; a User that Validate reports (with
// its location) is an errdefs.ErrInvalidArgument error here.
func (p *Policy) UserIDs() (uid, gid uint32, err error) {
	s := p.User
	if s == "" {
		s = DefaultUser
	}
	uid, gid, ok := parseUserIDs(s)
	if !ok {
		return 0, 0, fmt.Errorf("user %q is not a numeric uid or uid:gid: %w", s, errdefs.ErrInvalidArgument)
	}
	return uid, gid, nil
}

// parseID parses a decimal uid or gid; 4294967295 is (uid_t)-1 and invalid.
func parseID(s string) (uint32, bool) {
	if s == "" || strings.ContainsFunc(s, func(r rune) bool { return r < '0' || r > '9' }) {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 32)
	if err != nil || n == math.MaxUint32 {
		return 0, false
	}
	return uint32(n), true
}

// checkSandboxPath checks an absolute path inside the sandbox.
func checkSandboxPath(p string) string {
	switch {
	case strings.ContainsRune(p, 0):
		return fmt.Sprintf("%q contains a NUL character", p)
	case !path.IsAbs(p):
		return fmt.Sprintf("%q is not an absolute path", p)
	case slices.Contains(strings.Split(p, "/"), ".."):
		return fmt.Sprintf("%q contains a \"..\" element", p)
	}
	return ""
}

// checkGlob checks a pattern relative to a workspace root. "**" matches any
// number of directories; other elements use path.Match syntax. A leading
// slash is refused: it reads as a host path.
func checkGlob(g string) string {
	if strings.HasPrefix(g, "/") {
		return fmt.Sprintf("%q is absolute; patterns are relative to the workspace root", g)
	}
	return checkAnchoredGlob(g)
}

// checkAnchoredGlob is checkGlob for protect patterns, which follow
// .gitignore: a pattern without a slash matches at any depth, and one
// leading slash anchors it at the workspace root ("/package.json" is the
// top-level file only).
func checkAnchoredGlob(g string) string {
	switch {
	case g == "":
		return "the pattern is empty"
	case strings.ContainsRune(g, 0):
		return fmt.Sprintf("%q contains a NUL character", g)
	case g == "/" || strings.HasPrefix(g, "//"):
		return fmt.Sprintf("%q names no path: a leading slash anchors a pattern at the workspace root, as in \"/package.json\"", g)
	case slices.Contains(strings.Split(g, "/"), ".."):
		return fmt.Sprintf("%q contains \"..\"; patterns may not leave the workspace", g)
	}
	if _, err := path.Match(g, ""); err != nil {
		return fmt.Sprintf("%q is not a valid glob", g)
	}
	return ""
}

// checkRefEntry checks a protect_refs entry: a ref pattern, or "!" and a
// ref pattern for an exception.
func checkRefEntry(r string) string {
	rest, except := strings.CutPrefix(r, "!")
	switch {
	case !except:
		return checkRefPattern(r)
	case rest == "":
		return `"!" alone is not a pattern: an exception needs a ref pattern after "!"`
	}
	if reason := checkRefPattern(rest); reason != "" {
		return fmt.Sprintf("exception %q: %s", r, reason)
	}
	return ""
}

// checkRefPattern checks a git ref name or glob such as "refs/heads/*".
func checkRefPattern(r string) string {
	switch {
	case !strings.HasPrefix(r, "refs/") || len(r) == len("refs/"):
		return fmt.Sprintf("%q is not a full ref name starting with refs/", r)
	case strings.ContainsFunc(r, func(c rune) bool { return c <= ' ' || c == 0x7f || strings.ContainsRune("~^:\\", c) }):
		return fmt.Sprintf("%q contains a character git does not allow in ref names", r)
	case strings.Contains(r, ".."):
		return fmt.Sprintf("%q contains \"..\"", r)
	}
	if _, err := path.Match(r, ""); err != nil {
		return fmt.Sprintf("%q is not a valid glob", r)
	}
	return ""
}

func checkEnvName(k string) string {
	switch {
	case k == "":
		return "an environment variable name is empty"
	case strings.ContainsAny(k, "=\x00"):
		return fmt.Sprintf("%q contains '=' or NUL", k)
	}
	return ""
}

func hasControl(s string) bool {
	return strings.ContainsFunc(s, unicode.IsControl)
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// builtinScope checks a scope of an airlock-issued token against the scope
// grammar (package credentials/scope). External issuers interpret their own
// scopes, so only the built-in issuer's are checked.
func (c *checker) builtinScope(at fieldPath, s string) {
	sc, err := scope.Parse(s)
	if err != nil {
		c.add(at, "Invalid scope", `Write a scope as ACTION [KEY=PATTERN ...], such as "jobs.cancel owner=alex queue=dev"`, "%v", err)
		return
	}
	if err := scope.ValidateAction(sc.Action()); err != nil {
		c.add(at, "Unknown scope action", "Use one of the actions services know (see credentials/scope), or service.* for all of a service's actions", "%v", err)
		return
	}
	if keys := scope.UnknownKeys(sc); len(keys) > 0 {
		c.add(at, "Unknown scope attribute", "A scope with an attribute its action does not have allows nothing; check the spelling", "action %s has no attribute %s", sc.Action(), strings.Join(keys, ", "))
	}
}
