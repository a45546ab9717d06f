// Package policies holds the session manifest schema: the plain Go values
// every other package consumes, the HCL decoder that produces them (with
// diagnostics carrying file:line), validation of decoded values, the
// defaults a manifest leaves out (ApplyDefaults; the session's uid and gid
// come parsed from UserIDs), and Marshal, which writes a Policy back as HCL.
//
// Only this package imports HCL, and only it writes HCL. The Go types here are also the wire format:
// the CLI decodes a manifest, sends the Policy as JSON, and the daemon
// validates it again with (*Policy).Validate.
package policies

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"
)

// Policy is one decoded `session "label" { ... }` block.
// +kubebuilder:object:generate=true
type Policy struct {
	// Label is the session block's label: a human name, not an id.
	// +required
	// +kubebuilder:validation:MinLength=1
	Label string `json:"label"`
	// Image is an image reference known to the daemon's image store.
	// +required
	// +kubebuilder:validation:MinLength=1
	Image string `json:"image"`
	// Command is the argv run as the session's main process.
	Command []string `json:"command,omitempty"`
	// Env is added to the process environment.
	Env map[string]string `json:"env,omitempty"`
	// User is "uid" or "uid:gid"; numeric only. Empty means DefaultUser.
	User string `json:"user,omitempty"`
	// Workdir is the process working directory inside the sandbox.
	Workdir string `json:"workdir,omitempty"`
	// Timeout is the wall-clock limit of the session; zero means DefaultTimeout.
	Timeout Duration `json:"timeout,omitempty"`
	// Capabilities lists Linux capabilities (e.g. "CAP_NET_BIND_SERVICE")
	// granted to the process; everything else is dropped.
	Capabilities []string `json:"capabilities,omitempty"`
	// Resources are the cgroup and disk limits.
	Resources Resources `json:"resources"`
	// Workspaces are host directories exposed to the sandbox.
	Workspaces []Workspace `json:"workspaces,omitempty"`
	// Mounts are extra host paths bound into the sandbox.
	Mounts []Mount `json:"mounts,omitempty"`
	// Egress is the network allowlist; nil means loopback only.
	Egress *Egress `json:"egress,omitempty"`
	// Credentials are minted for the session at start.
	Credentials []Credential `json:"credentials,omitempty"`
	// Secrets are values the sandbox never sees: it holds a placeholder,
	// which the L7 gateway replaces by the value only on verified TLS to
	// the hosts the secret is bound to.
	Secrets []Secret `json:"secrets,omitempty"`
	// Approval says how requests an HTTP rule holds with "ask" are
	// decided when no person does; nil means the defaults.
	Approval *Approval `json:"approval,omitempty"`
	// Pool asks the daemon to keep sandboxes for this policy prepared
	// ahead of time; nil means none.
	Pool *Pool `json:"pool,omitempty"`
	// Terminal gives the main process a pseudo-terminal (airlock run
	// -it): its output, stdout and stderr together, is the session's
	// stdout log, and `airlock attach` connects to it. Set through the
	// API, not in manifests.
	Terminal bool `json:"terminal,omitempty"`
}

// Pool is the `pool { size = N }` block: the daemon keeps Size sandboxes
// of the policy prepared (container, mounts, network and credential
// directories ready, the main process not yet chosen). Each is used by
// exactly one session and never reused.
// +kubebuilder:object:generate=true
type Pool struct {
	Size int `json:"size"`
}

// MaxPoolSize bounds one policy's pool.
const MaxPoolSize = 64

// Defaults applied when a manifest leaves a value out.
const (
	DefaultUser    = "65534:65534"
	DefaultWorkdir = "/"
	DefaultTimeout = Duration(30 * time.Minute)
	DefaultCPUs    = 1.0
	DefaultMemory  = 1 << 30 // 1 GiB
	DefaultPids    = 512
)

