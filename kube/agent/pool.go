package agent

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"time"

	"github.com/containerd/errdefs"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// PoolLabelPrefix begins the policy label of the daemon pools the agent
// keeps for SessionPools, and of the Sessions that name one: the label is
// PoolLabelPrefix + namespace + "/" + name (see PoolLabel). The daemon's
// pool key covers the label, so a pool's sandboxes go only to the
// Sessions of its SessionPool, and two SessionPools of one policy in two
// namespaces keep two pools. The prefix is reserved: a Session that does
// not name a pool may not carry it.
const PoolLabelPrefix = "sessionpool:"

// PoolLabel is the policy label of SessionPool namespace/name's daemon
// pool, and of the Sessions naming it.
func PoolLabel(namespace, name string) string { return PoolLabelPrefix + namespace + "/" + name }

// The agent looks at a SessionPool (reconcilePool) only when something
// it decides from may have changed:
//   - the SessionPool itself (its watch; the cache's periodic resync,
//     which changes nothing, is not a change);
//   - the node's AirlockNode's labels, which its nodeSelector matches;
//   - an older SessionPool's spec, its creation or deletion, or whether
//     this node refuses it: the room for SessionPools goes oldest first
//     (allotted);
//   - its daemon pool: a sandbox prepared, taken, torn down, a refill
//     that failed (the daemon tells, Daemon.WatchPools; followPools).
//
// poolSafetyResync is how often it looks again at every SessionPool in
// its cache and at the SessionPool of every daemon pool it keeps, with
// none of these: a safety net, for a SessionPool deleted while its watch
// was down (its pool would stay, holding sandboxes and places under the
// session limit, without it) and for any change it did not hear of. It
// is slow, so that an idle SessionPool costs next to nothing however
// many there are.
const poolSafetyResync = time.Minute

// poolSettle is how long a look at a SessionPool that its daemon pool
// changed waits, gathering what else changes meanwhile: a pool whose
// sandboxes become ready together makes one look, and one status write,
// not one for each.
const poolSettle = 200 * time.Millisecond

// fieldManager is the node's field manager for the SessionPools' status,
// written by server-side apply: each node owns its own entry of
// status.nodes.
func (a *nodeAgent) fieldManager() string { return "airlockd-node/" + a.node }

