package credentials

import (
	"encoding/json"
	"testing"
	"time"
)

// An event's audit record carries the credential's identity and, when
// set, what was refused and by whom; empty details are left out.
func TestEventAuditEvent(t *testing.T) {
	at := time.Date(2026, 12, 2, 8, 0, 0, 0, time.UTC)
	ev := Event{Kind: EventRejected, Time: at, Session: "s1", Name: "jobs", Issuer: "airlock", ID: "j1", Audience: "jobs.test",
		Scopes: []string{"jobs:read"}, Action: "jobs:delete", Reason: "scope", Client: "10.213.0.2:40000"}.AuditEvent()
	b, err := json.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"time":"2026-12-02T08:00:00Z","session":"s1","layer":"credentials","action":"rejected","subject":"jobs","reason":"scope",` +
		`"fields":{"action":"jobs:delete","audience":"jobs.test","client":"10.213.0.2:40000","issuer":"airlock","jti":"j1","scopes":["jobs:read"]}}`
	if string(b) != want {
		t.Errorf("audit event\n got %s\nwant %s", b, want)
	}
	minted := Event{Kind: EventMinted, Time: at, Session: "s1", Name: "jobs", Expires: at.Add(time.Hour)}.AuditEvent()
	for _, k := range []string{"action", "detail", "client", "scopes"} {
		if _, ok := minted.Fields[k]; ok {
			t.Errorf("minted event has an empty %q field", k)
		}
	}
	if minted.Fields["expires"] != at.Add(time.Hour) {
		t.Errorf("expires %v", minted.Fields["expires"])
	}
}
