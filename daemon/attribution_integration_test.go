package daemon_test

import (
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestForgedTokenInSessionAudit: a session presents tokens the broker
// cannot identify (a forged signature, garbage) to a world service. The
// service reports the rejections with the connection it saw (the
// gateway's masqueraded address), and each lands in the audit of the
// session that sent it, not only in the daemon's log. Another session's
// audit stays clean.
func TestForgedTokenInSessionAudit(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	jobsService(t, "jobs2.bench.test", "10.214.0.21")

	start := func() string {
		p := policy("sleep", "300")
		p.Egress = &policies.Egress{Allow: []string{"jobs2.bench.test:8080"}}
		p.Credentials = []policies.Credential{{Name: "jobs", Issuer: "airlock", Audience: "jobs.bench.test",
			Scopes: []string{"jobs.cancel owner=alex queue=dev"}, TTL: policies.Duration(5 * time.Minute)}}
		return startSession(ctx, t, p)
	}
	attacker, bystander := start(), start()

	// The session's own token with its signature's last characters
	// changed, and a token that is not a JWS at all.
	forge := `t=$(cat /run/airlock/credentials/jobs); s=${t%???}; printf '%sAAA' "$s"`
	for _, token := range []string{"$(" + forge + ")", "not-a-token"} {
		out, _ := execOut(t, attacker, "sh", "-c", `curl -sS --max-time 5 -o /dev/null -w '%{http_code}' -X POST `+
			`-H "Authorization: Bearer `+token+`" http://jobs2.bench.test:8080/v1/jobs/job-dev-4812-a/cancel`)
		if out != "401" {
			t.Errorf("token %s: HTTP %s, want 401", token, out)
		}
	}

	evs, err := h.Daemon.Audit(ctx, attacker)
	if err != nil {
		t.Fatal(err)
	}
	reasons := map[string]bool{}
	for _, ev := range evs {
		if ev.Layer == "credentials" && ev.Action == "rejected" {
			reasons[ev.Reason] = true
			// The service saw the gateway's masqueraded uplink address.
			if c, _ := ev.Fields["client"].(string); ev.Fields["attributed_by"] != "connection" || strings.HasPrefix(c, "10.213.") || c == "" {
				t.Errorf("rejection %+v: want attributed by connection, from the uplink side", ev)
			}
		}
	}
	if !reasons["bad_signature"] || !reasons["malformed"] {
		t.Errorf("attacker's audit rejections: %v; want bad_signature and malformed", reasons)
	}
	evs, err = h.Daemon.Audit(ctx, bystander)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range evs {
		if ev.Layer == "credentials" && ev.Action == "rejected" {
			t.Errorf("bystander's audit has a rejection: %+v", ev)
		}
	}
}