// reconcilePool keeps the daemon pool of one SessionPool: of its policy
// and size while it selects this node and is not being deleted, none
// otherwise, and writes this node's entry of its status.
func (a *nodeAgent) reconcilePool(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctx = log.With(ctx, "sessionpool", req.String())
	log.G(ctx).Debug("SessionPool looked at")
	label := PoolLabel(req.Namespace, req.Name)
	var sp v1alpha1.SessionPool
	err := a.c.Get(ctx, req.NamespacedName, &sp)
	if apierrors.IsNotFound(err) {
		// Gone from the cache: confirmed afresh before its pool is
		// removed, since a cache may lag.
		err = a.fresh.Get(ctx, req.NamespacedName, &sp)
	}
	if err != nil && !apierrors.IsNotFound(err) {
		return reconcile.Result{}, err
	}
	exists := err == nil
	selected := false
	if exists && sp.DeletionTimestamp == nil {
		if selected, err = a.selects(ctx, sp.Spec.NodeSelector); err != nil {
			return reconcile.Result{}, err
		}
	}

	// The pool it wants, if any: a refusal leaves none.
	key, refusal := "", error(nil)
	size, short := 0, ""
	if selected && sp.Spec.Size > 0 {
		if size, err = a.allotted(ctx, &sp); err != nil {
			return reconcile.Result{}, err
		}
		if size < int(sp.Spec.Size) {
			short = fmt.Sprintf("%d of its %d sandboxes fit in the room this node keeps for SessionPools, %d (the admission policy's session limit less the node's capacity), given to older SessionPools first",
				size, sp.Spec.Size, a.poolRoom)
		}
	}
	if size > 0 {
		pol := *sp.Spec.Policy.Clone()
		pol.Label, pol.Pool = label, nil
		key, _, refusal = a.d.SetPool(ctx, pol, size)
		if refusal != nil {
			key = ""
			if errdefs.IsUnavailable(refusal) || errdefs.IsInternal(refusal) {
				return reconcile.Result{}, refusal // again, with backoff
			}
		}
		if a.noteRefusal(ctx, label, sp.Generation, refusal) {
			// The room it leaves to newer SessionPools changed.
			a.wakeNewer(ctx, &sp)
		}
	}
	// Every other pool of this SessionPool goes: it was deleted, resized
	// to 0, no longer selects this node, its policy changed or is
	// refused now.
	for _, p := range a.d.Pools() {
		if p.Label != label || p.Key == key {
			continue
		}
		if err := a.d.RemovePool(ctx, p.Key); err != nil && !errdefs.IsNotFound(err) {
			return reconcile.Result{}, fmt.Errorf("remove pool %s: %w", p.Key, err)
		}
		log.G(ctx).Info("warm pool removed", "pool", p.Key, "discarded", p.Ready)
	}
	if !exists {
		a.mu.Lock()
		delete(a.refused, label)
		a.mu.Unlock()
		return reconcile.Result{}, nil
	}
	if sp.DeletionTimestamp != nil {
		return reconcile.Result{}, nil
	}

	mine := -1
	others := int32(0)
	for i, n := range sp.Status.Nodes {
		if n.Node == a.node {
			mine = i
		} else {
			others += n.Ready
		}
	}
	if !selected {
		if mine < 0 {
			return reconcile.Result{}, nil
		}
		// Its entry goes: applying a status without it drops what this
		// node's field manager owned.
		return reconcile.Result{}, a.applyPoolStatus(ctx, &sp, map[string]any{"ready": int64(others)})
	}
	entry := v1alpha1.PoolNodeStatus{Node: a.node, ObservedGeneration: sp.Generation}
	for _, p := range a.d.Pools() {
		if key != "" && p.Key == key {
			entry.Ready, entry.Message = int32(p.Ready), p.LastError
		}
	}
	switch {
	case refusal != nil:
		entry.Reason, entry.Message = ReasonRefused, refusal.Error()
	case short != "":
		entry.Reason, entry.Message = ReasonNoRoom, short
	}
	total := others + entry.Ready
	if mine >= 0 && sp.Status.Nodes[mine] == entry && sp.Status.Ready == total && sp.Status.ObservedGeneration == sp.Generation {
		return reconcile.Result{}, nil
	}
	n := map[string]any{"node": entry.Node, "ready": int64(entry.Ready), "observedGeneration": entry.ObservedGeneration}
	if entry.Reason != "" {
		n["reason"] = entry.Reason
	}
	if entry.Message != "" {
		n["message"] = entry.Message
	}
	return reconcile.Result{}, a.applyPoolStatus(ctx, &sp, map[string]any{
		"observedGeneration": sp.Generation, "ready": int64(total), "nodes": []any{n},
	})
}

// applyPoolStatus applies status as this node's field manager, taking
// over the fields it shares with other nodes (ready, observedGeneration:
// the last writer's).
func (a *nodeAgent) applyPoolStatus(ctx context.Context, sp *v1alpha1.SessionPool, status map[string]any) error {
	u := &unstructured.Unstructured{Object: map[string]any{"status": status}}
	u.SetAPIVersion(v1alpha1.GroupVersion.String())
	u.SetKind("SessionPool")
	u.SetNamespace(sp.Namespace)
	u.SetName(sp.Name)
	u.SetUID(sp.UID) // never another SessionPool of the same name
	err := a.c.Status().Apply(ctx, client.ApplyConfigurationFromUnstructured(u), client.FieldOwner(a.fieldManager()), client.ForceOwnership)
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		return nil // deleted, or another of the name: its own events follow
	}
	return err
}

