package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	"github.com/airlock-sandbox/airlock/internal/log"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// boundVolume is a volume source's claim and the PersistentVolume bound
// to it.
type boundVolume struct {
	claim *corev1.PersistentVolumeClaim
	pv    *corev1.PersistentVolume
	// path is the volume's directory on the node it is on.
	path string
	// readOnly: the claim's access modes, or the volume's, admit no
	// writes (ReadOnlyMany alone).
	readOnly bool
}

// errVolumeWait marks a volume source that is not usable yet (its claim
// does not exist, or is not bound): placement waits for it, where a
// volume that can never be used (another kind of volume, a claim bound
// one way only) is refused.
var errVolumeWait = errdefs.ErrUnavailable

// bindVolume reads the claim v names in namespace ns and the
// PersistentVolume bound to it, with r, and checks that the binding holds
// both ways and that the volume is a directory on its node. Placement
// reads them from its cache (placementWatch); the node that runs the
// Session reads them again, uncached, before it holds the claim. An error
// wrapping errVolumeWait says the claim is not bound yet; one wrapping
// errdefs.ErrInvalidArgument or ErrPermissionDenied, that it cannot be
// used.
func bindVolume(ctx context.Context, r client.Reader, ns string, v *v1alpha1.VolumeSource) (*boundVolume, error) {
	what := fmt.Sprintf("PersistentVolumeClaim %s/%s", ns, v.ClaimName)
	if v.ClaimName == "" || v.ClaimName == "." || v.ClaimName == ".." || strings.ContainsAny(v.ClaimName, "/%") {
		// The schema's pattern keeps these out; a client would refuse
		// them before asking.
		return nil, fmt.Errorf("%s: not a claim's name: %w", what, errdefs.ErrInvalidArgument)
	}
	var pvc corev1.PersistentVolumeClaim
	if err := r.Get(ctx, types.NamespacedName{Namespace: ns, Name: v.ClaimName}, &pvc); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%s does not exist: %w", what, errVolumeWait)
		}
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	if pvc.DeletionTimestamp != nil {
		return nil, fmt.Errorf("%s is being deleted: %w", what, errdefs.ErrInvalidArgument)
	}
	if pvc.Spec.VolumeName == "" || pvc.Status.Phase != corev1.ClaimBound {
		return nil, fmt.Errorf("%s is not bound to a PersistentVolume (phase %s): %w", what, pvc.Status.Phase, errVolumeWait)
	}
	if pvc.Spec.VolumeMode != nil && *pvc.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		return nil, fmt.Errorf("%s has volumeMode Block: a workspace is a directory (Filesystem): %w", what, errdefs.ErrInvalidArgument)
	}
	if slices.Contains(pvc.Spec.AccessModes, corev1.ReadWriteOncePod) {
		// Kubernetes promises that claim to one pod at a time; airlock
		// does not count the Sessions that use it.
		return nil, fmt.Errorf("%s has access mode ReadWriteOncePod, which the node agent does not enforce (one Session at a time): use ReadWriteOnce or ReadOnlyMany: %w", what, errdefs.ErrInvalidArgument)
	}
	var pv corev1.PersistentVolume
	if err := r.Get(ctx, types.NamespacedName{Name: pvc.Spec.VolumeName}, &pv); err != nil {
		if apierrors.IsNotFound(err) {
			return nil, fmt.Errorf("%s names PersistentVolume %s, which does not exist: %w", what, pvc.Spec.VolumeName, errdefs.ErrInvalidArgument)
		}
		return nil, fmt.Errorf("%s: PersistentVolume %s: %w", what, pvc.Spec.VolumeName, err)
	}
	// The claim names the volume and the volume the claim, by uid: a
	// claim that names a volume bound to another claim (or to an earlier
	// claim of the same name) is not bound to it.
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.Namespace != pvc.Namespace || ref.Name != pvc.Name || ref.UID != pvc.UID {
		return nil, fmt.Errorf("%s names PersistentVolume %s, which is not bound to it (its claimRef names %s): %w", what, pv.Name, claimRefString(ref), errdefs.ErrPermissionDenied)
	}
	if pv.DeletionTimestamp != nil {
		return nil, fmt.Errorf("%s: PersistentVolume %s is being deleted: %w", what, pv.Name, errdefs.ErrInvalidArgument)
	}
	if pv.Spec.VolumeMode != nil && *pv.Spec.VolumeMode == corev1.PersistentVolumeBlock {
		return nil, fmt.Errorf("%s: PersistentVolume %s has volumeMode Block: a workspace is a directory (Filesystem): %w", what, pv.Name, errdefs.ErrInvalidArgument)
	}
	var path string
	switch {
	case pv.Spec.Local != nil:
		path = pv.Spec.Local.Path
	case pv.Spec.HostPath != nil:
		if t := pv.Spec.HostPath.Type; t != nil && *t != corev1.HostPathDirectory && *t != corev1.HostPathUnset {
			return nil, fmt.Errorf("%s: PersistentVolume %s is a hostPath of type %s: a workspace is an existing directory (type Directory or unset): %w", what, pv.Name, *t, errdefs.ErrInvalidArgument)
		}
		path = pv.Spec.HostPath.Path
	default:
		return nil, fmt.Errorf("%s: PersistentVolume %s is not a directory on a node (local or hostPath): the node agent mounts no other kind of volume: %w", what, pv.Name, errdefs.ErrInvalidArgument)
	}
	if !filepath.IsAbs(path) || filepath.Clean(path) != path {
		return nil, fmt.Errorf("%s: PersistentVolume %s: path %q is not absolute and clean: %w", what, pv.Name, path, errdefs.ErrInvalidArgument)
	}
	// Writable only when both the claim and the volume say so: the PV
	// controller binds a claim to a volume pre-bound to it (its
	// claimRef naming the claim) without comparing their access modes,
	// so a claim asking ReadWriteOnce gets a ReadOnlyMany volume.
	ro := !writableModes(pvc.Spec.AccessModes) || !writableModes(pv.Spec.AccessModes)
	return &boundVolume{claim: &pvc, pv: &pv, path: path, readOnly: ro}, nil
}

