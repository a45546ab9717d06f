package agent_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
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

// pools returns the node's daemon pools kept for SessionPool ns/name.
func pools(t *testing.T, n *agentproc.Proc, ns, name string) []api.Pool {
	t.Helper()
	list, err := n.API.ListPools(t.Context())
	if err != nil {
		t.Fatalf("node %s: list pools: %v", n.Node, err)
	}
	return slices.DeleteFunc(list, func(p api.Pool) bool { return p.Label != agent.PoolLabel(ns, name) })
}

// TestSessionPools runs two node agents (node-a, node-b) against a real
// control plane and works SessionPools through them:
//   - the attack: a SessionPool whose policy the nodes' admission policy
//     refuses (a mount of the host's /) prepares nothing on either node;
//     each node says so in status.nodes (reason refused, the rule) and in
//     its log;
//   - a SessionPool of size 1 selecting node-a: node-a's daemon keeps a
//     pool of its policy with one sandbox ready, status.nodes says so,
//     node-b keeps none;
//   - a Session naming it starts warm on node-a, and the pool refills;
//     a Session of the same policy naming no pool runs cold, and one
//     carrying the pool's label without naming it is refused;
//   - node-a's agent killed and restarted: its pool is declared again,
//     with a fresh sandbox;
//   - the same policy in a SessionPool of another namespace is another
//     daemon pool;
//   - resized to 0, node-a's pool goes; selecting node-b instead, it
//     moves: node-a's status entry goes, node-b's pool and entry come;
//     a Session naming it without a node is placed on node-b, where a
//     sandbox is ready, not on node-a, which has more room;
//   - node-b's room for SessionPools (its session limit less its
//     capacity) goes to the older SessionPool; a newer one says it has
//     no room, and gets it once the older one is deleted;
//   - deleted SessionPools leave no pool, and once the agents stopped
//     nothing of them is left.
func TestSessionPools(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	k := startCluster(t)
	c, kubeconfig := k.c, k.kubeconfig
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "other"}}); err != nil {
		t.Fatal(err)
	}
	var a, b *agentproc.Proc
	var wg sync.WaitGroup
	wg.Go(func() {
		a = startNode(t, env, kubeconfig, "node-a", 11, "--node-capacity", "4", "--node-labels", "airlock.test/node=a")
	})
	wg.Go(func() {
		// A session limit of 3, 2 of them for Sessions: room for one
		// prepared sandbox.
		b = startNode(t, env, kubeconfig, "node-b", 12, "--node-capacity", "2", "--node-labels", "airlock.test/node=b",
			"--admission", limitedAdmission(t, 3))
	})
	wg.Wait()
	nodes := map[string]*agentproc.Proc{"node-a": a, "node-b": b}
	t.Logf("two nodes up: %s", time.Since(began).Round(time.Millisecond))

	mkPool := func(ns, name string, size int32, sel map[string]string, edit ...func(*policies.Policy)) *v1alpha1.SessionPool {
		t.Helper()
		sp := &v1alpha1.SessionPool{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: v1alpha1.SessionPoolSpec{
				Policy: policies.Policy{Label: "pooled", Image: daemontest.AgentImage},
				Size:   size, NodeSelector: sel,
			},
		}
		for _, e := range edit {
			e(&sp.Spec.Policy)
		}
		if err := c.Create(t.Context(), sp); err != nil {
			t.Fatalf("create SessionPool %s/%s: %v", ns, name, err)
		}
		return sp
	}
	getPool := func(ns, name string) *v1alpha1.SessionPool {
		t.Helper()
		var sp v1alpha1.SessionPool
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: name}, &sp); err != nil {
			t.Fatalf("get SessionPool %s/%s: %v", ns, name, err)
		}
		return &sp
	}
	// waitPool waits until each node in want keeps one daemon pool of
	// SessionPool ns/name with want[node] ready, the others none, and its
	// status says the same of each node, for its current generation.
	waitPool := func(ns, name string, want map[string]int) {
		t.Helper()
		kubetest.Eventually(t, 90*time.Second, fmt.Sprintf("SessionPool %s/%s ready %v", ns, name, want), func() (bool, string) {
			var state []string
			ok := true
			for node, n := range nodes {
				ps := pools(t, n, ns, name)
				w, selected := want[node]
				if selected && (len(ps) != 1 || ps[0].Ready != w) || !selected && len(ps) != 0 {
					ok = false
				}
				state = append(state, fmt.Sprintf("%s: %+v", node, ps))
			}
			sp := getPool(ns, name)
			total := 0
			for _, w := range want {
				total += w
			}
			if len(sp.Status.Nodes) != len(want) || int(sp.Status.Ready) != total || sp.Status.ObservedGeneration != sp.Generation {
				ok = false
			}
			for _, e := range sp.Status.Nodes {
				if w, selected := want[e.Node]; !selected || int(e.Ready) != w || e.ObservedGeneration != sp.Generation || e.Reason != "" {
					ok = false
				}
			}
			return ok, fmt.Sprintf("%s; status %+v (generation %d)", strings.Join(state, "; "), sp.Status, sp.Generation)
		})
	}

	// The attack: a cluster user's SessionPool whose policy admission
	// refuses (the host's / mounted; only /tmp is admitted) prepares
	// nothing, on any node.
	phase := time.Now()
	mkPool("default", "escape", 2, nil, func(p *policies.Policy) {
		p.Mounts = []policies.Mount{{HostPath: "/", Target: "/host"}}
	})
	kubetest.Eventually(t, 30*time.Second, "both nodes report the refusal", func() (bool, string) {
		sp := getPool("default", "escape")
		refused := 0
		for _, e := range sp.Status.Nodes {
			if e.Reason == agent.ReasonRefused && strings.Contains(e.Message, `mount "/" refused`) && e.Ready == 0 {
				refused++
			}
		}
		return refused == 2, fmt.Sprintf("status %+v", sp.Status)
	})
	// Filling is asynchronous: a pool made in spite of the refusal would
	// show within a moment.
	for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(200 * time.Millisecond) {
		for name, n := range nodes {
			if all, err := n.API.ListPools(t.Context()); err != nil || len(all) != 0 {
				t.Fatalf("node %s keeps pools for a refused SessionPool: %+v (%v)", name, all, err)
			}
			if list, err := n.API.ListSessions(t.Context()); err != nil || len(list) != 0 {
				t.Fatalf("node %s has sessions: %+v (%v)", name, list, err)
			}
		}
	}
	for name, n := range nodes {
		if !strings.Contains(n.Log.String(), "SessionPool refused by this node's admission policy") {
			t.Errorf("node %s does not log the refusal", name)
		}
	}
	t.Logf("refused SessionPool: %s", time.Since(phase).Round(time.Millisecond))

	// A pool of one sandbox on node-a.
	phase = time.Now()
	onA := map[string]string{"airlock.test/node": "a"}
	mkPool("default", "warm", 1, onA)
	waitPool("default", "warm", map[string]int{"node-a": 1})
	t.Logf("pool ready on node-a: %s", time.Since(phase).Round(time.Millisecond))

	// A Session naming it starts warm; the pool refills.
	phase = time.Now()
	k.create("w1", []string{"sh", "-c", "exit 3"}, onNode("a"), func(s *v1alpha1.Session) { s.Spec.PoolName = "warm" })
	w1 := k.waitState("w1", v1alpha1.SessionExited, 60*time.Second)
	if v, err := a.API.InspectSession(t.Context(), w1.Status.ID); err != nil || !v.Warm || v.ExitCode == nil || *v.ExitCode != 3 || !w1.Status.Warm {
		t.Errorf("local session %s of a Session naming the pool: %+v (%v), status %+v, want warm, exit code 3", w1.Status.ID, v, err, w1.Status)
	}
	if c := meta.FindStatusCondition(w1.Status.Conditions, agent.ConditionWarm); c == nil || c.Status != metav1.ConditionTrue || c.Reason != agent.ReasonPreparedSandbox {
		t.Errorf("Session w1's Warm condition: %+v, want True, %s", c, agent.ReasonPreparedSandbox)
	}
	waitPool("default", "warm", map[string]int{"node-a": 1})
	if ps := pools(t, a, "default", "warm"); ps[0].Hits != 1 {
		t.Errorf("pool after a warm start: %+v, want 1 hit", ps[0])
	}
	// A Session naming it whose policy differs runs cold, saying in what.
	k.create("differs", []string{"true"}, onNode("a"), func(s *v1alpha1.Session) {
		s.Spec.PoolName = "warm"
		s.Spec.Policy.Env = map[string]string{"EXTRA": "1"}
	})
	differs := k.waitState("differs", v1alpha1.SessionExited, 60*time.Second)
	if c := meta.FindStatusCondition(differs.Status.Conditions, agent.ConditionWarm); c == nil || c.Status != metav1.ConditionFalse ||
		c.Reason != agent.ReasonPolicyDiffers || !strings.Contains(c.Message, "differs from pool") || !strings.Contains(c.Message, "in env (") {
		t.Errorf("Session differs's Warm condition: %+v, want False, %s, naming env", c, agent.ReasonPolicyDiffers)
	}
	if ps := pools(t, a, "default", "warm"); ps[0].Hits != 1 {
		t.Errorf("pool after a Session whose policy differs: %+v, want still 1 hit", ps[0])
	}
	// A Session not naming it, of the same policy, runs cold: the pool's
	// sandboxes are its SessionPool's Sessions'.
	k.create("cold", []string{"true"}, onNode("a"), func(s *v1alpha1.Session) { s.Spec.Policy.Label = "pooled" })
	cold := k.waitState("cold", v1alpha1.SessionExited, 60*time.Second)
	if v, err := a.API.InspectSession(t.Context(), cold.Status.ID); err != nil || v.Warm {
		t.Errorf("local session of a Session naming no pool: %+v (%v), want cold", v, err)
	}
	// The reserved label prefix is refused on a Session naming no pool.
	k.create("sneak", []string{"true"}, onNode("a"), func(s *v1alpha1.Session) { s.Spec.Policy.Label = agent.PoolLabel("default", "warm") })
	if s := k.waitState("sneak", v1alpha1.SessionFailed, 60*time.Second); s.Status.Reason != agent.ReasonRefused || !strings.Contains(s.Status.Message, "reserved") {
		t.Errorf("Session carrying a pool's label without naming it: status %+v, want Failed, refused, the prefix reserved", s.Status)
	}
	if ps := pools(t, a, "default", "warm"); ps[0].Hits != 1 {
		t.Errorf("pool after a cold and a refused Session: %+v, want still 1 hit", ps[0])
	}
	k.deleteAll(60 * time.Second)
	t.Logf("warm start and refill: %s", time.Since(phase).Round(time.Millisecond))

	// node-a's agent killed and restarted: the daemon's pools went with
	// it (the new daemon removes the sandboxes the old one prepared), and
	// the agent declares them again from the SessionPools.
	phase = time.Now()
	old := pools(t, a, "default", "warm")[0].ReadyIDs
	a.Kill()
	a.Restart()
	waitPool("default", "warm", map[string]int{"node-a": 1})
	if now := pools(t, a, "default", "warm")[0].ReadyIDs; slices.Equal(now, old) {
		t.Errorf("after a restart the pool holds %v, the sandboxes the killed daemon prepared", now)
	}
	t.Logf("agent restarted: %s", time.Since(phase).Round(time.Millisecond))

	// The same policy in another namespace's SessionPool: another pool.
	phase = time.Now()
	mkPool("other", "warm", 1, onA)
	waitPool("other", "warm", map[string]int{"node-a": 1})
	if all, err := a.API.ListPools(t.Context()); err != nil || len(all) != 2 || all[0].Key == all[1].Key {
		t.Errorf("node-a's pools with two SessionPools of one policy: %+v (%v), want two", all, err)
	}
	if err := c.Delete(t.Context(), getPool("other", "warm")); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, "other/warm's pool removed", func() (bool, string) {
		ps := pools(t, a, "other", "warm")
		return len(ps) == 0, fmt.Sprintf("%+v", ps)
	})
	waitPool("default", "warm", map[string]int{"node-a": 1})
	t.Logf("one policy, two namespaces: %s", time.Since(phase).Round(time.Millisecond))

	// Resized to 0: node-a's pool goes, its entry says 0.
	phase = time.Now()
	sp := getPool("default", "warm")
	sp.Spec.Size = 0
	if err := c.Update(t.Context(), sp); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, "default/warm resized to 0", func() (bool, string) {
		ps := pools(t, a, "default", "warm")
		sp = getPool("default", "warm")
		return len(ps) == 0 && len(sp.Status.Nodes) == 1 && sp.Status.Nodes[0].Ready == 0 && sp.Status.Nodes[0].ObservedGeneration == sp.Generation,
			fmt.Sprintf("pools %+v; status %+v", ps, sp.Status)
	})
	t.Logf("pool resized to 0: %s", time.Since(phase).Round(time.Millisecond))

	// Moved to node-b, size 1 again: node-a's entry goes.
	phase = time.Now()
	sp.Spec.Size = 1
	sp.Spec.NodeSelector = map[string]string{"airlock.test/node": "b"}
	if err := c.Update(t.Context(), sp); err != nil {
		t.Fatal(err)
	}
	waitPool("default", "warm", map[string]int{"node-b": 1})
	t.Logf("pool moved to node-b: %s", time.Since(phase).Round(time.Millisecond))

	// Placed where its pool has a sandbox ready: a Session naming the
	// pool, with no node, goes to node-b (2 places) rather than node-a
	// (4, the most room), and starts warm.
	k.create("placed-warm", []string{"true"}, func(s *v1alpha1.Session) { s.Spec.PoolName = "warm" })
	if pw := k.waitState("placed-warm", v1alpha1.SessionExited, 60*time.Second); pw.Spec.NodeName != "node-b" || !pw.Status.Warm {
		t.Errorf("a Session naming the pool ready on node-b: placed on %q, warm %v; want node-b, warm", pw.Spec.NodeName, pw.Status.Warm)
	}
	k.deleteAll(60 * time.Second)

	// No room: node-b keeps one sandbox for SessionPools (its session
	// limit 3 less its capacity 2), the older SessionPool's; a newer one
	// gets none, then the room once the older one is gone.
	phase = time.Now()
	mkPool("default", "big", 2, map[string]string{"airlock.test/node": "b"})
	bigIs := func(ready int, msg string) {
		t.Helper()
		kubetest.Eventually(t, 90*time.Second, fmt.Sprintf("SessionPool big: %d ready on node-b, %q", ready, msg), func() (bool, string) {
			sp := getPool("default", "big")
			ps := pools(t, b, "default", "big")
			ok := len(sp.Status.Nodes) == 1 && sp.Status.Nodes[0].Node == "node-b" && int(sp.Status.Nodes[0].Ready) == ready &&
				sp.Status.Nodes[0].Reason == agent.ReasonNoRoom && strings.Contains(sp.Status.Nodes[0].Message, msg) &&
				(ready == 0 && len(ps) == 0 || ready > 0 && len(ps) == 1 && ps[0].Ready == ready && ps[0].Size == ready)
			return ok, fmt.Sprintf("status %+v; pools %+v", sp.Status, ps)
		})
	}
	bigIs(0, "0 of its 2 sandboxes fit in the room this node keeps for SessionPools, 1")
	waitPool("default", "warm", map[string]int{"node-b": 1})
	if err := c.Delete(t.Context(), getPool("default", "warm")); err != nil {
		t.Fatal(err)
	}
	bigIs(1, "1 of its 2 sandboxes fit")
	t.Logf("room for SessionPools: %s", time.Since(phase).Round(time.Millisecond))

	// Deleted: nothing left.
	phase = time.Now()
	if err := c.DeleteAllOf(t.Context(), &v1alpha1.SessionPool{}, client.InNamespace("default")); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, "every pool removed", func() (bool, string) {
		var state []string
		ok := true
		for name, n := range nodes {
			all, err := n.API.ListPools(t.Context())
			ok = ok && err == nil && len(all) == 0
			state = append(state, fmt.Sprintf("%s: %+v (%v)", name, all, err))
		}
		return ok, strings.Join(state, "; ")
	})
	t.Logf("pools deleted: %s", time.Since(phase).Round(time.Millisecond))
	for name, n := range nodes {
		if left, err := n.API.ListSessions(t.Context()); err != nil || len(left) != 0 {
			t.Errorf("node %s: %+v (%v)", name, left, err)
		}
		if err := n.Stop(); err != nil {
			t.Error(err)
		}
		agentproc.WantNothingLeft(t, n.Root)
	}
	t.Logf("TestSessionPools took %s", time.Since(began).Round(time.Millisecond))
}

// limitedAdmission writes admissionFile's policy with a session limit.
func limitedAdmission(t *testing.T, sessions int) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "admission.hcl")
	hcl := fmt.Sprintf("admission {\n  host_paths = [\"/tmp\"]\n  limits {\n    sessions = %d\n  }\n}\n", sessions)
	if err := os.WriteFile(p, []byte(hcl), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
