package policies

import (
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unicode/utf8"

	"github.com/containerd/errdefs"
)

// Admission is the operator's admission policy: what an API caller may ask
// the daemon for, on top of what Validate checks. Every member of the
// socket's group can create sessions, and a session's user, capabilities
// and host paths act on the host, so the daemon admits a manifest only
// within these bounds. DefaultAdmission is the built-in policy; an operator
// writes one in HCL (see examples/airlockd/admission.hcl and
// DecodeAdmission).
//
// Whatever the policy says, host paths that would hand the host to a
// session are refused: see ProtectedHostPaths.
type Admission struct {
	// Source names where the policy came from: a file name, or
	// DefaultAdmissionSource.
	Source string `json:"source"`
	// HostPaths are the host directories under which workspaces and
	// mounts may name a path (the directory itself or anything beneath
	// it); "/" admits every path that is not protected.
	HostPaths []string `json:"host_paths"`
	// ReadOnlyPaths are host directories under which only read-only use is
	// admitted: workspaces with mode "ro" and mounts with read_only.
	ReadOnlyPaths []string `json:"read_only_paths,omitempty"`
	// Users and Groups are the uids and gids a session may run as.
	Users  []IDRange `json:"users"`
	Groups []IDRange `json:"groups"`
	// Capabilities are those a manifest may grant, in canonical form.
	Capabilities []string `json:"capabilities"`
	// SecretSources say which sources a secret's from may name, and into
	// which hosts each may be injected. The daemon reads a secret's value
	// as root from its own host and environment and the gateway sends it
	// to the manifest's inject hosts, so without the hosts any caller
	// could have the operator's API key sent to a host of its choosing.
	SecretSources []SecretSource `json:"secret_sources"`
	// GitSources are the repositories the Kubernetes node agent may fetch
	// a Session's workspace from, and the branches it may push the
	// session's committed changes to (see GitSource). None by default.
	GitSources []GitSource `json:"git_sources,omitempty"`
	// VolumePaths are the host directories under which the Kubernetes
	// node agent may take a workspace from a PersistentVolume (a `local`
	// or `hostPath` volume bound to the Session's claim). They may not
	// overlap HostPaths or ReadOnlyPaths: a directory there is a host path
	// any caller may name, and a volume's directory is its claim's alone.
	// None by default.
	VolumePaths []string `json:"volume_paths,omitempty"`
	// Limits are upper bounds on what one session, and all of them
	// together, may ask for.
	Limits Limits `json:"limits"`
}

// SecretSource is an admission `secret_source "GLOB" { hosts = [...] }`
// block: the sources From matches may be injected into Hosts alone.
type SecretSource struct {
	// From is a glob (path.Match syntax over the whole source: "*" does
	// not cross '/') such as "file:/etc/airlock/secrets/anthropic" or
	// "env:ANTHROPIC_API_KEY".
	From string `json:"from"`
	// Hosts are the inject hosts admitted for these sources: exact names,
	// "*.suffix" for the names under a domain, or DirHost.
	Hosts []string `json:"hosts"`
}

// DirHost, as a SecretSource host, stands for the name of the directory
// that holds the file: with from "file:/etc/airlock/secrets/*/*", the file
// /etc/airlock/secrets/api.anthropic.com/key may be injected into
// api.anthropic.com alone.
const DirHost = "{dir}"

// admitsHost reports whether the source src (which s.From matches) may be
// injected into host.
func (s SecretSource) admitsHost(src, host string) bool {
	for _, h := range s.Hosts {
		switch {
		case h == DirHost:
			file, ok := strings.CutPrefix(src, "file:")
			if ok && path.Base(path.Dir(file)) == host {
				return true
			}
		case strings.HasPrefix(h, "*."):
			if strings.HasSuffix(host, h[1:]) {
				return true
			}
		case h == host:
			return true
		}
	}
	return false
}

func (s SecretSource) String() string {
	return fmt.Sprintf("%s to %s", s.From, strings.Join(s.Hosts, ", "))
}

// Limits bound a session's resources and the number of sessions.
type Limits struct {
	CPUs   float64 `json:"cpus"`
	Memory int64   `json:"memory"` // bytes
	Pids   int64   `json:"pids"`
	Disk   int64   `json:"disk"` // bytes
	// LogSize and AuditSize bound resources.log_size and audit_size: what
	// one session's output and audit may take under the daemon's root.
	LogSize   int64    `json:"log_size"`
	AuditSize int64    `json:"audit_size"`
	Timeout   Duration `json:"timeout"`
	// Sessions bounds the sessions the daemon holds at once, in any
	// state, together with sandboxes prepared for warm pools.
	Sessions int `json:"sessions"`
}

