package policies

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

func TestAdmissionExample(t *testing.T) {
	a, err := LoadAdmissionFile("../examples/airlockd/admission.hcl")
	if err != nil {
		t.Fatal(err)
	}
	want := &Admission{
		Source:        "../examples/airlockd/admission.hcl",
		HostPaths:     []string{"/srv/agents", "/home"},
		ReadOnlyPaths: []string{"/opt/datasets", "/usr/share/ca-certificates"},
		Users:         []IDRange{{1000, 59999}, {65534, 65534}},
		Groups:        []IDRange{{1000, 59999}, {65534, 65534}},
		Capabilities:  []string{"CAP_NET_BIND_SERVICE", "CAP_KILL"},
		SecretSources: []SecretSource{
			{From: "file:/etc/airlock/secrets/*/*", Hosts: []string{DirHost}},
			{From: "env:ANTHROPIC_API_KEY", Hosts: []string{"api.anthropic.com"}},
			{From: "file:/etc/airlock/corp/*", Hosts: []string{"git.corp.test", "*.registry.corp.test"}},
		},
		GitSources: []GitSource{
			{URL: "https://git.corp.test/agents/*", PushBranches: []string{"airlock/*"}, TokenFile: "/etc/airlock/git/corp.token", Username: DefaultGitUsername},
			{URL: "https://git.corp.test/team-a/*", PushBranches: []string{"airlock/team-a/*"}, TokenFile: "/etc/airlock/git/team-a.token", Username: DefaultGitUsername, Namespaces: []string{"team-a"}},
			{URL: "ssh://git@git.corp.test/infra/*", PushBranches: []string{"airlock/*"}, SSHKeyFile: "/etc/airlock/git/id_ed25519", KnownHosts: "/etc/airlock/git/known_hosts"},
		},
		Limits: Limits{CPUs: 4, Memory: 8 << 30, Pids: 4096, Disk: 16 << 30, LogSize: 256 << 20, AuditSize: 64 << 20, Timeout: Duration(4 * 3600e9), Sessions: 32},
	}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("decoded\n%+v\nwant\n%+v", a, want)
	}
}

func TestDecodeAdmissionDefaults(t *testing.T) {
	a, diags := DecodeAdmission("a.hcl", []byte(`admission {
  host_paths = ["/"]
  limits {
    memory = "2GiB"
  }
}
`))
	if diags != nil {
		t.Fatal(diags)
	}
	want := DefaultAdmission()
	want.Source = "a.hcl"
	want.Limits.Memory = 2 << 30
	if !reflect.DeepEqual(a, want) {
		t.Errorf("decoded\n%+v\nwant\n%+v", a, want)
	}
	if users := (&Admission{Users: []IDRange{}}).Users; idAllowed(users, 1000) {
		t.Error("an empty users list admits uid 1000")
	}
}

