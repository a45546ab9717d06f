package agent_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// TestAttackApprovalBlindThroughKubernetes: the sandbox holds two
// requests on the same path, POST /x/deploy?env=dev with {"image":"ok"}
// and POST /x/deploy?env=prod with {"image":"evil"}. A held request in a
// Session's status.pendingApprovals was its method, host, path and rule,
// so whoever decided through a SessionApproval saw two entries that
// differed in nothing but their ids and times, and could not tell which
// one they allowed. The status now shows each one's query, content type
// and body (its digest, size and first bytes, escaped).
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
	if a.Query == "env=prod" {
		a, b = b, a
	}
	for _, p := range []struct {
		got         v1alpha1.PendingApproval
		query, body string
	}{{a, "env=dev", `{"image":"ok"}`}, {b, "env=prod", `{"image":"evil"}`}} {
		sum := sha256.Sum256([]byte(p.body))
		if p.got.Query != p.query || p.got.BodyPreview != p.body || p.got.BodySHA256 != hex.EncodeToString(sum[:]) ||
			p.got.BodyBytes != int32(len(p.body)) || p.got.BodyTruncated || !strings.HasPrefix(p.got.ContentType, "application/json") {
			t.Errorf("held request shown as %+v, want query %q, body %q (sha256 %x, %d bytes), content type application/json", p.got, p.query, p.body, sum, len(p.body))
		}
	}
	// What tells them apart but when they came.
	a.ID, b.ID = "", ""
	a.Created, a.Deadline = b.Created, b.Deadline
	if reflect.DeepEqual(a, b) {
		t.Errorf("the held requests ?env=dev {\"image\":\"ok\"} and ?env=prod {\"image\":\"evil\"} show the same in status: %+v: whoever decides through a SessionApproval cannot tell them apart", a)
	}
}
