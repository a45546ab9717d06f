package agent

import (
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

func TestChoose(t *testing.T) {
	mk := func(name string, capacity, used int, labels map[string]string) *node {
		return &node{name: name, capacity: capacity, used: used, labels: labels, registered: true, live: true}
	}
	sel := func(kv ...string) *v1alpha1.Session {
		s := &v1alpha1.Session{}
		if len(kv) > 0 {
			s.Spec.NodeSelector = map[string]string{kv[0]: kv[1]}
		}
		return s
	}
	for _, tt := range []struct {
		name    string
		s       *v1alpha1.Session
		nodes   []*node
		want    string
		wantWhy []string
		warm    map[string]int32
	}{
		{"most free places", sel(), []*node{mk("a", 1, 0, nil), mk("b", 4, 1, nil)}, "b", nil, nil},
		{"tie: fewer used", sel(), []*node{mk("a", 3, 1, nil), mk("b", 2, 0, nil)}, "b", nil, nil},
		{"tie: by name", sel(), []*node{mk("b", 2, 0, nil), mk("a", 2, 0, nil)}, "a", nil, nil},
		{"full", sel(), []*node{mk("a", 1, 1, nil), mk("b", 2, 2, nil)}, "", []string{"a: full (1 of 1)", "b: full (2 of 2)"}, nil},
		{"zero capacity", sel(), []*node{mk("a", 0, 0, nil)}, "", []string{"a: full (0 of 0)"}, nil},
		{"selector", sel("zone", "z2"), []*node{mk("a", 9, 0, map[string]string{"zone": "z1"}), mk("b", 1, 0, map[string]string{"zone": "z2"})}, "b", nil, nil},
		{"selector matches none", sel("zone", "z3"), []*node{mk("a", 9, 0, map[string]string{"zone": "z1"})}, "", []string{"a: labels do not match the nodeSelector"}, nil},
		{"not live", sel(), []*node{{name: "a", capacity: 5, registered: true}}, "", []string{"a: not live"}, nil},
		{"unregistered", sel(), []*node{{name: "a", capacity: 5, live: true}}, "", []string{"a: no AirlockNode"}, nil},
		{"unschedulable", sel(), []*node{{name: "a", capacity: 5, live: true, registered: true, unschedulable: true}, mk("b", 1, 0, nil)}, "b", nil, nil},
		{"no nodes", sel(), nil, "", []string{"no node agent is registered"}, nil},
		{"a ready sandbox over more room", sel(), []*node{mk("a", 4, 0, nil), mk("b", 2, 1, nil)}, "b", nil, map[string]int32{"b": 1}},
		{"none ready: by room", sel(), []*node{mk("a", 4, 0, nil), mk("b", 2, 1, nil)}, "a", nil, map[string]int32{"b": 0}},
		{"ready but full", sel(), []*node{mk("a", 4, 0, nil), mk("b", 1, 1, nil)}, "a", nil, map[string]int32{"b": 1}},
		{"ready but not selected", sel("zone", "z1"), []*node{mk("a", 4, 0, map[string]string{"zone": "z1"}), mk("b", 2, 0, nil)}, "a", nil, map[string]int32{"b": 3}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			n, why := choose(tt.s, tt.nodes, tt.warm, nil)
			got := ""
			if n != nil {
				got = n.name
			}
			if got != tt.want {
				t.Fatalf("choose() = %q (%s), want %q", got, why, tt.want)
			}
			if (n == nil) == (why == "") {
				t.Errorf("choose() = %v, %q: want exactly one of a node and a reason", n, why)
			}
			for _, w := range tt.wantWhy {
				if !strings.Contains(why, w) {
					t.Errorf("choose() reason %q, want it to say %q", why, w)
				}
			}
		})
	}
}

func TestHoldsPlace(t *testing.T) {
	for _, tt := range []struct {
		state v1alpha1.SessionState
		id    string
		want  bool
	}{
		{"", "", true},
		{v1alpha1.SessionPlaced, "", true},
		{v1alpha1.SessionRunning, "x", true},
		{v1alpha1.SessionExited, "x", true},
		{v1alpha1.SessionReview, "x", true},
		{v1alpha1.SessionFailed, "", false},
		{v1alpha1.SessionFailed, "x", true},
		{v1alpha1.SessionLost, "x", false},
	} {
		s := &v1alpha1.Session{Status: v1alpha1.SessionStatus{State: tt.state, ID: tt.id}}
		if got := holdsPlace(s); got != tt.want {
			t.Errorf("holdsPlace(%q, id %q) = %v, want %v", tt.state, tt.id, got, tt.want)
		}
	}
}