// IDRange is an inclusive range of uids or gids.
type IDRange struct {
	First uint32 `json:"first"`
	Last  uint32 `json:"last"`
}

func (r IDRange) String() string {
	if r.First == r.Last {
		return strconv.FormatUint(uint64(r.First), 10)
	}
	return fmt.Sprintf("%d-%d", r.First, r.Last)
}

func (r IDRange) contains(id uint32) bool { return id >= r.First && id <= r.Last }

// DefaultAdmissionSource is the Source of DefaultAdmission.
const DefaultAdmissionSource = "the built-in admission policy"

// DefaultDisk is the quota of a session's overlay upper directories when
// the manifest sets no resources.disk (fsscope uses it as its default).
const DefaultDisk = 4 << 30

// The built-in admission policy's bounds.
const (
	DefaultMaxCPUs      = 16
	DefaultMaxMemory    = 64 << 30
	DefaultMaxPids      = 32768
	DefaultMaxDisk      = 256 << 30
	DefaultMaxLogSize   = 1 << 30
	DefaultMaxAuditSize = 256 << 20
	DefaultMaxTimeout   = Duration(24 * time.Hour)
	DefaultMaxSessions  = 256
)

// SafeCapabilities are the capabilities the built-in policy admits: none
// of them reaches beyond the session's own processes, network namespace
// and root directory.
var SafeCapabilities = []string{"CAP_KILL", "CAP_NET_BIND_SERVICE", "CAP_SYS_CHROOT"}

// anyButRoot are the ids the built-in policy admits: every one but 0.
var anyButRoot = []IDRange{{First: 1, Last: math.MaxUint32 - 1}}

// DefaultSecretDir is the daemon-side directory whose files the built-in
// policy admits as secret sources, one directory per host the files in it
// may be injected into (/etc/airlock/secrets/api.anthropic.com/key): the
// operator fills it, and only root should be able to read or write it.
const DefaultSecretDir = "/etc/airlock/secrets"

// DefaultAdmission is what the daemon admits when the operator gives no
// policy: any host path that is not protected, any uid and gid but 0, the
// SafeCapabilities, secrets from the files in DefaultSecretDir/HOST/,
// injected into HOST alone (never from the daemon's environment, which
// may hold what no session should reach), and the DefaultMax* bounds.
func DefaultAdmission() *Admission {
	return &Admission{
		Source:        DefaultAdmissionSource,
		HostPaths:     []string{"/"},
		Users:         slices.Clone(anyButRoot),
		Groups:        slices.Clone(anyButRoot),
		Capabilities:  slices.Clone(SafeCapabilities),
		SecretSources: []SecretSource{{From: "file:" + DefaultSecretDir + "/*/*", Hosts: []string{DirHost}}},
		Limits:        defaultLimits(),
	}
}

// DefaultAdmissionFile is an admission file (HCL) for the built-in policy
// with secrets from the files in each of secretDirs instead: DIR/HOST/*
// may be injected into HOST alone, as the built-in policy does for
// DefaultSecretDir. Harnesses that run their own daemon give it their own
// secrets directory so. A directory must be absolute and clean, and may
// not hold a glob character (it would widen the source), a quote, a
// backslash, an HCL template sequence ("${", "%{") or a control
// character.
func DefaultAdmissionFile(secretDirs ...string) (string, error) {
	var b strings.Builder
	b.WriteString("admission {\n  host_paths = [\"/\"]\n")
	for _, d := range secretDirs {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d || d == "/" || strings.ContainsAny(d, `*?[]\"`) ||
			strings.Contains(d, "${") || strings.Contains(d, "%{") ||
			strings.ContainsFunc(d, func(r rune) bool { return r < 0x20 || r == 0x7f || r == utf8.RuneError }) {
			return "", fmt.Errorf("secret directory %q: want an absolute, clean path other than / without glob characters, quotes, backslashes, template sequences or control characters: %w", d, errdefs.ErrInvalidArgument)
		}
		fmt.Fprintf(&b, "  secret_source \"file:%s/*/*\" {\n    hosts = [%q]\n  }\n", d, DirHost)
	}
	b.WriteString("}\n")
	return b.String(), nil
}

func defaultLimits() Limits {
	return Limits{
		CPUs: DefaultMaxCPUs, Memory: DefaultMaxMemory, Pids: DefaultMaxPids, Disk: DefaultMaxDisk,
		LogSize: DefaultMaxLogSize, AuditSize: DefaultMaxAuditSize,
		Timeout: DefaultMaxTimeout, Sessions: DefaultMaxSessions,
	}
}

