//go:build linux

package deploytest

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/airlock-sandbox/airlock/internal/hostcgroup"
	"github.com/airlock-sandbox/airlock/internal/ocipack"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// A kubeNode is a Kubernetes node of the test's own: a kubelet (make kube
// builds it, at the pinned version, beside kube-apiserver) and the
// containerd it runs pods with through containerd's CRI plugin, both in a
// mount and a network namespace the test makes and nothing else shares:
//
//   - the mount namespace has the test's own directories over /var/lib,
//     /run, /var/log and /srv, so the DaemonSet's host paths
//     (/var/lib/airlock, /run/netns, /run/airlock, /srv/airlock/...), the
//     kubelet's /var/log/pods and /var/log/containers, the CNI's
//     /var/lib/cni and containerd's pod network namespaces are the test's,
//     never the machine's; its mounts are shared among themselves (as on a
//     systemd host) and private from the machine's. The kernel tunables the
//     kubelet checks at start (protectKernelDefaults: it refuses to start
//     rather than change them) read there from files of the test's with the
//     values the kubelet wants, over their /proc/sys entries: the machine's
//     own are never written.
//   - the network namespace has only loopback, with the node's address
//     (nodeIP) and the kubernetes Service's cluster IP (kubetest.ServiceIP)
//     besides 127.0.0.1, and the pod bridge the CNI plugins (Debian's
//     containernetworking-plugins: bridge, host-local, loopback) make: no
//     route leaves it. The kubelet, and pods through the bridge, reach the
//     API server at the Service's address, where the test itself listens
//     and carries each connection to the API server's loopback port: what
//     kube-proxy does on a real node.
//   - the kubelet's cgroups live under a cgroup root of the test's in every
//     hierarchy; the kubelet's and containerd's directories under the
//     test's.
//
// Close takes all of it down and checks that nothing is left.
type kubeNode struct {
	t    *testing.T
	name string
	dir  string
	// holder is the process that holds the namespaces (unshare, then
	// sleep); mntNS and netNS are its namespaces' identities
	// ("mnt:[4026532...]").
	holder       *exec.Cmd
	holderExited chan error
	mntNS, netNS string
	// netnsBefore are the machine's named network namespaces before.
	netnsBefore []string
	// cgroupName is the kubelet's cgroup root, without its slash.
	cgroupName string
	// socket is containerd's.
	socket     string
	containerd *nodeProc
	kubelet    *nodeProc
	proxy      *apiProxy
}

const (
	// nodeIP is the node's address in its network namespace.
	nodeIP = "10.99.0.1"
	// podSubnet is the pods' bridge network (host-local), in the same
	// namespace.
	podSubnet = "10.98.0.0/24"
	// pauseImage is the pod sandboxes' image: airlock-init --pause, which
	// sleeps until SIGTERM, packed by the test (containerd's default
	// comes from a registry).
	pauseImage = "airlock.test/pause:1"
	// cniDir holds the CNI plugins Debian's containernetworking-plugins
	// installs.
	cniDir = "/usr/lib/cni"
)

// kernelTunables are the values the kubelet checks at start
// (pkg/kubelet/cm: setupKernelTunables).
var kernelTunables = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
}

// nodeMounts are the machine's directories the node sees as its own,
// each a directory of the test's.
var nodeMounts = []string{"/var/lib", "/run", "/var/log", "/srv"}

// nodeProc is a process run in the node's namespaces and its log.
type nodeProc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

