package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/containerd/errdefs"
	"github.com/go-logr/logr"
	authnv1 "k8s.io/api/authentication/v1"
	authzv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/builder"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/predicate"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// DefaultLeaseDuration is a node Lease's duration unless airlockd
// --node-lease-duration says otherwise: a kubelet's default.
const DefaultLeaseDuration = 40 * time.Second

// MinLeaseDuration is the shortest node Lease duration taken.
const MinLeaseDuration = 2 * time.Second

// resync is how often the node agent looks at every Session on its node
// again, and sweeps the local sessions of Sessions that are gone.
const resync = 30 * time.Second

// Config configures a node agent.
type Config struct {
	// Kube is the API server's client configuration (a kubeconfig, or
	// the in-cluster one).
	Kube *rest.Config
	// Node is the node's name: its AirlockNode and Lease, and the
	// spec.nodeName of the Sessions it runs. A DNS subdomain.
	Node string
	// Labels are set on the node's AirlockNode (Sessions' nodeSelector
	// matches them).
	Labels map[string]string
	// Capacity is how many Sessions the node holds at once.
	Capacity int
	// PoolRoom is how many sandboxes the agent keeps prepared for all
	// SessionPools together: the admission policy's session limit less
	// Capacity (airlockd sets it), since prepared sandboxes count
	// against that limit and must not take the places of the Sessions
	// placed on the node. SessionPools get it oldest first.
	PoolRoom int
	// LeaseDuration is the node Lease's duration (and the placement
	// leader Lease's): a node not heard from for that long is lost.
	LeaseDuration time.Duration
	// Root is the daemon's root: the agent keeps its Lease identity there.
	Root string
	// Version and Runtime are reported in the AirlockNode's status.
	Version, Runtime string
	// Controller runs the placement controller in this agent, under
	// leader election.
	Controller bool
	// AuditStatusEvery is the shortest time between two writes of a
	// Session's status made for its audit counts alone (airlockd
	// --kubernetes-audit-interval, whose default is
	// DefaultAuditStatusEvery); 0: the counts are written only with
	// another change of status.
	AuditStatusEvery time.Duration
	// Listen is the node endpoint's TCP address (airlockd
	// --kubernetes-listen; DefaultListen): the Sessions' logs, diffs,
	// commits and audit logs, for airlock --context. Its address and
	// certificate are published in the AirlockNode's status.
	Listen string
	// Advertise is the host published with the endpoint's port (airlockd
	// --kubernetes-advertise-address; in a DaemonSet the node's IP, from
	// the downward API's status.hostIP); empty publishes the listener's
	// host, or when that is unspecified the address this host reaches the
	// API server from.
	Advertise string
	// API is the daemon's /v1 API handler (httpapi.New): the node
	// endpoint hands it the requests it authorized.
	API http.Handler
	// Draining, when set and true, has the agent start no Session it
	// has not started yet (the next agent on the node does): airlockd
	// sets it while it stops its sessions on its way out
	// (--stop-sessions-on-exit), whose Sessions the agent goes on
	// reporting.
	Draining *atomic.Bool
}

// Check reports what is wrong with cfg's node name, labels, capacity and
// lease duration, as an errdefs.ErrInvalidArgument error.
func (cfg *Config) Check() error {
	var problems []string
	if errs := validation.IsDNS1123Subdomain(cfg.Node); len(errs) > 0 {
		problems = append(problems, fmt.Sprintf("node name %q: %s", cfg.Node, strings.Join(errs, "; ")))
	}
	if cfg.Node == PlacementLease {
		problems = append(problems, fmt.Sprintf("node name %q is the placement controller's Lease", cfg.Node))
	}
	if cfg.Capacity < 0 {
		problems = append(problems, fmt.Sprintf("node capacity %d: want 0 or more sessions", cfg.Capacity))
	}
	if cfg.PoolRoom < 0 {
		problems = append(problems, fmt.Sprintf("room for SessionPools %d: want 0 or more sandboxes", cfg.PoolRoom))
	}
	if cfg.LeaseDuration < MinLeaseDuration || cfg.LeaseDuration%time.Second != 0 {
		problems = append(problems, fmt.Sprintf("node lease duration %s: want whole seconds, at least %s", cfg.LeaseDuration, MinLeaseDuration))
	}
	if cfg.AuditStatusEvery < 0 {
		problems = append(problems, fmt.Sprintf("audit status interval %s: want 0 or more", cfg.AuditStatusEvery))
	}
	if err := checkLabels(cfg.Labels); err != nil {
		problems = append(problems, err.Error())
	}
	if len(problems) > 0 {
		return fmt.Errorf("%s: %w", strings.Join(problems, "; "), errdefs.ErrInvalidArgument)
	}
	return nil
}

