//go:build linux

package deploytest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-logr/logr"
	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/airlock-sandbox/airlock/internal/hostcgroup"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestDaemonSetUnderKubelet runs deploy/kubernetes's DaemonSet as shipped
// under a real kubelet: the kubelet make kube builds (the pinned
// Kubernetes release), on a node of the test's own (kubeNode: containerd's
// CRI, a CNI bridge network, in namespaces of the test's), registered with
// a control plane that authorizes nodes as kubeadm's clusters do (the Node
// authorizer, NodeRestriction). The node image is built from
// deploy/kubernetes/image/Containerfile (hack/build-node-image.sh --image)
// and imported into the node's containerd; the pod is the DaemonSet's
// template bound to the node, owned by the DaemonSet, as its controller
// (which this control plane does not run) makes it. It proves that:
//   - the kubelet runs the pod: privileged, in the host's PID namespace,
//     with its projected pod-bound service-account token, its ConfigMap
//     and host path volumes, on the pod network, with the in-cluster
//     configuration the kubelet gives it;
//   - airlockd-kube in it registers its AirlockNode and Lease under the
//     node restriction (so the token names the node), leads placement and
//     runs a Session placed on the node to completion (Exited, its exit
//     code), with no request refused by RBAC;
//   - while the Session runs, its network namespace (under /run/netns) and
//     mounts under /var/lib/airlock made in the container are seen on the
//     node: mount propagation Bidirectional;
//   - a restart of airlockd's container leaves the Session that was
//     running as it was (its processes the same ones, run once): airlockd
//     places its containerd, the shims and the sessions beside kubepods
//     (--cgroup-parent), out of the container's cgroup, which runc kills;
//     the restarted agent takes the Session back and reports its exit;
//   - deleting the pod with a Session running stops the Session, reported
//     Exited, and airlockd's containerd: nothing of it is left under its
//     cgroup parent, and nothing of the node after the test
//     (kubeNode.close checks).
func TestDaemonSetUnderKubelet(t *testing.T) {
	testutil.RequiresRoot(t)
	if testing.Short() {
		t.Skip("kubelet test skipped in -short mode")
	}
	ctrllog.SetLogger(logr.Discard())
	env, err := daemontest.LoadEnv()
	if err != nil {
		t.Fatal(err)
	}
	kubeBin, err := kubetest.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	kubeletBin := filepath.Join(kubeBin, "kubelet")
	if _, err := os.Stat(kubeletBin); err != nil {
		t.Fatalf("kubelet: %v (run `make kube`, which builds it beside kube-apiserver)", err)
	}
	ms := loadManifests(t, baseDeployment)
	ds, ctr := daemonSet(t, ms)
	image := buildNodeImage(t, env, ctr.Image)

	const node = "kubelet-node"
	nodeUser := "system:node:" + node
	cp := kubetest.StartWith(t, kubetest.Options{
		Users:             []kubetest.User{{Name: nodeUser, Groups: []string{"system:nodes"}}},
		NodeAuthorization: true,
	})
	sch := scheme(t)
	admin, err := client.New(cp.Config, client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	strict := client.WithFieldValidation(admin, metav1.FieldValidationStrict)
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	for _, m := range ms {
		if err := strict.Create(ctx, m.obj.DeepCopy()); err != nil {
			t.Fatalf("apply %s: %v", m, err)
		}
	}
	kubetest.Eventually(t, time.Minute, "the CRDs served", func() (bool, string) {
		err := admin.List(ctx, &v1alpha1.SessionList{})
		return err == nil, fmt.Sprint(err)
	})
	// What kube-controller-manager's root CA publisher does in every
	// namespace: the projected token volume's ca.crt comes from it.
	if err := admin.Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: agent.LeaseNamespace, Name: "kube-root-ca.crt"},
		Data:       map[string]string{"ca.crt": string(cp.Config.CAData)},
	}); err != nil {
		t.Fatal(err)
	}
	// The node restriction in force before the pod starts: a token bound
	// to no pod writes nothing.
	unbound, err := client.New(asToken(cp, token(t, cs, agent.LeaseNamespace, "airlock-node", nil)), client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 30*time.Second, "the node restriction in force", func() (bool, string) {
		err := unbound.Create(ctx, &v1alpha1.AirlockNode{ObjectMeta: metav1.ObjectMeta{Name: "node-z"}}, client.DryRunAll)
		return refusedByPolicy(err), fmt.Sprint(err)
	})

	began := time.Now()
	n := startKubeNode(t, cp, env.BinDir, kubeletBin, node, cp.Tokens[nodeUser], []string{image})
	kubetest.Eventually(t, 3*time.Minute, "Node "+node+" Ready", func() (bool, string) {
		if n.kubelet.exited() {
			t.Fatalf("the kubelet exited:\n%s", n.kubelet.tail(16<<10))
		}
		var no corev1.Node
		if err := admin.Get(ctx, client.ObjectKey{Name: node}, &no); err != nil {
			return false, err.Error()
		}
		for _, c := range no.Status.Conditions {
			if c.Type == corev1.NodeReady {
				return c.Status == corev1.ConditionTrue, fmt.Sprintf("Ready %s: %s %s", c.Status, c.Reason, c.Message)
			}
		}
		return false, "no Ready condition"
	})
	t.Logf("node %s Ready %s after the kubelet's start", node, time.Since(began).Round(time.Millisecond))

	// The DaemonSet's pod, as its controller makes it: the template,
	// bound to the node, owned by the DaemonSet.
	var owner appsv1.DaemonSet
	if err := admin.Get(ctx, client.ObjectKey{Namespace: ds.Namespace, Name: ds.Name}, &owner); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: ds.Name + "-" + node, Namespace: ds.Namespace, Labels: ds.Spec.Template.Labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: owner.Name, UID: owner.UID,
				Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true)}},
		},
		Spec: *ds.Spec.Template.Spec.DeepCopy(),
	}
	pod.Spec.NodeName = node
	if err := admin.Create(ctx, pod); err != nil {
		t.Fatalf("the DaemonSet's pod on %s: %v", node, err)
	}
	// Runs before the node's close: the kubelet stops the pod (airlockd
	// has the DaemonSet's grace period to stop its sessions).
	t.Cleanup(func() { deletePod(t, admin, pod, n) })
	began = time.Now()
	kubetest.Eventually(t, 3*time.Minute, "the DaemonSet's pod running", func() (bool, string) {
		if n.kubelet.exited() {
			t.Fatalf("the kubelet exited:\n%s", n.kubelet.tail(16<<10))
		}
		var p corev1.Pod
		if err := admin.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return false, err.Error()
		}
		return p.Status.Phase == corev1.PodRunning && podReady(&p), podState(&p)
	})
	t.Logf("the DaemonSet's pod running %s after its creation", time.Since(began).Round(time.Millisecond))
	if err := admin.Get(ctx, client.ObjectKeyFromObject(pod), pod); err != nil {
		t.Fatal(err)
	}
	if pod.Status.PodIP == "" || !strings.HasPrefix(pod.Status.PodIP, strings.TrimSuffix(podSubnet, "0/24")) {
		t.Errorf("pod IP %q, want one of the pod network %s", pod.Status.PodIP, podSubnet)
	}

	kubetest.Eventually(t, 2*time.Minute, "AirlockNode and Lease "+node+" registered by the pod", func() (bool, string) {
		var an v1alpha1.AirlockNode
		var l coordinationv1.Lease
		errN := admin.Get(ctx, client.ObjectKey{Name: node}, &an)
		errL := admin.Get(ctx, client.ObjectKey{Namespace: agent.LeaseNamespace, Name: node}, &l)
		return errN == nil && errL == nil && an.Status.Capacity > 0,
			fmt.Sprintf("AirlockNode %v %+v, Lease %v; pod log:\n%s", errN, an.Status, errL, n.podLog(pod, 2<<10))
	})
	pid := checkPodProcess(t, n)
	// The pod's token is the kubelet's request, and the AirlockNode the
	// agent's write with it (the node restriction, in force, let it
	// through: the token names the node).
	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	var tokenBy, registeredBy []string
	for _, e := range events {
		if e.ObjectRef == nil || e.Verb != "create" || e.ResponseStatus == nil || e.ResponseStatus.Code != 201 {
			continue
		}
		switch {
		case e.Resource() == "serviceaccounts/token" && e.ObjectRef.Namespace == agent.LeaseNamespace && e.ObjectRef.Name == "airlock-node":
			tokenBy = append(tokenBy, e.User.Username)
		case e.Resource() == "airlocknodes" && e.ObjectRef.Name == node:
			registeredBy = append(registeredBy, e.User.Username)
		}
	}
	// The test's own token requests (the unbound one above) are the
	// admin's.
	if !slices.Contains(tokenBy, nodeUser) || !slices.Equal(registeredBy, []string{"system:serviceaccount:airlock-system:airlock-node"}) {
		t.Errorf("airlock-node's tokens requested by %v (want %s among them), AirlockNode %s created by %v (want the service account once)", tokenBy, nodeUser, node, registeredBy)
	}

	// A Session, placed on the only node by its agent (the placement
	// leader), runs there to completion. It sleeps first, for the look at
	// its mounts from the node.
	job := &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Name: "job-kubelet", Namespace: "default"},
		Spec: v1alpha1.SessionSpec{Policy: policies.Policy{
			Label: "job-kubelet", Image: daemontest.AgentImage, Command: []string{"sh", "-c", "sleep 10; exit 3"}}},
	}
	if err := admin.Create(ctx, job); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 2*time.Minute, "Session job-kubelet Running", func() (bool, string) {
		s, err := session(ctx, admin, job.Name)
		if err != nil {
			return false, err.Error()
		}
		return s.Status.State == v1alpha1.SessionRunning || s.Status.State == v1alpha1.SessionExited,
			fmt.Sprintf("spec.nodeName %q, status %+v", s.Spec.NodeName, s.Status)
	})
	// Bidirectional: the container's /var/lib/airlock and /run/netns are
	// in the peer groups of the node's mounts that hold them, so what
	// airlockd mounts there is seen on the node, as the running
	// Session's root filesystem is. (Without --uplink, as shipped,
	// airlockd pins no network namespace in /run/netns: its sessions'
	// egress perimeter is off.)
	for _, dir := range []string{"/var/lib/airlock", "/run/netns"} {
		cpoint, cgroup := peerGroup(pid, dir)
		npoint, ngroup := peerGroup(n.holder.Process.Pid, dir)
		if cpoint != dir || cgroup == "" || cgroup != ngroup {
			t.Errorf("%s: the container's mount at %s, peer group %q; the node's at %s, peer group %q: want the same shared peer group", dir, cpoint, cgroup, npoint, ngroup)
		}
	}
	var rootMounts []string
	kubetest.Eventually(t, 8*time.Second, "the running Session's mounts under /var/lib/airlock seen on the node", func() (bool, string) {
		rootMounts = n.mountsUnder("/var/lib/airlock/")
		return len(rootMounts) > 0, fmt.Sprintf("under /var/lib/airlock: %v", rootMounts)
	})
	t.Logf("seen on the node: %v", rootMounts)
	var s *v1alpha1.Session
	kubetest.Eventually(t, time.Minute, "Session job-kubelet Exited", func() (bool, string) {
		s, err = session(ctx, admin, job.Name)
		if err != nil {
			return false, err.Error()
		}
		return s.Status.State == v1alpha1.SessionExited, fmt.Sprintf("spec.nodeName %q, status %+v", s.Spec.NodeName, s.Status)
	})
	if s.Spec.NodeName != node || s.Status.ExitCode == nil || *s.Status.ExitCode != 3 || s.Status.ID == "" {
		t.Fatalf("Session job-kubelet: spec.nodeName %q, status %+v; want run by %s, exit 3", s.Spec.NodeName, s.Status, node)
	}
	if err := admin.Delete(ctx, job); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, time.Minute, "Session job-kubelet gone (its local session removed, then its finalizer)", func() (bool, string) {
		_, err := session(ctx, admin, job.Name)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// A restart of airlockd's container (its process killed; the kubelet
	// starts it again) with a Session running: runc, removing the old
	// container, kills every process of its cgroup and the cgroups
	// beneath it. airlockd's containerd, its shims and the sessions are
	// not among them (--cgroup-parent airlock: beside kubepods, under the
	// node's cgroup root): the Session runs on, its processes the same
	// ones, and the restarted agent takes it back and reports its end.
	restart := &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Name: "job-restart", Namespace: "default"},
		Spec: v1alpha1.SessionSpec{Policy: policies.Policy{
			Label: "job-restart", Image: daemontest.AgentImage, Command: []string{"sh", "-c", "sleep 30; exit 4"}}},
	}
	if err := admin.Create(ctx, restart); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 2*time.Minute, "Session job-restart Running", func() (bool, string) {
		s, err := session(ctx, admin, restart.Name)
		if err != nil {
			return false, err.Error()
		}
		return s.Status.State == v1alpha1.SessionRunning, fmt.Sprintf("%+v", s.Status)
	})
	parent := "/" + n.cgroupName + "/airlock"
	sessionProcs := n.sessionProcs()
	if len(sessionProcs) == 0 {
		t.Fatalf("no process of Session job-restart on the node: %v", n.procs())
	}
	// Where they run: containerd and the shims in its cgroup under the
	// parent, the Session's in its own cgroup under it too.
	placed := append([]string{}, sessionProcs...)
	for _, p := range n.procsNamed("containerd", "containerd-shim") {
		// airlockd's, not the node's (the kubelet's CRI and its shims):
		// their command lines name airlockd's root.
		pid, _, _ := strings.Cut(p, " ")
		if b, _ := os.ReadFile("/proc/" + pid + "/cmdline"); strings.Contains(string(b), "/var/lib/airlock/") {
			placed = append(placed, p)
		}
	}
	if len(placed) < len(sessionProcs)+2 {
		t.Errorf("airlockd's containerd and shim not found among the node's processes: %v", n.procs())
	}
	// In every hierarchy: a hybrid host's v2 one too, which runc (the
	// kubelet's) kills the old container's processes through.
	for _, p := range placed {
		pid, _, _ := strings.Cut(p, " ")
		b, err := os.ReadFile("/proc/" + pid + "/cgroup")
		if err != nil {
			t.Error(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			if parts := strings.SplitN(l, ":", 3); len(parts) != 3 || !strings.HasPrefix(parts[2], parent+"/") {
				t.Errorf("process %s in cgroup %q, want beneath %s in every hierarchy", p, l, parent)
			}
		}
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	began = time.Now()
	kubetest.Eventually(t, 2*time.Minute, "airlockd's container restarted by the kubelet", func() (bool, string) {
		var p corev1.Pod
		if err := admin.Get(ctx, client.ObjectKeyFromObject(pod), &p); err != nil {
			return false, err.Error()
		}
		return len(p.Status.ContainerStatuses) == 1 && p.Status.ContainerStatuses[0].RestartCount == 1 && podReady(&p), podState(&p)
	})
	t.Logf("airlockd's container restarted and ready %s after its kill", time.Since(began).Round(time.Millisecond))
	// The same processes, not a second run of the Session's command.
	if now := n.sessionProcs(); !slices.Equal(now, sessionProcs) {
		ctrLog, _ := os.ReadFile(filepath.Join(n.dir, "host", "var", "lib", "airlock", "containerd", "containerd.log"))
		if len(ctrLog) > 8<<10 {
			ctrLog = ctrLog[len(ctrLog)-8<<10:]
		}
		t.Errorf("the Session's processes %v before the restart, %v after: want the same ones; airlockd's log:\n%s\nits containerd's:\n%s", sessionProcs, now, n.podLog(pod, 16<<10), ctrLog)
	}
	if s, err = session(ctx, admin, restart.Name); err != nil || s.Status.State != v1alpha1.SessionRunning {
		t.Errorf("Session job-restart after the restart: %v %+v, want Running", err, s.Status)
	}
	kubetest.Eventually(t, 2*time.Minute, "Session job-restart Exited 4, reported by the restarted agent", func() (bool, string) {
		s, err = session(ctx, admin, restart.Name)
		if err != nil {
			return false, err.Error()
		}
		return s.Status.State == v1alpha1.SessionExited, fmt.Sprintf("%+v", s.Status)
	})
	if s.Status.ExitCode == nil || *s.Status.ExitCode != 4 || s.Status.Reason == "lost" {
		t.Errorf("Session job-restart ended with %+v, want exit code 4 (not lost)", s.Status)
	}
	if err := admin.Delete(ctx, restart); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, time.Minute, "Session job-restart gone", func() (bool, string) {
		_, err := session(ctx, admin, restart.Name)
		return apierrors.IsNotFound(err), fmt.Sprint(err)
	})
	// Every call the agent made was one RBAC grants.
	if m := regexp.MustCompile(`(?m)^.*cannot \w+ resource.*$`).FindString(n.podLog(pod, 1<<20)); m != "" {
		t.Errorf("the pod's agent was refused by RBAC: %s", m)
	}

	// The pod's deletion with a Session running: airlockd, on the
	// kubelet's SIGTERM, stops the Session (--stop-sessions-on-exit),
	// which is reported Exited, not lost a lease later, and stops its
	// containerd: nothing of it outlives the pod, no process and no
	// cgroup under the parent.
	drain := &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Name: "job-drain", Namespace: "default"},
		Spec: v1alpha1.SessionSpec{Policy: policies.Policy{
			Label: "job-drain", Image: daemontest.AgentImage, Command: []string{"sh", "-c", "sleep 300"}}},
	}
	if err := admin.Create(ctx, drain); err != nil {
		t.Fatal(err)
	}
	kubetest.Eventually(t, 2*time.Minute, "Session job-drain Running", func() (bool, string) {
		s, err := session(ctx, admin, drain.Name)
		if err != nil {
			return false, err.Error()
		}
		return s.Status.State == v1alpha1.SessionRunning, fmt.Sprintf("%+v", s.Status)
	})
	deletePod(t, admin, pod, n)
	if s, err = session(ctx, admin, drain.Name); err != nil || s.Status.State != v1alpha1.SessionExited || s.Status.Reason == "lost" || s.Status.ExitCode == nil {
		t.Errorf("Session job-drain after the pod's deletion: %v %+v; want Exited with its exit code, reported by the agent", err, s.Status)
	} else {
		t.Logf("Session job-drain after the pod's deletion: %s, exit code %d, reason %q", s.Status.State, *s.Status.ExitCode, s.Status.Reason)
	}
	// Its AirlockNode was given no room as it drained (the node
	// restriction let the pod's own write through): placement sent it
	// nothing more.
	var an v1alpha1.AirlockNode
	if err := admin.Get(ctx, client.ObjectKey{Name: node}, &an); err != nil || an.Status.Capacity != 0 {
		t.Errorf("AirlockNode %s after the pod's deletion: %v, capacity %d; want 0", node, err, an.Status.Capacity)
	}
	if left := n.procsUnder(parent); len(left) > 0 {
		t.Errorf("after the pod's deletion, processes under %s: %v", parent, left)
	}
	for _, h := range hostcgroup.Hierarchies("") {
		if _, err := os.Stat(filepath.Join(h, parent)); err == nil {
			t.Errorf("after the pod's deletion, cgroup %s left", filepath.Join(h, parent))
		}
	}
}

