package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/internal/caller"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/policies"
)

// Labels of a local session run for a Session.
const (
	// LabelSessionUID is the Session's uid: what the agent finds its
	// local session by.
	LabelSessionUID = "airlock.dev/session-uid"
	// LabelSession is the Session's namespace/name.
	LabelSession = "airlock.dev/session"
)

// Finalizer is the node agent's finalizer on the Sessions it runs: it is
// removed once the local session is.
const Finalizer = "airlock.dev/node-agent"

// ReasonRefused is a Failed Session's status.reason when its node's
// daemon refused it (validation, admission, a missing image).
const ReasonRefused = "refused"

// stopGrace is how long a Lost session's processes get between SIGTERM
// and SIGKILL.
const stopGrace = 2 * time.Second

// Daemon is what the agent needs of airlockd's daemon (*daemon.Daemon):
// the calls the /v1 API serves, in process.
type Daemon interface {
	Create(ctx context.Context, req api.CreateRequest) (*api.Session, error)
	Start(ctx context.Context, id string) (*api.Session, error)
	Stop(ctx context.Context, id string, grace time.Duration) (*api.Session, error)
	Wait(ctx context.Context, id string) (*api.WaitResponse, error)
	Remove(ctx context.Context, id string, force bool) error
	List(ctx context.Context) []api.Session
	// AuditSummary counts a session's audit events by layer and action
	// from counters the daemon keeps (no read of the audit log).
	AuditSummary(ctx context.Context, id string) (*api.AuditSummary, error)
	// ChangeSummary is the size of a session's workspace changes under
	// review, or of those committed or discarded; nil when it has none.
	ChangeSummary(ctx context.Context, id string) (*api.ChangeSummary, error)
	// Approvals is the store of the requests the L7 gateways hold for a
	// decision (GET /v1/approvals, POST /v1/approvals/{id}).
	Approvals() *approvals.Store
	// Update revises a running session's policy live (POST
	// /v1/sessions/{id}/update): validated and admitted again, applied
	// all or nothing.
	Update(ctx context.Context, id string, req api.UpdateRequest) (*api.Session, error)
	// ApproveRevise approves held request id by a revision of its
	// session's policy (POST /v1/approvals/{id} with revise).
	ApproveRevise(ctx context.Context, id, reason, by string) (api.Approval, error)
	// SetPool declares, resizes or (size 0) removes the warm pool of a
	// policy, after the validation and admission of a Create: a refused
	// policy prepares nothing. It returns the pool's key.
	SetPool(ctx context.Context, p policies.Policy, size int) (key string, warnings []string, err error)
	// RemovePool removes the pool of key and tears its prepared
	// sandboxes down.
	RemovePool(ctx context.Context, key string) error
	// Pools reports the warm pools.
	Pools() []api.Pool
	// WatchPools calls changed with the labels of the warm pools whose
	// ready count or last error changed, or that were removed, changes
	// made during a call gathered into the next, until ctx ends or the
	// daemon stops; its first call names every pool there is.
	WatchPools(ctx context.Context, changed func(labels []string))
	// Admission is the node's admission policy (its git_source blocks
	// admit workspace sources).
	Admission() *policies.Admission
}

