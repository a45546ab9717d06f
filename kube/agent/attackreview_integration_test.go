//go:build attackreview

package agent_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// TestAttackApprovalBlindThroughKubernetes: a held request in a
// Session's status.pendingApprovals is its method, host, path and rule;
// never its query, headers or body. The sandbox holds two requests on
// the same path, POST /x/deploy?env=dev with {"image":"ok"} and POST
// /x/deploy?env=prod with {"image":"evil"}: whoever decides through a
// SessionApproval sees two entries that differ in nothing but their ids
// and times, and cannot tell which one they allow (on the node, airlock
// approvals shows both queries and bodies).
//
// Run with -tags attackreview: it fails on the current agent.
func TestAttackApprovalBlindThroughKubernetes(t *testing.T) {
	k, _, ask := askNode(t)
	curl := func(query, body string) string {
		return fmt.Sprintf(`curl -s -o /dev/null --max-time 170 -X POST -H 'Content-Type: application/json' -d '%s' 'https://api.sx.test/x/deploy?%s' & `, body, query)
	}
	k.create("blind", []string{"sh", "-c", curl("env=dev", `{"image":"ok"}`) + "sleep 2; " + curl("env=prod", `{"image":"evil"}`) + "sleep 300"}, ask)
	var s *v1alpha1.Session
	kubetest.Eventually(t, 90*time.Second, "two held requests in status", func() (bool, string) {
		s = k.get("blind")
		return len(s.Status.PendingApprovals) == 2, fmt.Sprintf("%+v", s.Status.PendingApprovals)
	})
	a, b := s.Status.PendingApprovals[0], s.Status.PendingApprovals[1]
	// What tells them apart but when they came.
	a.ID, b.ID = "", ""
	a.Created, a.Deadline = b.Created, b.Deadline
	if a == b {
		t.Errorf("the held requests ?env=dev {\"image\":\"ok\"} and ?env=prod {\"image\":\"evil\"} show the same in status: %+v: whoever decides through a SessionApproval cannot tell them apart", a)
	}
}
