package policies

import (
	"bytes"
	"errors"
	"io/fs"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

// session wraps body in a session block with an image; body starts on line 3.
func session(body string) string {
	return "session \"t\" {\n  image = \"airlock/agent:bookworm\"\n" + body + "\n}\n"
}

type decodeTest struct {
	name string
	src  string
	vars map[string]string
	// summary and line are those of the first error; empty for success.
	summary string
	line    int
	// detail, when set, is a substring of the first error's detail.
	detail string
	check  func(t *testing.T, p *Policy)
}

var decodeTests = []decodeTest{
	{
		name: "minimal session gets defaults",
		src:  session(""),
		check: func(t *testing.T, p *Policy) {
			want := &Policy{
				Label:     "t",
				Image:     "airlock/agent:bookworm",
				User:      DefaultUser,
				Workdir:   DefaultWorkdir,
				Timeout:   DefaultTimeout,
				Resources: Resources{CPUs: DefaultCPUs, Memory: DefaultMemory, Pids: DefaultPids, LogSize: DefaultLogSize, AuditSize: DefaultAuditSize},
			}
			if !reflect.DeepEqual(p, want) {
				t.Errorf("got %+v, want %+v", p, want)
			}
		},
	},
	{
		name: "session attributes",
		src: session(`
  command      = ["claude", "-p", "fix it"]
  env          = { GOFLAGS = "-mod=mod", "A_B" = "1" }
  user         = "1000:1001"
  workdir      = "/workspace"
  timeout      = "1h30m"
  capabilities = ["net_bind_service", "CAP_CHOWN", "Kill"]`),
		check: func(t *testing.T, p *Policy) {
			if !reflect.DeepEqual(p.Command, []string{"claude", "-p", "fix it"}) {
				t.Errorf("command = %q", p.Command)
			}
			if !reflect.DeepEqual(p.Env, map[string]string{"GOFLAGS": "-mod=mod", "A_B": "1"}) {
				t.Errorf("env = %v", p.Env)
			}
			if p.User != "1000:1001" || p.Workdir != "/workspace" || p.Timeout.Std() != 90*time.Minute {
				t.Errorf("user, workdir, timeout = %q, %q, %v", p.User, p.Workdir, p.Timeout)
			}
			if want := []string{"CAP_NET_BIND_SERVICE", "CAP_CHOWN", "CAP_KILL"}; !reflect.DeepEqual(p.Capabilities, want) {
				t.Errorf("capabilities = %q, want %q", p.Capabilities, want)
			}
		},
	},
	{
		name: "resources with units",
		src: session(`
  resources {
    cpus   = 0.5
    memory = "1.5GiB"
    pids   = 64
    disk   = 1048576
    log_size   = "8MiB"
    audit_size = "1MiB"
  }`),
		check: func(t *testing.T, p *Policy) {
			want := Resources{CPUs: 0.5, Memory: 3 << 29, Pids: 64, Disk: 1 << 20, LogSize: 8 << 20, AuditSize: 1 << 20}
			if p.Resources != want {
				t.Errorf("resources = %+v, want %+v", p.Resources, want)
			}
		},
	},
	{
		name: "workspace defaults and relative path",
		src: session(`
  workspace "src/../app" {
    target = "/workspace"
  }`),
		check: func(t *testing.T, p *Policy) {
			want := []Workspace{{HostPath: "/manifests/app", Target: "/workspace", Mode: ModeOverlay, DefaultDenyRead: true, OnExit: OnExitReview}}
			if !reflect.DeepEqual(p.Workspaces, want) {
				t.Errorf("workspaces = %+v, want %+v", p.Workspaces, want)
			}
		},
	},
	{
		name: "workspace every attribute",
		src: session(`
  workspace "/srv/app/" {
    target             = "/workspace"
    mode               = "overlay"
    deny_read          = ["**/.env*"]
    default_deny_read  = false
    protect            = [".github/**"]
    preserve_untracked = true
    protect_refs       = ["refs/heads/main"]
    on_exit            = "discard"
  }
  workspace "../ro" {
    target = "/ro"
    mode   = "ro"
  }`),
		check: func(t *testing.T, p *Policy) {
			want := []Workspace{
				{HostPath: "/srv/app", Target: "/workspace", Mode: ModeOverlay, DenyRead: []string{"**/.env*"},
					Protect: []string{".github/**"}, PreserveUntracked: true, ProtectRefs: []string{"refs/heads/main"}, OnExit: OnExitDiscard},
				{HostPath: "/ro", Target: "/ro", Mode: ModeRO, DefaultDenyRead: true, OnExit: OnExitReview},
			}
			if !reflect.DeepEqual(p.Workspaces, want) {
				t.Errorf("workspaces = %+v, want %+v", p.Workspaces, want)
			}
		},
	},
	{
		name: "mounts default to read-only",
		src: session(`
  mount "/etc/ssl/certs" { target = "/etc/ssl/certs" }
  mount "cache" {
    target    = "/cache"
    read_only = false
    deny_read = ["tokens/"]
  }
  mount "/srv/ca" {
    target            = "/ca"
    default_deny_read = false
  }`),
		check: func(t *testing.T, p *Policy) {
			want := []Mount{
				{HostPath: "/etc/ssl/certs", Target: "/etc/ssl/certs", ReadOnly: true, DefaultDenyRead: true},
				{HostPath: "/manifests/cache", Target: "/cache", DenyRead: []string{"tokens/"}, DefaultDenyRead: true},
				{HostPath: "/srv/ca", Target: "/ca", ReadOnly: true},
			}
			if !reflect.DeepEqual(p.Mounts, want) {
				t.Errorf("mounts = %+v, want %+v", p.Mounts, want)
			}
		},
	},
	{
		name: "egress",
		src: session(`
  egress {
    allow = ["api.anthropic.com:443", "*.githubusercontent.com", "10.0.0.0/8:443", "2001:db8::/32", "[2001:db8::1]:53", "192.0.2.7"]
    deny  = ["gist.githubusercontent.com"]
    allow_private = ["10.20.0.0/16", "100.64.1.0/24", "192.168.7.7", "fd12:3456::/32"]
    ipv6  = true
    l7    = "check"
  }`),
		check: func(t *testing.T, p *Policy) {
			want := &Egress{
				Allow:        []string{"api.anthropic.com:443", "*.githubusercontent.com", "10.0.0.0/8:443", "2001:db8::/32", "[2001:db8::1]:53", "192.0.2.7"},
				Deny:         []string{"gist.githubusercontent.com"},
				AllowPrivate: []string{"10.20.0.0/16", "100.64.1.0/24", "192.168.7.7", "fd12:3456::/32"},
				OnBlock:      OnBlockReject,
				IPv6:         true,
				L7:           L7Check,
			}
			if !reflect.DeepEqual(p.Egress, want) {
				t.Errorf("egress = %+v, want %+v", p.Egress, want)
			}
		},
	},
	{
		name: "credential defaults",
		src: session(`
  credential "git" {
    audience = "git.corp.test"
    scopes   = ["git.push repo=app ref=refs/heads/agent/*"]
  }
  credential "npm" {
    issuer   = "exec-npm"
    audience = "registry.corp.test"
    scopes   = ["read"]
    ttl      = "1h"
    deliver  = "env"
    env_var  = "NPM_TOKEN"
  }`),
		check: func(t *testing.T, p *Policy) {
			want := []Credential{
				{Name: "git", Issuer: DefaultIssuer, Audience: "git.corp.test", Scopes: []string{"git.push repo=app ref=refs/heads/agent/*"},
					TTL: DefaultCredentialTTL, Deliver: DeliverFile, Path: "/run/airlock/credentials/git"},
				{Name: "npm", Issuer: "exec-npm", Audience: "registry.corp.test", Scopes: []string{"read"},
					TTL: Duration(time.Hour), Deliver: DeliverEnv, EnvVar: "NPM_TOKEN"},
			}
			if !reflect.DeepEqual(p.Credentials, want) {
				t.Errorf("credentials = %+v, want %+v", p.Credentials, want)
			}
		},
	},
	{
		name: "pool",
		src: session(`
  pool {
    size = 4
  }`),
		check: func(t *testing.T, p *Policy) {
			if want := (&Pool{Size: 4}); !reflect.DeepEqual(p.Pool, want) {
				t.Errorf("pool = %+v, want %+v", p.Pool, want)
			}
		},
	},
	{
		name: "pool size zero",
		src:  session(`  pool { size = 0 }`),
		check: func(t *testing.T, p *Policy) {
			if want := (&Pool{}); !reflect.DeepEqual(p.Pool, want) {
				t.Errorf("pool = %+v, want %+v", p.Pool, want)
			}
		},
	},
	{
		name: "pool size at the maximum",
		src:  session(`  pool { size = 64 }`),
		check: func(t *testing.T, p *Policy) {
			if p.Pool == nil || p.Pool.Size != MaxPoolSize {
				t.Errorf("pool = %+v, want size %d", p.Pool, MaxPoolSize)
			}
		},
	},
	{
		name: "no pool block",
		src:  session(""),
		check: func(t *testing.T, p *Policy) {
			if p.Pool != nil {
				t.Errorf("pool = %+v, want nil", p.Pool)
			}
		},
	},
	{
		name: "null means absent",
		src:  session(`  user = null`),
		check: func(t *testing.T, p *Policy) {
			if p.User != DefaultUser {
				t.Errorf("user = %q, want the default", p.User)
			}
		},
	},

	// Structure.
	{name: "no session", src: `variable "x" { default = 1 }`, summary: "Missing session block", line: 1},
	{name: "two sessions", src: session("") + `session "b" { image = "x" }`, summary: "Duplicate session block", line: 5},
	{name: "syntax error", src: "session \"t\" {\n  image = \n}\n", summary: "Invalid expression", line: 2},
	{name: "unknown attribute", src: session(`  imgae = "x"`), summary: "Unsupported argument", line: 3},
	{name: "unknown block", src: session(`  network {}`), summary: "Unsupported block type", line: 3},
	{name: "unknown top-level attribute", src: "version = 2\n" + session(""), summary: "Unsupported argument", line: 1},
	{name: "unknown workspace attribute", src: session("  workspace \".\" {\n    target = \"/w\"\n    mod = \"ro\"\n  }"), summary: "Unsupported argument", line: 5},
	{name: "attribute redefined", src: session(`  image = "y"`), summary: "Attribute redefined", line: 3},
	{name: "session without label", src: `session { image = "x" }`, summary: "Missing label for session", line: 1},
	{name: "empty session label", src: `session "" { image = "x" }`, summary: "Empty session label", line: 1},
	{name: "missing image", src: "session \"t\" {\n  user = \"1\"\n}\n", summary: "Missing image", line: 1},
	{name: "image with spaces", src: "session \"t\" {\n  image = \"a b\"\n}\n", summary: "Invalid image", line: 2},
	{name: "duplicate resources", src: session("  resources {}\n  resources {}"), summary: "Duplicate resources block", line: 4},
	{name: "duplicate egress", src: session("  egress {}\n  egress {}"), summary: "Duplicate egress block", line: 4},
	{name: "duplicate pool", src: session("  pool { size = 1 }\n  pool { size = 2 }"), summary: "Duplicate pool block", line: 4,
		detail: "A session has at most one pool block; the first is at /manifests/m.hcl:3,3-7. Merge the two."},
	{name: "pool unknown attribute", src: session("  pool {\n    size = 1\n    min  = 2\n  }"), summary: "Unsupported argument", line: 5,
		detail: `An argument named "min" is not expected here.`},
	{name: "pool missing size", src: session("  pool {\n  }"), summary: "Missing pool size", line: 3,
		detail: "A pool block needs size. Set size to the number of sandboxes to keep prepared, from 0 to 64, as in pool { size = 4 }."},
	{name: "pool null size", src: session("  pool {\n    size = null\n  }"), summary: "Missing pool size", line: 4,
		detail: "size is null."},
	{name: "pool size negative", src: session("  pool {\n    size = -1\n  }"), summary: "Invalid pool size", line: 4,
		detail: "size -1 is negative. Use a whole number from 0 to 64; 0 keeps no sandbox prepared."},
	{name: "pool size too large", src: session("  pool {\n    size = 65\n  }"), summary: "Invalid pool size", line: 4,
		detail: "size 65 is larger than the maximum 64. Use a whole number from 0 to 64; 0 keeps no sandbox prepared."},
	{name: "pool size huge", src: session("  pool {\n    size = 9223372036854775807\n  }"), summary: "Invalid pool size", line: 4,
		detail: "size 9223372036854775807 is larger than the maximum 64."},
	{name: "pool size fractional", src: session("  pool {\n    size = 1.5\n  }"), summary: "Invalid pool size", line: 4,
		detail: "1.5 is not a whole number. Set size to the number of sandboxes to keep prepared, from 0 to 64"},
	{name: "pool size not a number", src: session("  pool {\n    size = \"four\"\n  }"), summary: "Incorrect attribute value type", line: 4,
		detail: "size must be a whole number: a number is required."},
	{name: "pool size a list", src: session("  pool {\n    size = [4]\n  }"), summary: "Incorrect attribute value type", line: 4,
		detail: "size must be a whole number"},
	{name: "pool with a label", src: session("  pool \"warm\" {\n    size = 4\n  }"), summary: "Extraneous label for pool", line: 3},

	// Types.
	{name: "command not a list", src: session(`  command = {a = 1}`), summary: "Incorrect attribute value type", line: 3},
	{name: "env not a map", src: session(`  env = ["A"]`), summary: "Incorrect attribute value type", line: 3},
	{name: "null in list", src: session(`  command = ["a", null]`), summary: "Null list element", line: 3},
	{name: "ipv6 not a bool", src: session(`  egress { ipv6 = "maybe" }`), summary: "Incorrect attribute value type", line: 3},

	// Session rules.
	{name: "user not numeric", src: session(`  user = "alice"`), summary: "Invalid user", line: 3},
	{name: "user gid empty", src: session(`  user = "1000:"`), summary: "Invalid user", line: 3},
	{name: "user -1", src: session(`  user = "4294967295"`), summary: "Invalid user", line: 3},
	{name: "workdir relative", src: session(`  workdir = "src"`), summary: "Invalid workdir", line: 3},
	{name: "bad duration", src: session(`  timeout = "30min"`), summary: "Invalid duration", line: 3},
	{name: "negative duration", src: session(`  timeout = "-5m"`), summary: "Invalid duration", line: 3},
	{name: "zero duration", src: session(`  timeout = "0s"`), summary: "Invalid duration", line: 3},
	{name: "unknown capability", src: session(`  capabilities = ["CAP_NET_BIND_SERVCE"]`), summary: "Unknown capability", line: 3},
	{name: "duplicate capability", src: session("  capabilities = [\n    \"NET_ADMIN\",\n    \"cap_net_admin\",\n  ]"), summary: "Duplicate capability", line: 5},
	{name: "env name with =", src: session("  env = {\n    \"A=B\" = \"x\"\n  }"), summary: "Invalid environment variable", line: 4},
	{name: "cpus zero", src: session(`  resources { cpus = 0 }`), summary: "Invalid cpus", line: 3},
	{name: "cpus too many", src: session(`  resources { cpus = 5000 }`), summary: "Invalid cpus", line: 3},
	{name: "pids fractional", src: session(`  resources { pids = 1.5 }`), summary: "Invalid pids", line: 3},
	{name: "memory bad unit", src: session(`  resources { memory = "4GiBs" }`), summary: "Invalid size", line: 3},
	{name: "memory not a size", src: session(`  resources { memory = true }`), summary: "Invalid size", line: 3},
	{name: "memory too small", src: session(`  resources { memory = "1MiB" }`), summary: "Invalid memory", line: 3},
	{name: "disk too small", src: session(`  resources { disk = 100 }`), summary: "Invalid disk", line: 3},

	// Workspace and mount rules.
	{name: "bad mode", src: session("  workspace \".\" {\n    target = \"/w\"\n    mode = \"overlayy\"\n  }"), summary: "Invalid mode", line: 5},
	{name: "bad on_exit", src: session("  workspace \".\" {\n    target = \"/w\"\n    on_exit = \"keep\"\n  }"), summary: "Invalid on_exit", line: 5},
	{name: "on_exit with ro", src: session("  workspace \".\" {\n    target = \"/w\"\n    mode = \"ro\"\n    on_exit = \"commit\"\n  }"), summary: "on_exit needs an overlay workspace", line: 6},
	{name: "protect with rw", src: session("  workspace \".\" {\n    target = \"/w\"\n    mode = \"rw\"\n    protect = [\"a\"]\n  }"), summary: "protect needs an overlay workspace", line: 6},
	{name: "missing target", src: session("  workspace \".\" {\n    mode = \"ro\"\n  }"), summary: "Missing target", line: 3},
	{name: "relative target", src: session("  workspace \".\" {\n    target = \"workspace\"\n  }"), summary: "Invalid target", line: 4},
	{name: "target dotdot", src: session("  workspace \".\" {\n    target = \"/w/../etc\"\n  }"), summary: "Invalid target", line: 4},
	{name: "target root", src: session("  workspace \".\" {\n    target = \"/\"\n  }"), summary: "Invalid target", line: 4},
	{name: "target under proc", src: session("  mount \"/x\" {\n    target = \"/proc/sys\"\n  }"), summary: "Invalid target", line: 4},
	{name: "duplicate targets", src: session("  workspace \"a\" { target = \"/w\" }\n  workspace \"b\" { target = \"/w/\" }"), summary: "Duplicate target", line: 4},
	{name: "mount duplicates workspace target", src: session("  workspace \"a\" { target = \"/w\" }\n  mount \"/b\" { target = \"/w\" }"), summary: "Duplicate target", line: 4},
	{name: "empty host path", src: session("  workspace \"\" { target = \"/w\" }"), summary: "Missing host path", line: 3},
	{name: "home directory", src: session("  workspace \"~/src\" { target = \"/w\" }"), summary: "Home directory is not expanded", line: 3},
	{name: "absolute deny_read", src: session("  workspace \".\" {\n    target = \"/w\"\n    deny_read = [\"a\", \"/etc/passwd\"]\n  }"), summary: "Invalid deny_read pattern", line: 5},
	{name: "deny_read leaves workspace", src: session("  workspace \".\" {\n    target = \"/w\"\n    deny_read = [\"../x\"]\n  }"), summary: "Invalid deny_read pattern", line: 5},
	{name: "mount deny_read", src: session("  mount \"/x\" {\n    target = \"/x\"\n    deny_read = [\"ok/\", \"[z\"]\n  }"), summary: "Invalid deny_read pattern", line: 5},
	{name: "malformed protect", src: session("  workspace \".\" {\n    target = \"/w\"\n    protect = [\"[a\"]\n  }"), summary: "Invalid protect pattern", line: 5},
	{name: "short ref", src: session("  workspace \".\" {\n    target = \"/w\"\n    protect_refs = [\"main\"]\n  }"), summary: "Invalid protect_refs pattern", line: 5},
	{name: "bare ref exception", src: session("  workspace \".\" {\n    target = \"/w\"\n    protect_refs = [\n      \"refs/heads/**\",\n      \"!\",\n    ]\n  }"), summary: "Invalid protect_refs pattern", detail: `"!" alone is not a pattern`, line: 7},
	{name: "ref exception", src: session("  workspace \".\" {\n    target = \"/w\"\n    protect_refs = [\"refs/heads/**\", \"!refs/heads/alex/*\"]\n  }"), check: func(t *testing.T, p *Policy) {
		if got := p.Workspaces[0].ProtectRefs; !reflect.DeepEqual(got, []string{"refs/heads/**", "!refs/heads/alex/*"}) {
			t.Errorf("protect_refs = %q", got)
		}
	}},

	// Egress rules.
	{name: "egress star", src: session(`  egress { allow = ["*"] }`), summary: "Invalid egress entry", line: 3},
	{name: "egress inner wildcard", src: session("  egress {\n    allow = [\n      \"ok.test\",\n      \"foo*.example.com\",\n    ]\n  }"), summary: "Invalid egress entry", line: 6},
	{name: "egress port range", src: session(`  egress { allow = ["a.test:65536"] }`), summary: "Invalid egress entry", line: 3},
	{name: "egress port zero", src: session(`  egress { allow = ["a.test:0"] }`), summary: "Invalid egress entry", line: 3},
	{name: "egress host bits", src: session(`  egress { deny = ["10.0.0.1/8"] }`), summary: "Invalid egress entry", line: 3},
	{name: "egress bad ipv4", src: session(`  egress { allow = ["1.2.3"] }`), summary: "Invalid egress entry", line: 3},
	{name: "egress empty label", src: session(`  egress { allow = ["a..b"] }`), summary: "Invalid egress entry", line: 3},
	{name: "egress url", src: session(`  egress { allow = ["https://a.test"] }`), summary: "Invalid egress entry", line: 3},
	{name: "egress on_block", src: session(`  egress { on_block = "ignore" }`), summary: "Invalid on_block", line: 3},
	{name: "egress l7", src: session("  egress {\n    allow = [\"a.test\"]\n    l7 = \"terminate\"\n  }"), summary: "Invalid l7", detail: `"terminate" is not one of off, check`, line: 5},
	{name: "egress l7 not a string", src: session(`  egress { l7 = ["check"] }`), summary: "Incorrect attribute value type", line: 3},
	{name: "allow_private not a list", src: session(`  egress { allow_private = "10.0.0.0/8" }`), summary: "Incorrect attribute value type", line: 3},
	{name: "allow_private public", src: session("  egress {\n    allow_private = [\n      \"10.1.0.0/16\",\n      \"0.0.0.0/0\",\n    ]\n  }"), summary: "Invalid allow_private entry", detail: "not inside a private range", line: 6},
	{name: "allow_private loopback", src: session(`  egress { allow_private = ["127.0.0.0/8"] }`), summary: "Invalid allow_private entry", detail: "not inside a private range", line: 3},
	{name: "allow_private metadata", src: session(`  egress { allow_private = ["169.254.169.254"] }`), summary: "Invalid allow_private entry", line: 3},
	{name: "allow_private wider than private", src: session(`  egress { allow_private = ["10.0.0.0/7"] }`), summary: "Invalid allow_private entry", line: 3},
	{name: "allow_private host bits", src: session(`  egress { allow_private = ["10.1.2.3/16"] }`), summary: "Invalid allow_private entry", detail: `write "10.1.0.0/16"`, line: 3},
	{name: "allow_private name", src: session(`  egress { allow_private = ["corp.test"] }`), summary: "Invalid allow_private entry", detail: "not a CIDR", line: 3},
	{name: "allow_private mapped", src: session(`  egress { allow_private = ["::ffff:10.0.0.0/104"] }`), summary: "Invalid allow_private entry", line: 3},

	// Credential rules.
	{name: "duplicate credential", src: session("  credential \"git\" {\n    audience = \"a\"\n    scopes = [\"git.fetch repo=app\"]\n  }\n  credential \"git\" {\n    audience = \"b\"\n    scopes = [\"git.fetch repo=app\"]\n  }"), summary: "Duplicate credential", line: 7},
	{name: "credential name", src: session("  credential \"../x\" {\n    audience = \"a\"\n    scopes = [\"git.fetch repo=app\"]\n  }"), summary: "Invalid credential name", line: 3},
	{name: "credential missing audience", src: session("  credential \"git\" {\n    scopes = [\"git.fetch repo=app\"]\n  }"), summary: "Missing audience", line: 3},
	{name: "credential missing scopes", src: session("  credential \"git\" {\n    audience = \"a\"\n  }"), summary: "Missing scopes", line: 3},
	{name: "credential ttl too long", src: session("  credential \"git\" {\n    audience = \"a\"\n    scopes = [\"git.fetch repo=app\"]\n    ttl = \"13h\"\n  }"), summary: "Invalid ttl", line: 6},
	{name: "credential bad deliver", src: session("  credential \"git\" {\n    audience = \"a\"\n    scopes = [\"git.fetch repo=app\"]\n    deliver = \"stdin\"\n  }"), summary: "Invalid deliver", line: 6},
	{name: "credential env without env_var", src: session("  credential \"git\" {\n    audience = \"a\"\n    scopes = [\"git.fetch repo=app\"]\n    deliver = \"env\"\n  }"), summary: "Missing env_var", line: 3},
	{name: "credential env_var with file", src: session("  credential \"git\" {\n    audience = \"a\"\n    scopes = [\"git.fetch repo=app\"]\n    env_var = \"T\"\n  }"), summary: `env_var needs deliver = "env"`, line: 6},
	{name: "credential path relative", src: session("  credential \"git\" {\n    audience = \"a\"\n    scopes = [\"git.fetch repo=app\"]\n    path = \"token\"\n  }"), summary: "Invalid credential path", line: 6},
	{name: "credential env_var collides with env", src: session("  env = { TOKEN = \"x\" }\n  credential \"git\" {\n    audience = \"a\"\n    scopes = [\"git.fetch repo=app\"]\n    deliver = \"env\"\n    env_var = \"TOKEN\"\n  }"), summary: "Conflicting credential delivery", line: 8},

	// Expressions.
	{name: "function call", src: session(`  command = ["cat", file("/etc/shadow")]`), summary: "Functions are not allowed", line: 3},
	{name: "unknown reference", src: session(`  user = local.user`), summary: "Unknown reference", line: 3},
	{name: "undeclared variable", src: session(`  user = var.user`), summary: "Undeclared variable", line: 3},
	{name: "for expression", src: session(`  command = [for x in ["a"] : x]`), summary: "For expressions are not allowed", line: 3},
	{name: "template for directive", src: session(`  user = "%{for x in ["1"]}${x}%{endfor}"`), summary: "For expressions are not allowed", line: 3},
	{name: "arithmetic", src: session(`  resources { memory = 4 * 1024 }`), summary: "Arithmetic is not allowed", line: 3},
	// Formatting these numbers as strings would take minutes.
	{name: "tiny number", src: session(`  user = "${1e-100000000}"`), summary: "Number out of range", line: 3},
	{name: "huge number", src: session(`  command = [1e100000000]`), summary: "Number out of range", line: 3},
	{name: "huge number in a default", src: "variable \"v\" { default = 1e100000000 }\n" + session(""), summary: "Number out of range", line: 1},
	{name: "conditional and comparison", src: "variable \"ci\" { default = true }\n" + session(`  user = var.ci && 1 < 2 ? "1000" : "0"`), check: func(t *testing.T, p *Policy) {
		if p.User != "1000" {
			t.Errorf("user = %q, want 1000", p.User)
		}
	}},
}

func TestDecode(t *testing.T) {
	runDecodeTests(t, decodeTests)
}

func runDecodeTests(t *testing.T, tests []decodeTest) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, derr := Decode("/manifests/m.hcl", []byte(tt.src), tt.vars)
			checkDiagnostics(t, derr)
			if tt.summary == "" {
				if derr.HasErrors() {
					t.Fatalf("unexpected errors: %v", derr)
				}
				if p == nil {
					t.Fatal("no policy and no error")
				}
				if err := p.Validate(); err != nil {
					t.Errorf("decoded policy fails Validate: %v", err)
				}
				if tt.check != nil {
					tt.check(t, p)
				}
				return
			}
			if p != nil {
				t.Errorf("got a policy with errors: %+v", p)
			}
			if !derr.HasErrors() {
				t.Fatalf("want error %q at line %d, got none", tt.summary, tt.line)
			}
			first := derr.Errors()[0]
			if first.Summary != tt.summary || first.Line != tt.line {
				t.Errorf("first error = %q at line %d, want %q at line %d\nall: %v", first.Summary, first.Line, tt.summary, tt.line, derr.Diagnostics())
			}
			if !strings.Contains(first.Detail, tt.detail) {
				t.Errorf("first error detail = %q, want it to contain %q", first.Detail, tt.detail)
			}
		})
	}
}

