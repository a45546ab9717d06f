package agent_test

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
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

// poolPrompt bounds the time from a change of a node's daemon pool to its
// SessionPool's status.nodes[].ready saying so: the agent is told by the
// daemon, waits 200 ms for more, looks and writes. Its safety resync is a
// minute: a status this prompt was not written by it.
const poolPrompt = 5 * time.Second

// idleWindow is how long TestSessionPoolWake watches an idle SessionPool.
const idleWindow = 10 * time.Second

// lookedAt counts the agent's looks at SessionPool ns/name in its log
// (reconcilePool logs each at debug level).
func lookedAt(n *agentproc.Proc, ns, name string) int {
	c := 0
	for _, l := range strings.Split(n.Log.String(), "\n") {
		if strings.Contains(l, `msg="SessionPool looked at"`) && strings.Contains(l, "sessionpool="+ns+"/"+name) {
			c++
		}
	}
	return c
}

// step is one value seen, at a time.
type step struct {
	at    time.Time
	value string
}

// timeline records the values something takes, each when first seen.
type timeline struct {
	mu    sync.Mutex
	steps []step
}

func (tl *timeline) note(v string) {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	if len(tl.steps) == 0 || tl.steps[len(tl.steps)-1].value != v {
		tl.steps = append(tl.steps, step{time.Now(), v})
	}
}

// since returns the steps from i on.
func (tl *timeline) since(i int) []step {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return slices.Clone(tl.steps[min(i, len(tl.steps)):])
}

func (tl *timeline) len() int {
	tl.mu.Lock()
	defer tl.mu.Unlock()
	return len(tl.steps)
}

// first is when the steps from i on first took v; false if they did not.
func (tl *timeline) first(i int, v string) (time.Time, bool) {
	for _, s := range tl.since(i) {
		if s.value == v {
			return s.at, true
		}
	}
	return time.Time{}, false
}

func (tl *timeline) String() string { return stepsString(tl.since(0)) }

func stepsString(steps []step) string {
	var b strings.Builder
	for _, s := range steps {
		fmt.Fprintf(&b, " %s@%s", s.value, s.at.Format("15:04:05.000"))
	}
	return b.String()
}

