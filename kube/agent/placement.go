package agent

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// ReasonUnschedulable is a Pending Session's status.reason when no live
// node with room matches it.
const ReasonUnschedulable = "unschedulable"

// ReasonLost is a Lost Session's status.reason.
const ReasonLost = "lost"

// node is what placement knows of one node.
type node struct {
	name          string
	labels        map[string]string
	capacity      int
	used          int
	unschedulable bool
	// registered: its AirlockNode exists.
	registered bool
	// live: its Lease was renewed within its duration, as seen by the
	// controller's clock and by the Lease's own renew time.
	live bool
	// lost: the controller has not seen its Lease renewed for a whole
	// lease duration (or has seen none).
	lost bool
}

// holdsPlace reports whether s counts against its node's capacity: from
// its placement until it is deleted, unless it is Lost or it failed
// before its node made it a local session.
func holdsPlace(s *v1alpha1.Session) bool {
	switch s.Status.State {
	case v1alpha1.SessionLost:
		return false
	case v1alpha1.SessionFailed:
		return s.Status.ID != ""
	}
	return true
}

// lostable reports whether a Session on a lost node is marked Lost: one
// that had not ended. An ended one keeps its exit (Exited, Review) or its
// failure.
func lostable(st v1alpha1.SessionState) bool {
	switch st {
	case "", v1alpha1.SessionPending, v1alpha1.SessionPlaced, v1alpha1.SessionRunning:
		return true
	}
	return false
}

// choose picks the node for s among nodes: live, registered, schedulable,
// with a free place, its labels holding s's nodeSelector; the one where
// s's SessionPool has a sandbox ready (warm: each node's ready count of
// the pool s names, nil for none), then the one with the most free
// places, then the fewest used, then by name. Without one it returns ""
// and why each node was passed over.
//
// fits, when not nil, is asked last of a node that passes the rest, and
// says why s's volumes are not on it ("" when they are).
func choose(s *v1alpha1.Session, nodes []*node, warm map[string]int32, fits func(*node) string) (*node, string) {
	var best *node
	var why []string
	for _, n := range nodes {
		var reason string
		switch {
		case !n.registered:
			reason = "no AirlockNode"
		case !n.live:
			reason = "not live (its Lease is not being renewed)"
		case n.unschedulable:
			reason = "unschedulable"
		case !selects(s.Spec.NodeSelector, n.labels):
			reason = "labels do not match the nodeSelector"
		case n.used >= n.capacity:
			reason = fmt.Sprintf("full (%d of %d)", n.used, n.capacity)
		case fits != nil:
			reason = fits(n)
		}
		if reason != "" {
			why = append(why, n.name+": "+reason)
			continue
		}
		if best == nil || better(n, best, warm) {
			best = n
		}
	}
	if best != nil {
		return best, ""
	}
	if len(nodes) == 0 {
		return nil, "no node agent is registered"
	}
	return nil, "no node fits: " + strings.Join(why, "; ")
}

func better(a, b *node, warm map[string]int32) bool {
	if wa, wb := warm[a.name] > 0, warm[b.name] > 0; wa != wb {
		return wa
	}
	if fa, fb := a.capacity-a.used, b.capacity-b.used; fa != fb {
		return fa > fb
	}
	if a.used != b.used {
		return a.used < b.used
	}
	return a.name < b.name
}