// TestLeaseJudgedByTheControllersClock: a node is lost once the
// controller has not seen its Lease change for a lease duration by its
// own clock, whatever the Lease's renew time says; a node whose renew time
// is already older than its duration is not placed on; a node named only
// by a Session, without a Lease, is lost the controller's own lease
// duration after it first saw it.
func TestLeaseJudgedByTheControllersClock(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	p := newPlacer(nil, nil, 40*time.Second)
	p.now = func() time.Time { return now }
	secs := int32(3)
	lease := func(name string, renewed time.Time) coordinationv1.Lease {
		holder := name + "/id"
		rt := metav1.NewMicroTime(renewed)
		return coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: LeaseNamespace},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &rt}}
	}
	anodes := &v1alpha1.AirlockNodeList{Items: []v1alpha1.AirlockNode{
		{ObjectMeta: metav1.ObjectMeta{Name: "skewed"}, Status: v1alpha1.AirlockNodeStatus{Capacity: 1}},
		{ObjectMeta: metav1.ObjectMeta{Name: "stale"}, Status: v1alpha1.AirlockNodeStatus{Capacity: 1}},
		{ObjectMeta: metav1.ObjectMeta{Name: "fresh"}, Status: v1alpha1.AirlockNodeStatus{Capacity: 1}},
	}}
	sessions := &v1alpha1.SessionList{Items: []v1alpha1.Session{
		{ObjectMeta: metav1.ObjectMeta{Name: "s", UID: types.UID("u")}, Spec: v1alpha1.SessionSpec{NodeName: "ghost"}},
	}}
	leases := &coordinationv1.LeaseList{Items: []coordinationv1.Lease{
		lease("skewed", now.Add(time.Hour)),      // its clock is an hour ahead
		lease("stale", now.Add(-10*time.Second)), // not renewed for 10 s
		lease("fresh", now),
	}}
	nodes, recheck := p.nodes(now, sessions, anodes, leases)
	for name, want := range map[string][2]bool{ // live, lost
		"skewed": {true, false}, "stale": {false, false}, "fresh": {true, false}, "ghost": {false, false},
	} {
		if n := nodes[name]; n.live != want[0] || n.lost != want[1] {
			t.Errorf("at first sight: node %s live %v lost %v, want %v %v", name, n.live, n.lost, want[0], want[1])
		}
	}
	if recheck > 3*time.Second+20*time.Millisecond || recheck < 3*time.Second {
		t.Errorf("next pass in %s, want when the first live node could turn lost, 3s", recheck)
	}
	if nodes["ghost"].used != 1 {
		t.Errorf("the ghost node's used places %d, want the Session on it", nodes["ghost"].used)
	}

	// 2 s later "fresh" renewed; nothing is lost yet.
	now = now.Add(2 * time.Second)
	leases.Items[2] = lease("fresh", now)
	nodes, _ = p.nodes(now, sessions, anodes, leases)
	for name, n := range nodes {
		if n.lost {
			t.Errorf("2s later: node %s lost", name)
		}
	}
	// 3 s after first sight, every node not renewed since is lost,
	// "stale" by the controller's clock, not by its renew time.
	now = now.Add(1500 * time.Millisecond)
	nodes, _ = p.nodes(now, sessions, anodes, leases)
	for name, want := range map[string]bool{"skewed": true, "stale": true, "fresh": false, "ghost": false} {
		if nodes[name].lost != want {
			t.Errorf("3.5s after first sight: node %s lost %v, want %v", name, nodes[name].lost, want)
		}
	}
	now = now.Add(37 * time.Second)
	if nodes, _ = p.nodes(now, sessions, anodes, leases); !nodes["ghost"].lost {
		t.Errorf("40.5s after first sight: the node without a Lease is not lost")
	}
}

func TestLocalStatus(t *testing.T) {
	started := time.Date(2026, 1, 1, 12, 0, 0, 123456789, time.UTC)
	finished := started.Add(90 * time.Second)
	code := 7
	placedAt := metav1.NewTime(started.Add(-time.Second).Truncate(time.Second))
	prev := v1alpha1.SessionStatus{State: v1alpha1.SessionPlaced, Node: "n", PlacedAt: &placedAt}
	for _, tt := range []struct {
		name   string
		v      api.Session
		state  v1alpha1.SessionState
		reason string
	}{
		{"created", api.Session{ID: "i", State: api.StateCreated}, v1alpha1.SessionPlaced, ""},
		{"running", api.Session{ID: "i", State: api.StateRunning, Started: &started}, v1alpha1.SessionRunning, ""},
		{"exited", api.Session{ID: "i", State: api.StateStopped, Started: &started, Finished: &finished, ExitCode: &code, Reason: "exited"}, v1alpha1.SessionExited, "exited"},
		{"review", api.Session{ID: "i", State: api.StateStopped, Review: true, ExitCode: &code, Reason: "exited"}, v1alpha1.SessionReview, "exited"},
		{"unknown", api.Session{ID: "i", State: api.StateUnknown}, v1alpha1.SessionFailed, "error"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			st := localStatus(prev, &tt.v, "n", 3)
			if st.State != tt.state || st.Reason != tt.reason || st.ID != "i" || st.Node != "n" || st.ObservedGeneration != 3 || st.PlacedAt != prev.PlacedAt && !st.PlacedAt.Equal(prev.PlacedAt) {
				t.Errorf("localStatus = %+v, want state %s, reason %q, id, node, generation and placedAt kept", st, tt.state, tt.reason)
			}
			if tt.v.ExitCode != nil && (st.ExitCode == nil || int(*st.ExitCode) != *tt.v.ExitCode) {
				t.Errorf("exit code %v, want %d", st.ExitCode, *tt.v.ExitCode)
			}
			// Times as the API server keeps them, so that a status
			// read back compares equal and is not written again.
			if tt.v.Started != nil && (st.StartedAt == nil || st.StartedAt.Nanosecond() != 0 || !st.StartedAt.Equal(&metav1.Time{Time: started.Truncate(time.Second)})) {
				t.Errorf("startedAt %v, want %v to the second", st.StartedAt, started)
			}
		})
	}
}

