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
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
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

// poolResync is how often the agent looks at a SessionPool that selects
// its node again: the daemon fills pools and sessions take from them
// without an event the agent hears, and its ready count is written when
// it changes.
const poolResync = 2 * time.Second

// fieldManager is the node's field manager for the SessionPools' status,
// written by server-side apply: each node owns its own entry of
// status.nodes.
func (a *nodeAgent) fieldManager() string { return "airlockd-node/" + a.node }

// reconcilePool keeps the daemon pool of one SessionPool: of its policy
// and size while it selects this node and is not being deleted, none
// otherwise, and writes this node's entry of its status.
func (a *nodeAgent) reconcilePool(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctx = log.With(ctx, "sessionpool", req.String())
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
		a.noteRefusal(ctx, label, sp.Generation, refusal)
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
		return reconcile.Result{RequeueAfter: poolResync}, nil
	}
	n := map[string]any{"node": entry.Node, "ready": int64(entry.Ready), "observedGeneration": entry.ObservedGeneration}
	if entry.Reason != "" {
		n["reason"] = entry.Reason
	}
	if entry.Message != "" {
		n["message"] = entry.Message
	}
	err = a.applyPoolStatus(ctx, &sp, map[string]any{
		"observedGeneration": sp.Generation, "ready": int64(total), "nodes": []any{n},
	})
	return reconcile.Result{RequeueAfter: poolResync}, err
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
	older := func(x, y *v1alpha1.SessionPool) bool {
		if !x.CreationTimestamp.Equal(&y.CreationTimestamp) {
			return x.CreationTimestamp.Before(&y.CreationTimestamp)
		}
		if x.Namespace != y.Namespace {
			return x.Namespace < y.Namespace
		}
		return x.Name < y.Name
	}
	a.mu.Lock()
	refused := maps.Clone(a.refused)
	a.mu.Unlock()
	used := 0
	for i := range list.Items {
		o := &list.Items[i]
		if o.UID == sp.UID || o.DeletionTimestamp != nil || o.Spec.Size <= 0 || !older(o, sp) ||
			refused[PoolLabel(o.Namespace, o.Name)] != "" || !labels.SelectorFromSet(o.Spec.NodeSelector).Matches(labels.Set(an.Labels)) {
			continue
		}
		used += int(o.Spec.Size)
	}
	return max(0, min(int(sp.Spec.Size), a.poolRoom-used)), nil
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
// generation and reason, not at every look.
func (a *nodeAgent) noteRefusal(ctx context.Context, label string, gen int64, err error) {
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
}

// sweepPools asks for a look at the SessionPool of every daemon pool the
// agent keeps, every period until ctx ends, so that the pool of a
// SessionPool deleted without the agent seeing it go is removed too.
func (a *nodeAgent) sweepPools(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for _, p := range a.d.Pools() {
			ns, name, ok := strings.Cut(strings.TrimPrefix(p.Label, PoolLabelPrefix), "/")
			if !ok || !strings.HasPrefix(p.Label, PoolLabelPrefix) {
				continue
			}
			obj := &v1alpha1.SessionPool{}
			obj.Namespace, obj.Name = ns, name
			select {
			case a.poolWake <- event.GenericEvent{Object: obj}:
			case <-ctx.Done():
				return
			}
		}
	}
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
