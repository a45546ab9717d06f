package agent_test

import (
	"bufio"
	"fmt"
	"io"
	"maps"
	"net/http"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// apiCounts are the API server's own counters (its /metrics): requests
// by verb and resource, and watch events sent to watchers by resource.
type apiCounts struct {
	requests map[string]float64 // "VERB resource[/subresource]"
	watch    map[string]float64 // resource
}

// scrapeAPI reads the counters from the API server's /metrics.
func scrapeAPI(t *testing.T, cfg *rest.Config) apiCounts {
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
	out := apiCounts{requests: map[string]float64{}, watch: map[string]float64{}}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || (name != "apiserver_request_total" && name != "apiserver_watch_events_total") {
			continue
		}
		labelText, valueText, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(valueText), 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(labelText, ",") {
			if k, val, ok := strings.Cut(kv, "="); ok {
				labels[k] = strings.Trim(val, `"`)
			}
		}
		res := labels["resource"]
		if res == "" {
			res = labels["kind"]
		}
		if name == "apiserver_watch_events_total" {
			out.watch[res] += v
			continue
		}
		if labels["subresource"] != "" {
			res += "/" + labels["subresource"]
		}
		out.requests[labels["verb"]+" "+res] += v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// since is c less before, dropping what did not move.
func (c apiCounts) since(before apiCounts) apiCounts {
	d := apiCounts{requests: map[string]float64{}, watch: map[string]float64{}}
	for k, v := range c.requests {
		if n := v - before.requests[k]; n > 0 {
			d.requests[k] = n
		}
	}
	for k, v := range c.watch {
		if n := v - before.watch[k]; n > 0 {
			d.watch[k] = n
		}
	}
	return d
}

func isWrite(verb string) bool {
	switch verb {
	case "POST", "PUT", "PATCH", "DELETE", "DELETECOLLECTION", "APPLY":
		return true
	}
	return false
}

// TestAPICostPerSession measures what Sessions cost the API server, on a
// real control plane with a real node agent (which also leads placement):
// the writes node agents make per Session, from creation to deletion, by
// verb and resource, and the watch events sent per Session; and, with no
// Session, what an idle node costs (its Lease renewals). It fails if the
// agents' writes per Session exceed maxAgentWritesPerSession, and logs
// the figures docs/scale-out.md uses. Rerun it alone:
//
//	AIRLOCK_BIN_DIR=$PWD/_output/bin AIRLOCK_AGENT_IMAGE=$(cat _output/agent-image.path) \
//	  go test ./kube/agent -run TestAPICostPerSession -count=1 -v
func TestAPICostPerSession(t *testing.T) {
	testutil.RequiresRoot(t)
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	cp := kubetest.Start(t)
	dir, err := kubetest.CRDDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kubetest.InstallCRDs(t.Context(), cp.Config, dir); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := cp.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	scheme, err := agent.Scheme()
	if err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	k := &cluster{t: t, c: c}
	// What deploy/kubernetes/namespace.yaml makes: the agent does not.
	if err := c.Create(t.Context(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agent.LeaseNamespace}}); err != nil {
		t.Fatal(err)
	}
	const lease = 8 * time.Second
	startNode(t, env, kubeconfig, "node-a", 1, "--node-capacity", "16", "--node-lease-duration", lease.String())

	// An idle node: its heartbeat only.
	idle := 2 * lease
	before := scrapeAPI(t, cp.Config)
	time.Sleep(idle)
	idleCost := scrapeAPI(t, cp.Config).since(before)
	renewals := idleCost.requests["PUT leases"]
	t.Logf("idle node, %s lease, over %s: %v", lease, idle, idleCost.requests)
	// A kubelet-like renewal every quarter of the lease, and the
	// placement leader's (client-go's leader election renews every retry
	// period: a sixth of the lease).
	if want := idle.Seconds()/(lease.Seconds()/4) + idle.Seconds()/(lease.Seconds()/6); renewals < want-3 || renewals > want+3 {
		t.Errorf("an idle node and its placement leader renewed Leases %.0f times in %s, want about %.0f (a quarter lease, and a sixth)", renewals, idle, want)
	}

	// N Sessions, created, run to their end, deleted (each holds a place
	// until it is deleted: the node's capacity is n).
	const n = 16
	before = scrapeAPI(t, cp.Config)
	for i := range n {
		k.create(fmt.Sprintf("s%02d", i), []string{"true"})
	}
	eventually(t, 3*time.Minute, "every Session Exited", func() (bool, string) {
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
	cost := scrapeAPI(t, cp.Config).since(before)

	// The test's own writes: n creates and one collection delete.
	own := map[string]float64{"POST sessions": n, "DELETECOLLECTION sessions": 1}
	agentWrites := map[string]float64{}
	total := 0.0
	for _, key := range slices.Sorted(maps.Keys(cost.requests)) {
		verb, res, _ := strings.Cut(key, " ")
		if !isWrite(verb) || !strings.HasPrefix(res, "sessions") {
			continue
		}
		if w := cost.requests[key] - own[key]; w > 0 {
			agentWrites[key] = w
			total += w
		}
	}
	perSession := total / n
	var b strings.Builder
	fmt.Fprintf(&b, "%d Sessions (`true`) created, run, deleted through one node agent:\n", n)
	fmt.Fprintf(&b, "  agent writes to Sessions: %.1f per Session", perSession)
	for _, key := range slices.Sorted(maps.Keys(agentWrites)) {
		fmt.Fprintf(&b, "; %s %.1f", key, agentWrites[key]/n)
	}
	fmt.Fprintf(&b, "\n  watch events sent, per Session:")
	for _, res := range slices.Sorted(maps.Keys(cost.watch)) {
		fmt.Fprintf(&b, " %s %.1f", res, cost.watch[res]/n)
	}
	fmt.Fprintf(&b, "\n  all requests in the phase:")
	for _, key := range slices.Sorted(maps.Keys(cost.requests)) {
		fmt.Fprintf(&b, " %s=%.0f", key, cost.requests[key])
	}
	fmt.Fprintf(&b, "\n  idle node: %.2f Lease writes/s with a %s lease", renewals/idle.Seconds(), lease)
	t.Log(b.String())
	if perSession > maxAgentWritesPerSession {
		t.Errorf("node agents wrote %.1f times per Session (%v), want at most %d", perSession, agentWrites, maxAgentWritesPerSession)
	}
	if perSession < 3 {
		// Placement, the finalizer and at least one status: fewer means
		// the counters did not see the agent (a metrics label renamed?).
		t.Errorf("node agents wrote %.1f times per Session (%v): too few to be the agent's; is /metrics read right?", perSession, agentWrites)
	}
}