// startKubeNode makes the node's namespaces and starts its containerd,
// with the pause image and the images in archives imported into the CRI's
// namespace (k8s.io), then its kubelet, registering as name with token
// through the control plane cp. It does not wait for the Node to be Ready.
func startKubeNode(t *testing.T, cp *kubetest.ControlPlane, binDir, kubeletBin, name, token string, archives []string) *kubeNode {
	t.Helper()
	for _, p := range []string{"bridge", "host-local", "loopback"} {
		if _, err := os.Stat(filepath.Join(cniDir, p)); err != nil {
			t.Fatalf("CNI plugin %s: %v (make deps installs Debian's containernetworking-plugins)", p, err)
		}
	}
	for _, tool := range []string{"unshare", "nsenter", "ip", "mount"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("%s: %v", tool, err)
		}
	}
	// Short: containerd's socket path must fit a sockaddr_un.
	dir, err := os.MkdirTemp("", "kubenode-")
	if err != nil {
		t.Fatal(err)
	}
	suffix := make([]byte, 4)
	rand.Read(suffix)
	n := &kubeNode{t: t, name: name, dir: dir, cgroupName: "airlock-kubelet-" + hex.EncodeToString(suffix),
		socket: filepath.Join(dir, "containerd.sock"), netnsBefore: netnsList()}
	t.Cleanup(n.close)

	n.startHolder()
	n.makeCgroupRoot()
	n.writeContainerdConfig(binDir)
	n.containerd = n.run("containerd", filepath.Join(binDir, "containerd"), []string{"PATH=" + binDir + ":/usr/sbin:/usr/bin:/sbin:/bin"},
		"--config", filepath.Join(dir, "containerd.toml"))
	n.importImages(binDir, archives)

	// The kubelet and the pods reach the API server at the kubernetes
	// Service's address, in the node's network namespace.
	n.proxy, err = listenIn(n.holderNS("net"), net.JoinHostPort(kubetest.ServiceIP.String(), "443"), strings.TrimPrefix(cp.APIServerURL, "https://"))
	if err != nil {
		t.Fatalf("the API server's address in the node's network: %v", err)
	}
	n.writeKubeletConfig(cp, token)
	n.kubelet = n.run("kubelet", kubeletBin, nil,
		"--config", filepath.Join(dir, "kubelet.yaml"),
		"--kubeconfig", filepath.Join(dir, "kubelet.kubeconfig"),
		"--root-dir", filepath.Join(dir, "kubelet"),
		"--hostname-override", name,
		"--node-ip", nodeIP,
		"--v", "2")
	return n
}

// startHolder starts the process that makes and holds the node's
// namespaces, and waits until it has set them up.
func (n *kubeNode) startHolder() {
	t := n.t
	var script strings.Builder
	script.WriteString("set -eu\n")
	// Shared among the namespace's mounts (Bidirectional needs a shared
	// source), none of them the machine's: unshare made them private.
	script.WriteString("mount --make-rshared /\n")
	for _, m := range nodeMounts {
		src := filepath.Join(n.dir, "host", m)
		if err := os.MkdirAll(src, 0o755); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&script, "mount --bind %s %s && mount --make-private %s && mount --make-shared %s\n", src, m, m, m)
	}
	if err := os.MkdirAll(filepath.Join(n.dir, "sysctl"), 0o755); err != nil {
		t.Fatal(err)
	}
	for k, v := range kernelTunables {
		f := filepath.Join(n.dir, "sysctl", strings.ReplaceAll(k, "/", "."))
		if err := os.WriteFile(f, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&script, "mount --bind %s /proc/sys/%s\n", f, k)
	}
	fmt.Fprintf(&script, `ip link set lo up
ip addr add %s/32 dev lo
ip addr add %s/32 dev lo
touch %s
exec sleep infinity
`, nodeIP, kubetest.ServiceIP, filepath.Join(n.dir, "ready"))
	holderLog := filepath.Join(n.dir, "holder.log")
	logf, err := os.Create(holderLog)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("unshare", "--mount", "--net", "--propagation", "private", "--", "/bin/sh", "-c", script.String())
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n.holder = cmd
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	n.holderExited = exited
	deadline := time.After(30 * time.Second)
	for {
		if _, err := os.Stat(filepath.Join(n.dir, "ready")); err == nil {
			break
		}
		select {
		case err := <-exited:
			b, _ := os.ReadFile(holderLog)
			n.holder = nil
			t.Fatalf("the node's namespaces: %v\n%s", err, b)
		case <-deadline:
			t.Fatal("the node's namespaces not set up within 30 s")
		case <-time.After(20 * time.Millisecond):
		}
	}
	n.mntNS = n.nsID("mnt")
	n.netNS = n.nsID("net")
}

// holderNS is the path of the holder's namespace of kind.
func (n *kubeNode) holderNS(kind string) string {
	return fmt.Sprintf("/proc/%d/ns/%s", n.holder.Process.Pid, kind)
}

func (n *kubeNode) nsID(kind string) string {
	id, err := os.Readlink(n.holderNS(kind))
	if err != nil {
		n.t.Fatal(err)
	}
	return id
}

// makeCgroupRoot makes the kubelet's cgroup root in every hierarchy (the
// kubelet checks that it exists).
func (n *kubeNode) makeCgroupRoot() {
	for _, h := range hostcgroup.Hierarchies("") {
		p := filepath.Join(h, n.cgroupName)
		if err := os.Mkdir(p, 0o755); err != nil {
			n.t.Fatal(err)
		}
		// A v1 cpuset cgroup takes no task before its cpus and mems are
		// set.
		for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
			if b, err := os.ReadFile(filepath.Join(h, f)); err == nil && filepath.Base(h) == "cpuset" {
				if err := os.WriteFile(filepath.Join(p, f), b, 0o644); err != nil {
					n.t.Fatal(err)
				}
			}
		}
	}
}