// nodeAgent reconciles the Sessions placed on its node with its daemon's
// local sessions.
type nodeAgent struct {
	d    Daemon
	node string
	// draining is Config.Draining.
	draining *atomic.Bool
	c        client.Client // writes; its cache holds this node's Sessions
	fresh    client.Reader // reads that bypass the cache
	// wake carries an event for a Session whose status is to be
	// written again: its local session ended, one of its requests was
	// held or decided, its audit counts changed.
	wake chan event.GenericEvent
	// stopCtx is the agent's root context: the waits on local sessions
	// last until it ends.
	stopCtx context.Context
	// auditEvery is Config.AuditStatusEvery.
	auditEvery time.Duration
	// poolRoom is Config.PoolRoom.
	poolRoom int
	// poolWake carries an event for a SessionPool to look at again: its
	// daemon pool changed (followPools), another's refusal changed
	// (noteRefusal), or the safety sweep (sweepPools). Each is a look
	// poolSettle later, so that a burst makes one.
	poolWake chan event.GenericEvent

	mu sync.Mutex
	// waiting are the local sessions a goroutine waits on.
	waiting map[string]bool // +checklocks:mu
	// auditWritten is when each Session's audit counts were last
	// written (see auditEvery).
	auditWritten map[types.UID]time.Time // +checklocks:mu
	// statusWritten is when each Session's status was last written
	// (see followedEvery).
	statusWritten map[types.UID]time.Time // +checklocks:mu
	// refused is the refusal last logged for each SessionPool's pool
	// label, with the generation it was for.
	refused map[string]string // +checklocks:mu
	// pushed are the outcomes of the pushes of workspace sources not yet
	// known to be in their Sessions' status: a push is made once.
	pushed map[pushKey]v1alpha1.WorkspaceSourceStatus // +checklocks:mu
	// warmCond is the Warm condition of each Session naming a
	// SessionPool, from its create, until its status is written.
	warmCond map[types.UID]metav1.Condition // +checklocks:mu
	// claimMu serializes the holds on volume sources' claims and their
	// release (volumes.go): a claim is released only when no record of
	// this node's still names it.
	claimMu sync.Mutex
	// inflight are the Sessions between holdClaims and the end of their
	// create: the sweep keeps their claims.
	inflight map[types.UID]bool // +checklocks:claimMu
	// root is airlockd's root (Config.Root): the workspace sources are
	// fetched beneath it.
	root string
}

// local returns the local session labelled with uid, nil if none.
func (a *nodeAgent) local(ctx context.Context, uid types.UID) *api.Session {
	for _, v := range a.d.List(ctx) {
		if v.Labels[LabelSessionUID] == string(uid) {
			return &v
		}
	}
	return nil
}

// held counts the local sessions run for Sessions.
func (a *nodeAgent) held(ctx context.Context) int {
	n := 0
	for _, v := range a.d.List(ctx) {
		if v.Labels[LabelSessionUID] != "" {
			n++
		}
	}
	return n
}