// ProtectedHostPaths are refused as workspaces and mounts whatever the
// admission policy says: the path itself, anything beneath it, and any
// directory that contains it. The daemon adds its own root and socket, and
// containerd's root and socket; and its bin dir and binary, which sessions
// may read but not write (see Protected.ProtectWrites). "/" is refused as
// itself.
var ProtectedHostPaths = []string{"/etc", "/proc", "/sys", "/dev", "/boot", "/run", "/var/run", "/var/lib/containerd"}

// AdmissionError lists why a request was refused by admission. It is
// classified as errdefs.ErrPermissionDenied (HTTP 403).
type AdmissionError struct {
	Problems []string
}

func (e *AdmissionError) Error() string {
	return "admission: " + strings.Join(e.Problems, "; ")
}

// Unwrap classifies the error as errdefs.ErrPermissionDenied.
func (e *AdmissionError) Unwrap() error { return errdefs.ErrPermissionDenied }

// Protected is the resolved set of host paths refused whatever the policy
// says. Build it once with NewProtected.
type Protected struct {
	paths []string // resolved, cleaned
	// writable are refused only for uses whose writes reach the host:
	// programs the host runs as root, which a session may read but not
	// replace.
	writable []string
	// owned are directories the daemon's in-process caller made for one
	// session alone (a Kubernetes Session's fetched workspace, under the
	// daemon's root): admitted as that session's workspaces, as written,
	// whatever else would refuse them. See WithOwned.
	owned []string
	// volumes are the directories of the PersistentVolumes the daemon's
	// in-process caller found bound to the session's claims: admitted as
	// its workspaces when they are under the admission policy's
	// VolumePaths and not protected. See WithVolumes.
	volumes []string
}

// WithVolumes returns a copy of pr that admits the directories dirs
// (absolute paths, resolved as host paths are) as workspaces, and only as
// workspaces, when they are under the admission policy's VolumePaths and
// the workspace names one by its resolved path (no symlink in it). It
// is for the Kubernetes node agent, which found dirs as the directories of
// the PersistentVolumes bound to the claims of the Session being created:
// no API request can name one.
func (pr *Protected) WithVolumes(dirs ...string) *Protected {
	c := *pr
	c.volumes = nil
	for _, d := range dirs {
		if d == "" || !filepath.IsAbs(d) {
			continue
		}
		if r, err := filepath.EvalSymlinks(d); err == nil {
			d = r
		}
		c.volumes = append(c.volumes, filepath.Clean(d))
	}
	return &c
}

// WithOwned returns a copy of pr that admits the directories dirs (exact,
// clean, absolute paths; not what is beneath them) as workspaces although
// they are protected or outside the admitted host paths. It is for the
// daemon's in-process callers, which made dirs for the session being
// created: no API request can name one.
func (pr *Protected) WithOwned(dirs ...string) *Protected {
	c := *pr
	c.owned = nil
	for _, d := range dirs {
		if d != "" && filepath.IsAbs(d) && filepath.Clean(d) == d {
			c.owned = append(c.owned, d)
		}
	}
	return &c
}

// NewProtected resolves ProtectedHostPaths and extra (the daemon's own
// paths) into a Protected set. Paths that do not exist are kept as written,
// cleaned.
func NewProtected(extra ...string) *Protected {
	pr := &Protected{}
	for _, p := range append(slices.Clone(ProtectedHostPaths), extra...) {
		pr.paths = addResolved(pr.paths, p)
	}
	return pr
}

// ProtectWrites adds paths that sessions may read but never write to:
// their writable uses (and those of anything beneath them or containing
// them) are refused.
func (pr *Protected) ProtectWrites(paths ...string) {
	for _, p := range paths {
		pr.writable = addResolved(pr.writable, p)
	}
}

// addResolved adds p, cleaned, and what it resolves to, to set.
func addResolved(set []string, p string) []string {
	if p == "" || !filepath.IsAbs(p) {
		return set
	}
	p = filepath.Clean(p)
	if !slices.Contains(set, p) {
		set = append(set, p)
	}
	if r, err := filepath.EvalSymlinks(p); err == nil && !slices.Contains(set, r) {
		set = append(set, r)
	}
	return set
}

// reason says why the host path p may not be used, or "". writable is
// true for uses whose writes reach p.
func (pr *Protected) reason(p string, writable bool) string {
	if p == "/" {
		return `"/" is a protected host path`
	}
	if r := protectedReason(pr.paths, p); r != "" {
		return r
	}
	if writable {
		if r := protectedReason(pr.writable, p); r != "" {
			return r + " (read-only use is admitted)"
		}
	}
	return ""
}

