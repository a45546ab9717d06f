package fsscope

import (
	"fmt"

	"github.com/airlock-sandbox/airlock/api"
)

// The filesystem layer's audit records: each of its events becomes one
// api.AuditEvent of layer "fs", the way the egress layer writes its own
// (egress.DNSAuditEvent), so that a session's audit reads the same
// whatever daemon wrote it.

// MaxMaskEvents bounds the "masked" events per workspace or mount; one more
// event counts the rest.
const MaxMaskEvents = 100

var eventActions = map[string]string{
	EventRejected: "rejected", EventConflict: "conflict", EventApplied: "applied", EventModeNormalised: "mode_normalised",
}

// AuditEvent is the audit record of a commit decision or a normalised mode
// in session's workspace.
func (ev Event) AuditEvent(session string) api.AuditEvent {
	action := eventActions[ev.Type]
	if action == "" {
		action = ev.Type
	}
	f := map[string]any{"host_path": ev.HostPath}
	if ev.Kind != "" {
		f["kind"] = string(ev.Kind)
	}
	if ev.Rule != "" {
		f["rule"] = ev.Rule
	}
	return api.AuditEvent{Time: ev.Time, Session: session, Layer: "fs", Action: action, Subject: ev.Path, Reason: ev.Reason, Fields: f}
}

// AuditEvent is the audit record of a refused open of a deny_read mask.
func (r MaskRead) AuditEvent() api.AuditEvent {
	f := map[string]any{"rule": r.Rule, "pid": r.Pid}
	if r.Dropped > 0 {
		f["dropped_before"] = r.Dropped
	}
	return api.AuditEvent{Time: r.Time, Session: r.Owner, Layer: "fs", Action: "read_denied", Subject: r.Path, Reason: "deny_read", Fields: f}
}

// DenyReadEvents are the audit records, written when session starts, of
// what deny_read masks in each workspace and mount (the rule behind each
// mask, at most MaxMaskEvents each), and of every masked path git tracks,
// whose content deny_read does not hide in .git/objects. A read of a
// masked path inside the sandbox fails in the kernel and leaves no event
// of its own: these are the record of what was hidden.
func DenyReadEvents(session string, infos []DenyReadInfo) []api.AuditEvent {
	var out []api.AuditEvent
	for _, info := range infos {
		for i, m := range info.Masked {
			if i == MaxMaskEvents {
				out = append(out, api.AuditEvent{Session: session, Layer: "fs", Action: "masked", Subject: info.Target,
					Reason: fmt.Sprintf("deny_read: %d more paths masked", len(info.Masked)-i), Fields: map[string]any{"host_path": info.HostPath}})
				break
			}
			out = append(out, api.AuditEvent{Session: session, Layer: "fs", Action: "masked", Subject: m.Path,
				Reason: "deny_read", Fields: map[string]any{"rule": m.Rule, "host_path": info.HostPath}})
		}
		for _, p := range info.Tracked {
			out = append(out, api.AuditEvent{Session: session, Layer: "fs", Action: "masked_tracked", Subject: p,
				Reason: HistoryNote, Fields: map[string]any{"host_path": info.HostPath}})
		}
	}
	return out
}