func (a *nodeAgent) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ctx = log.With(ctx, "session", req.String())
	// From the cache, which holds this node's Sessions and has at least
	// the change that asked for this reconcile: every write below starts
	// from this copy and re-reads afresh only if it was stale (409).
	var s v1alpha1.Session
	err := a.c.Get(ctx, req.NamespacedName, &s)
	if apierrors.IsNotFound(err) {
		// Gone from the cache: confirmed afresh before its local
		// session is removed, since a cache may lag.
		err = a.fresh.Get(ctx, req.NamespacedName, &s)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			// Deleted without this agent's help (the placement
			// controller took the finalizer off while it judged
			// this node lost): its local session goes now.
			a.removeOrphans(ctx, req.String())
		}
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	if s.Spec.NodeName != a.node {
		return reconcile.Result{}, nil
	}
	v := a.local(ctx, s.UID)

	if s.DeletionTimestamp != nil {
		if v != nil {
			if err := a.d.Remove(ctx, v.ID, true); err != nil && !errdefs.IsNotFound(err) {
				return reconcile.Result{}, fmt.Errorf("remove local session %s: %w", v.ID, err)
			}
			log.G(ctx).Info("local session removed with its Session", "id", v.ID)
		}
		a.removeSources(ctx, s.UID)
		// Its claims are released before the Session may go: a
		// failure keeps the Session, and tries again.
		if err := a.releaseClaims(ctx, s.UID); err != nil {
			return reconcile.Result{}, err
		}
		_, err := updateFresh(ctx, a.c, a.fresh, req.NamespacedName, &s, func(f *v1alpha1.Session) bool {
			return f.UID == s.UID && controllerutil.RemoveFinalizer(f, Finalizer)
		})
		a.mu.Lock()
		delete(a.auditWritten, s.UID)
		delete(a.statusWritten, s.UID)
		for k := range a.pushed {
			if k.uid == s.UID {
				delete(a.pushed, k)
			}
		}
		delete(a.warmCond, s.UID)
		a.mu.Unlock()
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}

	if v == nil {
		switch {
		case !lostable(s.Status.State):
			// Ended, failed or lost: never run again.
			return reconcile.Result{}, nil
		case s.Status.ID != "" || s.Status.State == v1alpha1.SessionRunning:
			// It had a local session, and it is gone: removed on
			// the node by hand. It is not run a second time.
			_, err := writeStatus(ctx, a.c, a.fresh, req.NamespacedName, &s, func(f *v1alpha1.Session) bool {
				if f.UID != s.UID || !lostable(f.Status.State) {
					return false
				}
				now := metav1.NewTime(time.Now().Truncate(time.Second))
				f.Status.State, f.Status.Reason, f.Status.FinishedAt = v1alpha1.SessionFailed, "error", &now
				f.Status.Message = fmt.Sprintf("its local session %s on node %s is gone (removed on the node); it is not run again", f.Status.ID, a.node)
				return true
			})
			return reconcile.Result{}, err
		}
		if a.draining != nil && a.draining.Load() {
			// Its airlockd is stopping (Config.Draining): the next
			// agent on the node starts it.
			log.G(ctx).Info("Session not started: the node agent is stopping", "session", req.NamespacedName.String())
			return reconcile.Result{}, nil
		}
		var err error
		if v, err = a.run(ctx, &s); err != nil || v == nil {
			return reconcile.Result{}, err
		}
	} else if !controllerutil.ContainsFinalizer(&s, Finalizer) {
		// A local session made without the finalizer's being put
		// on first (by hand, or by an older agent): a delete must
		// still find it.
		if _, err := updateFresh(ctx, a.c, a.fresh, req.NamespacedName, &s, func(f *v1alpha1.Session) bool {
			return f.UID == s.UID && f.DeletionTimestamp == nil && controllerutil.AddFinalizer(f, Finalizer)
		}); err != nil {
			return reconcile.Result{}, err
		}
	}

	if s.Status.State == v1alpha1.SessionLost {
		// Given up for lost while this node was away: it is not
		// run on, here or anywhere.
		if v.State == api.StateRunning || v.State == api.StateCreated {
			log.G(ctx).Warn("stopping a session the cluster marked Lost", "id", v.ID)
			if _, err := a.d.Stop(caller.With(ctx, "node agent "+a.node+": the Session was marked Lost"), v.ID, stopGrace); err != nil {
				return reconcile.Result{}, err
			}
		}
		return reconcile.Result{}, nil
	}
	if v.State == api.StateCreated {
		// Made by an agent killed before it started it (the daemon
		// takes one that was handed its command for running).
		nv, err := a.d.Start(ctx, v.ID)
		if err != nil {
			return reconcile.Result{}, fmt.Errorf("start local session %s: %w", v.ID, err)
		}
		v = nv
	}
	var policyCond *metav1.Condition
	if v.State == api.StateRunning {
		var err error
		if v, policyCond, err = a.revise(ctx, &s, v); err != nil {
			return reconcile.Result{}, err
		}
		a.waitFor(v.ID, req.NamespacedName)
	}
	sum := a.summaries(ctx, v)
	var pushed []v1alpha1.WorkspaceSourceStatus
	if len(s.Spec.WorkspaceSources) > 0 && v.State == api.StateStopped && !v.Review {
		pushed = a.pushes(ctx, &s)
	}
	var cond *metav1.Condition
	a.mu.Lock()
	if c, ok := a.warmCond[s.UID]; ok {
		cond = &c
	}
	a.mu.Unlock()
	var later time.Duration
	auditNow := false
	wrote, err := writeStatus(ctx, a.c, a.fresh, req.NamespacedName, &s, func(f *v1alpha1.Session) bool {
		if f.UID != s.UID || f.Status.State == v1alpha1.SessionLost {
			return false
		}
		st := localStatus(f.Status, v, a.node, f.Generation)
		st.WorkspaceSources = withSources(st.WorkspaceSources, pushed)
		if cond != nil {
			meta.SetStatusCondition(&st.Conditions, *cond)
		}
		if policyCond != nil {
			meta.SetStatusCondition(&st.Conditions, *policyCond)
		}
		later, auditNow = sum.apply(&st, &f.Status, a.auditDue(f.UID))
		if due := a.followedDue(f.UID); due > 0 && !equality.Semantic.DeepEqual(&st, &f.Status) && onlyFollowed(&st, &f.Status) {
			// Held back; written once due, with whatever changed
			// meanwhile.
			later, auditNow = due, false
			return false
		}
		f.Status = st
		return true
	})
	if err == nil && wrote {
		a.mu.Lock()
		now := time.Now()
		for _, p := range pushed {
			delete(a.pushed, pushKey{s.UID, p.Target})
		}
		if cond != nil {
			delete(a.warmCond, s.UID)
		}
		a.statusWritten[s.UID] = now
		if auditNow {
			a.auditWritten[s.UID] = now
		}
		a.mu.Unlock()
	}
	if err == nil && v.State != api.StateRunning {
		log.G(ctx).Debug("session status written", "id", v.ID, "state", v.State, "exit", v.ExitCode)
	}
	return reconcile.Result{RequeueAfter: later}, err
}

