package policies

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

func validPolicy() *Policy {
	return &Policy{Label: "t", Image: "airlock/agent:bookworm"}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		mutate func(p *Policy)
		want   []string
	}{
		{name: "zero values mean defaults", mutate: func(p *Policy) {}},
		{name: "with defaults", mutate: func(p *Policy) { p.ApplyDefaults() }},
		{
			name: "everything valid",
			mutate: func(p *Policy) {
				p.Command = []string{"sh", "-c", "true"}
				p.Env = map[string]string{"A": "1"}
				p.User = "1000:1000"
				p.Workdir = "/w"
				p.Timeout = Duration(time.Hour)
				p.Capabilities = []string{"CAP_NET_BIND_SERVICE"}
				p.Resources = Resources{CPUs: 2, Memory: 4 << 30, Pids: 100, Disk: 1 << 30}
				p.Workspaces = []Workspace{{HostPath: "/src", Target: "/w", Mode: ModeOverlay, DenyRead: []string{"**/.env*"}, DefaultDenyRead: true, Protect: []string{".github/**"}, ProtectRefs: []string{"refs/heads/*"}, OnExit: OnExitCommit}}
				p.Mounts = []Mount{{HostPath: "/etc/ssl", Target: "/etc/ssl", ReadOnly: true}}
				p.Egress = &Egress{Allow: []string{"a.test:443", "*.b.test"}, Deny: []string{"c.b.test"}, OnBlock: OnBlockDrop}
				p.Credentials = []Credential{
					{Name: "git", Audience: "git.test", Scopes: []string{"git.push repo=app"}, TTL: Duration(12 * time.Hour)},
					{Name: "tok", Audience: "api.test", Scopes: []string{"objects.get bucket=b"}, Deliver: DeliverEnv, EnvVar: "TOKEN"},
				}
				p.Pool = &Pool{Size: 4}
			},
		},
		{name: "pool size zero means no pool", mutate: func(p *Policy) { p.Pool = &Pool{} }},
		{name: "pool size at the maximum", mutate: func(p *Policy) { p.Pool = &Pool{Size: MaxPoolSize} }},
		{
			name:   "pool size negative",
			mutate: func(p *Policy) { p.Pool = &Pool{Size: -1} },
			want:   []string{`pool.size: size -1 is negative`},
		},
		{
			name:   "pool size too large",
			mutate: func(p *Policy) { p.Pool = &Pool{Size: MaxPoolSize + 1} },
			want:   []string{`pool.size: size 65 is larger than the maximum 64`},
		},
		{
			name:   "pool size far too large",
			mutate: func(p *Policy) { p.Pool = &Pool{Size: math.MaxInt} },
			want:   []string{fmt.Sprintf(`pool.size: size %d is larger than the maximum 64`, math.MaxInt)},
		},
		{
			name:   "bad mode",
			mutate: func(p *Policy) { p.Workspaces = []Workspace{{HostPath: "/src", Target: "/w", Mode: "overlayy"}} },
			want:   []string{`workspaces[0].mode: "overlayy" is not one of overlay, ro, rw`},
		},
		{
			name: "session fields",
			mutate: func(p *Policy) {
				p.Label = ""
				p.Image = ""
				p.Command = []string{"a\x00b"}
				p.Env = map[string]string{"": "x", "B": "y\x00"}
				p.User = "root"
				p.Workdir = "w"
				p.Timeout = -1
				p.Capabilities = []string{"NET_ADMIN", "CAP_NOPE"}
			},
			want: []string{
				`label: the session label is empty`,
				`image: a session needs an image`,
				`command[0]: argument 0 contains a NUL character`,
				`env[""]: an environment variable name is empty`,
				`env["B"]: the value of B contains a NUL character`,
				`user: user "root" is not a numeric uid or uid:gid`,
				`workdir: "w" is not an absolute path`,
				`timeout: timeout -1ns is negative`,
				`capabilities[0]: "NET_ADMIN" is not written in canonical form`,
				`capabilities[1]: "CAP_NOPE" is not a Linux capability`,
			},
		},
		{
			name:   "resources",
			mutate: func(p *Policy) { p.Resources = Resources{CPUs: math.NaN(), Memory: 1, Pids: -1, Disk: -5} },
			want: []string{
				`resources.cpus: cpus NaN is out of range`,
				`resources.memory: memory 1 bytes is below the minimum 16MiB`,
				`resources.pids: pids -1 is negative`,
				`resources.disk: disk -5 bytes is below the minimum 1MiB`,
			},
		},
		{
			name:   "output and audit caps",
			mutate: func(p *Policy) { p.Resources = Resources{LogSize: 100, AuditSize: 5 << 30} },
			want: []string{
				`resources.log_size: log_size 100 bytes is out of range`,
				`resources.audit_size: audit_size 5368709120 bytes is out of range`,
			},
		},
		{
			name: "workspaces and mounts",
			mutate: func(p *Policy) {
				p.Workspaces = []Workspace{
					{HostPath: "src", Target: "/w"},
					{HostPath: "/a", Target: "/w/", Mode: ModeRO, Protect: []string{"x"}, OnExit: OnExitDiscard},
					{HostPath: "/b", Target: "/x", DenyRead: []string{"/etc", "a/../../b", "[z"}, ProtectRefs: []string{"main"}},
				}
				p.Mounts = []Mount{{Target: "/dev/shm"}}
			},
			want: []string{
				`workspaces[0].host_path: "src" is not an absolute path`,
				`workspaces[1].target: target "/w/" is already used by workspaces[0]`,
				`workspaces[1].on_exit: on_exit "discard" has no effect with mode "ro": only overlay workspaces are committed or discarded`,
				`workspaces[1].protect: protect has no effect with mode "ro"`,
				`workspaces[2].deny_read[0]: "/etc" is absolute; patterns are relative to the workspace root`,
				`workspaces[2].deny_read[1]: "a/../../b" contains ".."; patterns may not leave the workspace`,
				`workspaces[2].deny_read[2]: "[z" is not a valid glob`,
				`workspaces[2].protect_refs[0]: "main" is not a full ref name starting with refs/`,
				`mounts[0].host_path: the host path is empty`,
				`mounts[0].target: target "/dev/shm" is under /dev, which the runtime manages`,
			},
		},
		{
			name: "protect anchored at the root, deny_read never",
			mutate: func(p *Policy) {
				p.Workspaces = []Workspace{{HostPath: "/a", Target: "/w", Mode: ModeOverlay,
					Protect: []string{"/package.json", "//x", "/", "*.lock"}, DenyRead: []string{"/package.json"}}}
			},
			want: []string{
				`workspaces[0].deny_read[0]: "/package.json" is absolute; patterns are relative to the workspace root`,
				`workspaces[0].protect[1]: "//x" names no path: a leading slash anchors a pattern at the workspace root, as in "/package.json"`,
				`workspaces[0].protect[2]: "/" names no path: a leading slash anchors a pattern at the workspace root, as in "/package.json"`,
			},
		},
		{
			name: "egress",
			mutate: func(p *Policy) {
				p.Egress = &Egress{Allow: []string{"ok.test", "bad_.test:x"}, Deny: []string{""}, OnBlock: "ignore", L7: "all"}
			},
			want: []string{
				`egress.allow[1]: "bad_.test:x" is not a valid egress entry: port "x" is not a number`,
				`egress.deny[0]: "" is not a valid egress entry: the entry is empty`,
				`egress.on_block: "ignore" is not one of reject, drop`,
				`egress.l7: "all" is not one of off, check`,
			},
		},
		{
			name: "credentials",
			mutate: func(p *Policy) {
				p.Env = map[string]string{"TOKEN": "x"}
				p.Credentials = []Credential{
					{Name: "a", Audience: "x", Scopes: []string{"git.fetch repo=app"}, Path: "/run/t"},
					{Name: "a", Audience: "x y", Scopes: []string{""}, TTL: Duration(13 * time.Hour)},
					{Name: "b", Issuer: "bad issuer", Audience: "x", Scopes: []string{"git.fetch repo=app"}, Path: "/run/t", EnvVar: "X"},
					{Name: "c", Audience: "x", Scopes: []string{"git.fetch repo=app"}, Deliver: DeliverEnv, EnvVar: "TOKEN", Path: "/p"},
					{Name: "d", Audience: "x", Scopes: []string{"git.fetch repo=app"}, Deliver: DeliverEnv, EnvVar: "1X"},
					{Name: "e", Audience: "x", Deliver: "pipe", TTL: -1},
					{Name: "f", Audience: "x", Scopes: []string{"git.fetch repo=app"}, Path: "/run/f/"},
				}
			},
			want: []string{
				`credentials[1].name: credential "a" is already declared at credentials[0]`,
				`credentials[1].audience: audience "x y" contains whitespace`,
				`credentials[1].scopes[0]: scope "" is empty or contains control characters`,
				`credentials[1].ttl: ttl 13h0m0s is longer than the maximum 12h0m0s`,
				`credentials[2].issuer: "bad issuer" is not a valid issuer name`,
				`credentials[2].env_var: env_var is only used when the credential is delivered in the environment`,
				`credentials[2].path: path "/run/t" is already used by credentials[0]`,
				`credentials[3].path: path is only used when the credential is delivered as a file`,
				`credentials[3].env_var: env_var "TOKEN" is also set in the session's env`,
				`credentials[4].env_var: "1X" is not a valid environment variable name`,
				`credentials[5].scopes: a credential without scopes authorizes nothing`,
				`credentials[5].ttl: ttl -1ns is negative`,
				`credentials[5].deliver: "pipe" is not one of file, env, gateway`,
				`credentials[6].path: "/run/f/" does not name a file`,
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := validPolicy()
			tt.mutate(p)
			err := p.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Validate() = %v (%T), want *ValidationError", err, err)
			}
			if !reflect.DeepEqual(verr.Problems, tt.want) {
				t.Errorf("problems:\n got %q\nwant %q", verr.Problems, tt.want)
			}
			if !errdefs.IsInvalidArgument(err) {
				t.Errorf("errdefs.IsInvalidArgument(%v) = false", err)
			}
		})
	}
}

