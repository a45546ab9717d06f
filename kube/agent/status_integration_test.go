package agent_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/kube/kubetest/agentproc"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestSessionStatusAndApprovals runs a node agent (airlockd --kubernetes
// with real containerd, its uplink a test world with an HTTPS service),
// and a second one without an uplink, against a real control plane, and reads what a Session's status says
// of its session:
//   - a Session that looks up names its allowlist does not hold shows
//     them in status.audit (dns refused, counted as refused);
//   - a busy Session (DNS lookups in a loop for 20 s) has its status
//     written a few times, not once per event: at most one write per 5 s
//     for the audit counts alone, while they grow by hundreds;
//   - a Session whose overlay workspace it changes shows the changes'
//     summary in Review (added, modified, deleted, bytes), and committed
//     once they are committed on the node;
//   - a request an L7 `ask` rule holds is in status.pendingApprovals; a
//     SessionApproval allowing it lets it through (200), one denying the
//     next gives the sandbox the gateway's 403, and each is applied once,
//     recorded in the node's audit with the object's name, uid and
//     decidedBy; one decided on the node (its API) leaves the status too;
//   - the node's airlockd killed and restarted, the audit counts go on
//     from its log, and no decision is applied twice;
//   - SessionApprovals that must not be applied are reported, and change
//     nothing: an unknown id, the id of another Session's request (which
//     stays held), on the same node or on another (node-t, whose agent
//     reports it), a Session that does not exist, an id decided before;
//     the API server refuses a decision that is neither allow nor deny
//     and a change of a decision made.
func TestSessionStatusAndApprovals(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	tmp, err := os.MkdirTemp("/tmp", "alks-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	var mu sync.Mutex
	var calls []string
	svc := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		calls = append(calls, r.Method+" "+r.URL.Path)
		mu.Unlock()
		fmt.Fprint(rw, "deployed")
	})
	uplink := startWorld(t, "k", "api.st.test", svc)
	k := startCluster(t)
	c, kubeconfig := k.c, k.kubeconfig
	// node-s runs the Sessions under test; node-t, without an uplink,
	// one Session, to which a decision on node-s's request is sent.
	var n, far *agentproc.Proc
	var wg sync.WaitGroup
	wg.Go(func() {
		n = startNode(t, env, kubeconfig, "node-s", 7, append([]string{"--node-capacity", "4"}, uplink...)...)
	})
	wg.Go(func() { far = startNode(t, env, kubeconfig, "node-t", 8, "--node-capacity", "1") })
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("world, control plane and two node agents up in %s", time.Since(began).Round(time.Millisecond))
	onS := func(s *v1alpha1.Session) { s.Spec.NodeName = "node-s" }

	egress := func(ask bool) func(*v1alpha1.Session) {
		return func(s *v1alpha1.Session) {
			s.Spec.Policy.Egress = &policies.Egress{Allow: []string{"api.st.test:443"}}
			if ask {
				s.Spec.Policy.Egress.L7 = policies.L7Check
				s.Spec.Policy.Egress.HTTP = []policies.HTTPHost{{Host: "api.st.test", Rules: []policies.HTTPRule{
					{Methods: []string{"POST"}, Path: "/deploy/**", Action: policies.HTTPAsk},
				}}}
				s.Spec.Policy.Approval = &policies.Approval{Timeout: policies.Duration(3 * time.Minute), OnTimeout: policies.OnTimeoutDeny}
			}
		}
	}
	workspace := func(mode string) (string, func(*v1alpha1.Session)) {
		ws, err := os.MkdirTemp(tmp, "ws-")
		if err != nil {
			t.Fatal(err)
		}
		for name, body := range map[string]string{"kept.txt": "old\n", "gone.txt": "bye\n"} {
			if err := os.WriteFile(filepath.Join(ws, name), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
			if err := os.Chown(filepath.Join(ws, name), 1000, 1000); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.Chown(ws, 1000, 1000); err != nil {
			t.Fatal(err)
		}
		return ws, func(s *v1alpha1.Session) {
			s.Spec.Policy.User = "1000:1000"
			s.Spec.Policy.Workspaces = []policies.Workspace{{HostPath: ws, Target: "/w", Mode: mode, DefaultDenyRead: true, OnExit: policies.OnExitReview}}
		}
	}

	// The gateway Session: two refused lookups, then three requests the
	// ask rule holds, one after the other, their status codes written to
	// its workspace.
	gwWS, gwWorkspace := workspace(policies.ModeRW)
	curl := func(path, out string) string {
		return fmt.Sprintf(`curl -sS --max-time 170 -o /dev/null -w '%%{http_code}' -X POST https://api.st.test%s > /w/%s.tmp; mv /w/%s.tmp /w/%s; `, path, out, out, out)
	}
	k.create("gw", []string{"sh", "-c", "getent hosts refused.st.test; getent hosts also-refused.example.test; " +
		curl("/deploy/one", "one") + curl("/deploy/two", "two") + curl("/deploy/three", "three") + curl("/deploy/four", "four") + curl("/deploy/four", "four-again") + "sleep 300"},
		egress(true), gwWorkspace, onS)
	// The busy Session: lookups in a loop for 20 s.
	k.create("busy", []string{"sh", "-c", `end=$(($(date +%s)+20)); while [ "$(date +%s)" -lt "$end" ]; do getent hosts busy.nope.test; done; sleep 300`}, egress(false), onS)
	// The review Session: one file added, one modified, one deleted in
	// its overlay workspace.
	revWS, revWorkspace := workspace(policies.ModeOverlay)
	k.create("review", []string{"sh", "-c", "echo newer > /w/kept.txt; printf 0123456789 > /w/added.txt; rm /w/gone.txt"}, revWorkspace, onS)
	k.create("far", sleep("300"), func(s *v1alpha1.Session) { s.Spec.NodeName = "node-t" })

	// Audit counts.
	phase := time.Now()
	kubetest.Eventually(t, 30*time.Second, "Session gw's refused lookups in status.audit", func() (bool, string) {
		s := k.get("gw")
		a := s.Status.Audit
		if a == nil {
			return false, fmt.Sprintf("status %+v", s.Status)
		}
		dns := slices.IndexFunc(a.Counts, func(c v1alpha1.AuditCount) bool { return c.Layer == "dns" && c.Action == "refused" })
		return dns >= 0 && a.Counts[dns].Count >= 2 && a.Refused >= 2 && a.Events >= a.Refused && a.Last != nil, fmt.Sprintf("%+v", *a)
	})
	t.Logf("audit counts in status: %s", time.Since(phase).Round(time.Millisecond))

	// A busy session's status is not written on every event.
	phase = time.Now()
	kubetest.Eventually(t, 30*time.Second, "Session busy's lookups counted", func() (bool, string) {
		s := k.get("busy")
		return s.Status.Audit != nil && s.Status.Audit.Refused > 0, fmt.Sprintf("status %+v", s.Status)
	})
	first := k.get("busy")
	wt, err := c.Watch(t.Context(), &v1alpha1.SessionList{}, client.InNamespace("default"),
		client.MatchingFields{"metadata.name": "busy"}, &client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: first.ResourceVersion}})
	if err != nil {
		t.Fatal(err)
	}
	const window = 12 * time.Second
	writes := 0
	var last *v1alpha1.Session
	timeout := time.After(window)