// writableModes reports whether access modes admit writes: ReadWriteOnce
// or ReadWriteMany among them.
func writableModes(modes []corev1.PersistentVolumeAccessMode) bool {
	return slices.Contains(modes, corev1.ReadWriteOnce) || slices.Contains(modes, corev1.ReadWriteMany)
}

func claimRefString(ref *corev1.ObjectReference) string {
	if ref == nil {
		return "no claim"
	}
	return fmt.Sprintf("%s/%s uid %s", ref.Namespace, ref.Name, ref.UID)
}

// onNode reports whether b's volume is on the Kubernetes Node nodeName:
// its nodeAffinity, if any, selects the Node's labels (and name), read
// with nodes.
// A volume without a nodeAffinity (a hostPath) is on every node: its
// directory is taken to be the same on each (a network file system
// mounted there). Without a Node of that name, only such a volume is. If
// not, it says why.
func (b *boundVolume) onNode(ctx context.Context, nodes *nodeReader, nodeName string) (bool, string, error) {
	aff := b.pv.Spec.NodeAffinity
	if aff == nil || aff.Required == nil {
		return true, "", nil
	}
	n, err := nodes.get(ctx, nodeName)
	if err != nil {
		return false, "", err
	}
	if n == nil {
		return false, fmt.Sprintf("PersistentVolume %s has a nodeAffinity and there is no Kubernetes Node named %s to match it against", b.pv.Name, nodeName), nil
	}
	ok, err := nodeaffinity.NewLazyErrorNodeSelector(aff.Required).Match(n)
	if err != nil {
		return false, "", fmt.Errorf("PersistentVolume %s: nodeAffinity: %w", b.pv.Name, err)
	}
	if !ok {
		return false, fmt.Sprintf("PersistentVolume %s's nodeAffinity does not select Node %s", b.pv.Name, nodeName), nil
	}
	return true, "", nil
}

