package fsscope

import (
	"fmt"
	"testing"
)

// The masks of one workspace are listed up to MaxMaskEvents; one more
// event counts the rest, and tracked paths follow with the history note.
func TestDenyReadEventsBounded(t *testing.T) {
	info := DenyReadInfo{Target: "/w", HostPath: "/srv/w", Tracked: []string{"/w/.env"}}
	for i := range MaxMaskEvents + 5 {
		info.Masked = append(info.Masked, MaskedPath{Path: fmt.Sprintf("/w/secret%d", i), Rule: "secret*"})
	}
	evs := DenyReadEvents("s1", []DenyReadInfo{info})
	if len(evs) != MaxMaskEvents+2 {
		t.Fatalf("%d events, want %d masked, one count and one tracked", len(evs), MaxMaskEvents)
	}
	if ev := evs[0]; ev.Session != "s1" || ev.Layer != "fs" || ev.Action != "masked" || ev.Subject != "/w/secret0" || ev.Fields["rule"] != "secret*" {
		t.Errorf("first event %+v", ev)
	}
	if ev := evs[MaxMaskEvents]; ev.Subject != "/w" || ev.Reason != "deny_read: 5 more paths masked" {
		t.Errorf("count event %+v", ev)
	}
	if ev := evs[MaxMaskEvents+1]; ev.Action != "masked_tracked" || ev.Subject != "/w/.env" || ev.Reason != HistoryNote {
		t.Errorf("tracked event %+v", ev)
	}
}

func TestEventAuditEvent(t *testing.T) {
	ev := Event{Type: EventRejected, Path: "/w/.git/hooks/pre-commit", HostPath: "/srv/w", Kind: "added", Rule: "git_meta", Reason: "code in git metadata"}.AuditEvent("s1")
	if ev.Action != "rejected" || ev.Layer != "fs" || ev.Subject != "/w/.git/hooks/pre-commit" || ev.Fields["rule"] != "git_meta" || ev.Fields["kind"] != "added" {
		t.Errorf("%+v", ev)
	}
	r := MaskRead{Owner: "s1", Path: "/w/.env", Rule: ".env", Pid: 7}.AuditEvent()
	if r.Action != "read_denied" || r.Session != "s1" || r.Fields["pid"] != int32(7) {
		t.Errorf("%+v", r)
	}
	if _, ok := r.Fields["dropped_before"]; ok {
		t.Error("dropped_before set with nothing dropped")
	}
}
