package agent_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/kube/kubetest/agentproc"
	"github.com/airlock-sandbox/airlock/policies"
)

// askNode starts a control plane and node agent node-x whose uplink is
// a test world serving api.sx.test over HTTPS, and returns the cluster
// and the node; ask is the Session option of an L7 `ask` rule on
// api.sx.test paths under /x/ (any method), placed on node-x.
func askNode(t *testing.T) (k *cluster, n *agentproc.Proc, ask func(*v1alpha1.Session)) {
	t.Helper()
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	uplink := startWorld(t, "x", "api.sx.test", http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) { fmt.Fprint(rw, "ok") }))
	k = startCluster(t)
	n = startNode(t, env, k.kubeconfig, "node-x", 9, append([]string{"--node-capacity", "2"}, uplink...)...)

	ask = func(s *v1alpha1.Session) {
		s.Spec.NodeName = "node-x"
		s.Spec.Policy.Egress = &policies.Egress{Allow: []string{"api.sx.test:443"}, L7: policies.L7Check,
			HTTP: []policies.HTTPHost{{Host: "api.sx.test", Rules: []policies.HTTPRule{{Path: "/x/**", Action: policies.HTTPAsk}}}}}
		s.Spec.Policy.Approval = &policies.Approval{Timeout: policies.Duration(3 * time.Minute), OnTimeout: policies.OnTimeoutDeny}
	}
	return k, n, ask
}

// TestAttackSandboxFreezesSessionStatus is the sandbox's attack on what
// the cluster sees of it. A host's `ask` rule that names no method
// matches any method, and a held request's method goes into the
// Session's status.pendingApprovals. The sandbox sends 60 requests with
// a 40,000-byte method each (the L7 gateway takes request heads up to 64
// KiB); were the methods listed uncut, the status would be larger than
// the API server stores (etcd's 1.5 MiB request limit) and every status
// write of the Session would fail while they are held: its held requests
// never listed, so no one could decide them through Kubernetes, and the
// DNS lookups it refused since not counted in status.audit (each curl
// has one lookup refused, api.sx.test having no IPv6 address: the three
// after them make it more than 60). The agent
// cuts a held request's method and host as it does its path and rule:
// all 60 are listed, each method cut, and the later lookups counted.
func TestAttackSandboxFreezesSessionStatus(t *testing.T) {
	k, n, ask := askNode(t)

	const held = 60
	script := `m=$(head -c 40000 /dev/zero | tr '\0' A); i=0; ` +
		fmt.Sprintf(`while [ $i -lt %d ]; do curl -s -o /dev/null --max-time 170 -X "$m" https://api.sx.test/x/$i & i=$((i+1)); done; `, held) +
		`sleep 15; getent hosts after-one.sx.test; getent hosts after-two.sx.test; getent hosts after-three.sx.test; sleep 300`
	k.create("loud", []string{"sh", "-c", script}, ask)
	k.waitState("loud", v1alpha1.SessionRunning, 90*time.Second)

	// On the node: the requests are held (the daemon's own API).
	kubetest.Eventually(t, 60*time.Second, "the sandbox's requests held on the node", func() (bool, string) {
		l, err := n.API.ListApprovals(t.Context(), "")
		if err != nil {
			return false, err.Error()
		}
		return len(l) >= held, fmt.Sprintf("%d held", len(l))
	})
	t.Logf("%d requests held on the node", held)

	// What the cluster sees: the held requests listed (so that someone
	// can decide them), and the lookups refused after them counted.
	deadline := time.Now().Add(60 * time.Second)
	var s *v1alpha1.Session
	for time.Now().Before(deadline) {
		s = k.get("loud")
		a := s.Status.Audit
		dns := -1
		if a != nil {
			dns = slices.IndexFunc(a.Counts, func(c v1alpha1.AuditCount) bool { return c.Layer == "dns" && c.Action == "refused" })
		}
		if len(s.Status.PendingApprovals) == held && dns >= 0 && a.Counts[dns].Count >= held+3 {
			for _, p := range s.Status.PendingApprovals {
				if len(p.Method) > 64 || !strings.HasPrefix(p.Method, "AAAA") {
					t.Errorf("held request's method in status: %d bytes, want at most 64 of the sandbox's", len(p.Method))
				}
			}
			t.Logf("status lists %d held requests (method %d bytes) and %d refused lookups", len(s.Status.PendingApprovals), len(s.Status.PendingApprovals[0].Method), a.Counts[dns].Count)
			return
		}
		time.Sleep(time.Second)
	}
	t.Errorf("with %d held requests of 40,000-byte methods, Session loud's status lists %d held requests and audit %+v after 60 s: the sandbox froze its status (the agent's log follows)",
		held, len(s.Status.PendingApprovals), s.Status.Audit)
}

// TestAttackHeldPathBidi: a held request's path is the sandbox's text,
// percent-decoded: C0 controls are refused by the gateway, but Unicode
// format characters are not. The sandbox holds POST
// /x/%E2%80%AE<reversed text>, a right-to-left override (U+202E), so that
// the path in status.pendingApprovals, shown by kubectl in a terminal,
// reads as something else than what it is. The agent shows such a
// character escaped.
func TestAttackHeldPathBidi(t *testing.T) {
	k, _, ask := askNode(t)
	k.create("bidi", []string{"sh", "-c", `curl -s -o /dev/null --max-time 170 -X POST 'https://api.sx.test/x/review-config%E2%80%AEdorp-yolped'; sleep 300`}, ask)
	var s *v1alpha1.Session
	kubetest.Eventually(t, 90*time.Second, "the held request in status", func() (bool, string) {
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

// TestAttackSandboxChurnsStatusWrites: a change of a Session's held
// requests is written to its status at once, with no bound on how often.
// The sandbox holds 56 requests with 512-byte paths (the status then
// weighs some 50 KB) and, with its 8 free holds, 8 loops ask again and
// again, each request given up after 0.5 s: every hold and cancellation
// is a status write of the whole Session. Measured over 10 s through a
// watch: the writes and the bytes the API server stores (etcd keeps each
// revision until compaction, by default 5 min). A sandbox must not set
// the rate of a shared control plane's writes: a change of what a
// Session follows alone is written at most once a second
// (followedEvery).
func TestAttackSandboxChurnsStatusWrites(t *testing.T) {
	k, _, ask := askNode(t)
	long := strings.Repeat("p", 500)
	script := fmt.Sprintf(`i=0; while [ $i -lt 56 ]; do curl -s -o /dev/null --max-time 170 -X POST https://api.sx.test/x/%s/$i & i=$((i+1)); done; sleep 10; `, long) +
		`for j in 1 2 3 4 5 6 7 8; do (while true; do curl -s -o /dev/null --max-time 0.5 -X POST https://api.sx.test/x/churn; done) & done; wait`
	k.create("churn", []string{"sh", "-c", script}, ask)
	kubetest.Eventually(t, 90*time.Second, "56 held requests in status", func() (bool, string) {
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