// nodeReader reads Kubernetes Nodes, each once, and, for placement,
// claims and their volumes, each once. A Node is read as its metadata
// alone (a nodeAffinity matches its labels and name): placement's cache
// of Nodes holds no status.
type nodeReader struct {
	r      client.Reader
	seen   map[string]*corev1.Node
	claims map[string]boundOrErr
}

type boundOrErr struct {
	b   *boundVolume
	err error
}

func newNodeReader(r client.Reader) *nodeReader {
	return &nodeReader{r: r, seen: map[string]*corev1.Node{}, claims: map[string]boundOrErr{}}
}

// bind is bindVolume, once per claim.
func (nr *nodeReader) bind(ctx context.Context, r client.Reader, ns string, v *v1alpha1.VolumeSource) (*boundVolume, error) {
	key := ns + "/" + v.ClaimName
	if got, ok := nr.claims[key]; ok {
		return got.b, got.err
	}
	b, err := bindVolume(ctx, r, ns, v)
	nr.claims[key] = boundOrErr{b, err}
	return b, err
}

// get returns the Node name, or nil if there is none.
func (nr *nodeReader) get(ctx context.Context, name string) (*corev1.Node, error) {
	if n, ok := nr.seen[name]; ok {
		return n, nil
	}
	m := nodeMetadata()
	switch err := nr.r.Get(ctx, types.NamespacedName{Name: name}, m); {
	case apierrors.IsNotFound(err):
		nr.seen[name] = nil
		return nil, nil
	case err != nil:
		return nil, err
	}
	n := &corev1.Node{ObjectMeta: m.ObjectMeta}
	nr.seen[name] = n
	return n, nil
}

// nodeMetadata is a Kubernetes Node's metadata, to read into.
func nodeMetadata() *metav1.PartialObjectMetadata {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Node"))
	return m
}

// volumeFits returns, for placement, what s's volume sources ask of a
// node: nil when it has none; otherwise a check of a node that says why
// a volume is not on it ("" if every one is). wait says why s cannot be
// placed yet (a claim missing or not bound, or one that cannot be used);
// err is a failure to read.
//
// Claims are read through nodes' per-pass memory: the Sessions that name
// one claim cost one read of it (and of its volume) a pass, from
// placement's cache.
func volumeFits(ctx context.Context, r client.Reader, nodes *nodeReader, s *v1alpha1.Session) (fits func(*node) string, wait string, err error) {
	var bound []*boundVolume
	for i, src := range s.Spec.WorkspaceSources {
		if src.Volume == nil {
			continue
		}
		b, err := nodes.bind(ctx, r, s.Namespace, src.Volume)
		if err != nil {
			if errors.Is(err, errVolumeWait) || errdefs.IsInvalidArgument(err) || errdefs.IsPermissionDenied(err) {
				return nil, fmt.Sprintf("spec.workspaceSources[%d]: %v", i, err), nil
			}
			return nil, "", err
		}
		bound = append(bound, b)
	}
	if len(bound) == 0 {
		return nil, "", nil
	}
	return func(n *node) string {
		for _, b := range bound {
			ok, why, err := b.onNode(ctx, nodes, n.name)
			if err != nil {
				return err.Error()
			}
			if !ok {
				return why
			}
		}
		return ""
	}, "", nil
}

// claimsDir is the directory, under airlockd's root, where the agent
// records which claims each Session's workspaces hold on this node: one
// file per Session uid, a line "namespace/name" per claim. It is written
// before the claims are held and removed once they are released, so that
// an agent that stops at any point finds what to release.
const claimsDir = "kube-claims"