// Resources are per-session limits. Zero values mean "use the default".
// +kubebuilder:object:generate=true
type Resources struct {
	CPUs   float64 `json:"cpus,omitempty"`
	Memory int64   `json:"memory,omitempty"` // bytes
	Pids   int64   `json:"pids,omitempty"`
	Disk   int64   `json:"disk,omitempty"` // bytes, upper-dir quota
	// LogSize caps the session's recorded output (stdout and stderr
	// together) and AuditSize its audit log, in bytes under the daemon's
	// root. Neither counts against Disk.
	LogSize   int64 `json:"log_size,omitempty"`
	AuditSize int64 `json:"audit_size,omitempty"`
}

// Workspace modes.
const (
	ModeOverlay = "overlay"
	ModeRO      = "ro"
	ModeRW      = "rw"
)

// on_exit values.
const (
	OnExitReview  = "review"
	OnExitCommit  = "commit"
	OnExitDiscard = "discard"
)

// Workspace is a `workspace "HOSTPATH" { ... }` block.
// +kubebuilder:object:generate=true
type Workspace struct {
	// HostPath is absolute (relative paths resolve against the manifest's
	// directory at decode time). Required, but for a Kubernetes Session's
	// workspace that one of its spec.workspaceSources fills.
	// +optional
	HostPath string `json:"host_path"`
	// +required
	// +kubebuilder:validation:MinLength=1
	Target string `json:"target"`
	Mode   string `json:"mode"`
	// DenyRead are globs (relative to the workspace root) made unreadable.
	DenyRead []string `json:"deny_read,omitempty"`
	// DefaultDenyRead adds the built-in credential-file masks; on unless
	// the manifest sets default_deny_read = false.
	// +kubebuilder:default=true
	DefaultDenyRead bool `json:"default_deny_read"`
	// Protect are globs a commit may not change.
	Protect           []string `json:"protect,omitempty"`
	PreserveUntracked bool     `json:"preserve_untracked,omitempty"`
	ProtectRefs       []string `json:"protect_refs,omitempty"`
	// GitAllow are globs (relative to the workspace root) of git metadata
	// a commit may carry although it is not known to be inert: a new
	// repository, a worktree, info/attributes. Hooks and command-running
	// config are never committed, whatever it says.
	GitAllow []string `json:"git_allow,omitempty"`
	OnExit   string   `json:"on_exit"`
}

// Mount is a `mount "HOSTPATH" { target, read_only, deny_read,
// default_deny_read }` block.
// +kubebuilder:object:generate=true
type Mount struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	HostPath string `json:"host_path"`
	// +required
	// +kubebuilder:validation:MinLength=1
	Target string `json:"target"`
	// ReadOnly mounts it read-only; on unless the manifest sets
	// read_only = false.
	// +kubebuilder:default=true
	ReadOnly bool `json:"read_only"`
	// DenyRead are globs (relative to the mounted directory) made
	// unreadable, as a workspace's.
	DenyRead []string `json:"deny_read,omitempty"`
	// DefaultDenyRead adds the built-in credential-file masks; on unless
	// the manifest sets default_deny_read = false.
	// +kubebuilder:default=true
	DefaultDenyRead bool `json:"default_deny_read"`
}

// Blocked-connection behaviour.
const (
	OnBlockReject = "reject"
	OnBlockDrop   = "drop"
)

// L7 gateway modes of an egress block.
const (
	// L7Off leaves connections at layers 3-4: a session may open any
	// connection to an address an allowed name resolved to (the default).
	L7Off = "off"
	// L7Check sends the session's TCP to allowed destinations on ports 80
	// and 443 through the gateway, which binds the TLS ClientHello's SNI
	// or the HTTP Host to the names whose DNS answers pinned the
	// destination, and passes the connection through unterminated.
	L7Check = "check"
)

