//go:build attackreview

package agent_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

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

// TestAttackSandboxChurnsStatusWrites: a change of a Session's held
// requests is written to its status at once, with no bound on how often.
// The sandbox holds 56 requests with 512-byte paths (the status then
// weighs some 50 KB) and, with its 8 free holds, 8 loops ask again and
// again, each request given up after 0.5 s: every hold and cancellation
// is a status write of the whole Session. Measured over 10 s through a
// watch: the writes and the bytes the API server stores (etcd keeps each
// revision until compaction, by default 5 min). A sandbox must not set
// the rate of a shared control plane's writes: at most one write a
// second is asked here.
func TestAttackSandboxChurnsStatusWrites(t *testing.T) {
	k, _, ask := askNode(t)
	long := strings.Repeat("p", 500)
	script := fmt.Sprintf(`i=0; while [ $i -lt 56 ]; do curl -s -o /dev/null --max-time 170 -X POST https://api.sx.test/x/%s/$i & i=$((i+1)); done; sleep 10; `, long) +
		`for j in 1 2 3 4 5 6 7 8; do (while true; do curl -s -o /dev/null --max-time 0.5 -X POST https://api.sx.test/x/churn; done) & done; wait`
	k.create("churn", []string{"sh", "-c", script}, ask)
	eventually(t, 90*time.Second, "56 held requests in status", func() (bool, string) {
		s := k.get("churn")
		return len(s.Status.PendingApprovals) >= 56, fmt.Sprintf("%d held", len(s.Status.PendingApprovals))
	})
	time.Sleep(3 * time.Second)
	first := k.get("churn")
	wc, ok := k.c.(client.WithWatch)
	if !ok {
		t.Fatal("the cluster's client does not watch")
	}
	wt, err := wc.Watch(t.Context(), &v1alpha1.SessionList{}, client.InNamespace("default"),
		client.MatchingFields{"metadata.name": "churn"}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: first.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	defer wt.Stop()
	const window = 10 * time.Second
	writes, bytes := 0, 0
	timeout := time.After(window)
watching:
	for {
		select {
		case ev := <-wt.ResultChan():
			if ev.Type == watch.Modified {
				writes++
				b, _ := json.Marshal(ev.Object)
				bytes += len(b)
			}
		case <-timeout:
			break watching
		}
	}
	t.Logf("churning sandbox: %d status writes, %d KB stored in %s", writes, bytes>>10, window)
	if writes > int(window/time.Second) {
		t.Errorf("a sandbox churning held requests made %d writes of its Session (%d KB) in %s: more than one a second (%d MB of etcd history in 5 min at that rate)",
			writes, bytes>>10, window, bytes*30>>20)
	}
}