func TestValidateNil(t *testing.T) {
	var p *Policy
	if err := p.Validate(); err == nil {
		t.Error("(*Policy)(nil).Validate() = nil")
	}
}

// TestJSONRoundTrip checks the wire format: a decoded policy survives JSON
// unchanged and still validates, as the daemon receives it.
func TestJSONRoundTrip(t *testing.T) {
	p, err := LoadFile("../examples/reference.hcl", nil)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var got Policy
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(&got, p) {
		t.Errorf("round trip changed the policy:\n got %+v\nwant %+v", &got, p)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("Validate after JSON: %v", err)
	}
}

func TestWithDefaults(t *testing.T) {
	p := validPolicy()
	p.Workspaces = []Workspace{{HostPath: "/a", Target: "/w", DenyRead: []string{"x"}}}
	p.Egress = &Egress{}
	p.Credentials = []Credential{{Name: "git", Audience: "a", Scopes: []string{"git.fetch repo=app"}}, {Name: "e", Audience: "a", Scopes: []string{"git.fetch repo=app"}, Deliver: DeliverEnv, EnvVar: "E"}}
	p.Pool = &Pool{Size: 2}
	orig := p.Clone()
	d := p.WithDefaults()
	if !reflect.DeepEqual(p, orig) {
		t.Errorf("WithDefaults modified its receiver")
	}
	d.Workspaces[0].DenyRead[0] = "changed"
	if p.Workspaces[0].DenyRead[0] != "x" {
		t.Errorf("WithDefaults shares slices with its receiver")
	}
	if d.Pool == p.Pool || *d.Pool != (Pool{Size: 2}) {
		t.Errorf("WithDefaults pool = %p %+v, want a copy of %p %+v", d.Pool, d.Pool, p.Pool, p.Pool)
	}
	d.Pool.Size = 9
	if p.Pool.Size != 2 {
		t.Errorf("WithDefaults shares the pool with its receiver")
	}
	if d.User != DefaultUser || d.Workdir != DefaultWorkdir || d.Timeout != DefaultTimeout ||
		d.Resources != (Resources{CPUs: DefaultCPUs, Memory: DefaultMemory, Pids: DefaultPids, LogSize: DefaultLogSize, AuditSize: DefaultAuditSize}) {
		t.Errorf("session defaults: %+v", d)
	}
	if w := d.Workspaces[0]; w.Mode != ModeOverlay || w.OnExit != OnExitReview {
		t.Errorf("workspace defaults: %+v", w)
	}
	if d.Egress.OnBlock != OnBlockReject {
		t.Errorf("egress defaults: %+v", d.Egress)
	}
	want := []Credential{
		{Name: "git", Issuer: DefaultIssuer, Audience: "a", Scopes: []string{"git.fetch repo=app"}, TTL: DefaultCredentialTTL, Deliver: DeliverFile, Path: "/run/airlock/credentials/git"},
		{Name: "e", Issuer: DefaultIssuer, Audience: "a", Scopes: []string{"git.fetch repo=app"}, TTL: DefaultCredentialTTL, Deliver: DeliverEnv, EnvVar: "E"},
	}
	if !reflect.DeepEqual(d.Credentials, want) {
		t.Errorf("credential defaults:\n got %+v\nwant %+v", d.Credentials, want)
	}
	if err := d.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
}