// Egress is the `egress { ... }` block.
// +kubebuilder:object:generate=true
type Egress struct {
	// Allow entries: "name", "*.suffix", "name:port", "CIDR", "CIDR:port".
	Allow []string `json:"allow,omitempty"`
	// Deny entries have the same syntax and win over Allow.
	Deny []string `json:"deny,omitempty"`
	// AllowPrivate are CIDRs inside the private ranges (RFC 1918,
	// 100.64.0.0/10, fc00::/7) whose addresses DNS answers may pin. Other
	// private addresses in answers are dropped.
	AllowPrivate []string `json:"allow_private,omitempty"`
	// OnBlock is OnBlockReject (default) or OnBlockDrop.
	OnBlock string `json:"on_block,omitempty"`
	// IPv6 allows AAAA answers to be pinned and used.
	IPv6 bool `json:"ipv6,omitempty"`
	// L7 is L7Off (empty: the default) or L7Check.
	L7 string `json:"l7,omitempty"`
	// L7Ports are the TCP ports whose connections the L7 gateway checks
	// (TLS or HTTP, told apart by their first bytes); empty means
	// DefaultL7Ports. Only with L7Check.
	L7Ports []uint16 `json:"l7_ports,omitempty"`
	// Inspect is InspectRules (empty: the default) or InspectAll: which
	// TLS connections the L7 gateway terminates.
	Inspect string `json:"inspect,omitempty"`
	// HTTP are the `http "HOST" { ... }` blocks: per host, ordered HTTP
	// rules. Hosts without a block pass after the Host/SNI check.
	HTTP []HTTPHost `json:"http,omitempty"`
}

// Inspect modes of an egress block.
const (
	// InspectRules terminates TLS only to hosts with HTTP rules or a
	// bound secret; other TLS is checked by its SNI and passed through,
	// so the Host header inside it is not seen (the default).
	InspectRules = "rules"
	// InspectAll terminates TLS to every host, so every request's Host is
	// checked against the SNI and the pins, and every request is audited.
	InspectAll = "all"
)

// HTTP rule actions.
const (
	HTTPAllow = "allow"
	HTTPDeny  = "deny"
	HTTPAsk   = "ask"
)

// HTTPHost is an egress `http "HOST" { default, rule { ... } ... }` block.
// +kubebuilder:object:generate=true
type HTTPHost struct {
	// Host is a lower-case name without a trailing dot, or "*.suffix".
	// +required
	// +kubebuilder:validation:MinLength=1
	Host string `json:"host"`
	// Rules are checked in order; the first that matches decides.
	Rules []HTTPRule `json:"rules,omitempty"`
	// Default decides a request no rule matches: HTTPAllow (empty: the
	// default), HTTPDeny or HTTPAsk.
	Default string `json:"default,omitempty"`
}

// HTTPRule is a `rule { method, path, refs, json "FIELD" { values }, action }`
// block.
// +kubebuilder:object:generate=true
type HTTPRule struct {
	// Methods are upper-case HTTP methods; empty matches any.
	Methods []string `json:"methods,omitempty"`
	// Path is a glob over the request's decoded, cleaned path: "*"
	// matches within one segment, "**" across segments; empty matches
	// any path.
	Path string `json:"path,omitempty"`
	// Refs are globs of git refs ("refs/heads/agent/*"). A rule with Refs
	// matches only git smart-HTTP pushes (POST .../git-receive-pack) that
	// update refs: an allow rule only if every ref the push updates
	// matches one of them, a deny or ask rule if any does (so a protected
	// ref cannot ride along with an allowed one).
	Refs []string `json:"refs,omitempty"`
	// JSON are conditions on the top-level fields of a JSON request body,
	// for bulk calls whose targets travel in it (`json "names" { values =
	// ["svc-dev-*"] }`). A rule with JSON matches only a request whose
	// body the gateway read whole (at most 64 KiB, not content-encoded)
	// and is a JSON object in which each named field holds a string or a
	// non-empty array of strings: an allow rule only if every string of
	// every named field matches one of that field's Values, a deny or ask
	// rule if any string does (so a denied target cannot ride along with
	// allowed ones). Otherwise the rule does not match and a later rule
	// or the default decides. A rule has Refs or JSON, not both. Bodies
	// that JSON parsers may read differently (a named field twice, or in
	// another case) are refused outright.
	JSON []HTTPJSONMatch `json:"json,omitempty"`
	// JSONMatch says when a deny or ask rule's json conditions match:
	// JSONMatchAny (the default) if any string of a named field matches,
	// failing closed on a body the gateway cannot read; JSONMatchEvery
	// only if every string of every named field does, as an allow rule
	// (which always matches so): a body naming anything else, or one the
	// gateway cannot read, falls through to later rules and the default,
	// which should then deny. It says "hold this call only when every
	// target is one a person may allow".
	JSONMatch string `json:"json_match,omitempty"`
	// BodySHA256 are SHA-256 digests (64 lower-case hex digits) of whole
	// request bodies: uploads of exactly these contents, as a workspace
	// file's digest pins what may leave for a destination. A rule with
	// body_sha256 matches only a request whose body the gateway read
	// whole (at most MaxHashedBody, not content-encoded): an allow rule if
	// the body's digest is one of them, a deny or ask rule if it is or if
	// the gateway could not read the body so (failing closed). A
	// multipart/form-data body the gateway reads strictly matches by its
	// parts' contents: an allow rule if every part's digest is listed, a
	// deny or ask rule if any is. Otherwise a later rule or the default
	// decides. A rule has refs, json or
	// body_sha256, at most one of them.
	BodySHA256 []string `json:"body_sha256,omitempty"`
	// Action is HTTPAllow, HTTPDeny or HTTPAsk.
	// +required
	// +kubebuilder:validation:MinLength=1
	Action string `json:"action"`
}