func TestDecodeAdmissionErrors(t *testing.T) {
	tests := []struct {
		name, src string
		want      []string // "line:summary" of each error
	}{
		{"empty", ``, []string{"1:Missing admission block"}},
		{"no host_paths", "admission {\n}\n", []string{"1:Missing required argument"}},
		{"two blocks", "admission {\n  host_paths = [\"/\"]\n}\nadmission {\n  host_paths = [\"/\"]\n}\n", []string{"4:Duplicate admission block"}},
		{"unknown attribute", "admission {\n  host_paths = [\"/\"]\n  hostpaths = []\n}\n", []string{"3:Unsupported argument"}},
		{"relative root", "admission {\n  host_paths = [\"/srv\",\n    \"src\"]\n}\n", []string{"3:Invalid host path root"}},
		{"protected root", "admission {\n  host_paths = [\"/etc/app\"]\n  read_only_paths = [\"/proc\"]\n}\n", []string{"2:Invalid host path root", "3:Invalid host path root"}},
		{"unclean root", "admission {\n  host_paths = [\"/srv/../etc\"]\n}\n", []string{"2:Invalid host path root"}},
		{"bad ranges", "admission {\n  host_paths = [\"/\"]\n  users = [\"root\", \"10-5\"]\n  groups = [\"4294967295\"]\n}\n",
			[]string{"3:Invalid id range", "3:Invalid id range", "4:Invalid id range"}},
		{"unknown capability", "admission {\n  host_paths = [\"/\"]\n  capabilities = [\"CAP_FLY\"]\n}\n", []string{"3:Unknown capability"}},
		{"bad limits", "admission {\n  host_paths = [\"/\"]\n  limits {\n    memory = \"1KiB\"\n    cpus = 0\n    timeout = \"soon\"\n    sessions = -1\n    disk = \"lots\"\n  }\n}\n",
			[]string{"4:Invalid memory", "5:Invalid cpus", "6:Invalid duration", "7:Invalid sessions", "8:Invalid size"}},
		{"bad secret sources", "admission {\n  host_paths = [\"/\"]\n" + srcBlocks("vault:x", "file:secrets/*", "file:/etc/airlock/../x/*", "env:A/B", "env:", "file:/etc/[x", "file:/") + "}\n",
			[]string{"3:Invalid secret source", "4:Invalid secret source", "5:Invalid secret source", "6:Invalid secret source", "7:Invalid secret source", "8:Invalid secret source", "9:Invalid secret source"}},
		{"secret_sources list", "admission {\n  host_paths = [\"/\"]\n  secret_sources = [\"env:X\"]\n}\n", []string{"3:secret_sources was replaced"}},
		{"secret source hosts", "admission {\n  host_paths = [\"/\"]\n  secret_source \"env:X\" {\n    hosts = [\n      \"{dir}\",\n      \"API.test\",\n      \"a.test:443\",\n      \"*\",\n    ]\n  }\n}\n",
			[]string{"5:Invalid secret source host", "6:Invalid secret source host", "7:Invalid secret source host", "8:Invalid secret source host"}},
		{"secret source without hosts", "admission {\n  host_paths = [\"/\"]\n  secret_source \"env:X\" {\n  }\n}\n", []string{"3:Missing required argument"}},
		{"secret source empty hosts", "admission {\n  host_paths = [\"/\"]\n  secret_source \"env:X\" {\n    hosts = []\n  }\n}\n", []string{"4:Empty hosts"}},
		{"secret source twice", "admission {\n  host_paths = [\"/\"]\n  secret_source \"env:X\" {\n    hosts = [\"a.test\"]\n  }\n  secret_source \"env:X\" {\n    hosts = [\"b.test\"]\n  }\n}\n", []string{"6:Duplicate secret source"}},
		{"functions", "admission {\n  host_paths = [file(\"x\")]\n}\n", []string{"2:Functions are not allowed"}},
		{"variables", "admission {\n  host_paths = [var.root]\n}\n", []string{"2:References are not allowed"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a, diags := DecodeAdmission("adm.hcl", []byte(tt.src))
			if a != nil || !diags.HasErrors() {
				t.Fatalf("decoded %+v, %v; want errors", a, diags)
			}
			var got []string
			for _, d := range diags.Errors() {
				if d.Filename != "adm.hcl" || d.Line == 0 {
					t.Errorf("diagnostic without a location: %+v", d)
				}
				got = append(got, strconv.Itoa(d.Line)+":"+d.Summary)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("errors %q, want %q\n%v", got, tt.want, diags)
			}
		})
	}
}

