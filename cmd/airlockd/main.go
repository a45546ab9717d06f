// Command airlockd is airlock's daemon: it runs agent sessions in hardened
// containerd sandboxes and serves the airlock API on a unix socket.
package main

import (
	"cmp"
	"context"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/console"
	"github.com/airlock-sandbox/airlock/daemon"
	"github.com/airlock-sandbox/airlock/daemon/httpapi"
	"github.com/airlock-sandbox/airlock/egress"
	"github.com/airlock-sandbox/airlock/egress/dnsproxy"
	"github.com/airlock-sandbox/airlock/hostcheck"
	"github.com/airlock-sandbox/airlock/internal/caller"
	"github.com/airlock-sandbox/airlock/internal/hostcgroup"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/internal/sdnotify"
	"github.com/airlock-sandbox/airlock/metrics"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

const usage = `airlockd runs agent sessions in containerd sandboxes scoped by HCL manifests.

Usage:
  airlockd [flags]

It starts a private containerd under --root (unless --containerd names one),
re-adopts the sessions a previous daemon left running, and serves the API
(docs/api.md) on --socket until SIGINT or SIGTERM. Sessions keep running
across a daemon restart.

Whoever can use the socket can ask for sessions, and a session's user,
capabilities and host paths act on this host. airlockd admits a request
only within its admission policy (--admission FILE, or the built-in one),
and never admits as a workspace or mount its own root or socket,
containerd's root or socket, /, /etc, /proc, /sys, /dev, /boot, /run or
/var/run, anything beneath them, or a directory that contains one of them;
nor its bin dir and binary for writing. Refused requests get HTTP 403 with
the rule they broke. --socket-group and --kubernetes need --admission.

--kubernetes also makes airlockd a Kubernetes node agent (preview): it runs
the airlock.dev/v1alpha1 Sessions placed on its node (--node-name) as local
sessions, and places unplaced ones on nodes with room (README, Kubernetes).
It serves their logs, diffs, commits and audit logs to airlock --context on
--kubernetes-listen (HTTPS; TokenReview and SubjectAccessReview on each
request). It is in airlockd-kube, the same daemon built with the node agent;
airlockd itself is built without its Kubernetes libraries, which double its
size.

--console-listen serves a web console (docs/console.md): sessions, held
requests to allow or deny, diffs to commit or discard, audit timelines. On
a loopback TCP address it asks once for the bearer token in
--console-token-file (default: console.token under --root, generated at
start), as ?token=TOKEN or an Authorization header, then keeps a cookie;
on unix:/PATH it admits root and the --socket-group by peer credentials.

Flags:
`

// The daemon is what the API serves.
var _ httpapi.Daemon = (*daemon.Daemon)(nil)

func main() {
	// Heap profiling's sampled stacks are kept for the life of the
	// process and grow as new ones turn up: a daemon that runs for
	// months keeps them off unless an operator asks
	// (GODEBUG=memprofilerate=524288 for Go's default, then the heap
	// profile on --debug-socket).
	if !strings.Contains(os.Getenv("GODEBUG"), "memprofilerate=") {
		goruntime.MemProfileRate = 0
	}
	// containerd's shim runs this binary as the log writer of session output.
	if runtime.IsLoggerCall(os.Args[1:]) {
		if err := runtime.RunLogger(os.Args[1:]); err != nil {
			fmt.Fprintln(os.Stderr, "airlockd (log writer):", err)
			os.Exit(2)
		}
		return
	}
	// Before anything starts a child: none may report to the service
	// manager in airlockd's name.
	sdnotify.Take()
	os.Exit(run())
}

func run() int {
	self, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlockd:", err)
		return 1
	}
	self, _ = filepath.EvalSymlinks(self)
	fs := flag.NewFlagSet("airlockd", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	var (
		configFile     = fs.String("config", "", "read settings from this HCL `FILE` (see examples/airlockd/airlockd.hcl): every flag but this one is an attribute named with _ for -, a repeatable one takes a list, and an admission { ... } block may hold the admission policy; relative paths in it are taken from its directory. Flags given on the command line override it")
		checkConfig    = fs.Bool("check-config", false, "check the configuration (--config and flags, the admission policy, --pool manifests, --upstream-ca), print the settings in effect and exit: 0 when airlockd would start with them, 2 with each problem otherwise; nothing is made")
		root           = fs.String("root", "/var/lib/airlock", "state directory (sessions, containerd, the OCI runtime's state)")
		socket         = fs.String("socket", "/run/airlock/airlock.sock", "API unix socket")
		socketGroup    = fs.String("socket-group", "", "group allowed to use the socket (mode 0660); default root only (0600). Every member can create sessions, so this needs --admission")
		admission      = fs.String("admission", "", "admission policy FILE (HCL, see examples/airlockd/admission.hcl): the host paths, users, capabilities and resource bounds API callers may ask for; default: the built-in policy (any host path but the protected ones, no uid or gid 0, only CAP_KILL, CAP_NET_BIND_SERVICE and CAP_SYS_CHROOT, the documented bounds)")
		containerdAddr = fs.String("containerd", "", "address of an existing containerd; default: start an embedded one under --root")
		binDir         = fs.String("bin-dir", filepath.Dir(self), "directory holding containerd, containerd-shim-runc-v2, runc (and crun, for --runtime crun) and airlock-init")
		namespace      = fs.String("namespace", "airlock", "containerd namespace for sessions")
		logLevel       = fs.String("log-level", "info", "debug, info, warn or error")
		logFormat      = fs.String("log-format", "text", "text or json")
		stopContainerd = fs.Bool("stop-containerd", false, "stop the embedded containerd when airlockd exits")
		stopSessions   = fs.Bool("stop-sessions-on-exit", false, "on SIGINT or SIGTERM, stop every running session, and every created one not started (SIGTERM, SIGKILL 10s later), before airlockd exits; with --kubernetes the agent starts no new Session meanwhile and airlockd waits (up to 15s) until the stopped ones' Sessions are reported Exited. A second signal ends airlockd at once. Without it running sessions outlive airlockd and the next one on --root takes them back; a crash, SIGKILL or a failure of the node agent leaves them running either way. A DaemonSet sets it: the kubelet sends SIGTERM when the pod is deleted or the node shuts down, not when it restarts a container that ended")
		cgroupParent   = fs.String("cgroup-parent", "", "make the sessions' cgroups, the shim anchor's and the embedded containerd's (where the shims it starts are born) under this cgroup `PATH` of the host's hierarchies instead of their roots: an absolute path, or a relative one placed beside the kubelet's pod cgroups (beside kubepods, in the kubelet's cgroup root). In a DaemonSet's pod it keeps them out of the container's cgroup, which a restart of the container kills whole, so that sessions outlive the restart. For it airlockd joins its parent's cgroup namespace (the container runtime's shim's, which the host's PID namespace shows: hostPID) and mounts the host's hierarchies over its container's partial ones at /sys/fs/cgroup, in its container's mount namespace, from which nothing of it propagates. A session keeps the cgroup it was made in across restarts, whatever a later airlockd's parent; when it stops its containerd, airlockd removes its own empty cgroups under every parent its root has used and a parent it made itself once empty, never another cgroup nor a parent that existed before. airlockd must be the container's first process (no shell or init wrapper): on a cgroup v2 host an absolute PATH is otherwise taken inside the container's own cgroup")
		ociRuntime     = ociRuntimeFlag(runtime.DefaultOCIRuntime)
		poolRefill     = fs.Int("pool-refill", daemon.DefaultPoolRefill, "sandboxes one warm pool prepares at once, `N` from 1 to 16, when sessions take them or it starts")
		maxPrep        = fs.Int("max-preparing", daemon.DefaultMaxPreparing(), "sandboxes prepared at once, by cold creates and warm pools' refills together, `N` (0: no bound); more wait their turn, creates first and each in the order it came; a create's wait is in its response (queued) and in the metrics (default: four per CPU)")
		shimPerSession = fs.Bool("shim-per-session", false, "give every session a runc shim of its own; by default sessions share one, kept alive by a small anchor container, which makes each start and stop cheaper but lets a crash of that shim end every running session")
		debugSocket    = fs.String("debug-socket", "", "serve Go's runtime profiles (/debug/pprof/) and POST /debug/free-os-memory on this unix socket `PATH` (mode 0600), for diagnosing the daemon's CPU and memory; off by default. The heap profile is empty unless airlockd runs with GODEBUG=memprofilerate=N (Go's default is 524288): it keeps heap profiling off otherwise")
		credListen     = fs.String("credentials-listen", "", "also serve the credential verification endpoints (JWKS, introspection, reports) on this TCP address; never use an address sessions can reach")
		metricsListen  = fs.String("metrics-listen", "", "serve Prometheus metrics at http://`ADDR`/metrics (HOST:PORT, HOST an IP address): sessions by state, start and teardown latencies, warm pools, DNS, L7 and approval decisions, dropped flows, commit rejections, credential events, each session's audit log size (see docs/metrics.md). They name every session and count what each did: ADDR must be a loopback address unless --metrics-listen-remote, and is never the unspecified address nor one in --session-pool; never use an address sessions can reach. Off by default")
		metricsRemote  = fs.Bool("metrics-listen-remote", false, "let --metrics-listen take an address other than a loopback one (for a Prometheus on another host: put it on an interface sessions cannot reach, behind a firewall)")
		consoleListen  = fs.String("console-listen", "", "serve the web console (sessions, held requests to allow or deny, diffs to commit or discard, audit) on `ADDR`: unix:/PATH (made like --socket; peers must be root or in --socket-group) or a loopback HOST:PORT, which asks for a bearer token (--console-token-file); off by default")
		consoleToken   = fs.String("console-token-file", "", "`FILE` holding the console's bearer token for a TCP --console-listen (at least 32 characters, mode 0600); default: a token generated at start into console.token under --root")
		consoleRemote  = fs.Bool("console-allow-remote", false, "allow a --console-listen TCP address that is not loopback (the token and pages travel in clear: prefer an ssh tunnel to a loopback one)")
		issuers        = issuerFlag{}
		approver       = fs.String("approver", "", "exec:COMMAND [ARGS...]: run COMMAND (an absolute path; no shell) for every request held for approval, the request as JSON on stdin (with the first 64 KiB of its body, base64); its stdout {\"decision\": \"allow\"|\"deny\", \"reason\": \"...\"} decides it, and a failure or no decision leaves it to a person (airlock approve|deny). It gets no environment from airlockd but PATH")
		uplink         = fs.String("uplink", "", "where session traffic leaves the gateway: netns:NAME (a namespace that receives the uplink's peer) or host (NAT out of the host's routes); empty: sessions declaring egress are refused")
		pool           = fs.String("session-pool", "10.213.0.0/16", "address range for session networks")
		dnsUpstreams   = listFlag{}
		allowPrivate   = prefixFlag{}
		poolFiles      = listFlag{}
		imageFiles     = listFlag{}
		l7FastPath     = fs.Bool("l7-fast-path", true, "have the kernel forward TLS the L7 gateway passes through unseen once it has checked the ClientHello (held in a netfilter queue), instead of relaying every byte through the gateway: sessions with `l7 = \"check\"` on port 443 whose gateway terminates no TLS (no http rules, no secrets, inspect not \"all\"). Their bytes after the ClientHello are then not counted in the audit")
		upstreamCA     = fs.String("upstream-ca", "", "PEM `FILE` of the CAs the L7 gateway trusts when it dials a server for TLS it terminates (HTTP rules, secrets, inspect = \"all\"); default: the host's system roots")
		kubernetes     = fs.Bool("kubernetes", false, "also run as a Kubernetes node agent (preview; README, Kubernetes): register this node (an AirlockNode and a Lease it renews), run the airlock.dev Sessions placed on it as local sessions, through the same create as the API (admission and every perimeter layer apply), and write their status back; and, one agent at a time under leader election, place unplaced Sessions on live nodes with room")
		kubeconfig     = fs.String("kubeconfig", "", "with --kubernetes: the API server's kubeconfig `FILE`; default: the in-cluster configuration (a pod's service account)")
		kubeController = fs.Bool("kubernetes-controller", true, "with --kubernetes: also stand for the placement controller's leadership; false leaves placing Sessions to other agents")
		nodeName       = fs.String("node-name", "", "with --kubernetes: this node's `NAME` (its AirlockNode and Lease; the Sessions whose spec.nodeName is NAME run here); default: the hostname")
		nodeLabels     = fs.String("node-labels", "", "with --kubernetes: labels `K=V,...` set on this node's AirlockNode; a Session's nodeSelector matches them")
		nodeCapacity   = fs.Int("node-capacity", 0, "with --kubernetes: how many Sessions this node holds at once, `N` (a Session holds its place until it is deleted); default: the admission policy's session limit, which N may not exceed")
		kubeListen     = fs.String("kubernetes-listen", defaultKubeListen, "with --kubernetes: serve the node endpoint on this TCP `ADDR` (HTTPS, a certificate the agent makes under --root): the logs, diffs, commits, audit logs, execs, attaches and stops of the Sessions on this node, for airlock --context. Each request's bearer token is checked by a TokenReview and its right by a SubjectAccessReview on the Session (sessions/log, sessions/diff, sessions/commit, sessions/audit, sessions/exec, sessions/attach, sessions/stop); the address and certificate are published in the AirlockNode's status, and clients pin that certificate. An unspecified host publishes the address this host reaches the API server from")
		kubeAdvertise  = fs.String("kubernetes-advertise-address", "", "with --kubernetes: the `HOST` (an IP address or DNS name) published for the node endpoint, with --kubernetes-listen's port, when clients reach the node by another address than the one it listens on (in a DaemonSet: the node's IP, status.hostIP)")
		kubeAuditEvery = fs.Duration("kubernetes-audit-interval", defaultKubeAuditEvery, "with --kubernetes: the shortest `INTERVAL` between two writes of a Session's status made for its audit counts alone (each is an etcd write and a copy to every watcher of the Session; a fleet turns it up: docs/scale-out.md); a change of state, of the changes under review or of held requests is written at once with the counts of that moment. 0: the counts are written only with such a change")
		nodeLease      = fs.Duration("node-lease-duration", defaultNodeLease, "with --kubernetes: the node Lease's duration, whole seconds, at least 2s: when this agent has not renewed it for that long the node is lost, and its unfinished Sessions are marked Lost, never run elsewhere (also the placement leader's Lease)")
		dnsRate        = fs.Float64("dns-rate", dnsproxy.DefaultRate, "DNS queries a second each session may send to airlock's resolver, with a burst of twice as many; queries beyond are not answered, and the audit counts them (the gateway blocks UDP packets to the resolver beyond four times this rate, and at least 400 a second)")
	)
	fs.Var(&ociRuntime, "runtime", "OCI runtime every new session runs on: runc or crun (`NAME`, an executable of that name in --bin-dir; make deps installs both). A session keeps the runtime it was created with across restarts; the same hardening holds on both (the daemon's tests run on each)")
	fs.Var(&imageFiles, "image", "image archive `FILE` (OCI layout or docker save) to import at start, unless the images it names are in the store already; make images builds the agent images' archives (repeatable)")
	fs.Var(&poolFiles, "pool", "manifest FILE with a `pool { size = N }` block: keep N sandboxes of its policy prepared from the start (repeatable)")
	fs.Var(&dnsUpstreams, "dns-upstream", "resolver ADDR[:PORT] that allowlisted names are forwarded to (repeatable; default: the host's resolv.conf)")
	fs.Var(&allowPrivate, "allow-private", "private `CIDR` (inside 10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) whose addresses DNS answers may pin for every session, as a manifest's egress allow_private does (repeatable); other private addresses in answers are dropped, and the session pools and the host's own addresses never pass")
	fs.Var(issuers, "issuer", "external credential issuer NAME=COMMAND [ARGS...] (repeatable); the command speaks the exec issuer protocol")
	if err := fs.Parse(os.Args[1:]); err != nil {
		if err == flag.ErrHelp {
			return 0
		}
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "airlockd: unexpected argument %q (see airlockd --help)\n", fs.Arg(0))
		return 2
	}
	var fileAdmission *policies.Admission
	if *configFile != "" {
		cfg, err := loadConfig(fs, *configFile)
		if err != nil {
			var diags *policies.DiagnosticsError
			if errors.As(err, &diags) {
				_ = diags.Write(os.Stderr, false, 100)
			}
			fmt.Fprintf(os.Stderr, "airlockd: --config %s: %v\n", *configFile, err)
			return 2
		}
		fileAdmission = cfg.Admission
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		fmt.Fprintf(os.Stderr, "airlockd: --log-level %q: want debug, info, warn or error\n", *logLevel)
		return 2
	}
	hopts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	switch *logFormat {
	case "text":
		h = slog.NewTextHandler(os.Stderr, hopts)
	case "json":
		h = slog.NewJSONHandler(os.Stderr, hopts)
	default:
		fmt.Fprintf(os.Stderr, "airlockd: --log-format %q: want text or json\n", *logFormat)
		return 2
	}
	logger := slog.New(h)
	slog.SetDefault(logger)

	// A signal is a request to stop (--stop-sessions-on-exit acts on it
	// alone); a failure of the node agent or the API also ends the
	// daemon, through cancel, but ends no session.
	sigCtx, stopSignals := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stopSignals()
	ctx, cancel := context.WithCancel(sigCtx)
	defer cancel()
	ctx = log.WithLogger(ctx, logger)

	absRoot, err := filepath.Abs(*root)
	if err != nil {
		logger.Error("bad --root", "error", err)
		return 2
	}
	absBin, err := filepath.Abs(*binDir)
	if err != nil {
		logger.Error("bad --bin-dir", "error", err)
		return 2
	}
	if *maxPrep < 0 {
		logger.Error("bad --max-preparing: want 0 (no bound) or more", "max_preparing", *maxPrep)
		return 2
	}
	if *poolRefill < 1 || *poolRefill > 16 {
		logger.Error("bad --pool-refill: want 1 to 16 sandboxes prepared at once", "pool_refill", *poolRefill)
		return 2
	}
	if *dnsRate <= 0 {
		logger.Error("bad --dns-rate: want a positive number of queries a second")
		return 2
	}
	poolPrefix, err := netip.ParsePrefix(*pool)
	if err != nil {
		logger.Error("bad --session-pool", "error", err)
		return 2
	}
	if *metricsListen != "" {
		if err := metrics.CheckAddr(*metricsListen, *metricsRemote, poolPrefix); err != nil {
			logger.Error("bad --metrics-listen", "error", err)
			return 2
		}
	} else if *metricsRemote {
		logger.Error("--metrics-listen-remote without --metrics-listen")
		return 2
	}
	var mets *metrics.Metrics
	if *metricsListen != "" {
		mets = metrics.New()
	}
	var adm *policies.Admission
	switch {
	case fileAdmission != nil && !flagGiven(fs, "admission"):
		adm = fileAdmission
	case *admission != "":
		a, err := policies.LoadAdmissionFile(*admission)
		if err != nil {
			var diags *policies.DiagnosticsError
			if errors.As(err, &diags) {
				_ = diags.Write(os.Stderr, false, 100)
			}
			logger.Error("bad --admission policy", "file", *admission, "error", err)
			return 2
		}
		adm = a
	case *kubernetes:
		fmt.Fprintln(os.Stderr, "airlockd: --kubernetes runs the Sessions anyone who may create one in the cluster asks for, and what the built-in admission policy admits can be root-equivalent on this host (host paths, any uid but 0, the operator's secrets): give an explicit policy with --admission FILE (see examples/airlockd/admission.hcl) or an admission block in the --config file")
		return 2
	case *socketGroup != "":
		fmt.Fprintf(os.Stderr, "airlockd: --socket-group %s lets every member of the group create sessions, and what the built-in admission policy admits can be root-equivalent on this host: give an explicit policy with --admission FILE (see examples/airlockd/admission.hcl) or an admission block in the --config file\n", *socketGroup)
		return 2
	}
	absSocket, err := filepath.Abs(*socket)
	if err != nil {
		logger.Error("bad --socket", "error", err)
		return 2
	}
	consoleCfg := console.Config{Listen: *consoleListen, AllowRemote: *consoleRemote,
		TokenFile: *consoleToken, Root: absRoot, Group: *socketGroup, SessionPools: []netip.Prefix{poolPrefix}}
	switch {
	case *consoleListen != "":
		if err := consoleCfg.Check(); err != nil {
			fmt.Fprintln(os.Stderr, "airlockd: --console-listen:", err)
			return 2
		}
	case *consoleToken != "" || *consoleRemote:
		fmt.Fprintln(os.Stderr, "airlockd: --console-token-file and --console-allow-remote need --console-listen")
		return 2
	}
	var appr approvals.Approver
	if *approver != "" {
		if appr, err = approvals.ParseApprover(*approver); err != nil {
			logger.Error("bad --approver", "error", err)
			return 2
		}
		logger.Info("held requests are also asked of the approver hook", "approver", *approver)
	}
	var pools []policies.Policy
	for _, f := range poolFiles {
		p, err := policies.LoadFile(f, nil)
		if err != nil {
			var diags *policies.DiagnosticsError
			if errors.As(err, &diags) {
				_ = diags.Write(os.Stderr, false, 100)
			}
			logger.Error("bad --pool manifest", "file", f, "error", err)
			return 2
		}
		if p.Pool == nil || p.Pool.Size == 0 {
			logger.Error("bad --pool manifest: it has no `pool { size = N }` block", "file", f)
			return 2
		}
		pools = append(pools, *p)
	}
	var upstreamRoots *x509.CertPool
	if *upstreamCA != "" {
		pem, err := os.ReadFile(*upstreamCA)
		if err != nil {
			logger.Error("bad --upstream-ca", "error", err)
			return 2
		}
		upstreamRoots = x509.NewCertPool()
		if !upstreamRoots.AppendCertsFromPEM(pem) {
			logger.Error("bad --upstream-ca: no PEM certificate in it", "file", *upstreamCA)
			return 2
		}
	}
	var kubeCfg *kubeAgent
	if *kubernetes {
		if kubeCfg, err = kubeConfig(kubeFlags{kubeconfig: *kubeconfig, node: *nodeName, labels: *nodeLabels,
			listen: *kubeListen, advertise: *kubeAdvertise, lease: *nodeLease, auditEvery: *kubeAuditEvery,
			controller: *kubeController}); err != nil {
			fmt.Fprintln(os.Stderr, "airlockd:", err)
			return 2
		}
		limit := cmp.Or(adm, policies.DefaultAdmission()).Limits.Sessions
		switch {
		case !flagGiven(fs, "node-capacity"):
			kubeCfg.setCapacity(cmp.Or(limit, policies.DefaultMaxSessions))
		case *nodeCapacity < 0 || (limit > 0 && *nodeCapacity > limit):
			fmt.Fprintf(os.Stderr, "airlockd: --node-capacity %d: want 0 to the admission policy's session limit, %d\n", *nodeCapacity, limit)
			return 2
		default:
			kubeCfg.setCapacity(*nodeCapacity)
		}
		kubeCfg.setPoolRoom(cmp.Or(limit, policies.DefaultMaxSessions))
	} else {
		for _, f := range []string{"kubeconfig", "kubernetes-controller", "node-name", "node-labels", "node-capacity", "node-lease-duration", "kubernetes-listen", "kubernetes-advertise-address", "kubernetes-audit-interval"} {
			if flagGiven(fs, f) {
				fmt.Fprintf(os.Stderr, "airlockd: --%s needs --kubernetes\n", f)
				return 2
			}
		}
	}
	if *checkConfig {
		printSettings(os.Stdout, fs, adm)
		return 0
	}
	var cgParent string
	if *cgroupParent != "" {
		// Before anything is started: it may re-execute airlockd.
		if cgParent, err = hostCgroupParent(*cgroupParent); err != nil {
			fmt.Fprintln(os.Stderr, "airlockd: --cgroup-parent:", err)
			return 1
		}
		logger.Info("sessions, the shim anchor and containerd are placed under a cgroup of the host's", "cgroup_parent", cgParent)
	}
	// One airlockd a root: a second one (a DaemonSet's new pod while the
	// old one still stops) waits for the first to end.
	rootLock, err := lockRoot(ctx, absRoot)
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlockd: --root:", err)
		return 1
	}
	defer rootLock.Close()
	// What `airlock doctor` checks, before anything is made: a host that
	// cannot run sessions is refused here, plainly, instead of by the first
	// session's failure.
	fatal, warnings := hostProblems(hostcheck.Run(ctx, hostcheck.Config{Runtime: string(ociRuntime)}), *uplink != "")
	for _, w := range warnings {
		logger.Warn("host check", "problem", w)
	}
	if len(fatal) > 0 {
		fmt.Fprintln(os.Stderr, refusal(fatal))
		return 1
	}
	d, err := daemon.New(ctx, daemon.Config{
		Pools:      pools,
		Admission:  adm,
		Socket:     absSocket,
		Root:       absRoot,
		Containerd: *containerdAddr,
		BinDir:     absBin,
		Namespace:  *namespace,
		SelfBinary: self,
		Issuers:    issuers,
		Approver:   appr,
		Egress:     egress.Config{Uplink: *uplink, DNSUpstreams: dnsUpstreams, Pool: poolPrefix, AllowPrivate: allowPrivate, DNSLimits: dnsproxy.Limits{Rate: *dnsRate}, UpstreamRoots: upstreamRoots, FastPath: *l7FastPath},
		Metrics:    mets,

		ShimPerSession: *shimPerSession,
		Runtime:        string(ociRuntime),
		PoolRefill:     *poolRefill,
		MaxPreparing:   cmp.Or(*maxPrep, -1),
		CgroupParent:   cgParent,
	})
	if err != nil {
		logger.Error("start failed", "error", err)
		return 1
	}
	for _, f := range imageFiles {
		imgs, imported, err := d.Runtime().ImportImageFile(ctx, f)
		if err != nil {
			logger.Error("bad --image archive", "file", f, "error", err)
			_ = d.Close(context.WithoutCancel(ctx))
			return 1
		}
		for _, img := range imgs {
			logger.Info("image ready", "image", img.Name, "digest", img.Digest, "imported", imported, "file", f)
		}
	}
	if *debugSocket != "" {
		dbg, err := filepath.Abs(*debugSocket)
		if err == nil {
			_, err = httpapi.ServeDebug(ctx, dbg)
		}
		if err != nil {
			logger.Error("debug socket", "error", err)
			_ = d.Close(context.WithoutCancel(ctx))
			return 1
		}
	}
	if *credListen != "" {
		srv, err := httpapi.ServeCredentials(ctx, d.CredentialsHandler(), *credListen)
		if err != nil {
			logger.Error("credentials listener", "error", err)
			_ = d.Close(context.WithoutCancel(ctx))
			return 1
		}
		defer srv.Close()
	}
	if mets != nil {
		srv, _, err := mets.Serve(ctx, *metricsListen)
		if err != nil {
			logger.Error("metrics listener", "error", err)
			_ = d.Close(context.WithoutCancel(ctx))
			return 1
		}
		defer srv.Close()
	}
	var consoleSrv *console.Server
	if *consoleListen != "" {
		// Ways into the daemon no session may mount.
		if path, ok := strings.CutPrefix(*consoleListen, "unix:"); ok {
			d.Protect(path)
		}
		if *consoleToken != "" {
			d.Protect(*consoleToken)
		}
		if consoleSrv, err = console.Serve(ctx, d, consoleCfg); err != nil {
			logger.Error("console listener", "error", err)
			_ = d.Close(context.WithoutCancel(ctx))
			return 1
		}
	}
	var agentDone chan error
	// The agent outlives the signal while the sessions it reports are
	// stopped (--stop-sessions-on-exit).
	agentCtx, cancelAgent := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelAgent()
	var draining atomic.Bool
	if kubeCfg != nil {
		kubeCfg.setDaemon(absRoot, daemon.Version, string(ociRuntime))
		kubeCfg.setDraining(&draining)
		agentDone = make(chan error, 1)
		go func() {
			err := kubeCfg.run(agentCtx, d)
			if err != nil {
				// Its sessions run on, as on any stop of airlockd.
				logger.Error("node agent stopped; airlockd stops", "error", err)
				cancel()
			}
			agentDone <- err
		}()
	}
	serveErr := httpapi.Serve(ctx, d, absSocket, *socketGroup)
	signalled := sigCtx.Err() != nil
	// A second signal ends airlockd at once, whatever it is doing.
	stopSignals()
	if *stopSessions && signalled {
		// The agent starts no new Session meanwhile, and goes on
		// reporting those it runs.
		draining.Store(true)
		if kubeCfg != nil {
			rctx, rcancel := context.WithTimeout(agentCtx, 5*time.Second)
			if err := kubeCfg.reportDraining(rctx); err != nil {
				logger.Warn("the node's AirlockNode not written with no capacity; placement may still send it Sessions, which wait for the next agent", "error", err)
			}
			rcancel()
		}
		stopped := stopRunning(context.WithoutCancel(ctx), d, 10*time.Second)
		if kubeCfg != nil && len(stopped) > 0 {
			wctx, wcancel := context.WithTimeout(agentCtx, 15*time.Second)
			if left, err := kubeCfg.waitReported(wctx, stopped); err != nil {
				logger.Warn("stopped sessions not reported Exited before airlockd stops", "sessions", left, "error", err)
			}
			wcancel()
		}
	}
	var agentErr error
	if agentDone != nil {
		cancelAgent()
		agentErr = <-agentDone
		if *stopSessions && signalled {
			// One the agent had begun to start when the drain began:
			// its Session is marked lost after the lease.
			stopRunning(context.WithoutCancel(ctx), d, 10*time.Second)
		}
	}
	// The console acts on the daemon: it stops before the daemon does.
	if consoleSrv != nil {
		if err := consoleSrv.Close(); err != nil {
			logger.Error("console shutdown", "error", err)
		}
	}
	if err := d.Close(context.WithoutCancel(ctx)); err != nil {
		logger.Error("shutdown", "error", err)
	}
	if *stopContainerd {
		if err := d.StopContainerd(context.WithoutCancel(ctx)); err != nil {
			logger.Error("stop containerd", "error", err)
		}
	}
	if serveErr != nil {
		logger.Error("serve", "error", serveErr)
		return 1
	}
	if agentErr != nil {
		return 1
	}
	logger.Info("stopped")
	return 0
}