// sessionProcs returns the node's sh and sleep processes: the running
// Session's command.
func (n *kubeNode) sessionProcs() []string {
	return n.procsNamed("sh", "sleep")
}

// procsNamed returns the node's processes ("PID COMM") with one of names.
func (n *kubeNode) procsNamed(names ...string) []string {
	var out []string
	for _, p := range n.procs() {
		_, comm, _ := strings.Cut(p, " ")
		if slices.Contains(names, comm) {
			out = append(out, p)
		}
	}
	return out
}

// procsUnder returns the node's processes in a cgroup at or beneath
// cgroup, in any hierarchy.
func (n *kubeNode) procsUnder(cgroup string) []string {
	var out []string
	for _, p := range n.procs() {
		pid, _, _ := strings.Cut(p, " ")
		if b, err := os.ReadFile("/proc/" + pid + "/cgroup"); err == nil && inCgroup(string(b), strings.TrimPrefix(cgroup, "/")) {
			out = append(out, p)
		}
	}
	return out
}

// buildNodeImage builds the node image named ref from
// deploy/kubernetes/image/Containerfile with make's output
// (hack/build-node-image.sh --image) into a directory of the test's.
func buildNodeImage(t *testing.T, env daemontest.Env, ref string) string {
	t.Helper()
	root, err := kubetest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(t.TempDir(), "node-image.tar")
	began := time.Now()
	cmd := exec.Command("bash", filepath.Join(root, "hack", "build-node-image.sh"), "--image", ref, env.BinDir, env.AgentImage, out)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("hack/build-node-image.sh --image %s: %v\n%s", ref, err, b)
	}
	t.Logf("node image %s built in %s", ref, time.Since(began).Round(time.Millisecond))
	return out
}

