package agent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// LeaseNamespace holds the nodes' Leases and the placement controller's
// leader Lease.
const LeaseNamespace = "airlock-system"

// PlacementLease is the placement controller's leader Lease.
const PlacementLease = "airlock-placement"

// errLeaseTaken marks a node Lease another agent holds.
var errLeaseTaken = errors.New("node lease held by another agent")

// errNoNamespace says that LeaseNamespace is missing. The agent does not
// make it: that would take the right to create any namespace, and the
// namespace's owner decides which nodes are live, so it is the
// deployment's (deploy/kubernetes/namespace.yaml).
var errNoNamespace = fmt.Errorf("namespace %s does not exist: apply deploy/kubernetes (kubectl apply -k deploy/kubernetes), or create it and let no one but the operators write in it; the node agent does not create it", LeaseNamespace)

// loadIdentity returns the agent's Lease holder identity, kept in
// kube/identity under root (made on first use): the node name, and an id
// that stays with the root across restarts.
func loadIdentity(root, node string) (string, error) {
	dir := filepath.Join(root, "kube")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "identity")
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		var r [8]byte
		if _, err := rand.Read(r[:]); err != nil {
			return "", err
		}
		b = []byte(hex.EncodeToString(r[:]))
		if err := os.WriteFile(path, b, 0o600); err != nil {
			return "", err
		}
	} else if err != nil {
		return "", err
	}
	id := strings.TrimSpace(string(b))
	if id == "" {
		return "", fmt.Errorf("%s is empty: remove it, and a new identity is made", path)
	}
	return node + "/" + id, nil
}

// registrar registers the node and renews its Lease.
//
// Like a kubelet's, its renewals and status writes start from the
// objects as it last wrote them, not from a read: a node costs the API
// server one write per renewal, and nothing between two changes of its
// status. A conflict (409) says someone else changed the object; the
// write starts over from a read, which also tells a Lease taken over.
type registrar struct {
	c        client.Client // uncached
	cfg      Config
	identity string
	endpoint v1alpha1.NodeEndpoint

	mu sync.Mutex
	// lease is the node's Lease as this agent last wrote it; nil
	// before the first write, or when it must be read again.
	lease *coordinationv1.Lease // +checklocks:mu
	// node is the AirlockNode as last written or read, and checked
	// when it was last read (a deleted AirlockNode is noticed by a
	// read: see nodeCheckEvery).
	node    *v1alpha1.AirlockNode // +checklocks:mu
	checked time.Time             // +checklocks:mu
}

// nodeCheckEvery is how often reportSessions reads the AirlockNode even
// when its status has not changed, to notice it was deleted (a deleted
// AirlockNode's Lease, its dependent, is deleted by the garbage collector
// and the heartbeat notices that sooner).
const nodeCheckEvery = time.Minute

// setLease records l as the node's Lease last written (nil: read it
// again before the next renewal).
func (r *registrar) setLease(l *coordinationv1.Lease) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lease = l.DeepCopy()
}

// setNode records n as the AirlockNode last written or read (nil: read
// it again at the next report).
func (r *registrar) setNode(n *v1alpha1.AirlockNode, read bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.node = n.DeepCopy()
	if read {
		r.checked = time.Now()
	}
}

func (r *registrar) leaseSeconds() int32 {
	return int32(max(r.cfg.LeaseDuration.Round(time.Second), time.Second) / time.Second)
}