func TestClonePool(t *testing.T) {
	for _, tt := range []struct {
		name string
		pool *Pool
	}{
		{"no pool", nil},
		{"empty pool", &Pool{}},
		{"pool", &Pool{Size: 4}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := validPolicy()
			p.Pool = tt.pool
			c := p.Clone()
			if !reflect.DeepEqual(c, p) {
				t.Fatalf("Clone() = %+v, want %+v", c, p)
			}
			if tt.pool == nil {
				return
			}
			if c.Pool == p.Pool {
				t.Fatal("Clone shares the pool with its receiver")
			}
			want := p.Pool.Size
			c.Pool.Size++
			if p.Pool.Size != want {
				t.Errorf("changing the clone's pool changed the original to %+v", p.Pool)
			}
		})
	}
}

func TestValidateProtectRefsExceptions(t *testing.T) {
	tests := []struct {
		name string
		refs []string
		want []string // problems; nil = valid
	}{
		{name: "exception after a pattern", refs: []string{"refs/heads/**", "!refs/heads/alex/cleanup-auth-4812-*"}},
		{name: "exception first", refs: []string{"!refs/heads/alex/*", "refs/heads/*"}},
		{name: "exception of a full name", refs: []string{"refs/heads/**", "!refs/heads/main"}},
		{name: "bare bang", refs: []string{"refs/heads/**", "!"}, want: []string{
			`workspaces[0].protect_refs[1]: "!" alone is not a pattern: an exception needs a ref pattern after "!"`,
		}},
		{name: "exception of a short name", refs: []string{"!main"}, want: []string{
			`workspaces[0].protect_refs[0]: exception "!main": "main" is not a full ref name starting with refs/`,
		}},
		{name: "double bang", refs: []string{"!!refs/heads/x"}, want: []string{
			`workspaces[0].protect_refs[0]: exception "!!refs/heads/x": "!refs/heads/x" is not a full ref name starting with refs/`,
		}},
		{name: "exception with a bad glob", refs: []string{"!refs/heads/[x"}, want: []string{
			`workspaces[0].protect_refs[0]: exception "!refs/heads/[x": "refs/heads/[x" is not a valid glob`,
		}},
		{name: "exception with a character git refuses", refs: []string{"!refs/heads/a:b"}, want: []string{
			`workspaces[0].protect_refs[0]: exception "!refs/heads/a:b": "refs/heads/a:b" contains a character git does not allow in ref names`,
		}},
		{name: "bang inside a pattern is not an exception", refs: []string{"refs/heads/!x"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := validPolicy()
			p.Workspaces = []Workspace{{HostPath: "/src", Target: "/w", Mode: ModeOverlay, ProtectRefs: tt.refs}}
			err := p.Validate()
			if tt.want == nil {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Validate() = %v (%T), want *ValidationError", err, err)
			}
			if !reflect.DeepEqual(verr.Problems, tt.want) {
				t.Errorf("problems:\n got %q\nwant %q", verr.Problems, tt.want)
			}
		})
	}
}