func podReady(p *corev1.Pod) bool {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// podState says what a pod waits for, for the test's messages.
func podState(p *corev1.Pod) string {
	s := fmt.Sprintf("phase %s", p.Status.Phase)
	for _, c := range p.Status.Conditions {
		if c.Status != corev1.ConditionTrue {
			s += fmt.Sprintf("; %s %s: %s %s", c.Type, c.Status, c.Reason, c.Message)
		}
	}
	for _, c := range p.Status.ContainerStatuses {
		switch {
		case c.State.Waiting != nil:
			s += fmt.Sprintf("; %s waiting: %s %s", c.Name, c.State.Waiting.Reason, c.State.Waiting.Message)
		case c.State.Terminated != nil:
			s += fmt.Sprintf("; %s terminated: %s %d %s", c.Name, c.State.Terminated.Reason, c.State.Terminated.ExitCode, c.State.Terminated.Message)
		}
		if c.RestartCount > 0 {
			s += fmt.Sprintf(" (%d restarts)", c.RestartCount)
		}
	}
	return s
}

// podLog is the end of the pod's airlockd container's log, as the kubelet
// keeps it (/var/log/pods on the node), at most max bytes.
func (n *kubeNode) podLog(p *corev1.Pod, max int) string {
	logs, _ := filepath.Glob(filepath.Join(n.dir, "host", "var", "log", "pods", p.Namespace+"_"+p.Name+"_*", "*", "*.log"))
	var b strings.Builder
	for _, f := range logs {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if len(data) > max {
			data = data[len(data)-max:]
		}
		fmt.Fprintf(&b, "%s:\n%s\n", strings.TrimPrefix(f, n.dir), data)
	}
	return b.String()
}

// checkPodProcess checks the pod's airlockd process, found through the
// node's containerd: it is in the machine's PID namespace (hostPID) and
// has every capability the test has (privileged). It returns its pid.
func checkPodProcess(t *testing.T, n *kubeNode) int {
	t.Helper()
	c, ctx, err := n.client(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctrs, err := c.Containers(ctx, `labels."io.kubernetes.container.name"==airlockd`)
	if err != nil || len(ctrs) != 1 {
		t.Fatalf("the airlockd container in the node's containerd: %d, %v", len(ctrs), err)
	}
	task, err := ctrs[0].Task(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	pid := int(task.Pid())
	self, _ := os.Readlink("/proc/self/ns/pid")
	if got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", pid)); err != nil || got != self {
		t.Errorf("airlockd (pid %d) in PID namespace %q (%v), want the machine's %q (hostPID)", pid, got, err, self)
	}
	capEff := func(p string) string {
		b, _ := os.ReadFile(p)
		m := regexp.MustCompile(`(?m)^CapEff:\s*(\S+)$`).FindSubmatch(b)
		if m == nil {
			return ""
		}
		return string(m[1])
	}
	if got, want := capEff(fmt.Sprintf("/proc/%d/status", pid)), capEff("/proc/self/status"); got == "" || got != want {
		t.Errorf("airlockd's effective capabilities %s, want the test's %s (privileged)", got, want)
	}
	return pid
}

// deletePod deletes the pod and waits for the kubelet to have stopped it
// (the pod gone from the API server); when the kubelet cannot, it removes
// the pod by force (the node's close removes its containers).
func deletePod(t *testing.T, admin client.Client, pod *corev1.Pod, n *kubeNode) {
	// The test's context has ended when its cleanups run.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := admin.Delete(ctx, pod); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
		return
	}
	began := time.Now()
	grace := time.Duration(ptr.Deref(pod.Spec.TerminationGracePeriodSeconds, 30))*time.Second + 30*time.Second
	for time.Since(began) < grace && !n.kubelet.exited() {
		var p corev1.Pod
		if err := admin.Get(ctx, client.ObjectKeyFromObject(pod), &p); apierrors.IsNotFound(err) {
			t.Logf("the DaemonSet's pod stopped and gone %s after its deletion", time.Since(began).Round(time.Millisecond))
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Errorf("the DaemonSet's pod not stopped by the kubelet within %s of its deletion", grace)
	if err := admin.Delete(ctx, pod, client.GracePeriodSeconds(0)); err != nil && !apierrors.IsNotFound(err) {
		t.Error(err)
	}
}