// ClaimFinalizerPrefix begins the finalizer a node's agent puts on the
// claims its Sessions' workspaces use: ClaimFinalizerPrefix + the node's
// name. Kubernetes holds a claim for the pods that use it
// (kubernetes.io/pvc-protection); Sessions are no pods, so without it a
// claim could be deleted, and its volume released and bound to another
// namespace's claim, while a Session still has the directory (or waits in
// Review, to commit into it).
const ClaimFinalizerPrefix = "workspaces.airlock.dev/"

// claimFinalizer is node's finalizer on the claims it holds, or an error
// when the node's name cannot be one (a finalizer's name is at most 63
// characters).
func claimFinalizer(node string) (string, error) {
	if len(node) > 63 {
		return "", fmt.Errorf("node name %q is longer than 63 characters, too long for the finalizer that holds a claim (%s<node>): this node takes no volume sources: %w", node, ClaimFinalizerPrefix, errdefs.ErrInvalidArgument)
	}
	return ClaimFinalizerPrefix + node, nil
}

func (a *nodeAgent) claimsFile(uid types.UID) string {
	return filepath.Join(a.root, claimsDir, string(uid))
}

// holdClaims holds the claims of the Session uid (each as read when its
// binding was checked: one changed since fails with a conflict, and the
// Session is tried again) with this node's finalizer, after recording
// them. The Session's run is in flight from here until doneHolding: the
// sweep leaves its record alone.
func (a *nodeAgent) holdClaims(ctx context.Context, uid types.UID, claims []*corev1.PersistentVolumeClaim) error {
	if len(claims) == 0 {
		return nil
	}
	fin, err := claimFinalizer(a.node)
	if err != nil {
		return err
	}
	// A claim named by two sources is held once.
	seen := map[types.UID]bool{}
	var held []*corev1.PersistentVolumeClaim
	for _, c := range claims {
		if !seen[c.UID] {
			seen[c.UID] = true
			held = append(held, c)
		}
	}
	a.claimMu.Lock()
	defer a.claimMu.Unlock()
	if a.inflight == nil {
		a.inflight = map[types.UID]bool{}
	}
	a.inflight[uid] = true
	var b strings.Builder
	b.WriteString("finalizer " + fin + "\n")
	for _, c := range held {
		b.WriteString(c.Namespace + "/" + c.Name + "\n")
	}
	if err := writeSynced(filepath.Join(a.root, claimsDir), string(uid), []byte(b.String())); err != nil {
		return err
	}
	for _, c := range held {
		c = c.DeepCopy()
		controllerutil.AddFinalizer(c, fin)
		// Sent even when the copy has the finalizer already: the update
		// carries the copy's resourceVersion, so a claim released (or
		// changed) since it was read is a conflict, never a hold taken
		// for granted.
		if err := a.c.Update(ctx, c); err != nil {
			if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
				// Changed since its binding was checked: checked
				// again on the next try.
				return fmt.Errorf("PersistentVolumeClaim %s/%s changed while it was checked: %w", c.Namespace, c.Name, errdefs.ErrUnavailable)
			}
			return fmt.Errorf("hold PersistentVolumeClaim %s/%s: %w", c.Namespace, c.Name, err)
		}
		log.G(ctx).Info("claim held for its Session's workspace", "claim", c.Namespace+"/"+c.Name, "finalizer", fin)
	}
	return nil
}

// doneHolding ends the in-flight run of the Session uid (holdClaims):
// its local session exists now, or its start failed.
func (a *nodeAgent) doneHolding(uid types.UID) {
	a.claimMu.Lock()
	delete(a.inflight, uid)
	a.claimMu.Unlock()
}

// writeSynced writes dir/name through a temporary file, synced, and
// syncs dir: the record of a hold is on disk before the hold.
func writeSynced(dir, name string, b []byte) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "."+name+".tmp")
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
		return err
	}
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}

