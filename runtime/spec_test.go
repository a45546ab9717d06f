package runtime

import (
	"context"
	goruntime "runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/policies"
)

// buildSpec applies the options the daemon uses to a default spec, without
// containerd.
func buildSpec(t testing.TB, p *policies.Policy) *oci.Spec {
	t.Helper()
	ctx := namespaces.WithNamespace(context.Background(), "test")
	c := &containers.Container{ID: "s1"}
	s, err := oci.GenerateSpec(ctx, nil, c)
	if err != nil {
		t.Fatal(err)
	}
	popts, err := PolicyOpts(p, "host", "/airlock-x/s1")
	if err != nil {
		t.Fatal(err)
	}
	opts := append(HardeningOpts(), popts...)
	opts = append(opts, SeccompOpt())
	for _, o := range opts {
		if err := o(ctx, nil, c, s); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func TestSpecHardening(t *testing.T) {
	p := &policies.Policy{Image: "x", Command: []string{"echo", "hi"}, Env: map[string]string{"B": "2", "A": "1"}}
	p.ApplyDefaults()
	s := buildSpec(t, p)
	if !s.Root.Readonly {
		t.Error("rootfs is writable")
	}
	if !s.Process.NoNewPrivileges {
		t.Error("no_new_privs not set")
	}
	if s.Process.User.UID != 65534 || s.Process.User.GID != 65534 || len(s.Process.User.AdditionalGids) != 0 {
		t.Errorf("user %+v, want 65534:65534 without extra groups", s.Process.User)
	}
	caps := s.Process.Capabilities
	for name, set := range map[string][]string{"bounding": caps.Bounding, "effective": caps.Effective,
		"permitted": caps.Permitted, "inheritable": caps.Inheritable, "ambient": caps.Ambient} {
		if len(set) != 0 {
			t.Errorf("%s capabilities %v, want none", name, set)
		}
	}
	if s.Linux.Seccomp == nil || s.Linux.Seccomp.DefaultAction != specs.ActErrno {
		t.Fatal("default seccomp profile not installed")
	}
	// Only the native system call ABI: no compat (32-bit) entry points.
	if want, ok := nativeArch[goruntime.GOARCH]; ok && !slices.Equal(s.Linux.Seccomp.Architectures, []specs.Arch{want}) {
		t.Errorf("seccomp architectures %v, want only %s", s.Linux.Seccomp.Architectures, want)
	}
	if len(s.Linux.Seccomp.Syscalls) < 10 {
		t.Errorf("seccomp profile has %d rules, want containerd's default", len(s.Linux.Seccomp.Syscalls))
	}
	var nsTypes []specs.LinuxNamespaceType
	for _, ns := range s.Linux.Namespaces {
		if ns.Path != "" {
			t.Errorf("namespace %s joins %s, want a new one", ns.Type, ns.Path)
		}
		nsTypes = append(nsTypes, ns.Type)
	}
	for _, want := range []specs.LinuxNamespaceType{specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace,
		specs.MountNamespace, specs.NetworkNamespace, specs.CgroupNamespace} {
		if !slices.Contains(nsTypes, want) {
			t.Errorf("no %s namespace", want)
		}
	}
	for _, p := range []string{"/proc/kcore", "/proc/kallsyms", "/sys/firmware"} {
		if !slices.Contains(s.Linux.MaskedPaths, p) {
			t.Errorf("%s is not masked", p)
		}
	}
	if !slices.Contains(s.Linux.ReadonlyPaths, "/proc/sys") {
		t.Error("/proc/sys is not read-only")
	}
	var tmp *specs.Mount
	for i := range s.Mounts {
		if s.Mounts[i].Destination == "/tmp" {
			tmp = &s.Mounts[i]
		}
	}
	if tmp == nil || tmp.Type != "tmpfs" || !slices.Contains(tmp.Options, "nosuid") || !slices.Contains(tmp.Options, "nodev") {
		t.Errorf("/tmp mount %+v, want a nosuid,nodev tmpfs", tmp)
	}
	r := s.Linux.Resources
	if *r.Memory.Limit != policies.DefaultMemory || *r.Memory.Swap != policies.DefaultMemory {
		t.Errorf("memory limit %d swap %d, want %d", *r.Memory.Limit, *r.Memory.Swap, policies.DefaultMemory)
	}
	if r.Pids.Limit == nil || *r.Pids.Limit != policies.DefaultPids {
		t.Errorf("pids limit %v, want %d", r.Pids.Limit, policies.DefaultPids)
	}
	if *r.CPU.Quota != 100000 || *r.CPU.Period != 100000 {
		t.Errorf("cpu quota %d period %d, want one cpu", *r.CPU.Quota, *r.CPU.Period)
	}
	if s.Linux.CgroupsPath != "/airlock-x/s1" || s.Hostname != "host" {
		t.Errorf("cgroup %q hostname %q", s.Linux.CgroupsPath, s.Hostname)
	}
	if got := s.Process.Args; !slices.Equal(got, []string{"echo", "hi"}) {
		t.Errorf("args %v", got)
	}
	if !slices.Contains(s.Process.Env, "A=1") || !slices.Contains(s.Process.Env, "B=2") || !slices.Contains(s.Process.Env, "HOME=/tmp") {
		t.Errorf("env %v", s.Process.Env)
	}
}

func TestSpecCapabilitiesAndLimits(t *testing.T) {
	p := &policies.Policy{Image: "x", User: "1000:1001", Capabilities: []string{"CAP_NET_BIND_SERVICE"},
		Resources: policies.Resources{CPUs: 1.5, Memory: 64 << 20, Pids: 32}, Timeout: policies.Duration(time.Minute)}
	p.ApplyDefaults()
	s := buildSpec(t, p)
	want := []string{"CAP_NET_BIND_SERVICE"}
	c := s.Process.Capabilities
	// A non-root process keeps a capability across exec only as an ambient
	// one, which the kernel requires to be inheritable and permitted too.
	for name, set := range map[string][]string{"bounding": c.Bounding, "effective": c.Effective,
		"permitted": c.Permitted, "ambient": c.Ambient, "inheritable": c.Inheritable} {
		if !slices.Equal(set, want) {
			t.Errorf("%s = %v, want %v", name, set, want)
		}
	}
	if s.Process.User.UID != 1000 || s.Process.User.GID != 1001 {
		t.Errorf("user %+v", s.Process.User)
	}
	r := s.Linux.Resources
	if *r.CPU.Quota != 150000 || *r.Memory.Limit != 64<<20 || *r.Pids.Limit != 32 {
		t.Errorf("quota %d memory %d pids %d", *r.CPU.Quota, *r.Memory.Limit, *r.Pids.Limit)
	}
}

func TestPolicyOptsNeedsDefaults(t *testing.T) {
	p := &policies.Policy{Image: "x", Command: []string{"true"}}
	if _, err := PolicyOpts(p, "host", "/airlock-x/s1"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("PolicyOpts of a policy without defaults: err %v, want invalid argument", err)
	}
	p.ApplyDefaults()
	p.User = "root"
	if _, err := PolicyOpts(p, "host", "/airlock-x/s1"); !errdefs.IsInvalidArgument(err) {
		t.Errorf("PolicyOpts with user %q: err %v, want invalid argument", p.User, err)
	}
}

func BenchmarkSpec(b *testing.B) {
	p := &policies.Policy{Image: "x", Command: []string{"true"}}
	p.ApplyDefaults()
	b.ReportAllocs()
	for b.Loop() {
		buildSpec(b, p)
	}
}

func TestHostname(t *testing.T) {
	for _, tt := range []struct{ label, want string }{
		{"Fix Tests #42", "fix-tests--42"},
		{"ok-name", "ok-name"},
		{"---", "abc123"},
		{"", "abc123"},
		{strings.Repeat("a", 70), strings.Repeat("a", 63)},
	} {
		if got := Hostname(tt.label, "abc123"); got != tt.want {
			t.Errorf("Hostname(%q) = %q, want %q", tt.label, got, tt.want)
		}
	}
}