func protectedReason(set []string, p string) string {
	for _, q := range set {
		switch {
		case p == q:
			return fmt.Sprintf("%q is a protected host path", p)
		case within(q, p):
			return fmt.Sprintf("%q is beneath the protected host path %q", p, q)
		case within(p, q):
			return fmt.Sprintf("%q contains the protected host path %q", p, q)
		}
	}
	return ""
}

// within reports whether p is strictly beneath dir; both are clean and
// absolute.
func within(dir, p string) bool {
	if dir == "/" {
		return p != "/"
	}
	return strings.HasPrefix(p, dir+"/")
}

// Admit checks p, which has defaults applied and has passed Validate,
// against the admission policy and the protected paths. It resolves every
// host path (symlinks and "..") and the path of every file a secret comes
// from, and rewrites p with the resolved paths, so that what was checked
// is what is mounted and read. (Whoever reads a secret's file should still
// open it without following symlinks: one swapped in after admission
// would otherwise be read.) It returns warnings for the
// caller, and an *AdmissionError naming every rule p breaks, or an
// errdefs.ErrInvalidArgument error when a host path cannot be resolved.
func (a *Admission) Admit(p *Policy, pr *Protected) (warnings []string, err error) {
	var problems []string
	refuse := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	var missing []error

	uid, gid, ok := parseUserIDs(p.User)
	if ok {
		if !idAllowed(a.Users, uid) {
			refuse("user %q refused: uid %d is not among the admitted users (%s)", p.User, uid, rangesString(a.Users))
		}
		if !idAllowed(a.Groups, gid) {
			refuse("user %q refused: gid %d is not among the admitted groups (%s)", p.User, gid, rangesString(a.Groups))
		}
	}
	for _, c := range p.Capabilities {
		canon := NormalizeCapability(c)
		if !slices.Contains(a.Capabilities, canon) {
			refuse("capability %s refused: it is not among the admitted capabilities (%s)", c, listOrNone(a.Capabilities))
			continue
		}
		// Without a user namespace these make the session any uid or gid
		// on the host files it is given, whatever Users and Groups say.
		if idCapabilities[canon]&idUsers != 0 && !allIDs(a.Users) {
			refuse("capability %s refused: it lets the session take any uid, and only %s are admitted", c, rangesString(a.Users))
		} else if idCapabilities[canon]&idGroups != 0 && !allIDs(a.Groups) {
			refuse("capability %s refused: it lets the session take any gid, and only %s are admitted", c, rangesString(a.Groups))
		}
	}
	l := a.Limits
	if l.CPUs > 0 && p.Resources.CPUs > l.CPUs {
		refuse("resources.cpus %v refused: the limit is %v", p.Resources.CPUs, l.CPUs)
	}
	if l.Memory > 0 && p.Resources.Memory > l.Memory {
		refuse("resources.memory %s refused: the limit is %s", formatSize(p.Resources.Memory), formatSize(l.Memory))
	}
	if l.Pids > 0 && p.Resources.Pids > l.Pids {
		refuse("resources.pids %d refused: the limit is %d", p.Resources.Pids, l.Pids)
	}
	if l.Disk > 0 && p.Resources.Disk > l.Disk {
		refuse("resources.disk %s refused: the limit is %s", formatSize(p.Resources.Disk), formatSize(l.Disk))
	}
	if l.LogSize > 0 && p.Resources.LogSize > l.LogSize {
		refuse("resources.log_size %s refused: the limit is %s", formatSize(p.Resources.LogSize), formatSize(l.LogSize))
	}
	if l.AuditSize > 0 && p.Resources.AuditSize > l.AuditSize {
		refuse("resources.audit_size %s refused: the limit is %s", formatSize(p.Resources.AuditSize), formatSize(l.AuditSize))
	}
	if l.Timeout > 0 && p.Timeout > l.Timeout {
		refuse("timeout %s refused: the limit is %s", p.Timeout, l.Timeout)
	}

	// hostPath checks one host path and returns it resolved, or "".
	hostPath := func(kind, raw string, writable bool) string {
		what := fmt.Sprintf("%s %q", kind, raw)
		// As written first, so that a protected path is refused the same
		// way whether it exists or not.
		if filepath.IsAbs(raw) {
			if reason := pr.reason(filepath.Clean(raw), writable); reason != "" {
				refuse("%s refused: %s, refused whatever the admission policy says", what, reason)
				return ""
			}
		}
		resolved, err := resolveHostPath(raw)
		if err != nil {
			missing = append(missing, fmt.Errorf("%s: %w", what, err))
			return ""
		}
		if reason := a.hostPathReason(resolved, writable, pr); reason != "" {
			refuse("%s refused: %s", what, reason)
			return ""
		}
		return resolved
	}
	// Each volume the in-process caller names is one workspace: a second
	// workspace naming the same directory (by its path, or a symlink to
	// it) would take it in a mode of its own, past what the caller
	// checked of the claim (a ReadOnlyMany claim's "ro").
	volumeUses := map[string]int{}
	for i := range p.Workspaces {
		w := &p.Workspaces[i]
		if len(pr.volumes) > 0 && filepath.IsAbs(w.HostPath) {
			if r, err := resolveHostPath(w.HostPath); err == nil && slices.Contains(pr.volumes, r) {
				volumeUses[r]++
				if n := countOf(pr.volumes, r); volumeUses[r] > n {
					refuse("workspace %q refused: %q is the directory of a volume the session was given %d time(s), and more workspaces name it: a volume is one workspace per volume source", w.HostPath, r, n)
				} else if reason := a.volumePathReason(r, pr); reason != "" {
					refuse("workspace %q refused: %s", w.HostPath, reason)
				} else if filepath.Clean(w.HostPath) != r {
					// The caller checked the directory it named (a
					// subPath, resolved through no symlink beneath
					// the volume's directory); a symlink there now
					// was made since, by whoever writes the volume.
					refuse("workspace %q refused: it reaches %q, the directory of a volume the session was given, through a symbolic link: a volume's directory is taken only by its resolved path, as the node checked it", w.HostPath, r)
				} else {
					w.HostPath = r
				}
				continue
			}
		}
		if slices.Contains(pr.owned, w.HostPath) {
			if fi, err := os.Lstat(w.HostPath); err != nil || !fi.IsDir() {
				refuse("workspace %q refused: the directory made for it is gone or not a directory", w.HostPath)
			}
			if w.Mode == ModeRW {
				// Written directly, the directory under the daemon's
				// root would take the sandbox's writes past its disk
				// bound and past a commit's checks.
				refuse("workspace %q refused: a directory made for the session is taken with mode %q or %q, not %q", w.HostPath, ModeOverlay, ModeRO, ModeRW)
			}
			continue
		}
		if r := hostPath("workspace", w.HostPath, w.Mode != ModeRO); r != "" {
			w.HostPath = r
		}
	}
	for i := range p.Mounts {
		m := &p.Mounts[i]
		if r := hostPath("mount", m.HostPath, !m.ReadOnly); r != "" {
			m.HostPath = r
		}
	}
	for i := range p.Secrets {
		s := &p.Secrets[i]
		what := fmt.Sprintf("secret %q", s.Name)
		if strings.HasPrefix(s.From, "credential:") {
			// Minted by the daemon's own issuers for this session.
			continue
		}
		if !a.secretSourceAdmitted(s.From) {
			refuse("%s refused: source %q is not among the admitted secret sources (%s)", what, s.From, a.secretSourcesString())
			continue
		}
		if h := a.unadmittedHost(s.From, s); h != "" {
			refuse("%s refused: source %q may not be injected into %s (admitted: %s)", what, s.From, h, a.secretSourcesString())
			continue
		}
		file, ok := strings.CutPrefix(s.From, "file:")
		if !ok {
			continue
		}
		resolved, err := resolveHostPath(file)
		if err != nil {
			missing = append(missing, fmt.Errorf("%s: %w", what, err))
			continue
		}
		if reason := secretFileReason(resolved); reason != "" {
			refuse("%s refused: %s", what, reason)
			continue
		}
		if resolved != file && !a.secretSourceAdmitted("file:"+resolved) {
			refuse("%s refused: source %q resolves to %q, which is not among the admitted secret sources (%s)", what, s.From, resolved, a.secretSourcesString())
			continue
		}
		if h := a.unadmittedHost("file:"+resolved, s); resolved != file && h != "" {
			refuse("%s refused: source %q resolves to %q, which may not be injected into %s (admitted: %s)", what, s.From, resolved, h, a.secretSourcesString())
			continue
		}
		s.From = "file:" + resolved
	}
	if len(problems) > 0 {
		return nil, &AdmissionError{Problems: problems}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("%w: %w", errors.Join(missing...), errdefs.ErrInvalidArgument)
	}
	return p.Warnings(), nil
}