func TestParseLabels(t *testing.T) {
	for _, tt := range []struct {
		in      string
		want    map[string]string
		wantErr bool
	}{
		{"", map[string]string{}, false},
		{"zone=z1", map[string]string{"zone": "z1"}, false},
		{"zone=z1, airlock.dev/gpu=true", map[string]string{"zone": "z1", "airlock.dev/gpu": "true"}, false},
		{"empty=", map[string]string{"empty": ""}, false},
		{"novalue", nil, true},
		{"a=1,a=2", nil, true},
		{"bad key=1", nil, true},
		{"k=bad value", nil, true},
	} {
		got, err := ParseLabels(tt.in)
		if (err != nil) != tt.wantErr || (err == nil && len(got) != len(tt.want)) {
			t.Errorf("ParseLabels(%q) = %v, %v; want %v, error %v", tt.in, got, err, tt.want, tt.wantErr)
			continue
		}
		if err != nil && !errdefs.IsInvalidArgument(err) {
			t.Errorf("ParseLabels(%q) error %v, want invalid argument", tt.in, err)
		}
		for k, v := range tt.want {
			if got[k] != v {
				t.Errorf("ParseLabels(%q)[%q] = %q, want %q", tt.in, k, got[k], v)
			}
		}
	}
}

func TestConfigCheck(t *testing.T) {
	ok := Config{Node: "node-a", LeaseDuration: 3 * time.Second, Capacity: 1}
	if err := ok.Check(); err != nil {
		t.Fatalf("Check(%+v) = %v", ok, err)
	}
	for name, mutate := range map[string]func(*Config){
		"upper-case name":      func(c *Config) { c.Node = "Node-A" },
		"empty name":           func(c *Config) { c.Node = "" },
		"the leader's Lease":   func(c *Config) { c.Node = PlacementLease },
		"negative capacity":    func(c *Config) { c.Capacity = -1 },
		"lease too short":      func(c *Config) { c.LeaseDuration = time.Second },
		"lease not in seconds": func(c *Config) { c.LeaseDuration = 2500 * time.Millisecond },
		"bad label":            func(c *Config) { c.Labels = map[string]string{"a b": "c"} },
	} {
		c := ok
		mutate(&c)
		if err := c.Check(); !errdefs.IsInvalidArgument(err) {
			t.Errorf("%s: Check() = %v, want an invalid-argument error", name, err)
		}
	}
}

// TestLeaseSeenBeforeLeading: renewals the informer showed before this
// agent led count: a node quiet for a duration by then is lost at the
// first pass, not a duration after it.
func TestLeaseSeenBeforeLeading(t *testing.T) {
	now := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	p := newPlacer(nil, nil, 40*time.Second)
	p.now = func() time.Time { return now }
	secs := int32(3)
	holder := "b/id"
	rt := metav1.NewMicroTime(now)
	l := coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: LeaseNamespace},
		Spec: coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &secs, RenewTime: &rt}}
	p.observeLease(&l)
	p.observeLease(&coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: PlacementLease}})
	now = now.Add(3 * time.Second)
	anodes := &v1alpha1.AirlockNodeList{Items: []v1alpha1.AirlockNode{{ObjectMeta: metav1.ObjectMeta{Name: "b"}}}}
	nodes, _ := p.nodes(now, &v1alpha1.SessionList{}, anodes, &coordinationv1.LeaseList{Items: []coordinationv1.Lease{l}})
	if !nodes["b"].lost {
		t.Errorf("a node whose Lease was seen unchanged for its duration before the first pass is not lost")
	}
	if _, ok := nodes[PlacementLease]; ok {
		t.Errorf("the leader Lease was taken for a node")
	}
}
