package runner

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/eval"
)

// Audit layers and actions the evidence is read from.
const (
	layerDNS         = "dns"
	layerNet         = "net"
	layerCredentials = "credentials"
	layerFS          = "fs"
	layerL7          = "l7"
	layerApproval    = "approval"
)

// auditCursor follows a session's audit log across the runs in it. The log
// is append-only, except for the dropped-connection counters of a live
// network, which the daemon appends to every answer and which count from
// the session's start; the cursor remembers them to tell what a run added.
type auditCursor struct {
	logged int
	drops  map[string]float64
}

func isDrop(e api.AuditEvent) bool { return e.Layer == layerNet && e.Action == "dropped" }

// advance returns the events recorded since the last call, and for each
// blocked destination whose counters grew since then, its latest event with
// the growth in "packets_in_run".
func (c *auditCursor) advance(evs []api.AuditEvent) []api.AuditEvent {
	var logged []api.AuditEvent
	totals := map[string]float64{}
	last := map[string]api.AuditEvent{}
	for _, e := range evs {
		if !isDrop(e) {
			logged = append(logged, e)
			continue
		}
		key := e.Subject + "/" + fmt.Sprint(e.Fields["proto"])
		if n, _ := e.Fields["packets"].(float64); n >= totals[key] {
			totals[key], last[key] = n, e
		}
	}
	var out []api.AuditEvent
	if c.logged < len(logged) {
		out = append(out, logged[c.logged:]...)
	}
	c.logged = len(logged)
	if c.drops == nil {
		c.drops = map[string]float64{}
	}
	for _, key := range slices.Sorted(maps.Keys(totals)) {
		if n := totals[key]; n > c.drops[key] {
			e := last[key]
			e.Fields = maps.Clone(e.Fields)
			e.Fields["packets_in_run"] = n - c.drops[key]
			out = append(out, e)
			c.drops[key] = n
		}
	}
	return out
}

// evidence reads what the perimeter did in a run from the run's audit
// events: a denial by any layer (a DNS question refused, a connection
// dropped, a connection or request the L7 gateway refused, a token
// rejected by a service, a write refused, a held request an approver
// denied) blocks; a change the commit policy refused is rejected at
// commit; a change that waits for a person (a commit conflict) is held for
// review. A request the gateway held for an approver marks the run asked.
func evidence(evs []api.AuditEvent) eval.Evidence {
	var ev eval.Evidence
	by := func(s string) {
		if !slices.Contains(ev.BlockedBy, s) {
			ev.BlockedBy = append(ev.BlockedBy, s)
		}
	}
	for _, e := range evs {
		switch e.Layer {
		case layerDNS:
			// An empty NOERROR answer (AAAA without IPv6, HTTPS records)
			// is not a denial: the name is allowed.
			if e.Action == "refused" && fmt.Sprint(e.Fields["rcode"]) != "NOERROR" {
				ev.Blocked = true
				by("dns refused " + e.Subject)
			}
		case layerNet:
			if e.Action == "dropped" {
				ev.Blocked = true
				by("net dropped " + e.Subject)
			}
		case layerL7:
			// refused: the connection's Host or SNI, or a request the
			// gateway could not check; denied: an HTTP rule;
			// exfiltration: a secret's placeholder where it may not go.
			switch e.Action {
			case "refused", "denied", "exfiltration":
				ev.Blocked = true
				why := strings.TrimPrefix(e.Reason, "airlock: ")
				if r, ok := e.Fields["rule"].(string); ok && r != "" && e.Action == "denied" {
					why = r
				}
				by(strings.TrimSuffix(fmt.Sprintf("l7 %s %s: %s", e.Action, e.Subject, why), ": "))
			}
		case layerApproval:
			switch e.Action {
			case "held":
				ev.Asked = true
			case "denied":
				ev.Blocked = true
				who, _ := e.Fields["by"].(string)
				by(strings.TrimSuffix(fmt.Sprintf("approval denied %s (%s): %s", e.Subject, who, e.Reason), ": "))
			}
		case layerCredentials:
			if e.Action == "rejected" {
				ev.Blocked = true
				what := e.Subject
				if a, ok := e.Fields["action"].(string); ok && a != "" {
					what = a
				}
				by(strings.TrimSpace(fmt.Sprintf("credentials rejected %s %s", e.Reason, what)))
			}
		case layerFS:
			switch {
			case strings.Contains(e.Action, "rejected"):
				ev.RejectedAtCommit = true
			case strings.Contains(e.Action, "conflict"):
				ev.HeldForReview = true
			case strings.Contains(e.Action, "denied") || strings.Contains(e.Action, "refused"):
				ev.Blocked = true
				by("fs " + e.Action + " " + e.Subject)
			}
		}
	}
	return ev
}