func TestUserIDs(t *testing.T) {
	for _, tc := range []struct {
		in       string
		uid, gid uint32
		err      bool
	}{
		{"", 65534, 65534, false}, {"1000", 1000, 1000, false}, {"1000:50", 1000, 50, false}, {"0", 0, 0, false},
		{"root", 0, 0, true}, {"1000:staff", 0, 0, true}, {"-1", 0, 0, true}, {"+1", 0, 0, true},
		{"4294967296", 0, 0, true}, {"4294967295", 0, 0, true}, {"1000:", 0, 0, true},
	} {
		p := validPolicy()
		p.User = tc.in
		uid, gid, err := p.UserIDs()
		if (err != nil) != tc.err || !tc.err && (uid != tc.uid || gid != tc.gid) {
			t.Errorf("UserIDs(%q) = %d, %d, %v; want %d, %d, err %v", tc.in, uid, gid, err, tc.uid, tc.gid, tc.err)
		}
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("UserIDs(%q): err %v, want invalid argument", tc.in, err)
		}
		// Validate reports exactly the users UserIDs refuses.
		var verr *ValidationError
		userProblem := errors.As(p.Validate(), &verr) && slices.ContainsFunc(verr.Problems, func(s string) bool { return strings.HasPrefix(s, "user: ") })
		if userProblem != tc.err {
			t.Errorf("Validate with user %q: %v; want a user problem: %v", tc.in, verr, tc.err)
		}
	}
}
