package main

import (
	"fmt"
	"strings"

	"github.com/airlock-sandbox/airlock/hostcheck"
)

// egressChecks are the host checks only a daemon with an uplink needs:
// without one, no session has a network of its own.
var egressChecks = map[string]bool{"netns": true, "nftables": true}

// hostProblems sorts the results of hostcheck.Run for a daemon starting
// with (egress) or without an uplink: fatal are the failures that keep
// sessions from working; warnings are the rest of what is not ok (a
// failure of an egress check without an uplink included), each a line
// with its fix.
func hostProblems(rs []hostcheck.Result, egress bool) (fatal, warnings []string) {
	for _, r := range rs {
		if r.Status == hostcheck.StatusOK {
			continue
		}
		line := fmt.Sprintf("%s: %s", r.Name, r.Detail)
		if r.Fix != "" {
			line += " (fix: " + r.Fix + ")"
		}
		if r.Status == hostcheck.StatusFail && (egress || !egressChecks[r.Name]) {
			fatal = append(fatal, line)
		} else {
			warnings = append(warnings, line)
		}
	}
	return fatal, warnings
}

// refusal is airlockd's message for a host that fails its checks.
func refusal(fatal []string) string {
	return "airlockd: this host lacks what airlock needs (`airlock doctor` shows every check):\n  " + strings.Join(fatal, "\n  ")
}