func TestLoadAdmissionFileRendersLocation(t *testing.T) {
	path := filepath.Join(t.TempDir(), "bad.hcl")
	if err := os.WriteFile(path, []byte("admission {\n  host_paths = [\"relative\"]\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := LoadAdmissionFile(path)
	var diags *DiagnosticsError
	if !errors.As(err, &diags) || !errdefs.IsInvalidArgument(err) {
		t.Fatalf("error %v, want diagnostics", err)
	}
	var b strings.Builder
	_ = diags.Write(&b, false, 0)
	if !strings.Contains(b.String(), "bad.hcl line 2") || !strings.Contains(err.Error(), "bad.hcl:2,") {
		t.Errorf("no file:line in %q / %q", err, b.String())
	}
}

// admissionFixture is a host tree to admit paths from.
type admissionFixture struct {
	root, rw, ro, outside, sock, etcLink string
	pr                                   *Protected
}

func newAdmissionFixture(t *testing.T) admissionFixture {
	t.Helper()
	root := t.TempDir()
	f := admissionFixture{
		root: root, rw: filepath.Join(root, "rw"), ro: filepath.Join(root, "ro"), outside: filepath.Join(root, "outside"),
		sock: filepath.Join(root, "rw", "d.sock"), etcLink: filepath.Join(root, "rw", "etc"),
	}
	for _, d := range []string{f.rw, f.ro, f.outside, filepath.Join(f.rw, "sub"), filepath.Join(root, "state"), filepath.Join(f.ro, "bin"), filepath.Join(f.ro, "data")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	l, err := net.Listen("unix", f.sock)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	if err := os.Symlink("/etc", f.etcLink); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.outside, filepath.Join(f.rw, "out")); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"file", "linked"} {
		if err := os.WriteFile(filepath.Join(f.rw, name), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Link(filepath.Join(f.rw, "linked"), filepath.Join(f.outside, "linked")); err != nil {
		t.Fatal(err)
	}
	// The daemon's root, as the daemon adds it.
	f.pr = NewProtected(filepath.Join(root, "state"))
	// The daemon's bin dir: readable, never writable.
	f.pr.ProtectWrites(filepath.Join(f.ro, "bin"))
	return f
}

func TestAdmitHostPaths(t *testing.T) {
	f := newAdmissionFixture(t)
	a := DefaultAdmission()
	a.HostPaths = []string{f.rw}
	a.ReadOnlyPaths = []string{f.ro}
	tests := []struct {
		name     string
		ws       *Workspace
		mount    *Mount
		want     string // "" admitted; else a substring of the refusal
		resolved string
	}{
		{"rw root itself", &Workspace{HostPath: f.rw, Mode: ModeRW}, nil, "", f.rw},
		{"beneath rw root", &Workspace{HostPath: filepath.Join(f.rw, "sub"), Mode: ModeOverlay}, nil, "", filepath.Join(f.rw, "sub")},
		{"ro workspace under ro root", &Workspace{HostPath: f.ro, Mode: ModeRO}, nil, "", f.ro},
		{"read-only mount under ro root", nil, &Mount{HostPath: f.ro, ReadOnly: true}, "", f.ro},
		{"overlay under ro root", &Workspace{HostPath: filepath.Join(f.ro, "data"), Mode: ModeOverlay}, nil, "is under a read-only host path", ""},
		{"writable mount under ro root", nil, &Mount{HostPath: filepath.Join(f.ro, "data")}, "is under a read-only host path", ""},
		{"outside", &Workspace{HostPath: f.outside, Mode: ModeRO}, nil, "is not under an admitted host path", ""},
		{"symlink out of the root", &Workspace{HostPath: filepath.Join(f.rw, "out"), Mode: ModeRO}, nil, `"` + f.outside + `" is not under an admitted host path`, ""},
		{"dot-dot out of the root", &Workspace{HostPath: f.rw + "/sub/../../outside", Mode: ModeRO}, nil, "is not under an admitted host path", ""},
		{"dot-dot within the root", &Workspace{HostPath: f.rw + "/sub/..", Mode: ModeRO}, nil, "", f.rw},
		{"symlink to /etc", &Workspace{HostPath: f.etcLink, Mode: ModeRO}, nil, `"/etc" is a protected host path`, ""},
		{"socket", nil, &Mount{HostPath: f.sock, ReadOnly: true}, "is a unix socket", ""},
		{"regular file", nil, &Mount{HostPath: filepath.Join(f.rw, "file"), ReadOnly: true}, "", filepath.Join(f.rw, "file")},
		{"hard-linked file", nil, &Mount{HostPath: filepath.Join(f.rw, "linked"), ReadOnly: true}, "has 2 hard links", ""},
		{"/dev/null", nil, &Mount{HostPath: "/dev/null", ReadOnly: true}, `beneath the protected host path "/dev"`, ""},
		{"daemon root", nil, &Mount{HostPath: filepath.Join(f.root, "state"), ReadOnly: true}, "is a protected host path", ""},
		{"beneath the daemon root", nil, &Mount{HostPath: filepath.Join(f.root, "state", "keys"), ReadOnly: true}, "is beneath the protected host path", ""},
		{"holds the daemon root", nil, &Mount{HostPath: f.root, ReadOnly: true}, "contains the protected host path", ""},
		{"/", nil, &Mount{HostPath: "/", ReadOnly: true}, `"/" is a protected host path`, ""},
		{"/dev/sda", nil, &Mount{HostPath: "/dev/sda", ReadOnly: true}, `beneath the protected host path "/dev"`, ""},
		{"/run missing file", nil, &Mount{HostPath: "/run/nothing-here.sock"}, `beneath the protected host path "/run"`, ""},
		{"/sys", nil, &Mount{HostPath: "/sys"}, `"/sys" is a protected host path`, ""},
		{"/boot", nil, &Mount{HostPath: "/boot/grub"}, `beneath the protected host path "/boot"`, ""},
		{"bin dir read-only", nil, &Mount{HostPath: filepath.Join(f.ro, "bin"), ReadOnly: true}, "", filepath.Join(f.ro, "bin")},
		{"bin dir writable", nil, &Mount{HostPath: filepath.Join(f.ro, "bin")}, "is a protected host path (read-only use is admitted)", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := (&Policy{Label: "t", Image: "i", Command: []string{"true"}}).WithDefaults()
			if tt.ws != nil {
				w := *tt.ws
				w.Target, w.DefaultDenyRead, w.OnExit = "/w", true, OnExitReview
				p.Workspaces = []Workspace{w}
			}
			if tt.mount != nil {
				m := *tt.mount
				m.Target = "/m"
				p.Mounts = []Mount{m}
			}
			_, err := a.Admit(p, f.pr)
			if tt.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				got := ""
				if tt.ws != nil {
					got = p.Workspaces[0].HostPath
				} else {
					got = p.Mounts[0].HostPath
				}
				if got != tt.resolved {
					t.Errorf("host path %q after admission, want %q", got, tt.resolved)
				}
				return
			}
			var ae *AdmissionError
			if !errors.As(err, &ae) || !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want an admission error saying %q", err, tt.want)
			}
		})
	}
}