// register makes or updates the node's AirlockNode (labels, status) and
// takes its Lease: refused (errLeaseTaken) while another holder's Lease
// is live.
func (r *registrar) register(ctx context.Context) error {
	var l coordinationv1.Lease
	key := client.ObjectKey{Namespace: LeaseNamespace, Name: r.cfg.Node}
	err := r.c.Get(ctx, key, &l)
	exists := err == nil
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("lease %s: %w", key, err)
	}
	now := time.Now()
	if exists {
		holder := ptrString(l.Spec.HolderIdentity)
		if holder != r.identity && l.Spec.RenewTime != nil && l.Spec.LeaseDurationSeconds != nil &&
			now.Before(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds)*time.Second)) {
			return fmt.Errorf("%w: node name %q: its Lease %s is held by %q and was renewed %s ago; two agents with one name would both run its sessions (another --node-name, or wait for the Lease to expire): %w",
				errLeaseTaken, r.cfg.Node, key, holder, now.Sub(l.Spec.RenewTime.Time).Round(time.Millisecond), errdefs.ErrAlreadyExists)
		}
	}

	n := &v1alpha1.AirlockNode{}
	switch err := r.c.Get(ctx, client.ObjectKey{Name: r.cfg.Node}, n); {
	case apierrors.IsNotFound(err):
		n = &v1alpha1.AirlockNode{ObjectMeta: metav1.ObjectMeta{Name: r.cfg.Node, Labels: maps.Clone(r.cfg.Labels)}}
		if err := r.c.Create(ctx, n); err != nil {
			return fmt.Errorf("create AirlockNode %s: %w", r.cfg.Node, err)
		}
	case err != nil:
		return fmt.Errorf("AirlockNode %s: %w", r.cfg.Node, err)
	default:
		// --node-labels sets its keys; labels others set stay.
		changed := false
		for k, v := range r.cfg.Labels {
			if n.Labels[k] != v {
				if n.Labels == nil {
					n.Labels = map[string]string{}
				}
				n.Labels[k], changed = v, true
			}
		}
		if changed {
			if err := r.c.Update(ctx, n); err != nil {
				return fmt.Errorf("label AirlockNode %s: %w", r.cfg.Node, err)
			}
		}
	}
	if err := r.writeNodeStatus(ctx, n, -1); err != nil {
		return err
	}
	r.setNode(n, true)

	mt := metav1.NewMicroTime(now)
	secs := r.leaseSeconds()
	owner := []metav1.OwnerReference{{APIVersion: v1alpha1.GroupVersion.String(), Kind: "AirlockNode", Name: n.Name, UID: n.UID}}
	if !exists {
		l = coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Namespace: LeaseNamespace, Name: r.cfg.Node, OwnerReferences: owner},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &r.identity, LeaseDurationSeconds: &secs,
				AcquireTime: &mt, RenewTime: &mt},
		}
		if err := r.c.Create(ctx, &l); err != nil {
			if apierrors.IsNotFound(err) {
				return fmt.Errorf("create lease %s: %w: %w", key, errNoNamespace, err)
			}
			return fmt.Errorf("create lease %s: %w", key, err)
		}
		r.setLease(&l)
		return nil
	}
	if ptrString(l.Spec.HolderIdentity) != r.identity {
		l.Spec.AcquireTime = &mt
		t := ptrInt32(l.Spec.LeaseTransitions) + 1
		l.Spec.LeaseTransitions = &t
	}
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &r.identity, &secs, &mt
	l.OwnerReferences = owner
	if err := r.c.Update(ctx, &l); err != nil {
		return fmt.Errorf("take lease %s: %w", key, err)
	}
	r.setLease(&l)
	return nil
}