// stopRunning stops every running session of d at once, and every one
// created and not started (its sandbox's first process waits), each given
// grace between its SIGTERM and SIGKILL, and returns their ids.
func stopRunning(ctx context.Context, d *daemon.Daemon, grace time.Duration) []string {
	ctx = caller.With(ctx, "airlockd, stopping on a signal (--stop-sessions-on-exit)")
	var ids []string
	var wg sync.WaitGroup
	for _, s := range d.List(ctx) {
		if s.State != api.StateRunning && s.State != api.StateCreated {
			continue
		}
		ids = append(ids, s.ID)
		wg.Go(func() {
			if _, err := d.Stop(ctx, s.ID, grace); err != nil {
				log.G(ctx).Warn("stop session on exit", "session", s.ID, "error", err)
			}
		})
	}
	wg.Wait()
	if len(ids) > 0 {
		log.G(ctx).Info("running sessions stopped on exit", "sessions", ids)
	}
	return ids
}

// hostCgroupParent resolves --cgroup-parent against the host's cgroup
// hierarchies, which it makes this process see first (package hostcgroup):
// its parent's cgroup namespace (which may re-execute airlockd) and, in a
// mount namespace of its own, the hierarchies mounted afresh over the
// container's partial view.
func hostCgroupParent(parent string) (string, error) {
	ppid := os.Getppid()
	if err := hostcgroup.EnterNamespaceOf(ppid); err != nil {
		return "", err
	}
	if err := hostcgroup.MountFullView(ppid); err != nil {
		return "", err
	}
	own, err := hostcgroup.Own(0)
	if err != nil {
		return "", err
	}
	return hostcgroup.Resolve(parent, own)
}