// secretSourceAdmitted reports whether a secret's from matches one of the
// admitted sources.
func (a *Admission) secretSourceAdmitted(from string) bool {
	for _, g := range a.SecretSources {
		if ok, err := path.Match(g.From, from); err == nil && ok {
			return true
		}
	}
	return false
}

// unadmittedHost returns an inject host of s that no admitted source
// matching from admits, or "".
func (a *Admission) unadmittedHost(from string, s *Secret) string {
	for _, in := range s.Inject {
		admitted := false
		for _, g := range a.SecretSources {
			if ok, err := path.Match(g.From, from); err == nil && ok && g.admitsHost(from, in.Host) {
				admitted = true
				break
			}
		}
		if !admitted {
			return in.Host
		}
	}
	return ""
}

func (a *Admission) secretSourcesString() string {
	if len(a.SecretSources) == 0 {
		return "none"
	}
	out := make([]string, len(a.SecretSources))
	for i, s := range a.SecretSources {
		out[i] = s.String()
	}
	return strings.Join(out, "; ")
}

// secretFileReason says why the resolved path p may not be a secret's
// source, or "": only a regular file with one name is (another name of a
// hard-linked file may be outside the admitted sources).
func secretFileReason(p string) string {
	fi, err := os.Lstat(p)
	switch {
	case err != nil:
		return err.Error()
	case !fi.Mode().IsRegular():
		return fmt.Sprintf("%q is not a regular file", p)
	case linkCount(fi) > 1:
		return fmt.Sprintf("%q has %d hard links: another of its names may be outside the admitted sources", p, linkCount(fi))
	}
	return ""
}

