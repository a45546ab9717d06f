package agent_test

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// maxAgentWritesPerSession bounds what one Session costs the API server in
// writes made by node agents (placement, finalizers, status), from its
// creation to its deletion: the figure docs/scale-out.md's fleet
// arithmetic rests on. A status written on every small change would break it
// first.
const maxAgentWritesPerSession = 10

// maxAgentReadsPerSession bounds the node agent's reads (GETs; watches
// apart) per Session: its writes start from its cache or its last write,
// and read only after a conflict or to confirm a Session is gone.
const maxAgentReadsPerSession = 3

// agentUserAgent is the user agent airlockd's Kubernetes clients send,
// followed by " node/NAME" (the leader election's adds
// "/leader-election"): the audit log's events from node agents are those
// that start with it.
const agentUserAgent = "airlockd/node-agent"

// tally counts audit events by "verb resource[/subresource]".
type tally map[string]int

// agentTally counts the node agents' requests among events: writes and
// reads apart. Refused requests count too: they cost the apiserver as
// much.
func agentTally(events []kubetest.AuditEvent) (writes, reads tally) {
	writes, reads = tally{}, tally{}
	for _, e := range events {
		if !strings.HasPrefix(e.UserAgent, agentUserAgent) || e.Resource() == "" {
			continue
		}
		key := e.Verb + " " + e.Resource()
		if e.IsWrite() {
			writes[key]++
		} else {
			reads[key]++
		}
	}
	return writes, reads
}

func (t tally) total() int {
	n := 0
	for _, v := range t {
		n += v
	}
	return n
}

// per is t's counts divided by n, one decimal, in key order.
func (t tally) per(n float64) string {
	var b strings.Builder
	for _, k := range slices.Sorted(maps.Keys(t)) {
		fmt.Fprintf(&b, "%s%s %.1f", map[bool]string{true: "; "}[b.Len() > 0], k, float64(t[k])/n)
	}
	return b.String()
}