// issuerFlag collects --issuer NAME=COMMAND [ARGS...] values.
type issuerFlag map[string][]string

func (f issuerFlag) String() string { return "" }

func (f issuerFlag) Set(v string) error {
	name, cmd, ok := strings.Cut(v, "=")
	argv := strings.Fields(cmd)
	if !ok || name == "" || len(argv) == 0 {
		return fmt.Errorf("want NAME=COMMAND [ARGS...], got %q", v)
	}
	if !filepath.IsAbs(argv[0]) {
		return fmt.Errorf("issuer %q: command %q must be an absolute path", name, argv[0])
	}
	if _, dup := f[name]; dup {
		return fmt.Errorf("issuer %q given twice", name)
	}
	f[name] = argv
	return nil
}

// prefixFlag collects --allow-private CIDR values.
type prefixFlag []netip.Prefix

func (f *prefixFlag) String() string { return fmt.Sprint([]netip.Prefix(*f)) }

func (f *prefixFlag) Set(v string) error {
	p, reason := policies.ParsePrivateRange(v)
	if reason != "" {
		return fmt.Errorf("%q: %s", v, reason)
	}
	*f = append(*f, p)
	return nil
}

// ociRuntimeFlag is --runtime: one of runtime.OCIRuntimes.
type ociRuntimeFlag string

func (f *ociRuntimeFlag) String() string { return string(*f) }

func (f *ociRuntimeFlag) Set(v string) error {
	if !slices.Contains(runtime.OCIRuntimes, v) {
		return fmt.Errorf("%q: want %s", v, strings.Join(runtime.OCIRuntimes, " or "))
	}
	*f = ociRuntimeFlag(v)
	return nil
}

// listFlag collects a repeatable string flag.
type listFlag []string

func (f *listFlag) String() string { return strings.Join(*f, ",") }

func (f *listFlag) Set(v string) error {
	*f = append(*f, v)
	return nil
}

// kubeFlags are the --kubernetes flags as given (kubeConfig checks them).
type kubeFlags struct {
	kubeconfig, node, labels, listen, advertise string
	lease, auditEvery                           time.Duration
	controller                                  bool
}
