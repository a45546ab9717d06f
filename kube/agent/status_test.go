package agent

import (
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"

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