func TestAdmitMissingHostPath(t *testing.T) {
	p := (&Policy{Label: "t", Image: "i", Command: []string{"true"}}).WithDefaults()
	p.Mounts = []Mount{{HostPath: filepath.Join(t.TempDir(), "none"), Target: "/m", ReadOnly: true}}
	_, err := DefaultAdmission().Admit(p, NewProtected())
	if !errdefs.IsInvalidArgument(err) || !strings.Contains(err.Error(), "no such file or directory") {
		t.Fatalf("error %v, want an invalid-argument error", err)
	}
}

func TestAdmitUsersCapabilitiesLimits(t *testing.T) {
	a := DefaultAdmission()
	a.Users = []IDRange{{1000, 1999}}
	a.Capabilities = []string{"CAP_NET_BIND_SERVICE"}
	a.Limits = Limits{CPUs: 2, Memory: 1 << 30, Pids: 100, Disk: 2 << 30, LogSize: 1 << 20, AuditSize: 1 << 20, Timeout: Duration(3600e9), Sessions: 2}
	tests := []struct {
		name string
		edit func(*Policy)
		want []string
	}{
		{"within", func(p *Policy) {
			p.User, p.Capabilities = "1500:1500", []string{"CAP_NET_BIND_SERVICE"}
			p.Resources = Resources{CPUs: 2, Memory: 1 << 30, Pids: 100, Disk: 2 << 30}
		}, nil},
		{"log and audit above the limits", func(p *Policy) {
			p.User = "1000"
			p.Resources = Resources{LogSize: 2 << 20, AuditSize: 3 << 20}
		}, []string{"resources.log_size 2MiB refused: the limit is 1MiB", "resources.audit_size 3MiB refused: the limit is 1MiB"}},
		{"default user", func(p *Policy) {}, []string{`user "65534:65534" refused: uid 65534 is not among the admitted users (1000-1999)`}},
		{"root", func(p *Policy) { p.User = "0" }, []string{`uid 0 is not among`, `gid 0 is not among`}},
		{"root group", func(p *Policy) { p.User = "1000:0" }, []string{`user "1000:0" refused: gid 0 is not among the admitted groups (1-4294967294)`}},
		{"capability", func(p *Policy) { p.User = "1000"; p.Capabilities = []string{"CAP_SYS_ADMIN"} },
			[]string{"capability CAP_SYS_ADMIN refused: it is not among the admitted capabilities (CAP_NET_BIND_SERVICE)"}},
		{"everything above the limits", func(p *Policy) {
			p.User = "1000"
			p.Resources = Resources{CPUs: 3, Memory: 2 << 30, Pids: 101, Disk: 3 << 30}
			p.Timeout = Duration(7200e9)
		}, []string{"resources.cpus 3 refused: the limit is 2", "resources.memory 2GiB refused: the limit is 1GiB",
			"resources.pids 101 refused: the limit is 100", "resources.disk 3GiB refused: the limit is 2GiB", "timeout 2h0m0s refused: the limit is 1h0m0s"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Policy{Label: "t", Image: "i", Command: []string{"true"}}
			tt.edit(p)
			a.FillDefaults(p)
			p.ApplyDefaults()
			_, err := a.Admit(p, NewProtected())
			var ae *AdmissionError
			if tt.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.As(err, &ae) || len(ae.Problems) != len(tt.want) {
				t.Fatalf("error %v, want %d problems", err, len(tt.want))
			}
			for i, w := range tt.want {
				if !strings.Contains(ae.Problems[i], w) {
					t.Errorf("problem %q, want %q", ae.Problems[i], w)
				}
			}
		})
	}
	if err := a.AdmitSessions(1); err != nil {
		t.Errorf("1 of 2 sessions: %v", err)
	}
	if err := a.AdmitSessions(2); !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), "the limit is 2") {
		t.Errorf("2 of 2 sessions: %v", err)
	}
}