// run makes s a local session, after its finalizer is on it and its
// status says this node claimed it; nil without an error when s was lost
// or failed meanwhile.
func (a *nodeAgent) run(ctx context.Context, s *v1alpha1.Session) (*api.Session, error) {
	key := client.ObjectKeyFromObject(s)
	if _, err := updateFresh(ctx, a.c, a.fresh, key, s, func(f *v1alpha1.Session) bool {
		return f.UID == s.UID && f.DeletionTimestamp == nil && controllerutil.AddFinalizer(f, Finalizer)
	}); err != nil {
		return nil, err
	}
	claimed := false
	if _, err := claimStatus(ctx, a.c, a.fresh, key, s, func(f *v1alpha1.Session) bool {
		claimed = f.UID == s.UID && f.DeletionTimestamp == nil && f.Spec.NodeName == a.node &&
			lostable(f.Status.State) && f.Status.State != v1alpha1.SessionRunning && f.Status.ID == ""
		if !claimed {
			return false
		}
		f.Status.State, f.Status.Node = v1alpha1.SessionPlaced, a.node
		if f.Status.PlacedAt == nil {
			now := metav1.NewTime(time.Now().Truncate(time.Second))
			f.Status.PlacedAt = &now
		}
		return true
	}); err != nil || !claimed {
		return nil, err
	}
	// A Session's own pool block is not for its creator to set: it would
	// keep prepared sandboxes on the node, counted against its session
	// limit, past the Session (warm pools are the operator's: SessionPool
	// and --pool).
	var v *api.Session
	pol, err := sessionPolicy(s)
	var src preparedSources
	if err == nil {
		pol.Workspaces = slices.Clone(pol.Workspaces)
		src, err = a.fetchSources(ctx, s, &pol)
	}
	if err == nil {
		// Held before the session runs: from here until the Session
		// is deleted, its claims cannot go, nor their volumes pass to
		// another claim.
		if err = a.holdClaims(ctx, s.UID, src.claims); err != nil {
			a.removeSources(ctx, s.UID)
		}
	}
	owned, volumes, fetched := src.owned, src.volumes, src.statuses
	if err == nil && len(fetched) > 0 {
		// What was fetched is written before the session runs: its
		// pushes start from it.
		_, err = writeStatus(ctx, a.c, a.fresh, key, s, func(f *v1alpha1.Session) bool {
			if f.UID != s.UID || !lostable(f.Status.State) {
				return false
			}
			f.Status.WorkspaceSources = fetched
			return true
		})
		if err != nil {
			a.removeSources(ctx, s.UID)
			a.releaseAfterFailure(ctx, s.UID)
			return nil, err
		}
	}
	if err == nil {
		v, err = a.d.Create(ctx, api.CreateRequest{Policy: pol, Start: true, Labels: map[string]string{
			LabelSessionUID:        string(s.UID),
			LabelSession:           s.Namespace + "/" + s.Name,
			LabelSessionGeneration: strconv.FormatInt(s.Generation, 10),
			LabelSessionSources:    sourcesDigest(s.Spec.WorkspaceSources),
		}, OwnedWorkspaces: owned, VolumeWorkspaces: volumes})
		if err != nil && len(owned) > 0 {
			a.removeSources(ctx, s.UID)
		}
	}
	a.doneHolding(s.UID)
	if err != nil {
		// No local session holds them: released now (the sweep
		// releases what this misses).
		a.releaseAfterFailure(ctx, s.UID)
		if errdefs.IsUnavailable(err) || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return nil, err // again, with backoff
		}
		reason := "error"
		if errdefs.IsPermissionDenied(err) || errdefs.IsInvalidArgument(err) || errdefs.IsNotFound(err) {
			reason = ReasonRefused
		}
		log.G(ctx).Warn("session not run", "reason", reason, "error", err)
		_, werr := writeStatus(ctx, a.c, a.fresh, key, s, func(f *v1alpha1.Session) bool {
			if f.UID != s.UID || !lostable(f.Status.State) {
				return false
			}
			now := metav1.NewTime(time.Now().Truncate(time.Second))
			f.Status.State, f.Status.Reason, f.Status.FinishedAt = v1alpha1.SessionFailed, reason, &now
			f.Status.Message = err.Error()
			return true
		})
		return nil, werr
	}
	log.G(ctx).Info("session running", "id", v.ID, "warm", v.Warm)
	if s.Spec.PoolName != "" {
		a.mu.Lock()
		a.warmCond[s.UID] = warmCondition(s, v)
		a.mu.Unlock()
	}
	return v, nil
}