// ReasonNoRoom is a SessionPool's status.nodes[].reason when the node
// keeps fewer sandboxes for it than its size (Config.PoolRoom).
const ReasonNoRoom = "no-room"

// allotted is how many sandboxes the node keeps for sp: the room for
// SessionPools (Config.PoolRoom) goes to those that select the node, by
// age (then namespace and name), each up to its size, but for those whose
// policy this node refused at its last look at them. Every agent decides
// alone from its cache and what it knows of refusals: no count is shared.
func (a *nodeAgent) allotted(ctx context.Context, sp *v1alpha1.SessionPool) (int, error) {
	var list v1alpha1.SessionPoolList
	if err := a.c.List(ctx, &list); err != nil {
		return 0, err
	}
	var an v1alpha1.AirlockNode
	if err := a.c.Get(ctx, client.ObjectKey{Name: a.node}, &an); err != nil {
		return 0, fmt.Errorf("read AirlockNode %s for its labels: %w", a.node, err)
	}
	a.mu.Lock()
	refused := maps.Clone(a.refused)
	a.mu.Unlock()
	used := 0
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == sp.UID || o.DeletionTimestamp != nil || o.Spec.Size <= 0 || !olderPool(o, sp) ||
			refused[PoolLabel(o.Namespace, o.Name)] != "" || !labels.SelectorFromSet(o.Spec.NodeSelector).Matches(labels.Set(an.Labels)) {
			continue
		}
		used += int(o.Spec.Size)
	}
	return max(0, min(int(sp.Spec.Size), a.poolRoom-used)), nil
}

// olderPool reports whether x comes before y in the room for
// SessionPools: created earlier, then by namespace and name.
func olderPool(x, y *v1alpha1.SessionPool) bool {
	if !x.CreationTimestamp.Equal(&y.CreationTimestamp) {
		return x.CreationTimestamp.Before(&y.CreationTimestamp)
	}
	if x.Namespace != y.Namespace {
		return x.Namespace < y.Namespace
	}
	return x.Name < y.Name
}

// selects reports whether this node's AirlockNode's labels hold sel.
func (a *nodeAgent) selects(ctx context.Context, sel map[string]string) (bool, error) {
	if len(sel) == 0 {
		return true, nil
	}
	var an v1alpha1.AirlockNode
	if err := a.c.Get(ctx, client.ObjectKey{Name: a.node}, &an); err != nil {
		return false, fmt.Errorf("read AirlockNode %s for its labels: %w", a.node, err)
	}
	return labels.SelectorFromSet(sel).Matches(labels.Set(an.Labels)), nil
}

// noteRefusal logs a SessionPool's refusal (or its end) once per
// generation and reason, not at every look. It reports whether the
// SessionPool went from admitted to refused or back.
func (a *nodeAgent) noteRefusal(ctx context.Context, label string, gen int64, err error) bool {
	msg := ""
	if err != nil {
		msg = fmt.Sprintf("%d %s", gen, err)
	}
	a.mu.Lock()
	last := a.refused[label]
	if msg == "" {
		delete(a.refused, label)
	} else {
		a.refused[label] = msg
	}
	a.mu.Unlock()
	switch {
	case msg != "" && msg != last:
		log.G(ctx).Warn("SessionPool refused by this node's admission policy: no sandbox is prepared", "generation", gen, "error", err)
	case msg == "" && last != "":
		log.G(ctx).Info("SessionPool admitted", "generation", gen)
	}
	return (msg == "") != (last == "")
}