func TestFillDefaultsUsesLowerBounds(t *testing.T) {
	a := DefaultAdmission()
	a.Limits = Limits{CPUs: 0.5, Memory: 256 << 20, Pids: 64, Disk: 1 << 30, LogSize: 1 << 20, AuditSize: 512 << 10, Timeout: Duration(600e9)}
	p := &Policy{}
	a.FillDefaults(p)
	p.ApplyDefaults()
	want := Resources{CPUs: 0.5, Memory: 256 << 20, Pids: 64, Disk: 1 << 30, LogSize: 1 << 20, AuditSize: 512 << 10}
	if p.Resources != want || p.Timeout != Duration(600e9) {
		t.Errorf("resources %+v timeout %s, want %+v and 10m", p.Resources, p.Timeout, want)
	}
	// A policy with the defaults already applied (as the CLI sends it)
	// gets the same.
	p = (&Policy{}).WithDefaults()
	a.FillDefaults(p)
	if p.Resources != want || p.Timeout != Duration(600e9) {
		t.Errorf("with defaults applied: resources %+v timeout %s, want %+v and 10m", p.Resources, p.Timeout, want)
	}
	// An explicit value above the bound is left for Admit to refuse.
	p = &Policy{Resources: Resources{Memory: 2 << 30}}
	a.FillDefaults(p)
	if p.Resources.Memory != 2<<30 {
		t.Errorf("explicit memory changed to %d", p.Resources.Memory)
	}
	// Bounds above the defaults leave the defaults.
	p = &Policy{}
	DefaultAdmission().FillDefaults(p)
	p.ApplyDefaults()
	if p.Resources != (Resources{CPUs: DefaultCPUs, Memory: DefaultMemory, Pids: DefaultPids, LogSize: DefaultLogSize, AuditSize: DefaultAuditSize}) || p.Timeout != DefaultTimeout {
		t.Errorf("defaults changed: %+v %s", p.Resources, p.Timeout)
	}
}

