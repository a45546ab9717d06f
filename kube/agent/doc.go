// Package agent makes airlockd a Kubernetes node agent (airlockd
// --kubernetes): it runs the airlock.dev/v1alpha1 Sessions placed on its
// node as local sessions of its own daemon, and, while it leads, places
// the cluster's unplaced Sessions on live nodes with room.
//
// # The node
//
// At start the agent registers its node: an AirlockNode of its name
// (cluster-scoped, its labels from --node-labels, its capacity, version and
// runtime in status) and a coordination.k8s.io/v1 Lease of the same name in
// the airlock-system namespace, which it renews every quarter of the lease
// duration, as a kubelet renews its node's Lease. The Lease's holder is an
// identity kept under the daemon's root: the same agent restarted takes its
// Lease back at once, and a second agent started with a name whose Lease
// another holds, live, is refused (two agents on one name would both run
// its Sessions). The airlock-system namespace is the deployment's
// (deploy/kubernetes): the agent does not make it, and says so while it
// is missing. The agent never releases its Lease: its sessions keep
// running across its restart, as local sessions do across a daemon restart,
// and a node whose agent does not come back is lost when the Lease expires.
//
// # Sessions on the node
//
// A Session is the node's when its spec.nodeName is the node's name (set by
// the placement controller, or by whoever creates the Session; immutable
// once set, so that a session never moves). The agent watches only those
// (spec.nodeName is a selectable field of the CRD: the watch is a field
// selector, as a kubelet's watch of its pods is). For each one it:
//
//   - adds its finalizer (airlock.dev/node-agent) before anything runs, so
//     that deleting the Session always finds the local session to remove;
//   - runs it exactly as a local session, through the daemon's own create
//     (in process, the same call the /v1 API's POST /v1/sessions makes):
//     validation, admission and every perimeter layer apply unchanged;
//   - labels the local session with the Session's uid (and namespace/name,
//     for people): the daemon records labels before the command can run,
//     so an agent killed at any point finds, after its restart, the session
//     it made instead of making a second one; a create the kill cut short
//     left nothing (the daemon removes half-made sessions at start), and
//     one that was made re-adopts like any local session;
//   - writes status back through the status subresource with optimistic
//     concurrency, starting from its cached copy or the answer to its last
//     write and, on a conflict (409), from a fresh read: state, node,
//     local id, exit code and reason, timestamps (a stale copy costs a
//     refused write, never a lost one; a claim is a write like any other,
//     sent even when it changes nothing, so two claims of one Session
//     cannot both succeed and a cache that lags behind the agent's own
//     write of Failed cannot have it run again);
//   - removes the local session when the Session is deleted, then its
//     finalizer.
//
// A Session whose local session existed and is gone (removed on the node
// by hand) is marked Failed, never run again. A Session marked Lost that
// the agent still runs (its node came back after the lease expired) is
// stopped: it was given up for lost, and is never run twice. Local
// sessions labelled for Sessions that no longer exist are removed.
//
// # Workspaces from git
//
// A Session's spec.workspaceSources name git repositories its workspaces
// are fetched from (sources.go, kube/gitsource). The agent checks each
// against the node's admission policy (git_source blocks: the URL, the
// Session's namespace and the push branch) before any request, fetches it under airlockd's root
// (with the block's token, when it names a token_file, or for an ssh
// source its ssh_key_file and known_hosts)
// (kube-sources/UID/N: the agent's own bare repository and the workspace,
// a repository of its own), and names the workspace in
// api.CreateRequest.OwnedWorkspaces: the daemon admits it there although
// the root is protected, which keeps every manifest, another Session's
// included, from naming it. What was fetched is written to
// status.workspaceSources before the session starts. Once the session has
// ended and no change waits for review, a source with a pushBranch is
// pushed once: a commit of the workspace's files built through the
// agent's own repository (never git run in the sandbox's), on top of the
// fetched commit. The directory goes when the Session's local session
// does; the sweep removes those of Sessions gone while the agent was away.
//
// # Workspaces from volumes
//
// A source may name a PersistentVolumeClaim instead (volumes.go). The
// placement controller reads the claim and the PersistentVolume bound to
// it (the binding checked both ways, by uid) from its cache
// (placementwatch.go: claims, volumes and Nodes' metadata watched, a
// change of one an unplaced Session waits on asking for a pass), leaves
// the Session Pending until the claim is bound, and places it only on a
// node whose Kubernetes Node the volume's nodeAffinity selects. The
// node's agent checks it all again, uncached, before the session runs,
// resolves the source's subPath, if any, beneath the volume's directory
// through no symlink (openat2; subpath_linux.go), and names the directory
// (of a local or hostPath volume) in api.CreateRequest.VolumeWorkspaces:
// the daemon admits it under the admission policy's volume_paths, where
// no API caller's host_path is admitted, by its resolved path alone. Before the session runs the agent holds
// each claim with its own finalizer (workspaces.airlock.dev/NODE),
// recorded under the root (kube-claims/UID), and releases it once the
// node's last Session on it is deleted: a claim cannot go, nor its volume
// pass to another claim, while a Session has the directory.
//
// # The node endpoint
//
// Each agent serves its Sessions' logs, end (wait), diff, audit log,
// commit and discard over HTTPS (Config.Listen; endpoint.go), as a kubelet
// serves its pods' logs, for airlock --context: at
// /v1/namespaces/NS/sessions/NAME/ACTION, handed, once allowed, to the
// daemon's own /v1 API handler as /v1/sessions/ID/ACTION, so that they
// behave exactly as on the socket. Its serving certificate is self-signed,
// kept under the daemon's root; the agent publishes it with the address in
// its AirlockNode's status.endpoint, and clients pin it: they trust it
// because the API server they already trust gave it. Each request's bearer
// token is checked by a TokenReview, and the caller's right by a
// SubjectAccessReview on the Session's subresource (get sessions/log for
// logs and wait, get sessions/diff, get sessions/audit, update
// sessions/commit for commit and discard, create sessions/exec for exec,
// create sessions/attach for attach, update sessions/stop for stop), both
// cached briefly (see
// allowTTL). The Session is read fresh and must be on this node; its local
// session is the one labelled with its uid. The client calls the node with
// its own token, not through the API server as kubectl logs does: the
// README says what that exposes.
//
// # Status and approvals
//
// A Session's status also says what its local session's daemon reports
// of it: its audit events counted by layer and action (Daemon.AuditSummary,
// counters the daemon keeps as it records events: no read of the audit
// log), the size of its workspace changes once it is in review and after
// (Daemon.ChangeSummary, kept in the session's record with committed or
// discarded), and the requests its L7 gateway holds (the daemon's
// approvals store, without headers or bodies). Writes stay rare on a
// busy session: the audit counts alone are written at most every
// Config.AuditStatusEvery (airlockd --kubernetes-audit-interval, 5 s by
// default; 0: never on their own) per Session, looked at as often; a
// change of state or of the changes is written at once, the counts of
// that moment with it, and a change of the held requests at once unless
// the status was written less than followedEvery (1 s) before, so that a
// sandbox holding requests and giving them up does not set the rate of
// writes. The agent follows the approvals store, so a request held or
// decided anywhere (a SessionApproval, airlock approve on the node, the
// approver hook, a timeout) reaches the status within followedEvery.
//
// A SessionApproval (namespaced) decides one held request of a Session
// in its namespace: the agent whose node runs the Session decides it
// through the approvals store, once, in the name of the object
// (approvalBy: its decidedBy, namespace, name and uid, which the
// session's audit records with the decision), and writes Applied with
// the request's state, or Refused with why in status. Who may decide is
// whoever RBAC lets create SessionApprovals in the namespace. The API
// server does not record an object's creator; decidedBy is proven by the
// admission policy deploy/kubernetes/admission/sessionapproval-decider.yaml
// (a ValidatingAdmissionPolicy comparing it to the creator's user name),
// and is a claim without it.
//
// # Warm pools
//
// A SessionPool (namespaced) keeps sandboxes of its policy prepared on the
// nodes whose AirlockNode labels hold its nodeSelector (empty: every
// node). Each agent watches every SessionPool and its own AirlockNode, and
// for each SessionPool that selects its node, is not being deleted and
// has a size, declares a pool of that size in its daemon (Daemon.SetPool:
// the validation and admission of a create first, so a policy the node's
// admission policy refuses prepares nothing; the refusal is logged once
// per generation and reported). The pool's policy label is
// PoolLabel(namespace, name), "sessionpool:NAMESPACE/NAME": the daemon's
// pool key covers everything in a policy but its command, timeout and
// pool block, label included, so two SessionPools of one policy keep two
// pools, and a Session takes a prepared sandbox only when it names the
// SessionPool (spec.poolName: the agent gives its policy that label) and
// its policy is otherwise the pool's; its Warm condition says whether it
// did and, when not, why (the daemon's "started cold" warning: none ready,
// or the fields its policy differs in). A Session naming no pool may not
// carry the prefix (refused). Every other daemon pool of a SessionPool's
// label is removed, its prepared sandboxes torn down: the SessionPool was
// deleted, resized to 0, no longer selects the node, or its policy
// changed or is refused. Pools live in the daemon's memory and go with
// it (a daemon at start removes the sandboxes its predecessor prepared);
// the agent, started again with it, declares them again from the
// SessionPools its cache lists. An agent looks at a SessionPool only when
// something it decides from changed: the SessionPool (not the cache's
// periodic resync), an older SessionPool's spec or refusal (the room goes
// oldest first), the node's AirlockNode's labels, or its daemon pool,
// which the daemon tells it of (Daemon.WatchPools: a sandbox prepared,
// taken or torn down, a refill that failed), a burst within poolSettle
// (200 ms) making one look. Once a minute (poolSafetyResync) it looks at
// every SessionPool it caches and at the SessionPool of every pool it
// keeps, a safety net, so that one whose SessionPool went unseen is
// removed too.
//
// Each agent writes its own entry of status.nodes (ready, the generation
// it acted on, reason refused and a message, or the last failure to
// prepare) by server-side apply as field manager airlockd-node/NODE, so
// that nodes never overwrite each other's entries; ready and
// observedGeneration beside them are the last writer's (ready the sum of
// the entries it saw, which each agent corrects when it sees it wrong). A
// node no longer selected applies a status without its entry, which
// removes it.
//
// Prepared sandboxes count against the daemon's session limit: a node
// keeps for SessionPools only the room that limit leaves above its
// capacity for Sessions (Config.PoolRoom), given to the SessionPools that
// select it oldest first, those it refused left out, so that a cluster
// user's SessionPool cannot take the places of the Sessions placed on the
// node. A SessionPool short of room gets what is left and says so
// (reason no-room).
//
// Placement prefers, for a Session naming a pool, a node where the pool
// reports a sandbox ready (see Placement); where none is, it runs cold.
//
// # Placement
//
// The placement controller runs inside every agent (--kubernetes-controller
// false turns it off), and one agent at a time leads, elected through a
// Lease (airlock-placement in airlock-system). Inside the agents, because
// a fleet of node agents is then the whole deployment (a DaemonSet), with
// no second component to deploy, scale or keep highly available: when the
// leader's node goes, another agent takes over within a lease duration.
//
// It places each unplaced Session, oldest first, on a live, schedulable
// node with a free place whose labels hold the Session's nodeSelector:
// for a Session naming a SessionPool, one where that pool reports a
// sandbox ready (its status.nodes; SessionPools are read only when a
// pending Session names one), then the one with the most free places, by
// setting spec.nodeName with the
// resourceVersion it read (two leaders, or a leader and a person, cannot
// both place it), then state Placed in status. Free places are the node's
// capacity less the Sessions that hold a place on it (see
// v1alpha1.AirlockNodeStatus.Capacity), counting those it placed a moment
// ago that its cache does not show yet. A Session that fits nowhere stays
// Pending with reason unschedulable and, in message, why each node was
// passed over.
//
// A node is live while its Lease is renewed. The controller judges that by
// its own clock, as the node lifecycle controller does: it notes when it
// saw each Lease's renew time change, and a node whose Lease it has not
// seen change for a whole lease duration (or that has none) is lost, so a
// clock skewed between hosts cannot make a node lost early. Every agent
// notes the renewals its cache shows, leading or not, so a new leader (the
// old one's node lost, or restarted) knows how long each node has been
// quiet; a node is then lost a lease duration after its last renewal, or
// after the leader Lease's expiry when both went together. A node whose
// Lease's renew time is already older than its duration is not placed on,
// even by a leader that has just started. Its Sessions
// that were not yet ended (Pending, Placed, Running) are marked Lost, and
// never placed again: a lost node may still run them. Deleted Sessions of a
// lost node lose the finalizer the node cannot remove; if the node comes
// back, its agent removes their local sessions.
//
// # Rights
//
// deploy/kubernetes grants the agents exactly the calls above
// (node-rbac.yaml), and its node restriction (node-restriction.yaml, the
// counterpart of the Node authorizer) lets each write only what is its
// node's: its AirlockNode and Lease, the finalizer and status of the
// Sessions on it, its entry of SessionPools' status.nodes, and
// placement's writes while it holds airlock-placement.
// The node is the one its pod's token is bound to, so --node-name must be
// the Kubernetes node's name (the DaemonSet gives spec.nodeName); a change
// to what the agent writes, or how, must be made there too
// (kube/deploytest runs an agent under both).
package agent