// ParseLabels parses --node-labels: k=v pairs separated by commas, each a
// Kubernetes label.
func ParseLabels(s string) (map[string]string, error) {
	out := map[string]string{}
	if strings.TrimSpace(s) == "" {
		return out, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return nil, fmt.Errorf("label %q: want KEY=VALUE: %w", kv, errdefs.ErrInvalidArgument)
		}
		if _, dup := out[k]; dup {
			return nil, fmt.Errorf("label %q given twice: %w", k, errdefs.ErrInvalidArgument)
		}
		out[k] = v
	}
	if err := checkLabels(out); err != nil {
		return nil, fmt.Errorf("%w: %w", err, errdefs.ErrInvalidArgument)
	}
	return out, nil
}

func checkLabels(labels map[string]string) error {
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		if errs := validation.IsQualifiedName(k); len(errs) > 0 {
			return fmt.Errorf("label key %q: %s", k, strings.Join(errs, "; "))
		}
		if errs := validation.IsValidLabelValue(labels[k]); len(errs) > 0 {
			return fmt.Errorf("label %q value %q: %s", k, labels[k], strings.Join(errs, "; "))
		}
	}
	return nil
}

// Scheme returns a scheme with what the agent reads and writes.
func Scheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, coordinationv1.AddToScheme, corev1.AddToScheme,
		authnv1.AddToScheme, authzv1.AddToScheme} {
		if err := add(s); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Run is the node agent: it registers the node (trying again while the
// API server cannot be reached), then runs the Sessions placed on it and,
// with cfg.Controller, the placement controller when it leads, until ctx
// ends. It returns an error if the node cannot be registered for a reason
// a retry does not mend (another agent holds the node's Lease) or its
// Lease is taken over.
func Run(ctx context.Context, d Daemon, cfg Config) error {
	if err := cfg.Check(); err != nil {
		return err
	}
	if cfg.Kube == nil || cfg.Root == "" || cfg.API == nil || cfg.Listen == "" {
		return fmt.Errorf("node agent: no API server configuration, root, API handler or endpoint address: %w", errdefs.ErrInvalidArgument)
	}
	ctx = log.With(ctx, "node", cfg.Node)
	// client-go and controller-runtime log through the daemon's logger.
	klog.SetSlogLogger(log.G(ctx))
	ctrllog.SetLogger(logr.FromSlogHandler(log.G(ctx).Handler()))

	scheme, err := Scheme()
	if err != nil {
		return err
	}
	c, err := client.New(cfg.Kube, client.Options{Scheme: scheme})
	if err != nil {
		return err
	}
	identity, err := loadIdentity(cfg.Root, cfg.Node)
	if err != nil {
		return fmt.Errorf("lease identity: %w", err)
	}
	// The endpoint listens before the node registers, so that its first
	// status names it; it serves once the agent runs.
	ln, ep, tc, err := listenEndpoint(cfg)
	if err != nil {
		return err
	}
	defer ln.Close()
	reg := &registrar{c: c, cfg: cfg, identity: identity, endpoint: ep}
	for wait := 250 * time.Millisecond; ; wait = min(2*wait, 10*time.Second) {
		err := reg.register(ctx)
		if err == nil {
			break
		}
		if errors.Is(err, errLeaseTaken) {
			return err
		}
		log.G(ctx).Warn("node not registered yet; trying again", "error", err, "in", wait)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(wait):
		}
	}
	log.G(ctx).Info("node registered", "capacity", cfg.Capacity, "labels", cfg.Labels, "lease", cfg.LeaseDuration, "identity", identity, "endpoint", ep.Address)

	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	mgr, na, err := newNodeManager(ctx, d, cfg, scheme)
	if err != nil {
		return err
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		if err := mgr.Start(ctx); err != nil {
			cancel(fmt.Errorf("node agent: %w", err))
		}
	})
	wg.Go(func() {
		if err := reg.heartbeat(ctx); err != nil {
			cancel(err)
		}
	})
	wg.Go(func() { reg.reportSessions(ctx, min(cfg.LeaseDuration, 5*time.Second), na.held) })
	wg.Go(func() {
		serveEndpoint(ctx, ln, tc, &endpoint{node: cfg.Node, d: d, api: cfg.API, c: c, fresh: c, now: time.Now})
	})
	if cfg.Controller {
		wg.Go(func() { runPlacement(ctx, cfg, scheme) })
	}
	<-ctx.Done()
	wg.Wait()
	if err := context.Cause(ctx); !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// newNodeManager makes the manager of the node agent's controller: its
// cache watches the Sessions on this node only.
func newNodeManager(ctx context.Context, d Daemon, cfg Config, scheme *runtime.Scheme) (manager.Manager, *nodeAgent, error) {
	period := resync
	mgr, err := manager.New(cfg.Kube, manager.Options{
		Scheme:                 scheme,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		Cache: cache.Options{
			SyncPeriod: &period,
			ByObject: map[client.Object]cache.ByObject{
				&v1alpha1.Session{}: {Field: fields.OneTermEqualSelector("spec.nodeName", cfg.Node)},
				// Its own AirlockNode only: its labels, which
				// SessionPools' nodeSelector match.
				&v1alpha1.AirlockNode{}: {Field: fields.OneTermEqualSelector("metadata.name", cfg.Node)},
			},
		},
	})
	if err != nil {
		return nil, nil, err
	}
	na := &nodeAgent{d: d, node: cfg.Node, c: mgr.GetClient(), fresh: mgr.GetAPIReader(), draining: cfg.Draining,
		wake: make(chan event.GenericEvent, 256), stopCtx: ctx, waiting: map[string]bool{},
		auditWritten: map[types.UID]time.Time{}, statusWritten: map[types.UID]time.Time{},
		auditEvery: cfg.AuditStatusEvery,
		poolWake:   make(chan event.GenericEvent, 64), refused: map[string]string{}, poolRoom: cfg.PoolRoom,
		pushed: map[pushKey]v1alpha1.WorkspaceSourceStatus{}, warmCond: map[types.UID]metav1.Condition{}, root: cfg.Root}
	err = builder.ControllerManagedBy(mgr).
		Named("airlock-node").
		For(&v1alpha1.Session{}).
		WatchesRawSource(source.Channel(na.wake, &handler.EnqueueRequestForObject{})).
		WithOptions(controller.Options{MaxConcurrentReconciles: 4, SkipNameValidation: ptr.To(true)}).
		Complete(na)
	if err != nil {
		return nil, nil, err
	}
	// A cluster whose CRDs predate SessionApproval runs its Sessions
	// all the same; their held requests are decided on the node.
	gk := v1alpha1.GroupVersion.WithKind("SessionApproval").GroupKind()
	if _, err := mgr.GetRESTMapper().RESTMapping(gk, v1alpha1.GroupVersion.Version); meta.IsNoMatchError(err) {
		log.G(ctx).Warn("the SessionApproval CRD is not installed: held requests are not decided through Kubernetes (kubectl apply -f deploy/kubernetes/crds/, then restart the agent)")
	} else {
		err = builder.ControllerManagedBy(mgr).
			Named("airlock-approvals").
			For(&v1alpha1.SessionApproval{}).
			WithOptions(controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: ptr.To(true)}).
			Complete(reconcile.Func(na.reconcileApproval))
		if err != nil {
			return nil, nil, err
		}
	}
	// Nor do their SessionPools stop them: no sandbox is prepared ahead.
	pools := true
	gk = v1alpha1.GroupVersion.WithKind("SessionPool").GroupKind()
	if _, err := mgr.GetRESTMapper().RESTMapping(gk, v1alpha1.GroupVersion.Version); meta.IsNoMatchError(err) {
		pools = false
		log.G(ctx).Warn("the SessionPool CRD is not installed: no sandbox is prepared for SessionPools (kubectl apply -f deploy/kubernetes/crds/, then restart the agent)")
	} else {
		// A SessionPool is looked at when it changes (not at the
		// cache's resync, which changes nothing), when the node's
		// labels change, when an older SessionPool's spec does (the
		// room goes oldest first), and when its daemon pool does
		// (poolWake); and once every poolSafetyResync.
		err = builder.ControllerManagedBy(mgr).
			Named("airlock-pools").
			For(&v1alpha1.SessionPool{}, builder.WithPredicates(predicate.ResourceVersionChangedPredicate{})).
			Watches(&v1alpha1.AirlockNode{}, handler.EnqueueRequestsFromMapFunc(na.poolRequests),
				builder.WithPredicates(predicate.LabelChangedPredicate{})).
			Watches(&v1alpha1.SessionPool{}, handler.EnqueueRequestsFromMapFunc(na.newerPools),
				builder.WithPredicates(predicate.GenerationChangedPredicate{})).
			WatchesRawSource(source.Channel(na.poolWake, poolWakeHandler())).
			WithOptions(controller.Options{MaxConcurrentReconciles: 2, SkipNameValidation: ptr.To(true)}).
			Complete(reconcile.Func(na.reconcilePool))
		if err != nil {
			return nil, nil, err
		}
	}
	for _, run := range []func(context.Context){
		func(ctx context.Context) { na.sweep(ctx, resync) },
		func(ctx context.Context) {
			if pools {
				na.sweepPools(ctx, poolSafetyResync)
			}
		},
		func(ctx context.Context) {
			if pools {
				na.followPools(ctx)
			}
		},
		na.followApprovals,
		func(ctx context.Context) {
			if na.auditEvery > 0 {
				na.watchAudit(ctx, na.auditEvery)
			}
		},
	} {
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
			run(ctx)
			return nil
		})); err != nil {
			return nil, nil, err
		}
	}
	return mgr, na, nil
}

