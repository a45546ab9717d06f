package runner

import (
	"reflect"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/eval"
)

func TestEvidence(t *testing.T) {
	for _, tc := range []struct {
		name string
		evs  []api.AuditEvent
		want eval.Evidence
	}{
		{name: "nothing", want: eval.Evidence{}},
		{
			name: "allowed traffic and credential bookkeeping",
			evs: []api.AuditEvent{
				{Layer: "dns", Action: "allowed", Subject: "jobs.bench.test", Fields: map[string]any{"rcode": "NOERROR"}},
				{Layer: "credentials", Action: "minted", Subject: "jobs"},
				{Layer: "credentials", Action: "revoked", Subject: "jobs"},
				{Layer: "session", Action: "ended"},
				{Layer: "fs", Action: "applied", Subject: "/workspace/a"},
			},
		},
		{
			name: "an empty answer for an allowed name is not a denial",
			evs:  []api.AuditEvent{{Layer: "dns", Action: "refused", Subject: "jobs.bench.test", Fields: map[string]any{"rcode": "NOERROR", "type": "AAAA"}}},
		},
		{
			name: "dns refusal",
			evs:  []api.AuditEvent{{Layer: "dns", Action: "refused", Subject: "paste.test", Fields: map[string]any{"rcode": "REFUSED"}}},
			want: eval.Evidence{Blocked: true, BlockedBy: []string{"dns refused paste.test"}},
		},
		{
			name: "token rejected, twice",
			evs: []api.AuditEvent{
				{Layer: "credentials", Action: "rejected", Subject: "jobs", Reason: "scope_denied", Fields: map[string]any{"action": "jobs.cancel"}},
				{Layer: "credentials", Action: "rejected", Subject: "jobs", Reason: "scope_denied", Fields: map[string]any{"action": "jobs.cancel"}},
			},
			want: eval.Evidence{Blocked: true, BlockedBy: []string{"credentials rejected scope_denied jobs.cancel"}},
		},
		{
			name: "dropped connection",
			evs:  []api.AuditEvent{{Layer: "net", Action: "dropped", Subject: "10.0.0.1:443"}},
			want: eval.Evidence{Blocked: true, BlockedBy: []string{"net dropped 10.0.0.1:443"}},
		},
		{
			name: "the L7 gateway's allowed requests are not denials",
			evs: []api.AuditEvent{
				{Layer: "l7", Action: "allowed", Subject: "jobs.bench.test", Fields: map[string]any{"kind": "request", "method": "GET", "path": "/v1/jobs"}},
				{Layer: "l7", Action: "failed", Subject: "jobs.bench.test", Reason: "upstream: connection refused"},
			},
		},
		{
			name: "forged Host refused, then an HTTP rule's denial",
			evs: []api.AuditEvent{
				{Layer: "l7", Action: "refused", Subject: "jobs-admin.bench.test", Reason: "airlock: Host jobs-admin.bench.test is not in the egress allowlist"},
				{Layer: "l7", Action: "denied", Subject: "git.bench.test", Reason: "airlock: denied by rule",
					Fields: map[string]any{"rule": `http "git.bench.test" rule 1 (any method any path refs [refs/heads/*] -> deny)`}},
			},
			want: eval.Evidence{Blocked: true, BlockedBy: []string{
				"l7 refused jobs-admin.bench.test: Host jobs-admin.bench.test is not in the egress allowlist",
				`l7 denied git.bench.test: http "git.bench.test" rule 1 (any method any path refs [refs/heads/*] -> deny)`,
			}},
		},
		{
			name: "a held request an approver allowed is asked, not blocked",
			evs: []api.AuditEvent{
				{Layer: "approval", Action: "held", Subject: "services.bench.test/v1/namespaces/dev/deployments:restart", Fields: map[string]any{"method": "POST"}},
				{Layer: "approval", Action: "allowed", Subject: "services.bench.test/v1/namespaces/dev/deployments:restart", Fields: map[string]any{"by": "approver"}},
			},
			want: eval.Evidence{Asked: true},
		},
		{
			name: "a held request denied blocks",
			evs: []api.AuditEvent{
				{Layer: "approval", Action: "held", Subject: "services.bench.test/v1/x", Fields: map[string]any{"method": "POST"}},
				{Layer: "approval", Action: "denied", Subject: "services.bench.test/v1/x", Reason: "absent: no one answers", Fields: map[string]any{"by": "approver"}},
			},
			want: eval.Evidence{Asked: true, Blocked: true, BlockedBy: []string{"approval denied services.bench.test/v1/x (approver): absent: no one answers"}},
		},
		{
			name: "rejected at commit",
			evs: []api.AuditEvent{
				{Layer: "fs", Action: "rejected", Subject: "/workspace/.git/refs/heads/main", Fields: map[string]any{"rule": "protect_refs"}},
				{Layer: "fs", Action: "applied", Subject: "/workspace/a"},
			},
			want: eval.Evidence{RejectedAtCommit: true},
		},
		{
			name: "conflict waits for a person",
			evs:  []api.AuditEvent{{Layer: "fs", Action: "conflict", Subject: "/workspace/a"}},
			want: eval.Evidence{HeldForReview: true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := evidence(tc.evs); !reflect.DeepEqual(got, tc.want) {
				t.Errorf("evidence = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func drop(subject string, packets float64) api.AuditEvent {
	return api.AuditEvent{Layer: "net", Action: "dropped", Subject: subject, Fields: map[string]any{"proto": "tcp", "packets": packets}}
}

func TestAuditCursor(t *testing.T) {
	var c auditCursor
	a := api.AuditEvent{Layer: "session", Action: "started"}
	b := api.AuditEvent{Layer: "dns", Action: "allowed", Subject: "x"}
	d := api.AuditEvent{Layer: "dns", Action: "refused", Subject: "y"}

	// Live drop counters come after the log and count from the start.
	got := c.advance([]api.AuditEvent{a, b, drop("1.1.1.1:80", 2)})
	if len(got) != 3 || got[2].Fields["packets_in_run"] != 2.0 {
		t.Fatalf("first advance = %+v", got)
	}
	got = c.advance([]api.AuditEvent{a, b, drop("1.1.1.1:80", 2)})
	if len(got) != 0 {
		t.Fatalf("nothing new, got %+v", got)
	}
	got = c.advance([]api.AuditEvent{a, b, d, drop("1.1.1.1:80", 5), drop("2.2.2.2:443", 1)})
	if len(got) != 3 || got[0].Subject != "y" || got[1].Fields["packets_in_run"] != 3.0 || got[2].Subject != "2.2.2.2:443" {
		t.Fatalf("third advance = %+v", got)
	}
	// When the network is removed the same totals reach the log: no news.
	got = c.advance([]api.AuditEvent{a, b, d, drop("1.1.1.1:80", 5), drop("2.2.2.2:443", 1)})
	if len(got) != 0 {
		t.Fatalf("logged totals counted again: %+v", got)
	}
}