// sweepPools asks, every period until ctx ends, for a look at every
// SessionPool in the cache and at the SessionPool of every daemon pool
// the agent keeps, so that the pool of a SessionPool deleted without the
// agent seeing it go is removed too (poolSafetyResync).
func (a *nodeAgent) sweepPools(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		seen := map[types.NamespacedName]bool{}
		var list v1alpha1.SessionPoolList
		if err := a.c.List(ctx, &list); err == nil {
			for _, sp := range list.Items {
				seen[types.NamespacedName{Namespace: sp.Namespace, Name: sp.Name}] = true
			}
		}
		for _, p := range a.d.Pools() {
			if key, ok := poolOfLabel(p.Label); ok {
				seen[key] = true
			}
		}
		for key := range seen {
			a.wakePool(ctx, key)
		}
	}
}

// followPools asks for a look at the SessionPool of every daemon pool the
// daemon says changed (Daemon.WatchPools), until ctx ends: a sandbox
// became ready, was taken or torn down, a refill failed, the pool was
// removed. Its ready count and message reach status.nodes within
// poolSettle and a look.
func (a *nodeAgent) followPools(ctx context.Context) {
	a.d.WatchPools(ctx, func(labels []string) {
		for _, l := range labels {
			if key, ok := poolOfLabel(l); ok {
				a.wakePool(ctx, key)
			}
		}
	})
}

// poolOfLabel is the SessionPool whose daemon pool carries label; false
// for a pool not kept for a SessionPool.
func poolOfLabel(label string) (types.NamespacedName, bool) {
	rest, ok := strings.CutPrefix(label, PoolLabelPrefix)
	if !ok {
		return types.NamespacedName{}, false
	}
	ns, name, ok := strings.Cut(rest, "/")
	return types.NamespacedName{Namespace: ns, Name: name}, ok
}

// wakePool asks for a look at SessionPool key, poolSettle later
// (poolWakeHandler).
func (a *nodeAgent) wakePool(ctx context.Context, key types.NamespacedName) {
	obj := &v1alpha1.SessionPool{}
	obj.Namespace, obj.Name = key.Namespace, key.Name
	select {
	case a.poolWake <- event.GenericEvent{Object: obj}:
	case <-ctx.Done():
	}
}

// wakeNewer asks for a look at every SessionPool newer than sp, whose
// room sp's admission by this node changes (allotted).
func (a *nodeAgent) wakeNewer(ctx context.Context, sp *v1alpha1.SessionPool) {
	for _, r := range a.newerPools(ctx, sp) {
		a.wakePool(ctx, r.NamespacedName)
	}
}

// poolWakeHandler enqueues the SessionPool of an event of poolWake
// poolSettle later: the workqueue keeps one of a SessionPool waiting, so
// that the events of a burst make one look.
func poolWakeHandler() handler.EventHandler {
	return handler.Funcs{GenericFunc: func(_ context.Context, e event.GenericEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
		q.AddAfter(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)}, poolSettle)
	}}
}

// poolRequests maps a change of this node's AirlockNode (its labels) to
// a look at every SessionPool.
func (a *nodeAgent) poolRequests(ctx context.Context, _ client.Object) []reconcile.Request {
	var list v1alpha1.SessionPoolList
	if err := a.c.List(ctx, &list); err != nil {
		return nil
	}
	out := make([]reconcile.Request, 0, len(list.Items))
	for _, sp := range list.Items {
		out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: sp.Namespace, Name: sp.Name}})
	}
	return out
}

// newerPools maps a change of a SessionPool's spec, its creation or
// deletion to a look at the SessionPools newer than it: the room for
// SessionPools goes oldest first, so theirs may change (allotted).
func (a *nodeAgent) newerPools(ctx context.Context, obj client.Object) []reconcile.Request {
	sp, ok := obj.(*v1alpha1.SessionPool)
	if !ok {
		return nil
	}
	var list v1alpha1.SessionPoolList
	if err := a.c.List(ctx, &list); err != nil {
		return nil
	}
	var out []reconcile.Request
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID != sp.UID && olderPool(sp, o) {
			out = append(out, reconcile.Request{NamespacedName: types.NamespacedName{Namespace: o.Namespace, Name: o.Name}})
		}
	}
	return out
}