// AdmitSessions checks that one more session fits beside n.
func (a *Admission) AdmitSessions(n int) error {
	if a.Limits.Sessions > 0 && n >= a.Limits.Sessions {
		return &AdmissionError{Problems: []string{fmt.Sprintf("session refused: the daemon holds %d sessions and prepared sandboxes, the limit is %d (remove finished sessions with airlock rm)", n, a.Limits.Sessions)}}
	}
	return nil
}

// FillDefaults gives values a manifest left out the built-in default, or
// the policy's bound when that is lower, so that a session which asks for
// nothing in particular is admitted. A value equal to the built-in default
// counts as left out: the CLI sends policies with defaults applied. Call
// it before ApplyDefaults.
func (a *Admission) FillDefaults(p *Policy) {
	l := a.Limits
	if (p.Resources.CPUs == 0 || p.Resources.CPUs == DefaultCPUs) && l.CPUs > 0 && l.CPUs < DefaultCPUs {
		p.Resources.CPUs = l.CPUs
	}
	if (p.Resources.Memory == 0 || p.Resources.Memory == DefaultMemory) && l.Memory > 0 && l.Memory < DefaultMemory {
		p.Resources.Memory = l.Memory
	}
	if (p.Resources.Pids == 0 || p.Resources.Pids == DefaultPids) && l.Pids > 0 && l.Pids < DefaultPids {
		p.Resources.Pids = l.Pids
	}
	if p.Resources.Disk == 0 && l.Disk > 0 && l.Disk < DefaultDisk {
		p.Resources.Disk = l.Disk
	}
	if (p.Resources.LogSize == 0 || p.Resources.LogSize == DefaultLogSize) && l.LogSize > 0 && l.LogSize < DefaultLogSize {
		p.Resources.LogSize = l.LogSize
	}
	if (p.Resources.AuditSize == 0 || p.Resources.AuditSize == DefaultAuditSize) && l.AuditSize > 0 && l.AuditSize < DefaultAuditSize {
		p.Resources.AuditSize = l.AuditSize
	}
	if (p.Timeout == 0 || p.Timeout == DefaultTimeout) && l.Timeout > 0 && l.Timeout < DefaultTimeout {
		p.Timeout = l.Timeout
	}
}

// hostPathReason says why the resolved host path p may not be used, or "".
// writable is true for a use through which the session's writes reach p
// (rw and overlay workspaces, writable mounts).
func (a *Admission) hostPathReason(p string, writable bool, pr *Protected) string {
	if reason := a.pathReason(p, writable, pr); reason != "" {
		return reason
	}
	inRW := underAny(a.HostPaths, p)
	inRO := underAny(a.ReadOnlyPaths, p)
	switch {
	case !inRW && !inRO:
		return fmt.Sprintf("%q is not under an admitted host path (%s)", p, listOrNone(append(slices.Clone(a.HostPaths), a.ReadOnlyPaths...)))
	case writable && !inRW:
		return fmt.Sprintf("%q is under a read-only host path (%s): use a workspace with mode = \"ro\" or a mount with read_only = true", p, listOrNone(a.ReadOnlyPaths))
	}
	// Checked resolved (the policy's decoding compares the roots as
	// written): a host path root that is a symlink to a directory
	// holding volume_paths would reach every volume without a claim.
	if underAny(a.VolumePaths, p) || containsAny(a.VolumePaths, p) {
		return fmt.Sprintf("%q is under or holds the admission policy's volume_paths (%s): a volume's directory is a session's through its claim alone", p, listOrNone(a.VolumePaths))
	}
	return ""
}