// waitFor asks for another reconcile of key when local session id ends.
// sessionPolicy is the policy the node runs Session s with, before its
// workspace sources are added: its own pool block dropped, and the label
// of its SessionPool's daemon pool when it names one (it takes one of
// that pool's sandboxes if the rest of its policy is the pool's, the
// daemon's pool key, and runs cold otherwise).
func sessionPolicy(s *v1alpha1.Session) (policies.Policy, error) {
	pol := *s.Spec.Policy.Clone()
	pol.Pool = nil
	switch {
	case s.Spec.PoolName != "":
		pol.Label = PoolLabel(s.Namespace, s.Spec.PoolName)
	case strings.HasPrefix(pol.Label, PoolLabelPrefix):
		return pol, fmt.Errorf("label %q: the prefix %q is reserved for the Sessions of a SessionPool (set spec.poolName instead): %w",
			pol.Label, PoolLabelPrefix, errdefs.ErrInvalidArgument)
	}
	return pol, nil
}

func (a *nodeAgent) waitFor(id string, key types.NamespacedName) {
	ctx := a.stopCtx
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.waiting[id] {
		return
	}
	a.waiting[id] = true
	go func() {
		defer func() {
			a.mu.Lock()
			delete(a.waiting, id)
			a.mu.Unlock()
		}()
		if _, err := a.d.Wait(ctx, id); err != nil {
			return // the Session's next reconcile waits again
		}
		a.poke(ctx, key)
	}()
}

// removeOrphans removes the local sessions run for the Session
// namespace/name, which no longer exists.
func (a *nodeAgent) removeOrphans(ctx context.Context, name string) {
	for _, v := range a.d.List(ctx) {
		if v.Labels[LabelSession] != name || v.Labels[LabelSessionUID] == "" {
			continue
		}
		log.G(ctx).Info("removing the local session of a Session that is gone", "id", v.ID)
		if err := a.d.Remove(ctx, v.ID, true); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).Error("remove local session", "id", v.ID, "error", err)
		}
	}
}

