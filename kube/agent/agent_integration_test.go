package agent_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/kube/kubetest/agentproc"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestNodeAgents runs two node agents on this host (airlockd --kubernetes,
// each on a root, socket and session pool of its own, with real
// containerd) against a real control plane, and works Sessions through
// them:
//   - placement by capacity: node a holds 1, node b 2; of four Sessions,
//     three run (1+2) and the fourth stays Pending, unschedulable, until a
//     place is freed;
//   - a Session run to completion reports Exited with its exit code; one
//     the node's admission policy refuses is Failed, reason refused, and
//     nothing of it runs;
//   - an agent SIGKILLed mid-session and restarted re-adopts it: it
//     completes once (its command appends a line to a file on a host-path
//     workspace, which ends with one line) with the right status; and a
//     local session made for a Session before its agent wrote any status
//     (as an agent killed between the two leaves it) is adopted, not made
//     again;
//   - a node lost (its agent killed, not restarted; a 3 s lease): its
//     Sessions are marked Lost after the lease and not run on the other
//     node, and a new Session goes to the live node; the agent, back,
//     stops the sessions the cluster gave up on;
//   - a second agent given a live node's name is refused; a node whose
//     AirlockNode and Lease are deleted registers again;
//   - deleting the Sessions removes their local sessions, and once the
//     agents stopped (with --stop-containerd) nothing of them is left.
func TestNodeAgents(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	k := startCluster(t)
	c, kubeconfig := k.c, k.kubeconfig

	// Node a's lease outlasts its agent's restart; node b's is short,
	// for the lost node.
	var a, b *agentproc.Proc
	var wg sync.WaitGroup
	wg.Go(func() {
		a = startNode(t, env, kubeconfig, "node-a", 1, "--node-capacity", "1", "--node-labels", "airlock.test/node=a", "--node-lease-duration", "10s")
	})
	wg.Go(func() {
		b = startNode(t, env, kubeconfig, "node-b", 2, "--node-capacity", "2", "--node-labels", "airlock.test/node=b", "--node-lease-duration", "3s")
	})
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	t.Logf("control plane and two node agents up in %s", time.Since(began).Round(time.Millisecond))
	nodes := map[string]*agentproc.Proc{"node-a": a, "node-b": b}

	// A second agent given a live node's name is refused: both would run
	// its Sessions.
	dupRoot, err := os.MkdirTemp("/tmp", "alk-")
	if err != nil {
		t.Fatal(err)
	}
	dup := exec.Command(filepath.Join(env.BinDir, "airlockd-kube"), "--admission", admissionFile(t), "--root", dupRoot, "--socket", filepath.Join(dupRoot, "airlock.sock"),
		"--bin-dir", env.BinDir, "--runtime", env.Runtime, "--log-level", "warn", "--stop-containerd",
		"--session-pool", "10.241.3.0/24", "--kubernetes", "--kubeconfig", kubeconfig, "--node-name", "node-a")
	var dupErr daemontest.SyncBuffer
	dup.Stderr = &dupErr
	if err := dup.Start(); err != nil {
		t.Fatal(err)
	}
	dupDone := make(chan error, 1)
	go func() { dupDone <- dup.Wait() }()
	select {
	case err := <-dupDone:
		if code := dup.ProcessState.ExitCode(); err == nil || code != 1 || !strings.Contains(dupErr.String(), `its Lease airlock-system/node-a is held by`) {
			t.Errorf("a second agent named node-a: exit %d (%v), want 1 and the refusal; its log:\n%s", code, err, dupErr.String())
		}
	case <-time.After(60 * time.Second):
		dup.Process.Kill()
		<-dupDone
		t.Errorf("a second agent named node-a still runs after 60s; its log:\n%s", dupErr.String())
	}
	agentproc.WantNothingLeft(t, dupRoot)
	os.RemoveAll(dupRoot)

	phase := time.Now()
	for _, name := range []string{"p1", "p2", "p3"} {
		k.create(name, sleep("300"))
	}
	placed := map[string]int{}
	for _, name := range []string{"p1", "p2", "p3"} {
		s := k.waitState(name, v1alpha1.SessionRunning, 60*time.Second)
		if s.Status.Node != s.Spec.NodeName || s.Status.ID == "" || s.Status.StartedAt == nil || s.Status.PlacedAt == nil {
			t.Errorf("Session %s running: spec.nodeName %q, status %+v", name, s.Spec.NodeName, s.Status)
		}
		placed[s.Spec.NodeName]++
	}
	if placed["node-a"] != 1 || placed["node-b"] != 2 {
		t.Errorf("three Sessions placed %v, want 1 on node-a (capacity 1) and 2 on node-b (capacity 2)", placed)
	}
	// The fourth fits nowhere.
	k.create("p4", sleep("300"))
	p4 := k.waitState("p4", v1alpha1.SessionPending, 30*time.Second)
	if p4.Spec.NodeName != "" || p4.Status.Reason != agent.ReasonUnschedulable ||
		!strings.Contains(p4.Status.Message, "node-a: full (1 of 1)") || !strings.Contains(p4.Status.Message, "node-b: full (2 of 2)") {
		t.Errorf("the fourth Session: spec.nodeName %q, status %+v, want Pending, unschedulable, both nodes full", p4.Spec.NodeName, p4.Status)
	}
	// Each node holds local sessions for its Sessions, and says so.
	for name, n := range nodes {
		if got := len(n.Labelled(t)); got != placed[name] {
			t.Errorf("node %s holds %d local sessions for Sessions, want %d", name, got, placed[name])
		}
		kubetest.Eventually(t, 30*time.Second, name+"'s AirlockNode status", func() (bool, string) {
			var an v1alpha1.AirlockNode
			if err := c.Get(t.Context(), client.ObjectKey{Name: name}, &an); err != nil {
				return false, err.Error()
			}
			return int(an.Status.Sessions) == placed[name] && an.Status.HolderIdentity != "", fmt.Sprintf("%+v", an.Status)
		})
	}
	// A place freed on node-b goes to the fourth.
	var onB string
	for _, name := range []string{"p1", "p2", "p3"} {
		if k.get(name).Spec.NodeName == "node-b" {
			onB = name
			break
		}
	}
	if err := c.Delete(t.Context(), k.get(onB)); err != nil {
		t.Fatal(err)
	}
	if p4 = k.waitState("p4", v1alpha1.SessionRunning, 60*time.Second); p4.Spec.NodeName != "node-b" {
		t.Errorf("the fourth Session ran on %q once a place on node-b was freed", p4.Spec.NodeName)
	}
	k.deleteAll(60 * time.Second)
	for name, n := range nodes {
		if left := n.Labelled(t); len(left) != 0 {
			t.Errorf("node %s still holds local sessions of deleted Sessions: %+v", name, left)
		}
	}
	t.Logf("placement by capacity: %s", time.Since(phase).Round(time.Millisecond))

	// A Session run to completion.
	phase = time.Now()
	k.create("done", []string{"sh", "-c", "echo done; exit 7"})
	done := k.waitState("done", v1alpha1.SessionExited, 60*time.Second)
	if done.Status.ExitCode == nil || *done.Status.ExitCode != 7 || done.Status.Reason != "exited" ||
		done.Status.FinishedAt == nil || done.Status.StartedAt == nil || done.Status.ID == "" {
		t.Errorf("Session run to completion: status %+v, want Exited with exit code 7, reason exited, its times and local id", done.Status)
	}
	if v, err := nodes[done.Status.Node].API.InspectSession(t.Context(), done.Status.ID); err != nil || v.ExitCode == nil || *v.ExitCode != 7 ||
		v.Labels[agent.LabelSessionUID] != string(done.UID) || v.Labels[agent.LabelSession] != "default/done" {
		t.Errorf("its local session %s on %s: %+v, %v", done.Status.ID, done.Status.Node, v, err)
	}
	// The node's admission policy applies as to its API: the built-in
	// one refuses CAP_SYS_ADMIN, and nothing runs.
	k.create("refused", []string{"true"}, func(s *v1alpha1.Session) { s.Spec.Policy.Capabilities = []string{"CAP_SYS_ADMIN"} })
	refused := k.waitState("refused", v1alpha1.SessionFailed, 60*time.Second)
	if refused.Status.Reason != agent.ReasonRefused || !strings.Contains(refused.Status.Message, "capability CAP_SYS_ADMIN refused") || refused.Status.ID != "" {
		t.Errorf("Session the admission policy refuses: status %+v, want Failed, reason refused, the rule it broke, no local session", refused.Status)
	}
	if left := nodes[refused.Spec.NodeName].Labelled(t); len(left) != 0 {
		t.Errorf("node %s made local sessions for a refused Session: %+v", refused.Spec.NodeName, left)
	}
	k.deleteAll(60 * time.Second)
	t.Logf("run to completion, and a refusal: %s", time.Since(phase).Round(time.Millisecond))

	// node-b's AirlockNode and Lease deleted: its agent makes them again.
	phase = time.Now()
	for _, obj := range []client.Object{
		&v1alpha1.AirlockNode{ObjectMeta: metav1.ObjectMeta{Name: "node-b"}},
		&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "node-b", Namespace: agent.LeaseNamespace}},
	} {
		if err := c.Delete(t.Context(), obj); err != nil {
			t.Fatal(err)
		}
	}
	kubetest.Eventually(t, 30*time.Second, "node-b registered again", func() (bool, string) {
		var an v1alpha1.AirlockNode
		var l coordinationv1.Lease
		errN := c.Get(t.Context(), client.ObjectKey{Name: "node-b"}, &an)
		errL := c.Get(t.Context(), client.ObjectKey{Name: "node-b", Namespace: agent.LeaseNamespace}, &l)
		return errN == nil && errL == nil && an.Status.Capacity == 2 && an.Labels["airlock.test/node"] == "b",
			fmt.Sprintf("AirlockNode %+v (%v), Lease (%v)", an.Status, errN, errL)
	})
	t.Logf("re-registration: %s", time.Since(phase).Round(time.Millisecond))

	// An agent killed and restarted mid-session: the session runs once.
	phase = time.Now()
	ws := t.TempDir()
	if err := os.Chown(ws, 1000, 1000); err != nil {
		t.Fatal(err)
	}
	k.create("once", []string{"sh", "-c", "echo ran >> /w/runs; sleep 8; exit 3"}, onNode("a"), func(s *v1alpha1.Session) {
		s.Spec.Policy.User = "1000:1000"
		s.Spec.Policy.Workspaces = []policies.Workspace{{HostPath: ws, Target: "/w", Mode: policies.ModeRW, DefaultDenyRead: true}}
	})
	once := k.waitState("once", v1alpha1.SessionRunning, 60*time.Second)
	kubetest.Eventually(t, 10*time.Second, "the command's line in the workspace", func() (bool, string) {
		b, err := os.ReadFile(filepath.Join(ws, "runs"))
		return err == nil && len(b) > 0, fmt.Sprint(err)
	})
	a.Kill()
	// While node-a's agent is down, a Session placed on it directly
	// ("adopt") gets a local session, labelled as the agent labels its
	// own, through a plain airlockd on the node's root: what an agent
	// killed after its create and before its status write leaves. The
	// agent back must adopt it, not run the Session a second time.
	adopt := k.create("adopt", []string{"sh", "-c", "sleep 2; exit 4"}, func(s *v1alpha1.Session) { s.Spec.NodeName = "node-a" })
	adoptID := createLocal(t, a, api.CreateRequest{Policy: adopt.Spec.Policy, Start: true, Labels: map[string]string{
		agent.LabelSessionUID: string(adopt.UID), agent.LabelSession: "default/adopt",
	}})
	a.Restart()
	if s := k.waitState("adopt", v1alpha1.SessionExited, 60*time.Second); s.Status.ID != adoptID || s.Status.ExitCode == nil || *s.Status.ExitCode != 4 ||
		!slices.Contains(s.Finalizers, agent.Finalizer) {
		t.Errorf("Session whose local session was made before its agent wrote status: status %+v, finalizers %v, want local session %s Exited with exit code 4, and the agent's finalizer", s.Status, s.Finalizers, adoptID)
	}
	after := k.waitState("once", v1alpha1.SessionExited, 60*time.Second)
	if after.Status.ID != once.Status.ID || after.Status.ExitCode == nil || *after.Status.ExitCode != 3 || after.Status.Reason != "exited" {
		t.Errorf("Session after its agent's restart: status %+v, want local session %s Exited with exit code 3", after.Status, once.Status.ID)
	}
	if b, err := os.ReadFile(filepath.Join(ws, "runs")); err != nil || string(b) != "ran\n" {
		t.Errorf("the workspace's runs file: %q (%v), want one line: the command ran once", b, err)
	}
	var ids []string
	for _, v := range a.Labelled(t) {
		ids = append(ids, v.ID)
	}
	slices.Sort(ids)
	want := []string{once.Status.ID, adoptID}
	slices.Sort(want)
	if !slices.Equal(ids, want) {
		t.Errorf("node-a's local sessions for Sessions after the restart: %v, want one each for once and adopt, %v", ids, want)
	}
	k.deleteAll(60 * time.Second)
	t.Logf("agent killed and restarted mid-session: %s", time.Since(phase).Round(time.Millisecond))

	// A node lost: node-b's agent killed and not restarted.
	phase = time.Now()
	k.create("lost1", sleep("300"), onNode("b"))
	k.create("lost2", sleep("300"), onNode("b"))
	lostIDs := map[string]string{}
	for _, name := range []string{"lost1", "lost2"} {
		lostIDs[name] = k.waitState(name, v1alpha1.SessionRunning, 60*time.Second).Status.ID
	}
	var leader coordinationv1.Lease
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: agent.LeaseNamespace, Name: agent.PlacementLease}, &leader); err == nil && leader.Spec.HolderIdentity != nil {
		t.Logf("placement leader before node-b's agent is killed: %s", *leader.Spec.HolderIdentity)
	}
	b.Kill()
	killed := time.Now()
	// The lease runs from node-b's last renewal, up to a quarter lease
	// before the kill.
	var bLease coordinationv1.Lease
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: agent.LeaseNamespace, Name: "node-b"}, &bLease); err != nil || bLease.Spec.RenewTime == nil {
		t.Fatalf("node-b's Lease after its agent was killed: %v %+v", err, bLease.Spec)
	}
	lastRenewal := bLease.Spec.RenewTime.Time
	var uids []string
	for _, name := range []string{"lost1", "lost2"} {
		s := k.waitState(name, v1alpha1.SessionLost, 30*time.Second)
		if since := time.Since(lastRenewal); since < 3*time.Second {
			t.Errorf("Session %s marked Lost %s after node-b last renewed its Lease, before its 3s lease expired", name, since)
		}
		if s.Spec.NodeName != "node-b" || s.Status.Node != "node-b" || s.Status.Reason != agent.ReasonLost || s.Status.ID != lostIDs[name] {
			t.Errorf("lost Session %s: spec.nodeName %q, status %+v", name, s.Spec.NodeName, s.Status)
		}
		uids = append(uids, string(s.UID))
	}
	t.Logf("node-b's Sessions lost %s after its agent was killed", time.Since(killed).Round(time.Millisecond))
	// A new Session goes to the live node only.
	k.create("after", sleep("300"))
	if s := k.waitState("after", v1alpha1.SessionRunning, 60*time.Second); s.Spec.NodeName != "node-a" {
		t.Errorf("a Session created after node-b was lost ran on %q, want node-a", s.Spec.NodeName)
	}
	// The lost ones never ran elsewhere, nor were they placed again.
	for _, v := range a.Labelled(t) {
		if slices.Contains(uids, v.Labels[agent.LabelSessionUID]) {
			t.Errorf("a lost Session runs on node-a too: %+v", v)
		}
	}
	for _, name := range []string{"lost1", "lost2"} {
		if s := k.get(name); s.Status.State != v1alpha1.SessionLost || s.Spec.NodeName != "node-b" {
			t.Errorf("lost Session %s later: spec.nodeName %q, status %+v", name, s.Spec.NodeName, s.Status)
		}
	}
	// node-b's agent back: it stops what the cluster gave up on, and the
	// Sessions stay Lost.
	b.Restart()
	kubetest.Eventually(t, 30*time.Second, "node-b stops its lost sessions", func() (bool, string) {
		list := b.Labelled(t)
		var states []string
		for _, v := range list {
			states = append(states, v.ID+" "+v.State)
		}
		return len(list) == 2 && !slices.ContainsFunc(list, func(v api.Session) bool { return v.State != api.StateStopped }), strings.Join(states, ", ")
	})
	for _, name := range []string{"lost1", "lost2"} {
		if s := k.get(name); s.Status.State != v1alpha1.SessionLost {
			t.Errorf("lost Session %s after node-b came back: status %+v, want it still Lost", name, s.Status)
		}
	}
	t.Logf("node lost: %s", time.Since(phase).Round(time.Millisecond))

	// Nothing leaks: the Sessions deleted, their local sessions go; the
	// agents stopped, nothing of them is left.
	k.deleteAll(60 * time.Second)
	for name, n := range nodes {
		if left, err := n.API.ListSessions(t.Context()); err != nil || len(left) != 0 {
			t.Errorf("node %s after every Session was deleted: %+v (%v)", name, left, err)
		}
		if err := n.Stop(); err != nil {
			t.Error(err)
		}
		agentproc.WantNothingLeft(t, n.Root)
	}
	t.Logf("TestNodeAgents took %s", time.Since(began).Round(time.Millisecond))
}
