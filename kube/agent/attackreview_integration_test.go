//go:build attackreview

package agent_test

import (
	"fmt"
	"testing"
	"time"
	"unicode"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
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
	eventually(t, 90*time.Second, "two held requests in status", func() (bool, string) {
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

// TestAttackHeldPathBidi: a held request's path is the sandbox's text,
// percent-decoded: C0 controls are refused by the gateway, but Unicode
// format characters are not. The sandbox holds POST
// /x/%E2%80%AE<reversed text>, a right-to-left override (U+202E), so that
// the path in status.pendingApprovals, shown by kubectl in a terminal,
// reads as something else than what it is. The status must show such a
// character escaped.
func TestAttackHeldPathBidi(t *testing.T) {
	k, _, ask := askNode(t)
	k.create("bidi", []string{"sh", "-c", `curl -s -o /dev/null --max-time 170 -X POST 'https://api.sx.test/x/review-config%E2%80%AEdorp-yolped'; sleep 300`}, ask)
	var s *v1alpha1.Session
	eventually(t, 90*time.Second, "the held request in status", func() (bool, string) {
		s = k.get("bidi")
		return len(s.Status.PendingApprovals) == 1, fmt.Sprintf("%+v", s.Status.PendingApprovals)
	})
	p := s.Status.PendingApprovals[0].Path
	t.Logf("held path in status: %q", p)
	for _, r := range p {
		if unicode.Is(unicode.Cf, r) || !unicode.IsPrint(r) {
			t.Errorf("held request's path in status %q carries %U: a terminal shows it reordered", p, r)
			break
		}
	}
}
