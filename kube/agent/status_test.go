package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// TestApplyAuditInterval: audit counts that changed alone are held back
// until due (and asked for again then), written at once when due or when
// the status changes anyway, and never alone with an interval of 0
// (neverDue), which asks for no later write.
func TestApplyAuditInterval(t *testing.T) {
	old := v1alpha1.SessionStatus{State: v1alpha1.SessionRunning, Audit: &v1alpha1.AuditSummary{Events: 3}}
	grown := summaries{audit: &v1alpha1.AuditSummary{Events: 9}, diffKnown: true}
	for _, tc := range []struct {
		name      string
		due       time.Duration
		state     v1alpha1.SessionState // the status to write's state
		wantLater time.Duration
		wantSet   bool
	}{
		{"due later, nothing else changed", 4 * time.Second, v1alpha1.SessionRunning, 4 * time.Second, false},
		{"due now", 0, v1alpha1.SessionRunning, 0, true},
		{"overdue", -time.Second, v1alpha1.SessionRunning, 0, true},
		{"due later, state changed", 4 * time.Second, v1alpha1.SessionExited, 0, true},
		{"never alone, nothing else changed", neverDue, v1alpha1.SessionRunning, 0, false},
		{"never alone, state changed", neverDue, v1alpha1.SessionExited, 0, true},
	} {
		st := *old.DeepCopy()
		st.State = tc.state
		later, set := grown.apply(&st, &old, tc.due)
		if later != tc.wantLater || set != tc.wantSet {
			t.Errorf("%s: apply = (%s, %v), want (%s, %v)", tc.name, later, set, tc.wantLater, tc.wantSet)
		}
		if want := map[bool]int64{true: 9, false: 3}[tc.wantSet]; st.Audit == nil || st.Audit.Events != want {
			t.Errorf("%s: status's audit events %v, want %d", tc.name, st.Audit, want)
		}
	}
	a := &nodeAgent{auditWritten: map[types.UID]time.Time{"u": time.Now()}}
	if d := a.auditDue("u"); d != neverDue {
		t.Errorf("interval 0: auditDue = %s, want neverDue", d)
	}
	a.auditEvery = time.Minute
	if d := a.auditDue("u"); d <= 50*time.Second || d > time.Minute {
		t.Errorf("interval 1m, written just now: auditDue = %s, want just under 1m", d)
	}
	if d := a.auditDue("other"); d != 0 {
		t.Errorf("interval 1m, never written: auditDue = %s, want 0", d)
	}
}

// TestShown checks what status shows of a held request's fields, which
// are the sandbox's text: format and other unprintable characters
// escaped, the length bounded.
func TestShown(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"/x/deploy", "/x/deploy"},
		{"/x/naïve/日本", "/x/naïve/日本"},
		{"/x/review-config\u202edorp-yolped", `/x/review-config\u202Edorp-yolped`},
		{"/x/a\u200bb\u2066c\u00add", `/x/a\u200Bb\u2066c\u00ADd`},
		{"/x/\x1b[2J\x7f", `/x/\u001B[2J\u007F`},
	} {
		if got := shown(tc.in, 512); got != tc.want {
			t.Errorf("shown(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	long := shown(strings.Repeat("\u202e", 1000), 64)
	if len(long) > 64 || !strings.HasPrefix(long, `\u202E\u202E`) || !strings.HasSuffix(long, "…") {
		t.Errorf("shown of 1,000 overrides, cut to 64 bytes: %q (%d bytes)", long, len(long))
	}
}

// TestPendingApprovalShown: a held request's query, content type, refs
// and body reach the status bounded and escaped: the body as its digest,
// size and an escaped start, no byte of it as it is.
func TestPendingApprovalShown(t *testing.T) {
	body := append([]byte(`{"a":"\`), 0x1b, '[', '2', 'J', '\n')
	body = append(body, strings.Repeat("x", 1000)...)
	p := pendingApproval(api.Approval{
		ID: "0123456789abcdef", Method: "POST", Host: "api.test", Path: "/deploy",
		Query: "env=prod&" + strings.Repeat("q", 2000), ContentType: "application/json",
		Refs: []string{"refs/heads/main"}, Body: body, BodyTruncated: true, Rule: "ask POST api.test/deploy",
	})
	sum := sha256.Sum256(body)
	if p.BodySHA256 != hex.EncodeToString(sum[:]) || p.BodyBytes != int32(len(body)) || !p.BodyTruncated {
		t.Errorf("body shown as %d bytes, sha256 %s, truncated %v; want %d, %x, true", p.BodyBytes, p.BodySHA256, p.BodyTruncated, len(body), sum)
	}
	if want := `{"a":"\x5c\x1b[2J\x0a` + strings.Repeat("x", maxStatusPreview-12); p.BodyPreview != want {
		t.Errorf("preview %q, want %q", p.BodyPreview, want)
	}
	if strings.ContainsFunc(p.BodyPreview, func(r rune) bool { return r < 0x20 || r >= 0x7f }) {
		t.Errorf("preview %q carries a control byte", p.BodyPreview)
	}
	if len(p.Query) > maxStatusQuery || !strings.HasPrefix(p.Query, "env=prod&") || !p.QueryTruncated {
		t.Errorf("query of %d bytes shown as %d (truncated %v)", 2009, len(p.Query), p.QueryTruncated)
	}
	if p.ContentType != "application/json" || len(p.Refs) != 1 || p.Refs[0] != "refs/heads/main" {
		t.Errorf("content type %q, refs %q", p.ContentType, p.Refs)
	}
	if empty := pendingApproval(api.Approval{ID: "x", Method: "GET"}); empty.BodySHA256 != "" || empty.BodyPreview != "" || empty.BodyBytes != 0 {
		t.Errorf("a request without a body shown with one: %+v", empty)
	}
}

// TestWithDecision: a SessionApproval is recorded once, and the oldest
// decisions go past maxDecisions.
func TestWithDecision(t *testing.T) {
	var list []v1alpha1.AppliedDecision
	for i := range maxDecisions + 3 {
		var changed bool
		list, changed = withDecision(list, v1alpha1.AppliedDecision{Approval: fmt.Sprint("a", i), UID: types.UID(fmt.Sprint("u", i))})
		if !changed {
			t.Fatalf("decision %d not recorded", i)
		}
	}
	if len(list) != maxDecisions || list[0].UID != "u3" || list[maxDecisions-1].UID != types.UID(fmt.Sprint("u", maxDecisions+2)) {
		t.Fatalf("kept %d: first %s, last %s", len(list), list[0].UID, list[len(list)-1].UID)
	}
	again, changed := withDecision(list, v1alpha1.AppliedDecision{Approval: "again", UID: "u10"})
	if changed || len(again) != maxDecisions {
		t.Errorf("a SessionApproval recorded twice: changed %v, %d kept", changed, len(again))
	}
}