// checkDiagnostics asserts that every diagnostic says where and how.
func checkDiagnostics(t *testing.T, derr *DiagnosticsError) {
	t.Helper()
	for _, d := range derr.Diagnostics() {
		if d.Filename == "" || d.Line == 0 || d.Column == 0 {
			t.Errorf("diagnostic without a location: %v", d)
		}
		if d.Summary == "" || d.Detail == "" {
			t.Errorf("diagnostic without summary or detail: %v", d)
		}
	}
}

func TestDecodeAccumulates(t *testing.T) {
	src := session(`
  user    = "alice"
  timeout = "forever"
  workspace "." {
    target = "w"
    mode   = "overlayy"
  }`)
	_, err := Load("m.hcl", []byte(src), nil)
	var derr *DiagnosticsError
	if !errors.As(err, &derr) {
		t.Fatalf("err = %v (%T), want *DiagnosticsError", err, err)
	}
	var got []string
	for _, d := range derr.Errors() {
		got = append(got, d.Summary)
	}
	want := []string{"Invalid user", "Invalid duration", "Invalid target", "Invalid mode"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("errors = %q, want %q", got, want)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, `m.hcl:4,13-20: Invalid user; user "alice" is not a numeric uid or uid:gid.`) || !strings.HasSuffix(msg, "(and 3 more)") || strings.Contains(msg, "\n") {
		t.Errorf("Error() = %q", msg)
	}
	if !errdefs.IsInvalidArgument(err) {
		t.Errorf("errdefs.IsInvalidArgument(%v) = false", err)
	}

	var buf bytes.Buffer
	if err := derr.Write(&buf, false, 78); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"Error: Invalid mode",
		`on m.hcl line 8, in session "t":`,
		`   8:     mode   = "overlayy"`,
		`"overlayy" is not one of overlay, ro, rw.`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("Write output lacks %q:\n%s", want, out)
		}
	}
}

