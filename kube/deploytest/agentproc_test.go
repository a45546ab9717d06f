package deploytest

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/kubetest/agentproc"
)

// agentArgs are a DaemonSet's airlockd-kube arguments for node: the node
// name the downward API gives, and the test's own root, socket, admission
// file (admFile, the ConfigMap's policy), session image archive and cgroup
// parent for the container's; then the test's kubeconfig (in a pod: the in-cluster
// configuration), binaries, runtime and session pool.
func agentArgs(t *testing.T, env daemontest.Env, dsArgs []string, admFile, kubeconfig, node, pool, root, socket string) []string {
	t.Helper()
	args := slices.Clone(dsArgs)
	for i, a := range args {
		args[i] = strings.NewReplacer("$(NODE_NAME)", node, "$(POD_IP)", "127.0.0.1").Replace(a)
	}
	// Two agents on one host: each its own endpoint port.
	args = setArg(t, args, "--kubernetes-listen", "127.0.0.1:0")
	args = setArg(t, args, "--admission", admFile)
	args = setArg(t, args, "--root", root)
	args = setArg(t, args, "--socket", socket)
	args = setArg(t, args, "--image", env.AgentImage)
	// In a pod the cgroup parent is placed beside the kubelet's
	// kubepods; a process on the host is under none: a parent of the
	// test's own at the root, which airlockd makes and removes.
	args = setArg(t, args, "--cgroup-parent", "/"+filepath.Base(root)+"-cgroups")
	return append(args, "--kubeconfig", kubeconfig, "--bin-dir", env.BinDir, "--runtime", env.Runtime,
		"--session-pool", pool, "--stop-containerd", "--log-level", "info",
		"--node-labels", "airlock.test/node="+node)
}

// writeAdmission writes the ConfigMap's admission policy to a file for
// --admission.
func writeAdmission(t *testing.T, admission string) string {
	t.Helper()
	admFile := filepath.Join(t.TempDir(), "admission.hcl")
	if err := os.WriteFile(admFile, []byte(admission), 0o644); err != nil {
		t.Fatal(err)
	}
	return admFile
}

// startAgent runs airlockd-kube (agentproc.Start) with the DaemonSet's
// args (agentArgs). It first checks the same arguments with
// --check-config. Whatever the test leaves is cleaned up after it.
func startAgent(t *testing.T, env daemontest.Env, dsArgs []string, admission, kubeconfig, node, pool string) *agentproc.Proc {
	t.Helper()
	admFile := writeAdmission(t, admission)
	return agentproc.Start(t, agentproc.Options{Node: node, BinDir: env.BinDir, CheckConfig: true, Args: func(root, socket string) []string {
		return agentArgs(t, env, dsArgs, admFile, kubeconfig, node, pool, root, socket)
	}})
}

// checkAgentArgs fails the test unless airlockd-kube --check-config takes
// a DaemonSet's arguments for node (agentArgs, with root for its root).
func checkAgentArgs(t *testing.T, env daemontest.Env, dsArgs []string, admission, kubeconfig, node, pool, root string) {
	t.Helper()
	args := agentArgs(t, env, dsArgs, writeAdmission(t, admission), kubeconfig, node, pool, root, filepath.Join(root, "airlock.sock"))
	check := exec.Command(filepath.Join(env.BinDir, "airlockd-kube"), append(args, "--check-config")...)
	if out, err := check.CombinedOutput(); err != nil {
		t.Fatalf("airlockd-kube %s --check-config: %v\n%s", strings.Join(args, " "), err, out)
	}
}