func (n *kubeNode) writeContainerdConfig(binDir string) {
	t := n.t
	cni := filepath.Join(n.dir, "cni")
	if err := os.MkdirAll(cni, 0o755); err != nil {
		t.Fatal(err)
	}
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": "kubenode",
  "plugins": [{
    "type": "bridge",
    "bridge": "cni0",
    "isGateway": true,
    "ipMasq": false,
    "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}
  }]
}
`, podSubnet)
	if err := os.WriteFile(filepath.Join(cni, "10-kubenode.conflist"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	d := n.dir
	toml := fmt.Sprintf(`version = 3
root = %q
state = %q
disabled_plugins = ["io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing", "io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.blockfile", "io.containerd.snapshotter.v1.erofs"]

[grpc]
  address = %q

[ttrpc]
  address = %q

[debug]
  level = "info"

[plugins]
  [plugins.'io.containerd.internal.v1.opt']
    path = %q
  [plugins.'io.containerd.cri.v1.images']
    snapshotter = "overlayfs"
    [plugins.'io.containerd.cri.v1.images'.pinned_images]
      sandbox = %q
  [plugins.'io.containerd.cri.v1.runtime']
    cdi_spec_dirs = [%q]
    # Containers' oom_score_adj no lower than containerd's own: a
    # machine without CAP_SYS_RESOURCE in its bounding set (a sandboxed
    # CI's) refuses to lower it, and runc fails the container.
    restrict_oom_score_adj = true
    # The pods' network namespaces under containerd's state, not in
    # /run/netns: that is the DaemonSet's (airlockd's sessions').
    netns_mounts_under_state_dir = true
    [plugins.'io.containerd.cri.v1.runtime'.containerd]
      default_runtime_name = "runc"
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
        runtime_type = "io.containerd.runc.v2"
        [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
          BinaryName = %q
          SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%q]
      conf_dir = %q
      max_conf_num = 1
`, filepath.Join(d, "containerd", "root"), filepath.Join(d, "containerd", "state"), n.socket, n.socket+".ttrpc",
		filepath.Join(d, "containerd", "opt"), pauseImage, filepath.Join(d, "cdi"), filepath.Join(binDir, "runc"), cniDir, cni)
	if err := os.WriteFile(filepath.Join(d, "containerd.toml"), []byte(toml), 0o644); err != nil {
		t.Fatal(err)
	}
}

// run starts bin in the node's namespaces, its output in DIR/NAME.log.
func (n *kubeNode) run(name, bin string, env []string, args ...string) *nodeProc {
	t := n.t
	p := &nodeProc{name: name, log: filepath.Join(n.dir, name+".log"), done: make(chan struct{})}
	logf, err := os.Create(p.log)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	cmd := exec.Command("nsenter", append([]string{"--mount=" + n.holderNS("mnt"), "--net=" + n.holderNS("net"), "--", bin}, args...)...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p.cmd = cmd
	go func() {
		cmd.Wait()
		close(p.done)
	}()
	return p
}

// tail is the end of p's log.
func (p *nodeProc) tail(max int) string {
	b, err := os.ReadFile(p.log)
	if err != nil {
		return err.Error()
	}
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

func (p *nodeProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// stop sends SIGTERM, then SIGKILL after grace, and waits.
func (p *nodeProc) stop(grace time.Duration) error {
	if p == nil || p.exited() {
		return nil
	}
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	p.cmd.Process.Kill()
	<-p.done
	return fmt.Errorf("%s (pid %d) did not stop within %s of SIGTERM; killed", p.name, p.cmd.Process.Pid, grace)
}

// client connects to the node's containerd, in the CRI's namespace.
func (n *kubeNode) client(ctx context.Context) (*containerd.Client, context.Context, error) {
	c, err := containerd.New(n.socket, containerd.WithTimeout(10*time.Second))
	if err != nil {
		return nil, nil, err
	}
	return c, namespaces.WithNamespace(ctx, "k8s.io"), nil
}

// importImages waits for containerd and imports the pause image and the
// archives into the CRI's namespace, unpacked, as `ctr -n k8s.io images
// import` would: the kubelet finds them present (imagePullPolicy
// IfNotPresent) and pulls nothing.
func (n *kubeNode) importImages(binDir string, archives []string) {
	t := n.t
	var c *containerd.Client
	var ctx context.Context
	kubetest.Eventually(t, time.Minute, "the node's containerd serving", func() (bool, string) {
		if n.containerd.exited() {
			t.Fatalf("the node's containerd exited:\n%s", n.containerd.tail(4<<10))
		}
		var err error
		c, ctx, err = n.client(t.Context())
		if err == nil {
			if _, err = c.Version(ctx); err != nil {
				c.Close()
			}
		}
		return err == nil, fmt.Sprint(err)
	})
	defer c.Close()
	pause, err := pauseArchive(filepath.Join(binDir, "airlock-init"), filepath.Join(n.dir, "pause.tar"))
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range append([]string{pause}, archives...) {
		f, err := os.Open(a)
		if err != nil {
			t.Fatal(err)
		}
		imgs, err := ocipack.Import(ctx, c, f, ocipack.ImportOptions{})
		f.Close()
		if err != nil {
			t.Fatalf("import %s into the node's containerd: %v", a, err)
		}
		for _, img := range imgs {
			t.Logf("node %s: image %s imported", n.name, img.Name)
		}
	}
}