func TestDecodeSuppressesCascades(t *testing.T) {
	// A failed image expression must not also be reported as a missing image.
	_, derr := Decode("m.hcl", []byte("session \"t\" {\n  image = upper(\"x\")\n}\n"), nil)
	if got := derr.Errors(); len(got) != 1 || got[0].Summary != "Functions are not allowed" {
		t.Errorf("errors = %v, want only the function error", got)
	}
}

func TestDecodeWarnings(t *testing.T) {
	src := session(`
  user         = "0"
  capabilities = ["SYS_ADMIN"]
  workspace "." {
    target            = "/w"
    mode              = "rw"
    default_deny_read = false
  }
  mount "/srv/ca" {
    target            = "/ca"
    default_deny_read = false
  }
  egress {
    allow         = ["2001:db8::/32"]
    allow_private = ["fd00::/8"]
  }
  credential "t" {
    audience = "a"
    scopes   = ["git.fetch repo=app"]
    deliver  = "env"
    env_var  = "T"
  }`)
	p, derr := Decode("m.hcl", []byte(src), nil)
	if p == nil || derr.HasErrors() {
		t.Fatalf("Decode: %v", derr)
	}
	checkDiagnostics(t, derr)
	var got []string
	for _, d := range derr.Warnings() {
		got = append(got, d.Summary)
	}
	want := []string{"Session runs as root", "Capability weakens the sandbox", "Workspace is writable", "Credential files are readable", "Credential files are readable", "IPv6 entry without ipv6", "IPv6 entry without ipv6", "Credential in the environment"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("warnings = %q, want %q", got, want)
	}
	if _, err := Load("m.hcl", []byte(src), nil); err != nil {
		t.Errorf("Load returned %v for a manifest with warnings only", err)
	}
}