// runPlacement stands for the placement controller's leadership until ctx
// ends, again each time it loses it: a manager that lost its leadership
// stops, and a new one stands again.
func runPlacement(ctx context.Context, cfg Config, scheme *runtime.Scheme) {
	dur := cfg.LeaseDuration
	renew, retry := dur*2/3, max(dur/6, 100*time.Millisecond)
	// One placer for every manager: what it saw of the Leases stays.
	p := newPlacer(nil, nil, dur)
	all := handler.EnqueueRequestsFromMapFunc(func(context.Context, client.Object) []reconcile.Request {
		return []reconcile.Request{placementRequest}
	})
	for ctx.Err() == nil {
		// The leader Lease's holder names the node (kubectl get lease
		// -n airlock-system airlock-placement), and is new for every
		// term.
		lock, err := placementLock(cfg, renew)
		var mgr manager.Manager
		if err == nil {
			mgr, err = manager.New(cfg.Kube, manager.Options{
				Scheme:                              scheme,
				Metrics:                             metricsserver.Options{BindAddress: "0"},
				HealthProbeBindAddress:              "0",
				LeaderElection:                      true,
				LeaderElectionResourceLockInterface: lock,
				LeaderElectionReleaseOnCancel:       true,
				LeaseDuration:                       &dur,
				RenewDeadline:                       &renew,
				RetryPeriod:                         &retry,
				Cache:                               placementCache(),
			})
		}
		if err == nil {
			p.use(mgr.GetClient(), mgr.GetAPIReader())
			// Renewals are noted from the start, not from when this
			// agent leads (placer.observeLease): the cache runs
			// before the election.
			var inf cache.Informer
			if inf, err = mgr.GetCache().GetInformer(ctx, &coordinationv1.Lease{}); err == nil {
				_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
					AddFunc:    p.observeLease,
					UpdateFunc: func(_, obj any) { p.observeLease(obj) },
				})
			}
			// The other two are synced by then too.
			for _, obj := range []client.Object{&v1alpha1.Session{}, &v1alpha1.AirlockNode{}} {
				if err == nil {
					_, err = mgr.GetCache().GetInformer(ctx, obj)
				}
			}
		}
		if err == nil {
			b := builder.ControllerManagedBy(mgr).
				Named("airlock-placement").
				Watches(&v1alpha1.Session{}, all).
				Watches(&v1alpha1.AirlockNode{}, all).
				Watches(&coordinationv1.Lease{}, all).
				WithOptions(controller.Options{SkipNameValidation: ptr.To(true)})
			// Claims, volumes and Nodes: cached, and a pass when one
			// an unplaced Session waits on changes.
			if err = watchVolumes(ctx, mgr, b); err == nil {
				err = b.Complete(p)
			}
		}
		if err == nil {
			err = mgr.Start(ctx)
		}
		if ctx.Err() != nil {
			return
		}
		log.G(ctx).Warn("placement controller stopped; standing for its leadership again", "error", err)
		select {
		case <-ctx.Done():
		case <-time.After(retry):
		}
	}
}

// placementLock is the placement leader's Lease lock, whose holder is
// this node and a UUID new for every term. Its client is client-go's
// resourcelock.NewFromKubeconfig's (each request bounded by half the renew
// deadline), with the agent's user agent kept, so that an apiserver's
// audit log tells the leader's renewals as airlockd's
// ("airlockd/node-agent/leader-election"), not as client-go's default.
func placementLock(cfg Config, renewDeadline time.Duration) (resourcelock.Interface, error) {
	rc := rest.CopyConfig(cfg.Kube)
	rc.Timeout = max(renewDeadline/2, time.Second)
	if rc.UserAgent == "" {
		rc.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	rc.UserAgent += "/leader-election"
	cs, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, err
	}
	return resourcelock.New(resourcelock.LeasesResourceLock, LeaseNamespace, PlacementLease,
		cs.CoreV1(), cs.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: cfg.Node + "_" + string(uuid.NewUUID())})
}