// pauseArchive packs airlock-init as the pod sandboxes' image, whose
// process is airlock-init --pause, into out.
func pauseArchive(initBin, out string) (string, error) {
	b, err := os.ReadFile(initBin)
	if err != nil {
		return "", err
	}
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	if err := tw.WriteHeader(&tar.Header{Name: "pause", Mode: 0o755, Size: int64(len(b)), Typeflag: tar.TypeReg}); err != nil {
		return "", err
	}
	tw.Write(b)
	if err := tw.Close(); err != nil {
		return "", err
	}
	f, err := os.Create(out)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if _, err := ocipack.Pack(f, &layer, ocipack.Config{Ref: pauseImage, Entrypoint: []string{"/pause", "--pause"}}); err != nil {
		return "", err
	}
	return out, f.Close()
}

func (n *kubeNode) writeKubeletConfig(cp *kubetest.ControlPlane, token string) {
	t := n.t
	d := n.dir
	kc := clientcmdapi.NewConfig()
	kc.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: "https://" + net.JoinHostPort(kubetest.ServiceIP.String(), "443"), CertificateAuthorityData: cp.Config.CAData}
	kc.AuthInfos["node"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["node"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "node"}
	kc.CurrentContext = "node"
	if err := clientcmd.WriteToFile(*kc, filepath.Join(d, "kubelet.kubeconfig")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "resolv.conf"), []byte("nameserver 127.0.0.1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
authentication:
  anonymous:
    enabled: false
  webhook:
    enabled: false
authorization:
  mode: AlwaysAllow
cgroupDriver: cgroupfs
cgroupRoot: /%s
cgroupsPerQOS: true
containerRuntimeEndpoint: unix://%s
protectKernelDefaults: true
failCgroupV1: false
resolvConf: %s
volumePluginDir: %s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 1Mi
  nodefs.available: 1%%
  nodefs.inodesFree: 1%%
  imagefs.available: 1%%
syncFrequency: 10s
`, nodeIP, n.cgroupName, n.socket, filepath.Join(d, "resolv.conf"), filepath.Join(d, "volume-plugins"))
	if err := os.WriteFile(filepath.Join(d, "kubelet.yaml"), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
}

// logTails logs the end of the kubelet's and containerd's logs.
func (n *kubeNode) logTails() {
	for _, p := range []*nodeProc{n.kubelet, n.containerd} {
		if p != nil {
			n.t.Logf("node %s: %s's log ends:\n%s", n.name, p.name, p.tail(16<<10))
		}
	}
}

// procs returns the processes of the node: in its mount or network
// namespace, or in a cgroup under its cgroup root (the pods' containers
// and whatever they started), but the holder.
func (n *kubeNode) procs() []string {
	var out []string
	ents, _ := os.ReadDir("/proc")
	holder := -1
	if n.holder != nil {
		holder = n.holder.Process.Pid
	}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == holder || pid == os.Getpid() {
			continue
		}
		mine := false
		for kind, id := range map[string]string{"mnt": n.mntNS, "net": n.netNS} {
			if got, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, kind)); err == nil && id != "" && got == id {
				mine = true
			}
		}
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid)); err == nil && inCgroup(string(b), n.cgroupName) {
			mine = true
		}
		if mine {
			comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
			out = append(out, fmt.Sprintf("%d %s", pid, strings.TrimSpace(string(comm))))
		}
	}
	return out
}

// inCgroup reports whether a /proc/PID/cgroup's lines name a cgroup
// under /name.
func inCgroup(procCgroup, name string) bool {
	for _, l := range strings.Split(procCgroup, "\n") {
		parts := strings.SplitN(l, ":", 3)
		if len(parts) == 3 && (parts[2] == "/"+name || strings.HasPrefix(parts[2], "/"+name+"/")) {
			return true
		}
	}
	return false
}

// mountInfo is one line of a /proc/PID/mountinfo: the mount point and
// its shared peer group ("" when the mount is not shared).
type mountInfo struct {
	point, shared string
}

// mountInfos reads /proc/PID/mountinfo.
func mountInfos(pid int) []mountInfo {
	f, err := os.Open(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []mountInfo
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 7 {
			continue
		}
		m := mountInfo{point: fields[4]}
		// Optional fields up to "-": shared:N, master:N, ...
		for _, f := range fields[6:] {
			if f == "-" {
				break
			}
			if g, ok := strings.CutPrefix(f, "shared:"); ok {
				m.shared = g
			}
		}
		out = append(out, m)
	}
	return out
}

// mountsUnder returns the mount points under prefix in the node's mount
// namespace.
func (n *kubeNode) mountsUnder(prefix string) []string {
	var out []string
	for _, m := range mountInfos(n.holder.Process.Pid) {
		if strings.HasPrefix(m.point, prefix) {
			out = append(out, m.point)
		}
	}
	return out
}

// peerGroup returns the shared peer group of the mount that holds path in
// pid's mount namespace, "" when that mount is not shared: the last one
// mounted at path or above it (a later mount above path hides the ones
// below).
func peerGroup(pid int, path string) (point, group string) {
	for _, m := range mountInfos(pid) {
		if m.point == path || m.point == "/" || strings.HasPrefix(path, m.point+"/") {
			point, group = m.point, m.shared
		}
	}
	return point, group
}

// close takes the node down: the kubelet, every container and task in its
// containerd (pods' sandboxes and containers; their shims end with them),
// containerd, whatever still runs in the node (killed, and an error: the
// pods' own shutdown should have ended it), the cgroups, the namespaces'
// holder (the namespaces, their mounts and the pods' network namespaces
// go with it); then it checks that nothing is left: no process, cgroup or
// mount of the node, no network namespace the machine did not have.
func (n *kubeNode) close() {
	t := n.t
	if t.Failed() {
		n.logTails()
	}
	if err := n.kubelet.stop(15 * time.Second); err != nil {
		t.Error(err)
	}
	if n.containerd != nil && !n.containerd.exited() {
		if err := n.removeContainers(); err != nil {
			t.Errorf("node %s: removing its containers: %v", n.name, err)
		}
	}
	if err := n.containerd.stop(15 * time.Second); err != nil {
		t.Error(err)
	}
	if left := n.procs(); len(left) > 0 {
		t.Errorf("node %s: still running after the kubelet's and containerd's stop: %v (killed)", n.name, left)
		n.killProcs()
	}
	n.removeCgroups()
	if n.proxy != nil {
		n.proxy.Close()
	}
	if n.holder != nil {
		n.holder.Process.Kill()
		<-n.holderExited
	}
	// What must not be left.
	if left := n.procs(); len(left) > 0 {
		t.Errorf("node %s: processes left: %v", n.name, left)
	}
	for _, h := range hostcgroup.Hierarchies("") {
		if _, err := os.Stat(filepath.Join(h, n.cgroupName)); err == nil {
			t.Errorf("node %s: cgroup %s left", n.name, filepath.Join(h, n.cgroupName))
		}
	}
	if b, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(b), n.dir) {
		t.Errorf("node %s: mounts under %s left on the machine", n.name, n.dir)
	}
	// Other tests make and remove named network namespaces meanwhile:
	// the pods' are containerd's, named cni-....
	for _, ns := range netnsList() {
		if strings.HasPrefix(ns, "cni-") && !slices.Contains(n.netnsBefore, ns) {
			t.Errorf("node %s: a pod's network namespace %s left in the machine's /run/netns", n.name, ns)
		}
	}
	if err := os.RemoveAll(n.dir); err != nil {
		t.Errorf("node %s: %v", n.name, err)
	}
}

// removeContainers kills and deletes every task and container of the
// node's containerd, in every namespace.
func (n *kubeNode) removeContainers() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := containerd.New(n.socket, containerd.WithTimeout(10*time.Second))
	if err != nil {
		return err
	}
	defer c.Close()
	nss, err := c.NamespaceService().List(ctx)
	if err != nil {
		return err
	}
	var errs []error
	for _, ns := range nss {
		nctx := namespaces.WithNamespace(ctx, ns)
		ctrs, err := c.Containers(nctx)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, ctr := range ctrs {
			if task, err := ctr.Task(nctx, nil); err == nil {
				if ch, err := task.Wait(nctx); err == nil {
					if err := task.Kill(nctx, syscall.SIGKILL); err == nil {
						select {
						case <-ch:
						case <-time.After(10 * time.Second):
						}
					}
				}
				if _, err := task.Delete(nctx, containerd.WithProcessKill); err != nil {
					errs = append(errs, fmt.Errorf("task %s: %w", ctr.ID(), err))
				}
			}
			if err := ctr.Delete(nctx, containerd.WithSnapshotCleanup); err != nil {
				errs = append(errs, fmt.Errorf("container %s: %w", ctr.ID(), err))
			}
		}
	}
	return errors.Join(errs...)
}

// killProcs kills what procs finds, a few times over (a process may start
// another while it is killed), and waits for them to go.
func (n *kubeNode) killProcs() {
	for range 50 {
		left := n.procs()
		if len(left) == 0 {
			return
		}
		for _, p := range left {
			pid, _ := strconv.Atoi(strings.Fields(p)[0])
			syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// removeCgroups removes the cgroup root and everything under it, deepest
// first, in every hierarchy.
func (n *kubeNode) removeCgroups() {
	for _, h := range hostcgroup.Hierarchies("") {
		root := filepath.Join(h, n.cgroupName)
		var dirs []string
		filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			var err error
			// A cgroup whose last task just exited may be busy a moment.
			for range 50 {
				if err = os.Remove(dirs[i]); err == nil || errors.Is(err, os.ErrNotExist) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			if err != nil && !errors.Is(err, os.ErrNotExist) {
				n.t.Errorf("node %s: cgroup %s: %v", n.name, dirs[i], err)
			}
		}
	}
}

// netnsList is `ip netns list`'s names: the machine's named network
// namespaces.
func netnsList() []string {
	ents, _ := os.ReadDir("/run/netns")
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}

// apiProxy accepts connections on an address in another network
// namespace and carries each to the API server.
type apiProxy struct {
	l      net.Listener
	to     string
	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
	wg     sync.WaitGroup
}

// listenIn listens on addr in the network namespace at nsPath and carries
// every connection to to (in the test's own network namespace).
func listenIn(nsPath, addr, to string) (*apiProxy, error) {
	l, err := listenInNS(nsPath, addr)
	if err != nil {
		return nil, err
	}
	p := &apiProxy{l: l, to: to, conns: map[net.Conn]bool{}}
	p.wg.Go(p.serve)
	return p, nil
}

// listenInNS opens a listening socket in another network namespace: from
// a thread switched into it for the socket's creation, then back.
func listenInNS(nsPath, addr string) (net.Listener, error) {
	runtime.LockOSThread()
	self, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer self.Close()
	target, err := os.Open(nsPath)
	if err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		return nil, err
	}
	l, lerr := net.Listen("tcp", addr)
	if err := unix.Setns(int(self.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked, so it ends with the goroutine, never
		// to run another in the wrong namespace.
		if l != nil {
			l.Close()
		}
		return nil, fmt.Errorf("back to the test's network namespace: %w", err)
	}
	runtime.UnlockOSThread()
	return l, lerr
}

func (p *apiProxy) serve() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.carry(c) })
	}
}

func (p *apiProxy) track(c net.Conn, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if on && p.closed {
		c.Close()
	} else if on {
		p.conns[c] = true
	} else {
		delete(p.conns, c)
	}
}

func (p *apiProxy) carry(c net.Conn) {
	defer c.Close()
	up, err := net.DialTimeout("tcp", p.to, 10*time.Second)
	if err != nil {
		return
	}
	defer up.Close()
	p.track(c, true)
	p.track(up, true)
	defer p.track(c, false)
	defer p.track(up, false)
	done := make(chan struct{}, 2)
	go func() { io.Copy(up, c); done <- struct{}{} }()
	go func() { io.Copy(c, up); done <- struct{}{} }()
	<-done
}

// Close stops accepting, ends every connection and waits.
func (p *apiProxy) Close() {
	p.l.Close()
	p.mu.Lock()
	p.closed = true
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}