func TestLoadFile(t *testing.T) {
	_, err := LoadFile(filepath.Join(t.TempDir(), "missing.hcl"), nil)
	if !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("LoadFile(missing) = %v, want fs.ErrNotExist", err)
	}
	var derr *DiagnosticsError
	if errors.As(err, &derr) {
		t.Errorf("a missing file is not a manifest error: %v", err)
	}
}

func TestHostPathsResolveAgainstManifest(t *testing.T) {
	src := []byte(session(`
  workspace "." { target = "/a" }
  workspace "sub/dir" { target = "/b" }
  workspace "../up" { target = "/c" }
  mount "/abs/./x" { target = "/d" }`))
	cwd, err := filepath.Abs(".")
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		filename string
		dir      string
	}{
		{"/etc/airlock/task.hcl", "/etc/airlock"},
		{"task.hcl", cwd},
		{"examples/task.hcl", filepath.Join(cwd, "examples")},
	} {
		p, err := Load(tt.filename, src, nil)
		if err != nil {
			t.Fatal(err)
		}
		got := []string{p.Workspaces[0].HostPath, p.Workspaces[1].HostPath, p.Workspaces[2].HostPath, p.Mounts[0].HostPath}
		want := []string{tt.dir, filepath.Join(tt.dir, "sub/dir"), filepath.Join(filepath.Dir(tt.dir), "up"), "/abs/x"}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("Load(%q) host paths = %q, want %q", tt.filename, got, want)
		}
	}
}
