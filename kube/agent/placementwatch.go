package agent

import (
	"context"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// Placement watches the claims, the PersistentVolumes and the Nodes'
// metadata (for volumes' nodeAffinity) through its manager's cache, so
// that a pass reads none of them from the API server, and a change of one
// a pending Session waits on asks for a pass. The node agent that runs
// the Session reads them again, uncached (volumeSources), and holds the
// claims with an update conditioned on the claim it read: the cache
// decides where a Session goes, never whether it may use a volume.

// volumeWaitIndex indexes, in placement's cache of Sessions, the unplaced
// Sessions with volume sources: under "namespace/claim" for each claim
// they name, and under anyVolumeWait once.
const volumeWaitIndex = "airlock.dev/volume-wait"

// anyVolumeWait is the volumeWaitIndex key of every unplaced Session with
// a volume source (a Node's labels matter to them all). It is no claim's
// key: those hold a "/".
const anyVolumeWait = "*"

// claimVolumeIndex indexes placement's cache of claims by the
// PersistentVolume each names (spec.volumeName).
const claimVolumeIndex = "airlock.dev/claim-volume"

// volumeWaits are s's volumeWaitIndex keys: none once it is placed or
// being deleted.
func volumeWaits(obj client.Object) []string {
	s, ok := obj.(*v1alpha1.Session)
	if !ok || s.Spec.NodeName != "" || s.DeletionTimestamp != nil {
		return nil
	}
	var keys []string
	for _, src := range s.Spec.WorkspaceSources {
		if src.Volume != nil {
			keys = append(keys, s.Namespace+"/"+src.Volume.ClaimName)
		}
	}
	if len(keys) > 0 {
		keys = append(keys, anyVolumeWait)
	}
	return keys
}

// placementCache is what placement's manager caches, besides the
// Sessions and AirlockNodes (every one): the Leases of airlock-system,
// and for volume sources every claim, PersistentVolume and Node, the
// Nodes as metadata alone. None of them keeps its managedFields, and a
// Node no annotations: placement reads a Node's labels and name only.
func placementCache() cache.Options {
	strip := cache.TransformStripManagedFields()
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&coordinationv1.Lease{}:         {Namespaces: map[string]cache.Config{LeaseNamespace: {}}},
		&corev1.PersistentVolumeClaim{}: {Transform: strip},
		&corev1.PersistentVolume{}:      {Transform: strip},
		&corev1.Node{}: {Transform: func(in any) (any, error) {
			if m, err := meta.Accessor(in); err == nil {
				m.SetManagedFields(nil)
				m.SetAnnotations(nil)
			}
			return in, nil
		}},
	}}
}

// watchVolumes adds to placement's controller the watches of claims,
// PersistentVolumes and Nodes (metadata), each change of one asking for
// a pass only when an unplaced Session waits on it, and the indexes that
// tell.
func watchVolumes(ctx context.Context, mgr manager.Manager, b *builder.Builder) error {
	if err := mgr.GetFieldIndexer().IndexField(ctx, &v1alpha1.Session{}, volumeWaitIndex, volumeWaits); err != nil {
		return err
	}
	err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.PersistentVolumeClaim{}, claimVolumeIndex, func(obj client.Object) []string {
		if c, ok := obj.(*corev1.PersistentVolumeClaim); ok && c.Spec.VolumeName != "" {
			return []string{c.Spec.VolumeName}
		}
		return nil
	})
	if err != nil {
		return err
	}
	w := volumeWake{r: mgr.GetCache()}
	b.Watches(&corev1.PersistentVolumeClaim{}, handler.EnqueueRequestsFromMapFunc(w.claim)).
		Watches(&corev1.PersistentVolume{}, handler.EnqueueRequestsFromMapFunc(w.volume)).
		// A Node matters by its labels (and name) alone: its status
		// writes ask for nothing.
		WatchesMetadata(&corev1.Node{}, handler.EnqueueRequestsFromMapFunc(w.node),
			builder.WithPredicates(predicate.LabelChangedPredicate{}))
	return nil
}

// volumeWake maps a change of a claim, a PersistentVolume or a Node to a
// placement pass when an unplaced Session waits on it, read from
// placement's cache (r).
type volumeWake struct {
	r client.Reader
}

// waited asks for a pass if an unplaced Session is under one of keys in
// volumeWaitIndex (or if that cannot be told).
func (w volumeWake) waited(ctx context.Context, keys ...string) []reconcile.Request {
	for _, k := range keys {
		var list v1alpha1.SessionList
		if err := w.r.List(ctx, &list, client.MatchingFields{volumeWaitIndex: k}, client.Limit(1)); err != nil {
			log.G(ctx).Warn("placement: the Sessions waiting on a volume not read from the cache; placing again", "key", k, "error", err)
			return []reconcile.Request{placementRequest}
		}
		if len(list.Items) > 0 {
			return []reconcile.Request{placementRequest}
		}
	}
	return nil
}

func (w volumeWake) claim(ctx context.Context, obj client.Object) []reconcile.Request {
	return w.waited(ctx, obj.GetNamespace()+"/"+obj.GetName())
}

// volume: the claim its claimRef names, and every claim that names it
// (bound to it, or claiming to be).
func (w volumeWake) volume(ctx context.Context, obj client.Object) []reconcile.Request {
	var keys []string
	if pv, ok := obj.(*corev1.PersistentVolume); ok && pv.Spec.ClaimRef != nil {
		keys = append(keys, pv.Spec.ClaimRef.Namespace+"/"+pv.Spec.ClaimRef.Name)
	}
	var claims corev1.PersistentVolumeClaimList
	if err := w.r.List(ctx, &claims, client.MatchingFields{claimVolumeIndex: obj.GetName()}); err != nil {
		log.G(ctx).Warn("placement: the claims naming a PersistentVolume not read from the cache; placing again", "volume", obj.GetName(), "error", err)
		return []reconcile.Request{placementRequest}
	}
	for _, c := range claims.Items {
		keys = append(keys, c.Namespace+"/"+c.Name)
	}
	return w.waited(ctx, keys...)
}

func (w volumeWake) node(ctx context.Context, _ client.Object) []reconcile.Request {
	return w.waited(ctx, anyVolumeWait)
}