func ptrInt32(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// writeNodeStatus writes the AirlockNode's status when it differs;
// held < 0 keeps the sessions count.
func (r *registrar) writeNodeStatus(ctx context.Context, n *v1alpha1.AirlockNode, held int) error {
	st := n.Status
	st.Capacity = int32(r.cfg.Capacity)
	if r.cfg.Draining != nil && r.cfg.Draining.Load() {
		// Its airlockd is stopping: placement sends it nothing more
		// (the next agent writes the capacity again).
		st.Capacity = 0
	}
	st.Version, st.Runtime, st.HolderIdentity = r.cfg.Version, r.cfg.Runtime, r.identity
	st.Endpoint = r.endpoint
	if held >= 0 {
		st.Sessions = int32(held)
	}
	if st == n.Status {
		return nil
	}
	n.Status = st
	if err := r.c.Status().Update(ctx, n); err != nil {
		return fmt.Errorf("AirlockNode %s status: %w", r.cfg.Node, err)
	}
	return nil
}

// renew renews the node's Lease: an error wrapping errLeaseTaken when
// another agent took it over (ours had expired). It writes the Lease as
// it last wrote it, with a new renew time; only a conflict, someone
// else's change, makes it read the Lease first.
func (r *registrar) renew(ctx context.Context) error {
	key := client.ObjectKey{Namespace: LeaseNamespace, Name: r.cfg.Node}
	r.mu.Lock()
	l := r.lease.DeepCopy()
	r.mu.Unlock()
	for {
		read := l == nil
		if read {
			l = &coordinationv1.Lease{}
			if err := r.c.Get(ctx, key, l); err != nil {
				return err
			}
		}
		if h := ptrString(l.Spec.HolderIdentity); h != r.identity {
			r.setLease(nil)
			return fmt.Errorf("%w: lease %s is now held by %q (this agent's had expired)", errLeaseTaken, key, h)
		}
		mt := metav1.NewMicroTime(time.Now())
		l.Spec.RenewTime = &mt
		err := r.c.Update(ctx, l)
		switch {
		case err == nil:
			r.setLease(l)
			return nil
		case apierrors.IsConflict(err) && !read:
			l = nil // changed by someone else: read it, once
		default:
			r.setLease(nil)
			return err
		}
	}
}

// heartbeat renews the Lease every quarter of its duration until ctx ends
// or another agent takes the Lease over. A failed renewal is tried again
// at the next tick: the Lease expires only after four of them. It calls
// nothing of the daemon, whose locks a slow session start may hold.
func (r *registrar) heartbeat(ctx context.Context) error {
	t := time.NewTicker(max(r.cfg.LeaseDuration/4, 100*time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, r.cfg.LeaseDuration/2)
		err := r.renew(rctx)
		if apierrors.IsNotFound(err) {
			// Deleted, perhaps with its AirlockNode (its owner):
			// the node registers again, as a kubelet makes its
			// Lease again.
			log.G(ctx).Warn("node lease deleted; registering the node again")
			err = r.register(rctx)
		}
		cancel()
		if errors.Is(err, errLeaseTaken) {
			return err
		}
		if err != nil && ctx.Err() == nil {
			log.G(ctx).Warn("node lease not renewed", "error", err)
		}
	}
}

// reportSessions brings the AirlockNode's count of the sessions the node
// holds up to date every period, until ctx ends; it registers the node
// again if its AirlockNode was deleted.
func (r *registrar) reportSessions(ctx context.Context, period time.Duration, held func(context.Context) int) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		err := r.report(ctx, held(ctx))
		if apierrors.IsNotFound(err) {
			// Deleted by someone: the node registers again, or
			// nothing is placed on it.
			log.G(ctx).Warn("AirlockNode deleted; registering the node again")
			err = r.register(ctx)
		}
		if err != nil && ctx.Err() == nil && !apierrors.IsConflict(err) {
			log.G(ctx).Warn("node status not written", "error", err)
		}
	}
}

// report writes the AirlockNode's status with held sessions, starting
// from the AirlockNode as last written: no request when nothing changed
// and it was read less than nodeCheckEvery ago. A conflict makes the
// next report read it; NotFound says it was deleted.
func (r *registrar) report(ctx context.Context, held int) error {
	r.mu.Lock()
	n := r.node.DeepCopy()
	read := n == nil || time.Since(r.checked) >= nodeCheckEvery
	r.mu.Unlock()
	if read {
		n = &v1alpha1.AirlockNode{}
		if err := r.c.Get(ctx, client.ObjectKey{Name: r.cfg.Node}, n); err != nil {
			return err
		}
		r.setNode(n, true)
	}
	err := r.writeNodeStatus(ctx, n, held)
	if apierrors.IsConflict(err) && !read {
		// Written by someone else meanwhile (airlockd's own write of
		// no capacity as it drains): once more from a fresh read.
		n = &v1alpha1.AirlockNode{}
		if err = r.c.Get(ctx, client.ObjectKey{Name: r.cfg.Node}, n); err == nil {
			r.setNode(n, true)
			err = r.writeNodeStatus(ctx, n, held)
		}
	}
	if err != nil {
		r.mu.Lock()
		r.node = nil
		r.mu.Unlock()
		return err
	}
	r.setNode(n, false)
	return nil
}