// releaseClaims takes this node's finalizer off the claims the Session uid
// held that no other Session on this node holds, then forgets them. An
// error leaves the record, for a later try; a record made under another
// node name (the agent renamed on the same root) is kept, and said so: the
// node restriction lets only that node take its finalizer off.
func (a *nodeAgent) releaseClaims(ctx context.Context, uid types.UID) error {
	a.claimMu.Lock()
	defer a.claimMu.Unlock()
	fin, mine, err := readRecord(a.claimsFile(uid))
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if own, _ := claimFinalizer(a.node); fin != own {
		return fmt.Errorf("the claims %s of Session uid %s are held by finalizer %s, not this node's (%s): the agent was renamed on the same root; start it under its old name to release them, or have an administrator take %s off them",
			strings.Join(mine, ", "), uid, fin, own, fin)
	}
	ents, err := os.ReadDir(filepath.Join(a.root, claimsDir))
	if err != nil {
		return err
	}
	others := map[string]bool{}
	for _, e := range ents {
		if e.Name() == string(uid) || strings.HasPrefix(e.Name(), ".") {
			continue
		}
		cs, err := readClaims(filepath.Join(a.root, claimsDir, e.Name()))
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		for _, c := range cs {
			others[c] = true
		}
	}
	for _, c := range mine {
		if others[c] {
			continue
		}
		ns, name, _ := strings.Cut(c, "/")
		key := types.NamespacedName{Namespace: ns, Name: name}
		for try := 0; ; try++ {
			var pvc corev1.PersistentVolumeClaim
			if err := a.fresh.Get(ctx, key, &pvc); err != nil {
				if apierrors.IsNotFound(err) {
					break
				}
				return err
			}
			if !controllerutil.RemoveFinalizer(&pvc, fin) {
				break
			}
			err := a.c.Update(ctx, &pvc)
			if err == nil || apierrors.IsNotFound(err) {
				log.G(ctx).Info("claim released", "claim", c)
				break
			}
			if !apierrors.IsConflict(err) || try == 4 {
				return fmt.Errorf("release PersistentVolumeClaim %s: %w", c, err)
			}
		}
	}
	return os.Remove(a.claimsFile(uid))
}

// readRecord reads a claims record: the finalizer that holds them and the
// claims, "namespace/name" each.
func readRecord(path string) (fin string, claims []string, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", nil, err
	}
	first, rest, _ := strings.Cut(string(b), "\n")
	fin, ok := strings.CutPrefix(first, "finalizer ")
	if !ok {
		return "", nil, fmt.Errorf("claims record %s: no finalizer line", path)
	}
	return fin, strings.Fields(rest), nil
}

// readClaims reads the claims of a claims record.
func readClaims(path string) ([]string, error) {
	_, claims, err := readRecord(path)
	return claims, err
}

// sweepClaims releases the claims of Sessions that have no local session
// on this node and are not in the agent's cache of its node's Sessions
// (deleted while the agent was away, or failed before their local
// session was made).
func (a *nodeAgent) sweepClaims(ctx context.Context) {
	ents, err := os.ReadDir(filepath.Join(a.root, claimsDir))
	if err != nil || len(ents) == 0 {
		return
	}
	keep, ok := a.liveUIDs(ctx, false)
	if !ok {
		return
	}
	a.claimMu.Lock()
	for uid := range a.inflight {
		keep[uid] = true
	}
	a.claimMu.Unlock()
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".") {
			continue
		}
		if uid := types.UID(e.Name()); !keep[uid] {
			if err := a.releaseClaims(ctx, uid); err != nil {
				log.G(ctx).Warn("claims not released", "session-uid", uid, "error", err)
			}
		}
	}
}

// releaseAfterFailure releases the claims of the Session uid, which has no
// local session after a failed start; an error is left to the sweep.
func (a *nodeAgent) releaseAfterFailure(ctx context.Context, uid types.UID) {
	a.doneHolding(uid)
	if err := a.releaseClaims(ctx, uid); err != nil {
		log.G(ctx).Warn("claims not released after the Session failed to start; the sweep tries again", "error", err)
	}
}