// HTTPJSONMatch is a rule's `json "FIELD" { values = [...] }` block.
// +kubebuilder:object:generate=true
type HTTPJSONMatch struct {
	// Field is a top-level key of the body, a plain JSON key: a letter or
	// '_', then letters, digits, '_' or '-'.
	// +required
	// +kubebuilder:validation:MinLength=1
	Field string `json:"field"`
	// Values are globs of the field's strings, in the path grammar: "*"
	// matches within one "/"-separated segment, "**" (a whole segment)
	// across segments.
	// +required
	// +kubebuilder:validation:MinItems=1
	Values []string `json:"values"`
}

// String is the rule in one line, as decisions name it: methods (or
// "any method"), path (or "any path"), refs, json and body_sha256
// conditions (digests shortened), action: "POST /x -> allow".
func (r HTTPRule) String() string {
	var b strings.Builder
	if len(r.Methods) == 0 {
		b.WriteString("any method")
	} else {
		b.WriteString(strings.Join(r.Methods, ","))
	}
	b.WriteByte(' ')
	if r.Path == "" {
		b.WriteString("any path")
	} else {
		b.WriteString(r.Path)
	}
	if len(r.Refs) > 0 {
		b.WriteString(" refs [" + strings.Join(r.Refs, " ") + "]")
	}
	for _, m := range r.JSON {
		b.WriteString(" json " + m.Field + " [" + strings.Join(m.Values, " ") + "]")
	}
	if r.JSONMatch != "" {
		b.WriteString(" json_match " + r.JSONMatch)
	}
	if len(r.BodySHA256) > 0 {
		short := make([]string, len(r.BodySHA256))
		for i, d := range r.BodySHA256 {
			short[i] = d[:min(len(d), 12)]
		}
		b.WriteString(" body_sha256 [" + strings.Join(short, " ") + "]")
	}
	b.WriteString(" -> " + r.Action)
	return b.String()
}

// HTTPRule json_match values.
const (
	JSONMatchAny   = "any"
	JSONMatchEvery = "every"
)

// Secret is a `secret "NAME" { from, env_var | path, inject { ... } }` block.
// +kubebuilder:object:generate=true
type Secret struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	Name string `json:"name"`
	// From is where the daemon reads the value: "env:VAR" (the daemon's
	// environment), "file:/abs/path" (a file on the daemon's host), or
	// "credential:NAME" (the token of the manifest's credential NAME,
	// which must say deliver = "gateway": minted and refreshed by its
	// issuer, never delivered into the sandbox). The admission policy
	// bounds which env and file sources a manifest may name.
	// +required
	// +kubebuilder:validation:MinLength=1
	From string `json:"from"`
	// EnvVar and Path say where the sandbox finds the placeholder: an
	// environment variable, a file (read-only), or both. With neither,
	// the placeholder is in the environment variable named Name.
	EnvVar string `json:"env_var,omitempty"`
	Path   string `json:"path,omitempty"`
	// Inject are the hosts the value may go to, and how. With none the
	// secret is only guarded: its value goes nowhere, and the gateway
	// refuses every request it sees that carries the value (a copy the
	// sandbox found on disk, say) or the placeholder.
	Inject []SecretInject `json:"inject"`
}