// containsAny reports whether the resolved path p holds one of roots
// (resolved), strictly.
func containsAny(roots []string, p string) bool {
	for _, r := range roots {
		r = filepath.Clean(r)
		if rr, err := filepath.EvalSymlinks(r); err == nil {
			r = rr
		}
		if within(p, r) {
			return true
		}
	}
	return false
}

// inAny reports whether the resolved path p is one of roots (resolved).
func inAny(roots []string, p string) bool {
	for _, r := range roots {
		r = filepath.Clean(r)
		if rr, err := filepath.EvalSymlinks(r); err == nil {
			r = rr
		}
		if p == r {
			return true
		}
	}
	return false
}

// countOf counts the entries of list equal to s.
func countOf(list []string, s string) int {
	n := 0
	for _, e := range list {
		if e == s {
			n++
		}
	}
	return n
}

// volumePathReason says why the resolved directory p of a
// PersistentVolume is refused as a workspace, or "".
func (a *Admission) volumePathReason(p string, pr *Protected) string {
	if reason := a.pathReason(p, true, pr); reason != "" {
		return reason
	}
	if fi, err := os.Stat(p); err == nil && !fi.IsDir() {
		return fmt.Sprintf("%q, a volume's path, is not a directory", p)
	}
	if !underAny(a.VolumePaths, p) {
		return fmt.Sprintf("%q, a volume's path, is not under the admission policy's volume_paths (%s)", p, listOrNone(a.VolumePaths))
	}
	// Checked resolved too (the policy's decoding compares the roots as
	// written): a symlink can put a volume's directory under a root
	// every caller may name as a host_path.
	if underAny(a.HostPaths, p) || underAny(a.ReadOnlyPaths, p) {
		return fmt.Sprintf("%q, a volume's path, is also under an admitted host path (%s), which any session may name: keep the volumes' directories apart", p, listOrNone(append(slices.Clone(a.HostPaths), a.ReadOnlyPaths...)))
	}
	// A volume is a directory beneath a root: the root itself holds
	// every other volume.
	if inAny(a.VolumePaths, p) {
		return fmt.Sprintf("%q, a volume's path, is a volume_paths root itself, which holds every volume under it: make each volume a directory beneath it", p)
	}
	return ""
}

// BeneathVolumePaths reports whether the resolved host path p is strictly
// beneath one of the volume_paths roots (the roots resolved, as admission
// compares them): a volume's directory, not a root, which holds every
// volume under it, nor outside them.
func (a *Admission) BeneathVolumePaths(p string) bool {
	return underAny(a.VolumePaths, p) && !inAny(a.VolumePaths, p)
}

// UnderVolumePaths reports whether the resolved host path p is one of the
// volume_paths roots or beneath one (the roots resolved, as admission
// compares them).
func (a *Admission) UnderVolumePaths(p string) bool {
	return underAny(a.VolumePaths, p)
}

// pathReason says why the resolved host path p is refused whatever the
// admitted roots: protected, a secret source's directory, or not a
// directory or regular file one may hand a sandbox.
func (a *Admission) pathReason(p string, writable bool, pr *Protected) string {
	if reason := pr.reason(p, writable); reason != "" {
		return reason + ", refused whatever the admission policy says"
	}
	// The files secrets come from are the daemon's to read, never a
	// session's: a workspace or mount holding one would hand the sandbox
	// the values the gateway keeps out of it.
	var secrets []string
	for _, d := range a.secretDirs() {
		secrets = addResolved(secrets, d)
	}
	if r := protectedReason(secrets, p); r != "" {
		return strings.Replace(r, "protected host path", "secret source's directory", 1) + " (the admission policy's secret_source): secrets are read by the daemon alone"
	}
	fi, err := os.Lstat(p)
	if err != nil {
		return err.Error()
	}
	switch {
	case fi.Mode()&fs.ModeSocket != 0:
		return fmt.Sprintf("%q is a unix socket: a socket hands the sandbox the service behind it", p)
	case !fi.IsDir() && !fi.Mode().IsRegular():
		return fmt.Sprintf("%q is neither a directory nor a regular file", p)
	case fi.Mode().IsRegular() && linkCount(fi) > 1:
		return fmt.Sprintf("%q has %d hard links: another of its names may be a protected path", p, linkCount(fi))
	}
	return ""
}

