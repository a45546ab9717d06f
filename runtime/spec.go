package runtime

import (
	"context"
	"fmt"
	"math"
	goruntime "runtime"
	"slices"
	"sort"
	"strings"

	"github.com/containerd/containerd/v2/contrib/seccomp"
	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/policies"
)

// cpuPeriod is the CFS period used for the cpus limit (100ms, as runc's default).
const cpuPeriod = 100000

// tmpSize bounds the sandbox's /tmp tmpfs.
const tmpSize = "256m"

// extraMaskedPaths are masked on top of containerd's defaults.
var extraMaskedPaths = []string{
	"/proc/kallsyms",
	"/proc/sysrq-trigger",
	"/sys/firmware",
	"/sys/kernel/debug",
}

// HardeningOpts returns the options every session gets, whatever its
// manifest says: read-only rootfs, no new privileges, the default seccomp
// profile, an own cgroup namespace, masked /proc paths and a tmpfs /tmp.
// They are applied after the image config, so the image cannot undo them.
func HardeningOpts() []oci.SpecOpts {
	return []oci.SpecOpts{
		oci.WithRootFSReadonly(),
		oci.WithNoNewPrivileges,
		oci.WithLinuxNamespace(specs.LinuxNamespace{Type: specs.CgroupNamespace}),
		withExtraMaskedPaths(extraMaskedPaths),
		oci.WithMounts([]specs.Mount{{
			Destination: "/tmp",
			Type:        "tmpfs",
			Source:      "tmpfs",
			Options:     []string{"nosuid", "nodev", "mode=1777", "size=" + tmpSize},
		}}),
		// seccomp last: the default profile depends on the final capability set.
	}
}

// PolicyOpts translates the parts of a policy the runtime owns (process,
// user, capabilities, resources) into spec options. p must have defaults
// applied (policies.Policy.ApplyDefaults): a policy without its resource
// limits is an errdefs.ErrInvalidArgument error. cgroupPath is the cgroup
// the session's processes go into.
func PolicyOpts(p *policies.Policy, hostname, cgroupPath string) ([]oci.SpecOpts, error) {
	uid, gid, err := p.UserIDs()
	if err != nil {
		return nil, err
	}
	r := p.Resources
	if r.CPUs <= 0 || r.Memory <= 0 || r.Pids <= 0 {
		return nil, fmt.Errorf("policy %q has no resource limits; apply its defaults first: %w", p.Label, errdefs.ErrInvalidArgument)
	}
	caps := normalizeCaps(p.Capabilities)
	opts := []oci.SpecOpts{
		oci.WithHostname(hostname),
		oci.WithUIDGID(uid, gid),
		withNoAdditionalGIDs,
		oci.WithCapabilities(caps),
		withInheritableCapabilities(nil),
		oci.WithCgroup(cgroupPath),
	}
	if uid != 0 {
		// A non-root process only keeps capabilities through exec as ambient ones.
		opts = append(opts, oci.WithAmbientCapabilities(caps))
	} else {
		opts = append(opts, oci.WithAmbientCapabilities(nil))
	}
	if len(p.Command) > 0 {
		opts = append(opts, oci.WithProcessArgs(p.Command...))
	}
	if p.Workdir != "" {
		opts = append(opts, oci.WithProcessCwd(p.Workdir))
	}
	env := []string{"HOME=/tmp"}
	keys := make([]string, 0, len(p.Env))
	for k := range p.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+p.Env[k])
	}
	opts = append(opts, oci.WithEnv(env))

	opts = append(opts,
		oci.WithCPUCFS(int64(math.Ceil(r.CPUs*cpuPeriod)), cpuPeriod),
		oci.WithMemoryLimit(uint64(r.Memory)),
		withMemorySwapLimit(r.Memory),
		oci.WithPidsLimit(r.Pids),
	)
	return opts, nil
}

// SeccompOpt installs containerd's default seccomp profile, narrowed to
// the host's native system call ABI (see nativeArch). It must be the last
// option: the profile allows some syscalls only when a capability is held.
func SeccompOpt() oci.SpecOpts {
	return func(ctx context.Context, c oci.Client, ctr *containers.Container, s *oci.Spec) error {
		if err := seccomp.WithDefaultProfile()(ctx, c, ctr, s); err != nil {
			return err
		}
		if s.Linux == nil || s.Linux.Seccomp == nil {
			return nil
		}
		if arch, ok := nativeArch[goruntime.GOARCH]; ok {
			s.Linux.Seccomp.Architectures = []specs.Arch{arch}
		}
		s.Linux.Seccomp.Syscalls = withoutSyscalls(s.Linux.Seccomp.Syscalls, refusedSyscalls)
		return nil
	}
}