// sweep removes the local sessions labelled for Sessions that no longer
// exist (deleted while this node was away, their finalizer taken off by
// the placement controller), every period until ctx ends.
func (a *nodeAgent) sweep(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		for _, v := range a.d.List(ctx) {
			uid := v.Labels[LabelSessionUID]
			ns, name, ok := strings.Cut(v.Labels[LabelSession], "/")
			if uid == "" || !ok {
				continue
			}
			var s v1alpha1.Session
			key := client.ObjectKey{Namespace: ns, Name: name}
			if err := a.c.Get(ctx, key, &s); err == nil && string(s.UID) == uid {
				continue // in the cache: no request
			}
			// Gone from the cache: confirmed afresh, since a cache
			// may lag.
			err := a.fresh.Get(ctx, key, &s)
			if err == nil && string(s.UID) == uid {
				continue
			}
			if err != nil && !apierrors.IsNotFound(err) {
				continue
			}
			log.G(ctx).Info("removing the local session of a Session that is gone", "id", v.ID, "session", ns+"/"+name)
			if err := a.d.Remove(ctx, v.ID, true); err != nil && !errdefs.IsNotFound(err) {
				log.G(ctx).Error("remove local session", "id", v.ID, "error", err)
			}
		}
		a.sweepSources(ctx)
		a.sweepClaims(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// liveUIDs are the uids of the Sessions that have a local session on this
// node or are in the agent's cache of its node's Sessions (those being
// deleted only withDeleting); false when the cache could not be read.
func (a *nodeAgent) liveUIDs(ctx context.Context, withDeleting bool) (map[types.UID]bool, bool) {
	keep := map[types.UID]bool{}
	for _, v := range a.d.List(ctx) {
		keep[types.UID(v.Labels[LabelSessionUID])] = true
	}
	var list v1alpha1.SessionList
	if err := a.c.List(ctx, &list); err != nil {
		return nil, false
	}
	for _, s := range list.Items {
		if withDeleting || s.DeletionTimestamp == nil {
			keep[s.UID] = true
		}
	}
	return keep, true
}

// sweepSources removes the fetched workspace sources of Sessions that have
// no local session on this node and are not in the agent's cache of its
// node's Sessions (deleted while the agent was away; a fetch happens only
// for a Session in the cache).
func (a *nodeAgent) sweepSources(ctx context.Context) {
	uids := a.sourceUIDs()
	if len(uids) == 0 {
		return
	}
	keep, ok := a.liveUIDs(ctx, true)
	if !ok {
		return
	}
	for _, uid := range uids {
		if !keep[uid] {
			a.removeSources(ctx, uid)
		}
	}
}

// Condition types and reasons of a Session's status.
const (
	// ConditionWarm, on a Session naming a SessionPool, says whether it
	// took a sandbox the pool had prepared and, when not, why.
	ConditionWarm = "Warm"

	ReasonPreparedSandbox = "PreparedSandbox"
	ReasonPolicyDiffers   = "PolicyDiffers"
	ReasonNoneReady       = "NoneReady"
	ReasonNoPoolHere      = "NoPoolOnNode"
)

// warmCondition is the Warm condition of Session s, which names a
// SessionPool, run as local session v.
func warmCondition(s *v1alpha1.Session, v *api.Session) metav1.Condition {
	c := metav1.Condition{Type: ConditionWarm, ObservedGeneration: s.Generation}
	if v.Warm {
		c.Status, c.Reason = metav1.ConditionTrue, ReasonPreparedSandbox
		c.Message = fmt.Sprintf("took a sandbox SessionPool %s had prepared", s.Spec.PoolName)
		return c
	}
	c.Status = metav1.ConditionFalse
	for _, w := range v.Warnings {
		if !strings.HasPrefix(w, "started cold: ") {
			continue
		}
		c.Message = shown(w, maxStatusMessage)
		if strings.Contains(w, "policy differs") {
			c.Reason = ReasonPolicyDiffers
		} else {
			c.Reason = ReasonNoneReady
		}
		return c
	}
	c.Reason = ReasonNoPoolHere
	c.Message = fmt.Sprintf("started cold: SessionPool %s keeps no pool on this node (it selects other nodes, has no room here, or its policy was refused)", s.Spec.PoolName)
	return c
}