// underAny reports whether p is one of roots or beneath one. Roots are
// resolved when they exist.
func underAny(roots []string, p string) bool {
	for _, r := range roots {
		r = filepath.Clean(r)
		if rr, err := filepath.EvalSymlinks(r); err == nil {
			r = rr
		}
		if p == r || within(r, p) {
			return true
		}
	}
	return false
}

// resolveHostPath resolves symlinks and ".." in an absolute host path.
func resolveHostPath(p string) (string, error) {
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("host path %q is not absolute", p)
	}
	r, err := filepath.EvalSymlinks(p)
	if err != nil {
		var pe *fs.PathError
		if errors.As(err, &pe) {
			return "", fmt.Errorf("host path %q: %s", p, pe.Err)
		}
		return "", err
	}
	return r, nil
}

// Warnings returns what Validate accepts but an operator should know:
// rules broken only as warnings, rendered as "path: message".
func (p *Policy) Warnings() []string {
	if p == nil {
		return nil
	}
	var out []string
	for _, pr := range p.check() {
		if pr.warning {
			out = append(out, pr.String())
		}
	}
	return out
}

func parseUserIDs(s string) (uid, gid uint32, ok bool) {
	u, g, hasGID := strings.Cut(s, ":")
	uid, ok = parseID(u)
	if !ok {
		return 0, 0, false
	}
	gid = uid
	if hasGID {
		if gid, ok = parseID(g); !ok {
			return 0, 0, false
		}
	}
	return uid, gid, true
}

// idCapabilities are the capabilities through which a session's processes
// take uids (idUsers) or gids (idGroups) other than its own: setuid(2),
// setgid(2) and setgroups(2); chown(2) of its files to any owner; and
// acting on any owner's files as their owner (chmod, setuid bits) or
// past their permissions (write root's files).
var idCapabilities = map[string]int{
	"CAP_SETUID":       idUsers,
	"CAP_SETGID":       idGroups,
	"CAP_CHOWN":        idUsers | idGroups,
	"CAP_FOWNER":       idUsers | idGroups,
	"CAP_DAC_OVERRIDE": idUsers | idGroups,
	// Reads past permissions: any owner's files.
	"CAP_DAC_READ_SEARCH": idUsers | idGroups,
	// A device node on a writable host path is, on the host, the device
	// for whoever may open it (mounts are nodev only in the sandbox).
	"CAP_MKNOD": idUsers | idGroups,
}

const (
	idUsers = 1 << iota
	idGroups
)

// allIDs reports whether rs admits every id, 0 to 4294967294.
func allIDs(rs []IDRange) bool {
	next := uint64(0)
	for next < math.MaxUint32 {
		advanced := false
		for _, r := range rs {
			if uint64(r.First) <= next && uint64(r.Last) >= next {
				next = uint64(r.Last) + 1
				advanced = true
			}
		}
		if !advanced {
			return false
		}
	}
	return true
}

func idAllowed(rs []IDRange, id uint32) bool {
	for _, r := range rs {
		if r.contains(id) {
			return true
		}
	}
	return false
}

func rangesString(rs []IDRange) string {
	if len(rs) == 0 {
		return "none"
	}
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ", ")
}

func listOrNone(l []string) string {
	if len(l) == 0 {
		return "none"
	}
	return strings.Join(l, ", ")
}

// linkCount is the number of hard links of the file fi describes.
func linkCount(fi fs.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return uint64(st.Nlink)
	}
	return 1
}

// secretDirs are the fixed directories of the admission policy's file
// secret sources: the path up to the first element with a glob character
// ("file:/etc/airlock/secrets/*/*" gives /etc/airlock/secrets), or the
// file itself when the source names one.
func (a *Admission) secretDirs() []string {
	var out []string
	for _, s := range a.SecretSources {
		rest, ok := strings.CutPrefix(s.From, "file:")
		if !ok || !filepath.IsAbs(rest) {
			continue
		}
		var fixed []string
		for _, el := range strings.Split(filepath.Clean(rest), "/") {
			if strings.ContainsAny(el, `*?[\`) {
				break
			}
			fixed = append(fixed, el)
		}
		d := strings.Join(fixed, "/")
		if d == "" {
			// Decoding refuses such a source; one made in code keeps
			// every host path out.
			d = "/"
		}
		out = append(out, d)
	}
	// A git source's token and ssh key are secrets the daemon reads
	// alone; its known hosts, the keys it trusts, no session may write.
	for _, g := range a.GitSources {
		for _, f := range []string{g.TokenFile, g.SSHKeyFile, g.KnownHosts} {
			if f != "" && filepath.IsAbs(f) {
				out = append(out, filepath.Clean(f))
			}
		}
	}
	return out
}