// refusedSyscalls are refused (the profile's default action) whatever
// capabilities the session holds. The default profile admits
// open_by_handle_at with CAP_DAC_READ_SEARCH: a file handle names any
// inode of a filesystem, so through any bind from the host (the launch
// directory every sandbox has, a workspace) a session would open any
// host file, /etc/shadow and the daemon's keys included.
var refusedSyscalls = []string{"open_by_handle_at"}

// withoutSyscalls removes names from every rule; a rule left with no
// names is dropped.
func withoutSyscalls(rules []specs.LinuxSyscall, names []string) []specs.LinuxSyscall {
	out := rules[:0]
	for _, r := range rules {
		n := len(r.Names)
		r.Names = slices.DeleteFunc(slices.Clone(r.Names), func(s string) bool { return slices.Contains(names, s) })
		if len(r.Names) == 0 && n > 0 {
			continue
		}
		out = append(out, r)
	}
	return out
}

// nativeArch is the seccomp architecture of each GOARCH. containerd's
// default profile also admits the compat ABIs (x86 and x32 beside x86_64,
// arm beside arm64), so that 32-bit programs run. A sandbox admits only the
// native one: a system call made through a compat entry point (int 0x80,
// x32) is refused, which closes an old source of kernel bugs and makes the
// filter a third of the size, and cheaper for runc to build at every start
// (about 20 ms less per start on a 2-core host). 32-bit binaries do not
// run in a sandbox.
var nativeArch = map[string]specs.Arch{
	"amd64":   specs.ArchX86_64,
	"arm64":   specs.ArchAARCH64,
	"ppc64le": specs.ArchPPC64LE,
	"s390x":   specs.ArchS390X,
	"riscv64": specs.ArchRISCV64,
}

func normalizeCaps(in []string) []string {
	out := make([]string, 0, len(in))
	for _, c := range in {
		c = strings.ToUpper(c)
		if !strings.HasPrefix(c, "CAP_") {
			c = "CAP_" + c
		}
		out = append(out, c)
	}
	return out
}

func withNoAdditionalGIDs(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
	if s.Process != nil {
		s.Process.User.AdditionalGids = nil
	}
	return nil
}

func withInheritableCapabilities(caps []string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Process != nil && s.Process.Capabilities != nil {
			s.Process.Capabilities.Inheritable = caps
		}
		return nil
	}
}

// withMemorySwapLimit sets memory+swap equal to memory: no swap beyond the limit.
func withMemorySwapLimit(limit int64) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		if s.Linux.Resources == nil {
			s.Linux.Resources = &specs.LinuxResources{}
		}
		if s.Linux.Resources.Memory == nil {
			s.Linux.Resources.Memory = &specs.LinuxMemory{}
		}
		s.Linux.Resources.Memory.Swap = &limit
		return nil
	}
}

// withExtraMaskedPaths appends to the masked paths instead of replacing them.
func withExtraMaskedPaths(paths []string) oci.SpecOpts {
	return func(_ context.Context, _ oci.Client, _ *containers.Container, s *oci.Spec) error {
		if s.Linux == nil {
			s.Linux = &specs.Linux{}
		}
		have := map[string]bool{}
		for _, p := range s.Linux.MaskedPaths {
			have[p] = true
		}
		for _, p := range paths {
			if !have[p] {
				s.Linux.MaskedPaths = append(s.Linux.MaskedPaths, p)
			}
		}
		return nil
	}
}

// Hostname is a sandbox's hostname: its label as a DNS label (lower case,
// letters, digits and hyphens, at most 63), or its id when nothing of the
// label is left.
func Hostname(label, id string) string {
	h := strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			return r
		case r >= 'A' && r <= 'Z':
			return r + ('a' - 'A')
		}
		return '-'
	}, label)
	h = strings.Trim(h, "-")
	if h == "" {
		return id
	}
	if len(h) > 63 {
		h = h[:63]
	}
	return h
}