// selects reports whether labels hold every key and value of selector.
func selects(selector, labels map[string]string) bool {
	for k, v := range selector {
		if got, ok := labels[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// leaseSeen is when the controller saw a node's Lease as it is now.
type leaseSeen struct {
	key  string // holder and renew time; "" when there is no Lease
	seen time.Time
}

// placer is the placement controller: one reconcile pass places every
// unplaced Session it can and marks the Sessions of lost nodes. Every
// watch event of a Session, AirlockNode or Lease asks for a pass, and one
// of a claim, PersistentVolume or Node's labels when an unplaced Session
// waits on it (placementwatch.go).
type placer struct {
	lease  time.Duration // lease duration of a node without a Lease
	now    func() time.Time
	leaseN string // the namespace of the nodes' Leases

	mu sync.Mutex
	// c does the cached reads and the writes, fresh the reads that
	// bypass the cache, before a write: the current manager's.
	c     client.Client // +checklocks:mu
	fresh client.Reader // +checklocks:mu
	// seen holds, per node name, when its Lease was last seen to change.
	seen map[string]leaseSeen // +checklocks:mu
	// assumed are the placements made that the cache may not show yet:
	// Session uid -> node.
	assumed map[types.UID]string // +checklocks:mu
}

func newPlacer(c client.Client, fresh client.Reader, lease time.Duration) *placer {
	return &placer{c: c, fresh: fresh, lease: lease, now: time.Now, leaseN: LeaseNamespace,
		seen: map[string]leaseSeen{}, assumed: map[types.UID]string{}}
}

// use makes the placer read and write through a new manager's clients.
func (p *placer) use(c client.Client, fresh client.Reader) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.c, p.fresh = c, fresh
}

// clients returns the clients to read and write through.
func (p *placer) clients() (client.Client, client.Reader) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.c, p.fresh
}

// placementRequest is the one request every event maps to.
var placementRequest = reconcile.Request{NamespacedName: types.NamespacedName{Name: "placement"}}

func (p *placer) Reconcile(ctx context.Context, _ reconcile.Request) (reconcile.Result, error) {
	c, _ := p.clients()
	var sessions v1alpha1.SessionList
	if err := c.List(ctx, &sessions); err != nil {
		return reconcile.Result{}, err
	}
	var anodes v1alpha1.AirlockNodeList
	if err := c.List(ctx, &anodes); err != nil {
		return reconcile.Result{}, err
	}
	var leases coordinationv1.LeaseList
	if err := c.List(ctx, &leases, client.InNamespace(p.leaseN)); err != nil {
		return reconcile.Result{}, err
	}
	now := p.now()
	nodes, recheck := p.nodes(now, &sessions, &anodes, &leases)

	var errs []error
	// The Sessions of lost nodes first: they hold no place.
	for i := range sessions.Items {
		s := &sessions.Items[i]
		n, ok := nodes[s.Spec.NodeName]
		if s.Spec.NodeName == "" || !ok || !n.lost {
			continue
		}
		if err := p.lose(ctx, s, n); err != nil {
			errs = append(errs, err)
		}
	}

	var pending []*v1alpha1.Session
	for i := range sessions.Items {
		s := &sessions.Items[i]
		if s.Spec.NodeName == "" && s.DeletionTimestamp == nil && p.assumedNode(s.UID) == "" {
			pending = append(pending, s)
		}
	}
	slices.SortFunc(pending, func(a, b *v1alpha1.Session) int {
		if c := a.CreationTimestamp.Compare(b.CreationTimestamp.Time); c != 0 {
			return c
		}
		return cmp.Or(cmp.Compare(a.Namespace, b.Namespace), cmp.Compare(a.Name, b.Name))
	})
	list := slices.SortedFunc(maps.Values(nodes), func(a, b *node) int { return cmp.Compare(a.name, b.name) })
	ready := p.poolsReady(ctx, pending)
	// Claims, volumes and Nodes (for volumes' nodeAffinity) come from
	// the cache (placementwatch.go), each read once a pass.
	knodes := newNodeReader(c)
	for _, s := range pending {
		warm := ready[s.Namespace+"/"+s.Spec.PoolName]
		if s.Spec.PoolName == "" {
			warm = nil
		}
		fits, wait, err := volumeFits(ctx, c, knodes, s)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if wait != "" {
			if err := p.unschedulable(ctx, s, wait); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		n, why := choose(s, list, warm, fits)
		if n == nil {
			if err := p.unschedulable(ctx, s, why); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		if err := p.place(ctx, s, n.name); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				// Changed or gone since the cache saw it: the
				// event that says so asks for another pass.
				continue
			}
			errs = append(errs, err)
			continue
		}
		n.used++
		if warm[n.name] > 0 {
			warm[n.name]-- // taken by this one
		}
	}
	if len(errs) > 0 {
		return reconcile.Result{}, errs[0]
	}
	return reconcile.Result{RequeueAfter: recheck}, nil
}

// poolsReady returns, for the SessionPools the pending Sessions name, how
// many sandboxes each node reports ready (status.nodes), by
// "namespace/name" and node. Only when some Session names one are
// SessionPools read (and cached); a failure to read them leaves placement
// by room alone.
func (p *placer) poolsReady(ctx context.Context, pending []*v1alpha1.Session) map[string]map[string]int32 {
	if !slices.ContainsFunc(pending, func(s *v1alpha1.Session) bool { return s.Spec.PoolName != "" }) {
		return nil
	}
	c, _ := p.clients()
	var list v1alpha1.SessionPoolList
	if err := c.List(ctx, &list); err != nil {
		log.G(ctx).Warn("SessionPools not read: placing by room alone", "error", err)
		return nil
	}
	out := map[string]map[string]int32{}
	for _, sp := range list.Items {
		m := map[string]int32{}
		for _, n := range sp.Status.Nodes {
			m[n.Node] = n.Ready
		}
		out[sp.Namespace+"/"+sp.Name] = m
	}
	return out
}

// nodes builds the nodes from the AirlockNodes, the Leases and the
// Sessions placed (or assumed placed), and returns with them how soon a
// live node could turn lost, for the next pass.
func (p *placer) nodes(now time.Time, sessions *v1alpha1.SessionList, anodes *v1alpha1.AirlockNodeList, leases *coordinationv1.LeaseList) (map[string]*node, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	nodes := map[string]*node{}
	get := func(name string) *node {
		n, ok := nodes[name]
		if !ok {
			n = &node{name: name}
			nodes[name] = n
		}
		return n
	}
	for i := range anodes.Items {
		an := &anodes.Items[i]
		n := get(an.Name)
		n.registered = true
		n.labels = an.Labels
		n.capacity = int(an.Status.Capacity)
		n.unschedulable = an.Spec.Unschedulable
	}
	byName := map[string]*coordinationv1.Lease{}
	for i := range leases.Items {
		byName[leases.Items[i].Name] = &leases.Items[i]
	}
	// Placements the cache shows are no longer assumed.
	uids := map[types.UID]bool{}
	for i := range sessions.Items {
		s := &sessions.Items[i]
		uids[s.UID] = true
		if s.Spec.NodeName != "" {
			delete(p.assumed, s.UID)
		}
	}
	for uid := range p.assumed {
		if !uids[uid] {
			delete(p.assumed, uid)
		}
	}
	for i := range sessions.Items {
		s := &sessions.Items[i]
		name := cmp.Or(s.Spec.NodeName, p.assumed[s.UID])
		if name == "" {
			continue
		}
		n := get(name)
		if holdsPlace(s) {
			n.used++
		}
	}
	recheck := p.lease
	for name, n := range nodes {
		// A node named by Sessions only (no AirlockNode, no Lease)
		// is lost once the controller has seen no Lease of it for a
		// duration.
		l := byName[name]
		key, renewed, dur := p.leaseKey(l)
		o := p.observeLocked(name, key, now)
		quiet := now.Sub(o.seen)
		n.lost = quiet >= dur
		n.live = key != "" && !n.lost && now.Before(renewed.Add(dur))
		if key != "" && !n.lost {
			recheck = min(recheck, dur-quiet)
		}
	}
	for name := range p.seen {
		if _, ok := nodes[name]; !ok {
			delete(p.seen, name)
		}
	}
	return nodes, max(recheck+10*time.Millisecond, 100*time.Millisecond)
}

// leaseKey is what identifies one renewal of l ("" for no Lease), its
// renew time, and its duration (the placer's own for no Lease).
func (p *placer) leaseKey(l *coordinationv1.Lease) (key string, renewed time.Time, dur time.Duration) {
	dur = p.lease
	if l == nil || l.Spec.RenewTime == nil {
		return "", time.Time{}, dur
	}
	if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
		dur = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
	}
	return fmt.Sprintf("%s@%s", ptrString(l.Spec.HolderIdentity), l.Spec.RenewTime.Time.Format(time.RFC3339Nano)), l.Spec.RenewTime.Time, dur
}