watching:
	for {
		select {
		case ev := <-wt.ResultChan():
			if ev.Type == watch.Modified {
				writes++
				last = ev.Object.(*v1alpha1.Session)
			}
		case <-timeout:
			break watching
		}
	}
	wt.Stop()
	if last == nil || last.Status.Audit == nil {
		t.Fatalf("busy Session: no status write in %s while it made audit events", window)
	}
	grew := last.Status.Audit.Events - first.Status.Audit.Events
	t.Logf("busy Session: %d status writes in %s; its audit counts grew by %d", writes, window, grew)
	if grew < 100 {
		t.Errorf("busy Session's audit counts grew by %d in %s: not busy enough to show anything", grew, window)
	}
	if max := int(window/(5*time.Second)) + 2; writes > max {
		t.Errorf("busy Session's status written %d times in %s, more than %d: the audit counts must not be written more than once every 5 s", writes, window, max)
	}
	t.Logf("busy session: %s", time.Since(phase).Round(time.Millisecond))

	// Workspace changes in Review, then committed.
	phase = time.Now()
	rev := k.waitState("review", v1alpha1.SessionReview, 90*time.Second)
	kubetest.Eventually(t, 15*time.Second, "Session review's changes in status.diff", func() (bool, string) {
		rev = k.get("review")
		d := rev.Status.Diff
		return d != nil && *d == v1alpha1.DiffSummary{Added: 1, Modified: 1, Deleted: 1, Bytes: 16}, fmt.Sprintf("%+v", rev.Status)
	})
	if _, err := n.API.Commit(t.Context(), rev.Status.ID, api.CommitRequest{}); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 40*time.Second, "Session review committed", func() (bool, string) {
		s := k.get("review")
		d := s.Status.Diff
		return s.Status.State == v1alpha1.SessionExited && d != nil && *d == v1alpha1.DiffSummary{Added: 1, Modified: 1, Deleted: 1, Bytes: 16, Outcome: "committed"},
			fmt.Sprintf("%+v", s.Status)
	})
	if b, err := os.ReadFile(filepath.Join(revWS, "added.txt")); err != nil || string(b) != "0123456789" {
		t.Errorf("committed added.txt: %q (%v)", b, err)
	}
	t.Logf("diff summary: %s", time.Since(phase).Round(time.Millisecond))

	// Held requests and their decisions.
	phase = time.Now()
	pending := func(name, path string) v1alpha1.PendingApproval {
		t.Helper()
		var p v1alpha1.PendingApproval
		kubetest.Eventually(t, 60*time.Second, "Session "+name+" holds POST "+path, func() (bool, string) {
			s := k.get(name)
			for _, q := range s.Status.PendingApprovals {
				if q.Path == path {
					p = q
				}
			}
			return p.ID != "" && len(s.Status.PendingApprovals) == 1, fmt.Sprintf("%+v", s.Status.PendingApprovals)
		})
		if p.Method != "POST" || p.Host != "api.st.test" || !strings.Contains(p.Rule, "rule 1") || p.Deadline.Before(&p.Created) {
			t.Errorf("held request in status: %+v", p)
		}
		return p
	}
	decide := func(name string, spec v1alpha1.SessionApprovalSpec) *v1alpha1.SessionApproval {
		t.Helper()
		ap := &v1alpha1.SessionApproval{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"}, Spec: spec}
		if err := c.Create(t.Context(), ap); err != nil {
			t.Fatalf("create SessionApproval %s: %v", name, err)
		}
		kubetest.Eventually(t, 30*time.Second, "SessionApproval "+name+" looked at", func() (bool, string) {
			if err := c.Get(t.Context(), client.ObjectKeyFromObject(ap), ap); err != nil {
				return false, err.Error()
			}
			return ap.Status.Phase != "", fmt.Sprintf("%+v", ap.Status)
		})
		return ap
	}
	wantRefused := func(ap *v1alpha1.SessionApproval, why string) {
		t.Helper()
		if ap.Status.Phase != v1alpha1.ApprovalRefused || !strings.Contains(ap.Status.Message, why) || ap.Status.State != "" {
			t.Errorf("SessionApproval %s: status %+v, want Refused saying %q", ap.Name, ap.Status, why)
		}
	}
	one := pending("gw", "/deploy/one")
	gwID := k.get("gw").Status.ID

	// The API server refuses a decision that is neither.
	bad := &v1alpha1.SessionApproval{ObjectMeta: metav1.ObjectMeta{Name: "maybe", Namespace: "default"},
		Spec: v1alpha1.SessionApprovalSpec{SessionName: "gw", ApprovalID: one.ID, Decision: "maybe"}}
	if err := c.Create(t.Context(), bad); !apierrors.IsInvalid(err) {
		t.Errorf("SessionApproval with decision maybe: %v, want refused as invalid", err)
	}
	// Decisions that are not applied.
	wantRefused(decide("unknown-id", v1alpha1.SessionApprovalSpec{SessionName: "gw", ApprovalID: "0123456789abcdef", Decision: v1alpha1.DecisionAllow}),
		"no request 0123456789abcdef is held for Session default/gw")
	wantRefused(decide("other-session", v1alpha1.SessionApprovalSpec{SessionName: "busy", ApprovalID: one.ID, Decision: v1alpha1.DecisionAllow}),
		"no request "+one.ID+" is held for Session default/busy")
	// A Session on another node: that node's agent reports it.
	k.waitState("far", v1alpha1.SessionRunning, 60*time.Second)
	farAp := decide("far-node", v1alpha1.SessionApprovalSpec{SessionName: "far", ApprovalID: one.ID, Decision: v1alpha1.DecisionAllow})
	wantRefused(farAp, "no request "+one.ID+" is held for Session default/far")
	if farAp.Status.Node != "node-t" {
		t.Errorf("SessionApproval far-node reported by %q, want node-t, whose Session it names", farAp.Status.Node)
	}
	wantRefused(decide("no-session", v1alpha1.SessionApprovalSpec{SessionName: "ghost", ApprovalID: one.ID, Decision: v1alpha1.DecisionAllow}),
		"no Session default/ghost")
	if held, err := n.API.ListApprovals(t.Context(), gwID); err != nil || len(held) != 1 || held[0].ID != one.ID || held[0].State != api.ApprovalPending {
		t.Fatalf("after the refused decisions, gw holds %+v (%v), want %s still pending", held, err, one.ID)
	}
	if _, err := os.Stat(filepath.Join(gwWS, "one")); err == nil {
		t.Fatal("the held request was answered before a decision that applies")
	}

	// Allowed through Kubernetes.
	allow := decide("allow-one", v1alpha1.SessionApprovalSpec{SessionName: "gw", ApprovalID: one.ID, Decision: v1alpha1.DecisionAllow, Reason: "ship it", DecidedBy: "alice"})
	if allow.Status.Phase != v1alpha1.ApprovalApplied || allow.Status.State != api.ApprovalAllowed || allow.Status.Node != "node-s" {
		t.Errorf("SessionApproval allow-one: status %+v, want Applied, allowed, on node-s", allow.Status)
	}
	// The Session's own record: the refusals of its node and this one.
	gwDecisions := map[string]v1alpha1.AppliedDecision{}
	for _, d := range k.get("gw").Status.Decisions {
		gwDecisions[d.Approval] = d
	}
	if d := gwDecisions["allow-one"]; d.UID != allow.UID || d.Phase != v1alpha1.ApprovalApplied || d.State != api.ApprovalAllowed || d.ApprovalID != one.ID {
		t.Errorf("Session gw's status.decisions: %+v, want allow-one Applied, allowed", k.get("gw").Status.Decisions)
	}
	if d := gwDecisions["unknown-id"]; d.Phase != v1alpha1.ApprovalRefused || !strings.Contains(d.Message, "no request 0123456789abcdef") {
		t.Errorf("Session gw's status.decisions: %+v, want unknown-id Refused", k.get("gw").Status.Decisions)
	}
	if _, ok := gwDecisions["no-session"]; ok {
		t.Errorf("a SessionApproval of no Session recorded on Session gw: %+v", gwDecisions)
	}
	readCode := func(name string) string {
		t.Helper()
		var b []byte
		kubetest.Eventually(t, 30*time.Second, "the sandbox's status code for "+name, func() (bool, string) {
			var err error
			b, err = os.ReadFile(filepath.Join(gwWS, name))
			return err == nil, fmt.Sprint(err)
		})
		return string(b)
	}
	if code := readCode("one"); code != "200" {
		t.Errorf("request allowed through a SessionApproval: %s, want 200", code)
	}
	// A decision on a request decided before is reported, not applied;
	// a decision made cannot be changed.
	wantRefused(decide("allow-one-again", v1alpha1.SessionApprovalSpec{SessionName: "gw", ApprovalID: one.ID, Decision: v1alpha1.DecisionDeny}),
		"already allowed by kubernetes user \"alice\" through SessionApproval default/allow-one")
	allow.Spec.Decision = v1alpha1.DecisionDeny
	if err := c.Update(t.Context(), allow); !apierrors.IsInvalid(err) {
		t.Errorf("changing a SessionApproval's decision: %v, want refused as invalid", err)
	}

	// Denied through Kubernetes: the sandbox gets the gateway's 403.
	two := pending("gw", "/deploy/two")
	deny := decide("deny-two", v1alpha1.SessionApprovalSpec{SessionName: "gw", ApprovalID: two.ID, Decision: v1alpha1.DecisionDeny, Reason: "not today", DecidedBy: "bob"})
	if deny.Status.Phase != v1alpha1.ApprovalApplied || deny.Status.State != api.ApprovalDenied {
		t.Errorf("SessionApproval deny-two: status %+v, want Applied, denied", deny.Status)
	}
	if code := readCode("two"); code != "403" {
		t.Errorf("request denied through a SessionApproval: %s, want 403", code)
	}

	// Decided on the node: it leaves the status too.
	three := pending("gw", "/deploy/three")
	if _, err := n.API.DecideApproval(t.Context(), three.ID, api.ApprovalDecision{Decision: api.DecisionDeny, Reason: "on the node"}); err != nil {
		t.Fatal(err)
	}
	if code := readCode("three"); code != "403" {
		t.Errorf("request denied on the node: %s, want 403", code)
	}

	// Approved by a revision through Kubernetes: the request goes on,
	// the session's policy version goes up, and the same request again
	// is allowed without a hold.
	four := pending("gw", "/deploy/four")
	revise := decide("revise-four", v1alpha1.SessionApprovalSpec{SessionName: "gw", ApprovalID: four.ID, Decision: v1alpha1.DecisionRevise, Reason: "ticket 9", DecidedBy: "carol"})
	if revise.Status.Phase != v1alpha1.ApprovalApplied || revise.Status.State != api.ApprovalAllowed || !strings.Contains(revise.Status.Message, "revised to version 2") {
		t.Errorf("SessionApproval revise-four: status %+v, want Applied, allowed, the policy revised to version 2", revise.Status)
	}
	if code := readCode("four"); code != "200" {
		t.Errorf("request approved by revision: %s, want 200", code)
	}
	if code := readCode("four-again"); code != "200" {
		t.Errorf("the same request after the revision: %s, want 200 without a hold", code)
	}
	kubetest.Eventually(t, 15*time.Second, "Session gw at policy version 2", func() (bool, string) {
		s := k.get("gw")
		return s.Status.PolicyVersion == 2, fmt.Sprintf("policyVersion %d", s.Status.PolicyVersion)
	})
	kubetest.Eventually(t, 10*time.Second, "no held request in Session gw's status", func() (bool, string) {
		s := k.get("gw")
		return len(s.Status.PendingApprovals) == 0, fmt.Sprintf("%+v", s.Status.PendingApprovals)
	})
	mu.Lock()
	got := strings.Join(calls, ", ")
	mu.Unlock()
	if got != "POST /deploy/one, POST /deploy/four, POST /deploy/four" {
		t.Errorf("the service saw %q, want only the requests allowed", got)
	}

	// The node's audit says who decided, through which object.
	evs, err := n.API.Audit(t.Context(), gwID)
	if err != nil {
		t.Fatal(err)
	}
	var decided []string
	for _, ev := range evs {
		if ev.Layer == "approval" && ev.Action != "held" {
			decided = append(decided, fmt.Sprintf("%s by %v: %s", ev.Action, ev.Fields["by"], ev.Reason))
		}
	}
	want := []string{
		fmt.Sprintf("allowed by kubernetes user \"alice\" through SessionApproval default/allow-one (uid %s): ship it", allow.UID),
		fmt.Sprintf("denied by kubernetes user \"bob\" through SessionApproval default/deny-two (uid %s): not today", deny.UID),
	}
	if len(decided) != 4 || decided[0] != want[0] || decided[1] != want[1] || !strings.HasPrefix(decided[2], "denied by ") ||
		!strings.HasPrefix(decided[3], "allowed by ") || !strings.Contains(decided[3], "revis") {
		t.Errorf("the node's audit of gw's decisions:\n%s\nwant:\n%s\nand the node's own", strings.Join(decided, "\n"), strings.Join(want, "\n"))
	}
	t.Logf("approvals: %s", time.Since(phase).Round(time.Millisecond))

	// node-s's airlockd killed and restarted: the audit counts go on
	// from the log its predecessor wrote, and no decision is applied
	// again. (A killed daemon's log misses the repeats of a decision
	// merged in its last window, 10 s: getent's repeated lookups. The
	// events written one by one are all there.)
	phase = time.Now()
	var before *v1alpha1.AuditSummary
	kubetest.Eventually(t, 15*time.Second, "Session gw's audit counts written with the revision's", func() (bool, string) {
		before = k.get("gw").Status.Audit
		if before == nil {
			return false, "no counts"
		}
		for _, c := range before.Counts {
			if c.Layer == "policy" && c.Action == "revised" && c.Count == 1 {
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", before.Counts)
	})
	n.Kill()
	n.Restart()
	written := func(a *v1alpha1.AuditSummary) map[string]int64 {
		m := map[string]int64{}
		for _, c := range a.Counts {
			if c.Layer != "dns" {
				m[c.Layer+"/"+c.Action] = c.Count
			}
		}
		return m
	}
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		a := k.get("gw").Status.Audit
		if a == nil || fmt.Sprint(written(a)) != fmt.Sprint(written(before)) || a.Refused < 4 {
			t.Fatalf("Session gw's audit counts after its node's restart: %+v, before %+v: counts lost", a, before)
		}
	}
	evs, err = n.API.Audit(t.Context(), gwID)
	if err != nil {
		t.Fatal(err)
	}
	again := 0
	for _, ev := range evs {
		if ev.Layer == "approval" && ev.Action != "held" {
			again++
		}
	}
	if again != len(decided) {
		t.Errorf("after node-s's restart its audit has %d decisions on gw's requests, want the %d before", again, len(decided))
	}
	t.Logf("restart: %s", time.Since(phase).Round(time.Millisecond))

	k.deleteAll(60 * time.Second)
	for _, n := range []*agentproc.Proc{n, far} {
		if err := n.Stop(); err != nil {
			t.Error(err)
		}
		agentproc.WantNothingLeft(t, n.Root)
	}
	t.Logf("TestSessionStatusAndApprovals took %s", time.Since(began).Round(time.Millisecond))
}

// TestAgentWithoutSessionApprovalCRD: a cluster whose CRDs predate
// SessionApproval still has its Sessions run (with their status), and the
// agent says why decisions through Kubernetes are off.
func TestAgentWithoutSessionApprovalCRD(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := kubetest.CRDDir()
	if err != nil {
		t.Fatal(err)
	}
	old := t.TempDir()
	files, _ := filepath.Glob(filepath.Join(dir, "*.yaml"))
	for _, f := range files {
		if strings.Contains(f, "sessionapprovals") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(old, filepath.Base(f)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cp, _ := kubetest.StartWithCRDsFrom(t, old)
	k := newCluster(t, cp)
	kubeconfig := k.kubeconfig
	n := startNode(t, env, kubeconfig, "node-o", 9, "--node-capacity", "1")
	k.create("old", []string{"sh", "-c", "exit 5"})
	s := k.waitState("old", v1alpha1.SessionExited, 60*time.Second)
	if s.Status.ExitCode == nil || *s.Status.ExitCode != 5 || s.Status.Audit == nil || s.Status.Audit.Events == 0 {
		t.Errorf("Session on a cluster without SessionApprovals: status %+v, want Exited 5 with its audit counts", s.Status)
	}
	if !strings.Contains(n.Log.String(), "the SessionApproval CRD is not installed") {
		t.Errorf("the agent did not say SessionApprovals are off; its log:\n%s", n.Log.String())
	}
	k.deleteAll(60 * time.Second)
	if err := n.Stop(); err != nil {
		t.Error(err)
	}
	agentproc.WantNothingLeft(t, n.Root)
}
