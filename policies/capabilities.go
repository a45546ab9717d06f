package policies

import "strings"

// knownCapabilities are the Linux capabilities, in kernel order
// (include/uapi/linux/capability.h, CAP_CHOWN = 0 to CAP_CHECKPOINT_RESTORE = 40).
var knownCapabilities = []string{
	"CAP_CHOWN",
	"CAP_DAC_OVERRIDE",
	"CAP_DAC_READ_SEARCH",
	"CAP_FOWNER",
	"CAP_FSETID",
	"CAP_KILL",
	"CAP_SETGID",
	"CAP_SETUID",
	"CAP_SETPCAP",
	"CAP_LINUX_IMMUTABLE",
	"CAP_NET_BIND_SERVICE",
	"CAP_NET_BROADCAST",
	"CAP_NET_ADMIN",
	"CAP_NET_RAW",
	"CAP_IPC_LOCK",
	"CAP_IPC_OWNER",
	"CAP_SYS_MODULE",
	"CAP_SYS_RAWIO",
	"CAP_SYS_CHROOT",
	"CAP_SYS_PTRACE",
	"CAP_SYS_PACCT",
	"CAP_SYS_ADMIN",
	"CAP_SYS_BOOT",
	"CAP_SYS_NICE",
	"CAP_SYS_RESOURCE",
	"CAP_SYS_TIME",
	"CAP_SYS_TTY_CONFIG",
	"CAP_MKNOD",
	"CAP_LEASE",
	"CAP_AUDIT_WRITE",
	"CAP_AUDIT_CONTROL",
	"CAP_SETFCAP",
	"CAP_MAC_OVERRIDE",
	"CAP_MAC_ADMIN",
	"CAP_SYSLOG",
	"CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND",
	"CAP_AUDIT_READ",
	"CAP_PERFMON",
	"CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

// escapeCapabilities are capabilities that commonly let a process leave or
// weaken a container sandbox. Granting one is allowed but draws a warning.
var escapeCapabilities = map[string]bool{
	"CAP_BPF":             true,
	"CAP_DAC_READ_SEARCH": true,
	"CAP_MAC_ADMIN":       true,
	"CAP_MAC_OVERRIDE":    true,
	"CAP_NET_ADMIN":       true,
	"CAP_PERFMON":         true,
	"CAP_SYSLOG":          true,
	"CAP_SYS_ADMIN":       true,
	"CAP_SYS_BOOT":        true,
	"CAP_SYS_MODULE":      true,
	"CAP_SYS_PTRACE":      true,
	"CAP_SYS_RAWIO":       true,
}

// KnownCapabilities returns the Linux capability names a manifest may grant,
// in kernel order.
func KnownCapabilities() []string {
	return append([]string(nil), knownCapabilities...)
}

// NormalizeCapability returns the canonical form of a capability name:
// upper case with the CAP_ prefix ("net_bind_service" becomes
// "CAP_NET_BIND_SERVICE"). It does not check that the capability exists.
func NormalizeCapability(name string) string {
	s := strings.ToUpper(strings.TrimSpace(name))
	if s != "" && !strings.HasPrefix(s, "CAP_") {
		s = "CAP_" + s
	}
	return s
}

func isKnownCapability(name string) bool {
	for _, c := range knownCapabilities {
		if c == name {
			return true
		}
	}
	return false
}