// observeLocked notes that the Lease of node name is key at now, and
// returns when it was first seen so.
func (p *placer) observeLocked(name, key string, now time.Time) leaseSeen {
	o, ok := p.seen[name]
	if !ok || o.key != key {
		o = leaseSeen{key: key, seen: now}
		p.seen[name] = o
	}
	return o
}

// observeLease is the Lease informer's event handler: it notes each
// renewal as it is seen, also while this agent does not lead, so that on
// taking over it knows how long each node has been quiet instead of
// starting every node's clock anew.
func (p *placer) observeLease(obj any) {
	l, ok := obj.(*coordinationv1.Lease)
	if !ok || l.Name == PlacementLease {
		return
	}
	key, _, _ := p.leaseKey(l)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.observeLocked(l.Name, key, p.now())
}

func ptrString(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func (p *placer) assumedNode(uid types.UID) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.assumed[uid]
}

// place sets s's spec.nodeName with the resourceVersion the cache had
// (a conflict means someone else changed or placed it), then its status.
func (p *placer) place(ctx context.Context, s *v1alpha1.Session, name string) error {
	c, fresh := p.clients()
	s = s.DeepCopy()
	s.Spec.NodeName = name
	if err := c.Update(ctx, s); err != nil {
		return err
	}
	p.mu.Lock()
	p.assumed[s.UID] = name
	p.mu.Unlock()
	log.G(ctx).Info("session placed", "session", s.Namespace+"/"+s.Name, "node", name)
	now := metav1.NewTime(p.now().Truncate(time.Second))
	_, err := writeStatus(ctx, c, fresh, client.ObjectKeyFromObject(s), s, func(f *v1alpha1.Session) bool {
		if f.UID != s.UID || f.Spec.NodeName != name {
			return false
		}
		if f.Status.State != "" && f.Status.State != v1alpha1.SessionPending {
			return false // its agent was quicker
		}
		f.Status.State, f.Status.Node, f.Status.PlacedAt = v1alpha1.SessionPlaced, name, &now
		f.Status.Reason, f.Status.Message = "", ""
		return true
	})
	return err
}