func TestDefaultAdmissionRefusesWhatItWarnsAbout(t *testing.T) {
	// Every capability Validate warns about is refused by default, and
	// every default-admitted one draws no warning.
	a := DefaultAdmission()
	for c := range escapeCapabilities {
		if slices.Contains(a.Capabilities, c) {
			t.Errorf("%s is admitted by default", c)
		}
	}
	for _, c := range a.Capabilities {
		if escapeCapabilities[c] || !isKnownCapability(c) {
			t.Errorf("%s is in the safe list", c)
		}
	}
}

func TestPolicyWarnings(t *testing.T) {
	p := (&Policy{Label: "t", Image: "i", User: "0", Capabilities: []string{"CAP_SYS_ADMIN"}}).WithDefaults()
	got := p.Warnings()
	want := []string{`user: user "0" is uid 0`, "capabilities[0]: CAP_SYS_ADMIN commonly lets a process escape or weaken a container sandbox"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("warnings %q, want %q", got, want)
	}
}

// FuzzDecodeAdmission checks that DecodeAdmission returns either a policy
// or errors, every error with a location, and that a decoded policy's
// host path roots are absolute and its limits within range.
func FuzzDecodeAdmission(f *testing.F) {
	src, err := os.ReadFile("../examples/airlockd/admission.hcl")
	if err != nil {
		f.Fatal(err)
	}
	f.Add(src)
	f.Add([]byte("admission {\n  host_paths = [\"/\"]\n  users = [\"1-2\"]\n  limits {\n    sessions = 3\n  }\n}\n"))
	f.Add([]byte("admission {\n  host_paths = [\"/\"]\n  secret_source \"env:A_*\" {\n    hosts = [\"a.test\"]\n  }\n  secret_source \"file:/srv/s/[a-z]*\" {\n    hosts = [\"{dir}\", \"*.b.test\"]\n  }\n}\n"))
	f.Fuzz(func(t *testing.T, src []byte) {
		a, diags := DecodeAdmission("/fuzz/a.hcl", src)
		if (a == nil) != diags.HasErrors() {
			t.Fatalf("DecodeAdmission returned %v and %v: want exactly one of a policy and errors", a, diags)
		}
		for _, d := range diags.Errors() {
			if d.Line == 0 || d.Summary == "" {
				t.Fatalf("diagnostic without location or summary: %+v", d)
			}
		}
		if a == nil {
			return
		}
		for _, p := range append(slices.Clone(a.HostPaths), a.ReadOnlyPaths...) {
			if !filepath.IsAbs(p) {
				t.Fatalf("root %q is not absolute", p)
			}
		}
		l := a.Limits
		if l.CPUs <= 0 || l.CPUs > MaxCPUs || l.Memory < MinMemory || l.Pids <= 0 || l.Disk < MinDisk || l.Timeout <= 0 || l.Sessions <= 0 {
			t.Fatalf("limits out of range: %+v", l)
		}
		for _, src := range a.SecretSources {
			if reason := checkSecretSourceGlob(src.From); reason != "" {
				t.Fatalf("secret source %q: %s", src.From, reason)
			}
			if len(src.Hosts) == 0 {
				t.Fatalf("secret source %q admits no host", src.From)
			}
			for _, h := range src.Hosts {
				if reason := checkAdmittedHost(src.From, h); reason != "" {
					t.Fatalf("secret source %q host %q: %s", src.From, h, reason)
				}
			}
		}
		for _, r := range append(slices.Clone(a.Users), a.Groups...) {
			if r.First > r.Last {
				t.Fatalf("range %v ends before it starts", r)
			}
		}
	})
}