// watchEvents reads, from the apiserver's /metrics, the watch events it
// has sent to watchers, by resource (apiserver_watch_events_total): the
// fan-out the audit log does not show.
func watchEvents(t *testing.T, cfg *rest.Config) map[string]float64 {
	t.Helper()
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Get(strings.TrimSuffix(cfg.Host, "/") + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET /metrics: %s: %s", resp.Status, b)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "apiserver_watch_events_total{")
		if !ok {
			continue
		}
		labelText, rest, ok := strings.Cut(line, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", sc.Text(), err)
		}
		for _, kv := range strings.Split(labelText, ",") {
			if k, val, ok := strings.Cut(kv, "="); ok && (k == "resource" || k == "kind") {
				out[strings.Trim(val, `"`)] += v
				break
			}
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// auditSince returns the audit events after the first n, and the new n.
func auditSince(t *testing.T, cp *kubetest.ControlPlane, n int) ([]kubetest.AuditEvent, int) {
	t.Helper()
	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	return events[n:], len(events)
}

// TestAPICostPerSession measures what Sessions cost the API server, on a
// real control plane with two real node agents, node-a standing for
// placement (and leading) and node-b started with
// --kubernetes-controller=false as a fleet's nodes are
// (deploy/kubernetes-fleet), counted from the apiserver's own audit log
// by the agents' user agents: the writes and reads the agents make per
// Session, from creation to deletion, by verb and resource; the watch
// events sent per Session; and, with no Session, what idle nodes cost
// (their Lease renewals, the leader's). It fails if the agents' writes or
// reads per Session exceed their bounds, an idle node renews more often
// than its lease asks or reads at all, or node-b lists or watches
// anything of the cluster but its own Sessions and the SessionApprovals;
// and logs the figures docs/scale-out.md uses. Rerun it alone:
//
//	AIRLOCK_BIN_DIR=$PWD/_output/bin AIRLOCK_AGENT_IMAGE=$(cat _output/agent-image.path) \
//	  go test ./kube/agent -run TestAPICostPerSession -count=1 -v
func TestAPICostPerSession(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	k := startCluster(t)
	cp, c, kubeconfig := k.cp, k.c, k.kubeconfig
	const lease = 8 * time.Second
	startNode(t, env, kubeconfig, "node-a", 1, "--node-capacity", "16", "--node-lease-duration", lease.String())
	startNode(t, env, kubeconfig, "node-b", 2, "--node-capacity", "16", "--node-lease-duration", lease.String(),
		"--kubernetes-controller=false")

	// Idle nodes, once registered and node-a leading placement: their
	// heartbeats only.
	kubetest.Eventually(t, time.Minute, "node-a and node-b registered, node-a leading placement", func() (bool, string) {
		var l coordinationv1.Lease
		if err := c.Get(t.Context(), client.ObjectKey{Namespace: agent.LeaseNamespace, Name: agent.PlacementLease}, &l); err != nil {
			return false, err.Error()
		}
		// The holder is the node's name and its term's UUID.
		if l.Spec.HolderIdentity == nil || !strings.HasPrefix(*l.Spec.HolderIdentity, "node-a_") {
			return false, "placement not yet held by node-a"
		}
		for _, name := range []string{"node-a", "node-b"} {
			var n v1alpha1.AirlockNode
			if err := c.Get(t.Context(), client.ObjectKey{Name: name}, &n); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
	_, cursor := auditSince(t, cp, 0)
	const idle = 4 * lease
	time.Sleep(idle)
	var events []kubetest.AuditEvent
	events, cursor = auditSince(t, cp, cursor)
	idleWrites, idleReads := agentTally(events)
	t.Logf("two idle nodes, %s lease, over %s: writes %v, reads %v", lease, idle, idleWrites, idleReads)
	// A kubelet-like renewal every quarter of the lease for each node,
	// and the placement leader's (client-go's leader election renews
	// every retry period: a sixth of the lease); nothing else but the
	// nodes' status refresh.
	renewals := idleWrites["update leases"]
	if want := int(2*idle/(lease/4) + idle/(lease/6)); renewals < want-4 || renewals > want+4 {
		t.Errorf("two idle nodes and their placement leader renewed Leases %d times in %s, want about %d (a quarter lease each, and a sixth)", renewals, idle, want)
	}
	if other := idleWrites.total() - renewals; other > 2*(int(idle/(5*time.Second))+1) {
		t.Errorf("idle nodes wrote %d times in %s besides renewing Leases (%v): more than their status refresh", other, idle, idleWrites)
	}
	// Renewals and status writes start from the last write: an idle
	// node reads its AirlockNode once a minute (agent.nodeCheckEvery),
	// and nothing else but its watches.
	gets := 0
	for key, v := range idleReads {
		if !strings.HasPrefix(key, "watch ") {
			gets += v
		}
	}
	if gets > 2*(int(idle/time.Minute)+1) {
		t.Errorf("idle nodes read %d times in %s (%v): their renewals and status reports should not read", gets, idle, idleReads)
	}

	// N Sessions, created, run to their end, deleted (each holds a place
	// until it is deleted: the node's capacity is n).
	const n = 16
	watchBefore := watchEvents(t, cp.Config)
	for i := range n {
		k.create(fmt.Sprintf("s%02d", i), []string{"true"})
	}
	kubetest.Eventually(t, 3*time.Minute, "every Session Exited", func() (bool, string) {
		var list v1alpha1.SessionList
		if err := c.List(t.Context(), &list); err != nil {
			return false, err.Error()
		}
		ended := 0
		for _, s := range list.Items {
			if s.Status.State == v1alpha1.SessionExited {
				ended++
			}
		}
		return ended == n, fmt.Sprintf("%d of %d exited", ended, n)
	})
	k.deleteAll(time.Minute)
	events, _ = auditSince(t, cp, cursor)
	watchAfter := watchEvents(t, cp.Config)
	writes, reads := agentTally(events)

	// node-b, not standing for placement, asks the cluster only for its
	// own Sessions and AirlockNode (field-selected), the SessionApprovals
	// and the SessionPools: it keeps no cache of every Session,
	// AirlockNode and Lease.
	all, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	ranB := 0
	for _, e := range all {
		if !strings.HasPrefix(e.UserAgent, agentUserAgent+" node/node-b") {
			continue
		}
		if e.Verb != "list" && e.Verb != "watch" {
			continue
		}
		switch e.Resource() {
		case "sessions":
			if !strings.Contains(e.RequestURI, "fieldSelector=spec.nodeName%3Dnode-b") {
				t.Errorf("node-b, with --kubernetes-controller=false, asked for Sessions not its own: %s %s", e.Verb, e.RequestURI)
			}
			ranB++
		case "airlocknodes":
			if !strings.Contains(e.RequestURI, "fieldSelector=metadata.name%3Dnode-b") {
				t.Errorf("node-b, with --kubernetes-controller=false, asked for AirlockNodes not its own: %s %s", e.Verb, e.RequestURI)
			}
		case "sessionapprovals", "sessionpools":
		default:
			t.Errorf("node-b, with --kubernetes-controller=false, asked for %s: %s %s", e.Resource(), e.Verb, e.RequestURI)
		}
	}
	if ranB == 0 {
		t.Errorf("no list or watch of Sessions from node-b in the audit log: is its user agent %q?", agentUserAgent+" node/node-b")
	}

	sessionWrites := tally{}
	for key, v := range writes {
		if _, res, _ := strings.Cut(key, " "); strings.HasPrefix(res, "sessions") {
			sessionWrites[key] = v
		}
	}
	perSession := float64(sessionWrites.total()) / n
	var b strings.Builder
	fmt.Fprintf(&b, "%d Sessions (`true`) created, run, deleted on two nodes, one of them leading placement (counted from the apiserver's audit log):\n", n)
	fmt.Fprintf(&b, "  agent writes to Sessions, per Session: %.1f (%s)\n", perSession, sessionWrites.per(n))
	fmt.Fprintf(&b, "  all agent writes in the phase, per Session: %s\n", writes.per(n))
	fmt.Fprintf(&b, "  agent reads in the phase, per Session: %s\n", reads.per(n))
	fmt.Fprintf(&b, "  watch events sent, per Session:")
	for _, res := range slices.Sorted(maps.Keys(watchAfter)) {
		if d := watchAfter[res] - watchBefore[res]; d > 0 {
			fmt.Fprintf(&b, " %s %.1f", res, d/n)
		}
	}
	fmt.Fprintf(&b, "\n  two idle nodes and their leader: %.2f Lease writes/s with a %s lease; all writes %v, reads %v", float64(renewals)/idle.Seconds(), lease, idleWrites, idleReads)
	t.Log(b.String())
	if perSession > maxAgentWritesPerSession {
		t.Errorf("node agents wrote %.1f times per Session (%v), want at most %d", perSession, sessionWrites, maxAgentWritesPerSession)
	}
	if r := float64(reads["get sessions"]) / n; r > maxAgentReadsPerSession {
		t.Errorf("node agents read Sessions %.1f times per Session, want at most %d (writes start from the cache or the last write)", r, maxAgentReadsPerSession)
	}
	if perSession < 3 {
		// Placement, the finalizer and at least one status: fewer means
		// the audit log did not see the agent (its user agent renamed?).
		t.Errorf("node agents wrote %.1f times per Session (%v): too few to be the agent's; is its user agent still %q?", perSession, sessionWrites, agentUserAgent)
	}
}