// TestSessionPoolWake runs a node agent whose SessionPools are looked at
// only when something changed, the daemon telling it of its pools'
// changes, against a real control plane:
//   - a SessionPool's first sandbox becoming ready, a Session taking it,
//     and its replacement becoming ready each reach status.nodes[].ready
//     within poolPrompt of the daemon's pool showing it (the agent's
//     safety resync is a minute);
//   - an idle SessionPool, its pool full, is looked at at most once (the
//     safety resync) in idleWindow, and its status is not written;
//   - a resize that fills several sandboxes at once costs a few looks,
//     not one per poll: the figures are logged.
//
// Rerun it alone:
//
//	AIRLOCK_BIN_DIR=$PWD/_output/bin AIRLOCK_AGENT_IMAGE=$(cat _output/agent-image.path) \
//	  go test ./kube/agent -run TestSessionPoolWake -count=1 -v
func TestSessionPoolWake(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	began := time.Now()
	k := startCluster(t)
	c := k.c
	// At debug level: the agent logs each look at a SessionPool.
	n := startNode(t, env, k.kubeconfig, "node-p", 23, "--node-capacity", "2", "--log-level", "debug")

	// The daemon's pool, polled every 50 ms: its ready count and hits
	// ("ready=R hits=H"), and ids.
	var daemonTL, statusTL timeline
	var hits int
	var readyIDs []string
	var mu sync.Mutex
	stop := make(chan struct{})
	var wg sync.WaitGroup
	defer func() { close(stop); wg.Wait() }()
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(50 * time.Millisecond):
			}
			all, err := n.API.ListPools(t.Context())
			if err != nil {
				continue // stopped at the end
			}
			ps := slices.DeleteFunc(all, func(p api.Pool) bool { return p.Label != agent.PoolLabel("default", "wake") })
			if len(ps) != 1 {
				daemonTL.note("none")
				continue
			}
			mu.Lock()
			hits, readyIDs = int(ps[0].Hits), ps[0].ReadyIDs
			mu.Unlock()
			daemonTL.note(fmt.Sprintf("ready=%d hits=%d", ps[0].Ready, ps[0].Hits))
		}
	})
	// Its status, watched: every write of node-p's entry.
	w, err := c.Watch(t.Context(), &v1alpha1.SessionPoolList{}, client.InNamespace("default"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var writes int
	wg.Go(func() {
		for ev := range w.ResultChan() {
			sp, ok := ev.Object.(*v1alpha1.SessionPool)
			if !ok || sp.Name != "wake" || ev.Type != watch.Modified && ev.Type != watch.Added {
				continue
			}
			for _, e := range sp.Status.Nodes {
				if e.Node == "node-p" {
					mu.Lock()
					writes++
					mu.Unlock()
					statusTL.note(fmt.Sprint(e.Ready))
				}
			}
		}
	})
	// prompt checks that status took v within poolPrompt of the
	// daemon's pool taking dv, both from their steps dFrom and sFrom on,
	// and returns the lag.
	prompt := func(what, dv, v string, dFrom, sFrom int) time.Duration {
		t.Helper()
		var dAt, sAt time.Time
		kubetest.Eventually(t, 90*time.Second, what+": the daemon's pool at "+dv, func() (bool, string) {
			var ok bool
			dAt, ok = daemonTL.first(dFrom, dv)
			return ok, "daemon:" + daemonTL.String()
		})
		kubetest.Eventually(t, poolPrompt+time.Second, what+": status.nodes[node-p].ready "+v, func() (bool, string) {
			var ok bool
			sAt, ok = statusTL.first(sFrom, v)
			return ok, "status:" + statusTL.String() + "; daemon:" + daemonTL.String()
		})
		lag := sAt.Sub(dAt)
		if lag > poolPrompt {
			t.Errorf("%s: status.nodes[].ready took %s after the daemon's pool to say %s, want at most %s; status:%s; daemon:%s",
				what, lag.Round(time.Millisecond), v, poolPrompt, &statusTL, &daemonTL)
		}
		t.Logf("%s: status.nodes[].ready %s %s after the daemon's pool", what, v, lag.Round(time.Millisecond))
		return lag
	}

	// Its first sandbox becoming ready: the status said 0 first (the
	// pool was declared at the first look, and fills after).
	sp := &v1alpha1.SessionPool{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "wake"},
		Spec:       v1alpha1.SessionPoolSpec{Policy: policies.Policy{Label: "pooled", Image: daemontest.AgentImage}, Size: 1},
	}
	if err := c.Create(t.Context(), sp); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 90*time.Second, "status.nodes[node-p] written", func() (bool, string) {
		return statusTL.len() > 0, "status:" + statusTL.String()
	})
	if s := statusTL.since(0); s[0].value != "0" {
		t.Fatalf("the first status written said ready %s: the sandbox was ready before the agent's first look, which proves nothing of its being told", s[0].value)
	}
	filled := prompt("first sandbox prepared", "ready=1 hits=0", "1", 0, 0)

	// A Session taking it (it runs on, holding it), then its
	// replacement ready.
	dFrom, sFrom := daemonTL.len(), statusTL.len()
	mu.Lock()
	first := slices.Clone(readyIDs)
	mu.Unlock()
	k.create("taker", sleep("600"), func(s *v1alpha1.Session) { s.Spec.PoolName = "wake" })
	var dTake, dRepl time.Time
	kubetest.Eventually(t, 90*time.Second, "the daemon's pool: a sandbox taken and replaced", func() (bool, string) {
		var ok1, ok2 bool
		dTake, ok1 = daemonTL.first(dFrom, "ready=0 hits=1")
		dRepl, ok2 = daemonTL.first(dFrom, "ready=1 hits=1")
		return ok1 && ok2, "daemon:" + daemonTL.String()
	})
	// Status says 0, then 1. A replacement ready within poolSettle of
	// the take may make one look that sees it full: nothing to write.
	var sTake, sRepl time.Time
	for deadline := time.Now().Add(poolPrompt + time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		var ok1, ok2 bool
		sTake, ok1 = statusTL.first(sFrom, "0")
		sRepl, ok2 = statusTL.first(sFrom, "1")
		if ok1 && ok2 && sRepl.After(sTake) {
			break
		}
		sTake, sRepl = time.Time{}, time.Time{}
	}
	var taken, replaced time.Duration
	switch gap := dRepl.Sub(dTake); {
	case !sRepl.IsZero():
		taken, replaced = sTake.Sub(dTake), sRepl.Sub(dRepl)
		t.Logf("sandbox taken: status.nodes[].ready 0 %s after the daemon's pool; its replacement, %s later: 1 %s after",
			taken.Round(time.Millisecond), gap.Round(time.Millisecond), replaced.Round(time.Millisecond))
		if taken > poolPrompt || replaced > poolPrompt {
			t.Errorf("status.nodes[].ready took %s to say a sandbox was taken and %s to say its replacement was ready, want at most %s; status:%s; daemon:%s",
				taken.Round(time.Millisecond), replaced.Round(time.Millisecond), poolPrompt, &statusTL, &daemonTL)
		}
	case gap < time.Second && statusTL.len() == sFrom:
		t.Logf("sandbox taken and replaced %s later: looked at once, full, status unchanged", gap.Round(time.Millisecond))
	default:
		t.Errorf("sandbox taken, replaced %s later: status.nodes[].ready did not say 0 then 1 within %s; status:%s; daemon:%s",
			gap.Round(time.Millisecond), poolPrompt, &statusTL, &daemonTL)
	}
	mu.Lock()
	if hits != 1 || slices.Equal(readyIDs, first) {
		t.Errorf("the daemon's pool after the take: %d hits, ready %v (before: %v); want 1 hit, another sandbox", hits, readyIDs, first)
	}
	mu.Unlock()
	if s := k.get("taker"); !s.Status.Warm {
		t.Errorf("Session taker did not start warm: status %+v", s.Status)
	}

	// Idle: its pool full, nothing changing. The look its own last
	// status write causes is over within a second.
	time.Sleep(time.Second)
	mu.Lock()
	writesBefore := writes
	mu.Unlock()
	looksBefore := lookedAt(n, "default", "wake")
	time.Sleep(idleWindow)
	idleLooks := lookedAt(n, "default", "wake") - looksBefore
	mu.Lock()
	idleWrites := writes - writesBefore
	mu.Unlock()
	t.Logf("idle SessionPool over %s: %d looks, %d status writes", idleWindow, idleLooks, idleWrites)
	if idleLooks > 1 || idleWrites != 0 {
		t.Errorf("an idle SessionPool was looked at %d times in %s and its status written %d times; want at most one look (the safety resync) and no write",
			idleLooks, idleWindow, idleWrites)
	}

	// A burst: resized to 3 (two more) on a node that prepares 2 at
	// once.
	looksBefore = lookedAt(n, "default", "wake")
	mu.Lock()
	writesBefore = writes
	mu.Unlock()
	dFrom, sFrom = daemonTL.len(), statusTL.len()
	if err := c.Get(t.Context(), client.ObjectKeyFromObject(sp), sp); err != nil {
		t.Fatal(err)
	}
	sp.Spec.Size = 3
	if err := c.Update(t.Context(), sp); err != nil {
		t.Fatal(err)
	}
	grown := prompt("resized to 3", "ready=3 hits=1", "3", dFrom, sFrom)
	time.Sleep(time.Second)
	mu.Lock()
	burstWrites := writes - writesBefore
	mu.Unlock()
	burstLooks := lookedAt(n, "default", "wake") - looksBefore
	t.Logf("resized from 1 to 3: %d looks, %d status writes; daemon:%s", burstLooks, burstWrites, stepsString(daemonTL.since(dFrom)))

	k.deleteAll(60 * time.Second)
	if err := c.Delete(t.Context(), sp); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, "the pool removed", func() (bool, string) {
		ps := pools(t, n, "default", "wake")
		return len(ps) == 0, fmt.Sprintf("%+v", ps)
	})
	if left, err := n.API.ListSessions(t.Context()); err != nil || len(left) != 0 {
		t.Errorf("node-p: %+v (%v)", left, err)
	}
	if err := n.Stop(); err != nil {
		t.Error(err)
	}
	agentproc.WantNothingLeft(t, n.Root)
	t.Logf("lags from the daemon's pool to status.nodes[].ready: first sandbox %s, take %s, replacement %s, resize %s; idle %s: %d looks, %d writes; TestSessionPoolWake took %s",
		filled.Round(time.Millisecond), taken.Round(time.Millisecond), replaced.Round(time.Millisecond), grown.Round(time.Millisecond),
		idleWindow, idleLooks, idleWrites, time.Since(began).Round(time.Millisecond))
}