// TestAdmitIDCapabilities: CAP_SETUID, CAP_SETGID, CAP_CHOWN, CAP_FOWNER
// and CAP_DAC_OVERRIDE make a session any uid or gid on its host files, so a policy that lists them admits them only
// when it admits every uid (gid), in one range or several.
func TestAdmitIDCapabilities(t *testing.T) {
	all := []IDRange{{0, 99}, {100, 4294967294}}
	tests := []struct {
		users, groups []IDRange
		cap, want     string
	}{
		{[]IDRange{{1000, 1999}}, all, "CAP_SETUID", "capability CAP_SETUID refused: it lets the session take any uid, and only 1000-1999 are admitted"},
		{all, []IDRange{{1000, 1999}}, "CAP_SETGID", "capability CAP_SETGID refused: it lets the session take any gid"},
		{all, []IDRange{{1000, 1999}}, "CAP_CHOWN", "capability CAP_CHOWN refused: it lets the session take any gid"},
		{anyButRoot, all, "CAP_CHOWN", "capability CAP_CHOWN refused: it lets the session take any uid"},
		{[]IDRange{{0, 4294967293}}, all, "CAP_SETUID", "capability CAP_SETUID refused"},
		{all, all, "CAP_SETUID", ""},
		{all, all, "CAP_CHOWN", ""},
		{anyButRoot, anyButRoot, "CAP_DAC_OVERRIDE", "capability CAP_DAC_OVERRIDE refused"},
		{anyButRoot, anyButRoot, "CAP_FOWNER", "capability CAP_FOWNER refused"},
		{anyButRoot, anyButRoot, "CAP_MKNOD", "capability CAP_MKNOD refused"},
		{anyButRoot, anyButRoot, "CAP_DAC_READ_SEARCH", "capability CAP_DAC_READ_SEARCH refused: it lets the session take any uid"},
		{[]IDRange{{1000, 1999}}, []IDRange{{1000, 1999}}, "CAP_KILL", ""},
	}
	for _, tt := range tests {
		a := DefaultAdmission()
		a.Users, a.Groups = tt.users, tt.groups
		a.Capabilities = []string{"CAP_SETUID", "CAP_SETGID", "CAP_CHOWN", "CAP_FOWNER", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_MKNOD", "CAP_KILL"}
		p := &Policy{Label: "t", Image: "i", Command: []string{"true"}, User: "1000:1000", Capabilities: []string{tt.cap}}
		p.ApplyDefaults()
		_, err := a.Admit(p, NewProtected())
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s with users %v groups %v: %v", tt.cap, tt.users, tt.groups, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s with users %v groups %v: %v, want %q", tt.cap, tt.users, tt.groups, err, tt.want)
		}
	}
}

// srcBlocks renders one secret_source block per source, a line each.
func srcBlocks(srcs ...string) string {
	var b strings.Builder
	for _, s := range srcs {
		fmt.Fprintf(&b, "  secret_source %q { hosts = [\"a.test\"] }\n", s)
	}
	return b.String()
}

