package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/hostcheck"
)

// TestHostProblems: a failed check stops the daemon, except an egress
// check (netns, nftables) when no uplink is configured, which, like any
// warning, is only logged.
func TestHostProblems(t *testing.T) {
	rs := []hostcheck.Result{
		{Name: "kernel", Status: hostcheck.StatusOK, Detail: "Linux 6.18"},
		{Name: "loop", Status: hostcheck.StatusFail, Detail: "/dev/loop-control: no such file", Fix: "modprobe loop"},
		{Name: "nftables", Status: hostcheck.StatusFail, Detail: "list tables: protocol not supported", Fix: "modprobe nf_tables"},
		{Name: "fanotify", Status: hostcheck.StatusWarn, Detail: "fanotify_init: EINVAL", Fix: "CONFIG_FANOTIFY_ACCESS_PERMISSIONS"},
	}
	fatal, warnings := hostProblems(rs, false)
	if !slices.Equal(fatal, []string{"loop: /dev/loop-control: no such file (fix: modprobe loop)"}) {
		t.Errorf("without an uplink, fatal %q", fatal)
	}
	if len(warnings) != 2 || !strings.HasPrefix(warnings[0], "nftables: ") || !strings.HasPrefix(warnings[1], "fanotify: ") {
		t.Errorf("without an uplink, warnings %q", warnings)
	}
	fatal, warnings = hostProblems(rs, true)
	if len(fatal) != 2 || !strings.HasPrefix(fatal[1], "nftables: ") || len(warnings) != 1 {
		t.Errorf("with an uplink: fatal %q, warnings %q", fatal, warnings)
	}
	if msg := refusal(fatal); !strings.Contains(msg, "airlock doctor") || !strings.Contains(msg, "\n  loop: ") {
		t.Errorf("refusal %q", msg)
	}
	if fatal, warnings := hostProblems(rs[:1], true); fatal != nil || warnings != nil {
		t.Errorf("a host that passes: %q %q", fatal, warnings)
	}
}