// SecretInject is an `inject { host, header | bearer }` block: on TLS to
// Host with a verified upstream certificate, the gateway sets Header to
// the value (replacing the placeholder where the request carried it), or,
// with Bearer, Authorization to "Bearer " and the value.
// +kubebuilder:object:generate=true
type SecretInject struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	Host   string `json:"host"`
	Header string `json:"header,omitempty"`
	Bearer bool   `json:"bearer,omitempty"`
}

// Approval on_timeout values.
const (
	OnTimeoutDeny = "deny"
)

// DefaultApprovalTimeout is how long a held request waits for a decision
// when the manifest sets no approval timeout.
const DefaultApprovalTimeout = Duration(5 * time.Minute)

// Approval is the `approval { timeout, on_timeout }` block.
// +kubebuilder:object:generate=true
type Approval struct {
	// Timeout bounds how long a held request waits; zero means
	// DefaultApprovalTimeout.
	Timeout Duration `json:"timeout,omitempty"`
	// OnTimeout is what a timeout decides: OnTimeoutDeny (the only one).
	OnTimeout string `json:"on_timeout,omitempty"`
}

// DefaultL7Ports are the ports the L7 gateway checks when l7_ports is
// not set.
var DefaultL7Ports = []uint16{80, 443}

// GatewayPorts returns the ports the L7 gateway checks for e.
func (e *Egress) GatewayPorts() []uint16 {
	if e == nil || !e.L7Enabled() {
		return nil
	}
	if len(e.L7Ports) > 0 {
		return e.L7Ports
	}
	return DefaultL7Ports
}

// L7Enabled reports whether the session's HTTP and TLS connections go
// through the L7 gateway.
func (e *Egress) L7Enabled() bool { return e != nil && e.L7 == L7Check }

// Credential delivery.
const (
	DeliverFile = "file"
	DeliverEnv  = "env"
	// DeliverGateway keeps the credential out of the sandbox: a secret
	// whose from is "credential:NAME" gives the sandbox a placeholder,
	// and the L7 gateway injects the token, fresh, into requests to the
	// secret's hosts.
	DeliverGateway = "gateway"
)

// Credential is a `credential "NAME" { ... }` block.
// +kubebuilder:object:generate=true
type Credential struct {
	// +required
	// +kubebuilder:validation:MinLength=1
	Name   string `json:"name"`
	Issuer string `json:"issuer"` // "airlock" or the name of an exec issuer
	// +required
	// +kubebuilder:validation:MinLength=1
	Audience string `json:"audience"`
	// +required
	// +kubebuilder:validation:MinItems=1
	Scopes  []string `json:"scopes"`
	TTL     Duration `json:"ttl,omitempty"`
	Deliver string   `json:"deliver,omitempty"` // DeliverFile (default), DeliverEnv or DeliverGateway
	// Path is the file path inside the sandbox (DeliverFile);
	// default /run/airlock/credentials/NAME.
	Path string `json:"path,omitempty"`
	// EnvVar is the variable name (DeliverEnv).
	EnvVar string `json:"env_var,omitempty"`
}

// Duration is a time.Duration that travels as a Go duration string ("30m").
// +kubebuilder:validation:Type=string
type Duration time.Duration

// Std returns d as a time.Duration.
func (d Duration) Std() time.Duration { return time.Duration(d) }

func (d Duration) String() string { return time.Duration(d).String() }

// MarshalJSON encodes d as a duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return json.Marshal(time.Duration(d).String())
}

// UnmarshalJSON accepts a duration string or integer nanoseconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("invalid duration %q: %w", s, err)
		}
		*d = Duration(v)
		return nil
	}
	var n int64
	if err := json.Unmarshal(b, &n); err != nil {
		return fmt.Errorf("duration must be a string like \"30m\"")
	}
	*d = Duration(n)
	return nil
}