// unschedulable records in status why s stays Pending.
func (p *placer) unschedulable(ctx context.Context, s *v1alpha1.Session, why string) error {
	if s.Status.State == v1alpha1.SessionPending && s.Status.Reason == ReasonUnschedulable && s.Status.Message == why {
		return nil
	}
	c, fresh := p.clients()
	_, err := writeStatus(ctx, c, fresh, client.ObjectKeyFromObject(s), s.DeepCopy(), func(f *v1alpha1.Session) bool {
		if f.UID != s.UID || f.Spec.NodeName != "" || (f.Status.State != "" && f.Status.State != v1alpha1.SessionPending) {
			return false
		}
		f.Status.State, f.Status.Reason, f.Status.Message = v1alpha1.SessionPending, ReasonUnschedulable, why
		return true
	})
	return err
}

// lose marks s, on the lost node n, Lost if it had not ended, and takes
// the node agent's finalizer off it if it is being deleted. The node's
// Lease is read again first: one renewed since the cache saw it keeps its
// node.
func (p *placer) lose(ctx context.Context, s *v1alpha1.Session, n *node) error {
	deleting := s.DeletionTimestamp != nil && controllerutil.ContainsFinalizer(s, Finalizer)
	if !lostable(s.Status.State) && !deleting {
		return nil
	}
	c, fresh := p.clients()
	var l coordinationv1.Lease
	switch err := fresh.Get(ctx, client.ObjectKey{Namespace: p.leaseN, Name: n.name}, &l); {
	case err == nil:
		p.mu.Lock()
		o := p.seen[n.name]
		p.mu.Unlock()
		if key, _, _ := p.leaseKey(&l); key != o.key {
			return nil // renewed meanwhile: the next pass sees it live
		}
	case !apierrors.IsNotFound(err):
		return err
	}
	key := client.ObjectKeyFromObject(s)
	if deleting {
		log.G(ctx).Info("removing the finalizer of a deleted session whose node is lost", "session", key, "node", n.name)
		_, err := updateFresh(ctx, c, fresh, key, s.DeepCopy(), func(f *v1alpha1.Session) bool {
			return f.UID == s.UID && controllerutil.RemoveFinalizer(f, Finalizer)
		})
		return err
	}
	now := metav1.NewTime(p.now().Truncate(time.Second))
	wrote, err := writeStatus(ctx, c, fresh, key, s.DeepCopy(), func(f *v1alpha1.Session) bool {
		if f.UID != s.UID || f.Spec.NodeName != n.name || !lostable(f.Status.State) {
			return false
		}
		f.Status.State, f.Status.Reason, f.Status.FinishedAt = v1alpha1.SessionLost, ReasonLost, &now
		f.Status.Node = n.name
		f.Status.Message = fmt.Sprintf("node %s did not renew its Lease for its duration: the session is not run again elsewhere", n.name)
		return true
	})
	if wrote {
		log.G(ctx).Warn("session lost with its node", "session", key, "node", n.name)
	}
	return err
}