// A workspace or mount that holds, or lies in, the directory an admission
// policy's file secret sources read from is refused, even under an
// admitted host path: the values stay the daemon's.
func TestAdmitRefusesSecretDirs(t *testing.T) {
	root := t.TempDir()
	keys := filepath.Join(root, "keys")
	for _, d := range []string{filepath.Join(keys, "api.test"), filepath.Join(root, "work"), filepath.Join(root, "one")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "one", "key"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := DefaultAdmission()
	a.HostPaths = []string{root}
	a.SecretSources = []SecretSource{
		{From: "file:" + keys + "/*/*", Hosts: []string{DirHost}},
		{From: "file:" + filepath.Join(root, "one", "key"), Hosts: []string{"api.test"}},
	}
	for _, c := range []struct {
		path string
		want string
	}{
		{filepath.Join(root, "work"), ""},
		{keys, "is a secret source's directory"},
		{filepath.Join(keys, "api.test"), "is beneath the secret source's directory"},
		{root, "contains the secret source's directory"},
		{filepath.Join(root, "one"), "contains the secret source's directory"},
	} {
		p := (&Policy{Label: "t", Image: "i", Command: []string{"true"}}).WithDefaults()
		p.Mounts = []Mount{{HostPath: c.path, Target: "/m", ReadOnly: true}}
		_, err := a.Admit(p, NewProtected())
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: refused: %v", c.path, err)
		case c.want != "" && (err == nil || !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%s: %v, want a refusal saying %q", c.path, err, c.want)
		}
	}
	if got := DefaultAdmission().secretDirs(); len(got) != 1 || got[0] != DefaultSecretDir {
		t.Errorf("the built-in policy's secret dirs: %v", got)
	}
	// A glob in the first directory names no directory to keep out: the
	// admission file is refused, and a policy made in code keeps every
	// host path out.
	if _, diags := DecodeAdmission("a.hcl", []byte(`admission {
  host_paths = ["/srv"]
  secret_source "file:/[s]rv/keys/*" {
    hosts = ["api.test"]
  }
}
`)); diags == nil || !strings.Contains(diags.Error(), "has a glob in its first directory") {
		t.Errorf("a source globbing its first directory: %v", diags)
	}
	a.SecretSources = []SecretSource{{From: "file:/[t]mp/keys/*/*", Hosts: []string{DirHost}}}
	p := (&Policy{Label: "t", Image: "i", Command: []string{"true"}}).WithDefaults()
	p.Mounts = []Mount{{HostPath: filepath.Join(root, "work"), Target: "/m", ReadOnly: true}}
	if _, err := a.Admit(p, NewProtected()); err == nil || !strings.Contains(err.Error(), "secret source's directory") {
		t.Errorf("a mount beside a source globbing its first directory: %v, want refused", err)
	}
}

// TestDefaultAdmissionFile: the rendered policy decodes to the built-in
// one with the given secret directories; a directory that a glob, a quote,
// a template sequence or a control character would change (or break) is
// refused, not rendered into a wider source.
func TestDefaultAdmissionFile(t *testing.T) {
	src, err := DefaultAdmissionFile(DefaultSecretDir, "/tmp/b-1/secrets")
	if err != nil {
		t.Fatal(err)
	}
	a, diags := DecodeAdmission("admission.hcl", []byte(src))
	if diags.HasErrors() {
		t.Fatal(diags)
	}
	want := []SecretSource{
		{From: "file:" + DefaultSecretDir + "/*/*", Hosts: []string{DirHost}},
		{From: "file:/tmp/b-1/secrets/*/*", Hosts: []string{DirHost}},
	}
	if !reflect.DeepEqual(a.SecretSources, want) {
		t.Errorf("secret sources %+v, want %+v", a.SecretSources, want)
	}
	for _, d := range []string{"relative/dir", "/", "/tmp/x/../y", "/tmp/a*", "/tmp/[a]", "/tmp/a?", `/tmp/a\b`,
		`/tmp/"x`, "/tmp/${HOME}", "/tmp/%{if true}x%{endif}", "/tmp/a\nb", "/tmp/\xff"} {
		if src, err := DefaultAdmissionFile(d); !errors.Is(err, errdefs.ErrInvalidArgument) {
			t.Errorf("secret directory %q: %v, want refused\n%s", d, err, src)
		}
	}
}
