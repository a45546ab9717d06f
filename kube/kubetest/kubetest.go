// Package kubetest starts a real Kubernetes control plane for tests: an etcd
// and a kube-apiserver, the binaries `make kube` builds from the Go module
// proxy at the versions pinned in hack/versions.env (hack/build-kube.sh).
// No kubelet, scheduler or controller manager runs: objects are stored,
// validated and watched, and nothing acts on them but the code under test.
//
// Both listen on loopback only, on free ports, with their state in one
// directory: etcd with a fresh data dir, the apiserver with a self-signed
// serving certificate, a service-account key and a static token file made
// here. The token's user is in system:masters, so under RBAC it may do
// everything; Options.Users adds more users to the token file (a kubelet's
// node identity), and Options.NodeAuthorization the Node authorizer and
// the NodeRestriction admission plugin kubelets run under.
//
// The apiserver is v1.34 (hack/versions.env); the client libraries in
// go.mod are k8s.io/* v0.37, the release containerd v2.4.2 already brings
// into the build. The tests use stable APIs only (namespaces, CRDs, custom
// resources), which both speak alike.
//
// Start is the usual entry: it fails the test, never skips it, when the
// binaries are missing (outside -short, as testutil.RequiresRoot does), and
// stops both processes and removes their state when the test ends.
// StartWithCRDs also installs airlock's CRDs; Eventually waits for what
// the code under test writes. Package kubetest/agentproc runs
// airlockd-kube node agents against it.
package kubetest

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// Binaries are the programs the control plane runs, looked up in the
// binary directory.
var Binaries = []string{"etcd", "kube-apiserver"}

// AdminUser is the token file's user; it is in system:masters.
const AdminUser = "kubetest-admin"

// ErrPortTaken is New's error when etcd or the apiserver could not bind a
// port that was free when it was drawn; Start tries again.
var ErrPortTaken = errors.New("a port drawn free was taken")

// readyTimeout bounds the wait for etcd's /health and the apiserver's
// /readyz; the apiserver is typically ready in about 2 s, much later on a
// loaded machine.
const readyTimeout = 2 * time.Minute

// ControlPlane is a running etcd and kube-apiserver.
type ControlPlane struct {
	// Config is an admin client configuration for the apiserver.
	Config *rest.Config
	// Dir holds everything the control plane made: data, keys, logs.
	Dir string
	// EtcdURL is etcd's client URL, APIServerURL the apiserver's.
	EtcdURL, APIServerURL string
	// Tokens are the bearer tokens of Options.Users, by user name.
	Tokens map[string]string
	// AuditLog is the apiserver's audit log: one JSON event per request
	// at Metadata level (who, user agent, verb, object, response code),
	// which lets a test count what each client cost the apiserver
	// (AuditEvents).
	AuditLog string

	procs []*proc // in start order; stopped in reverse
}

// proc is one child process and what it logged.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{} // closed when Wait returned
	err  error         // Wait's result, set before done closes
}

// BinDir returns the directory holding etcd and kube-apiserver:
// AIRLOCK_BIN_DIR, as make test sets it, or else _output/bin at the root of
// the module, where make kube puts them. The error says to run make kube
// when either is missing.
func BinDir() (string, error) {
	dir := os.Getenv("AIRLOCK_BIN_DIR")
	if dir == "" {
		root, err := ModuleRoot()
		if err != nil {
			return "", fmt.Errorf("%w and no AIRLOCK_BIN_DIR (run `make kube`, or set AIRLOCK_BIN_DIR)", err)
		}
		dir = filepath.Join(root, "_output", "bin")
	}
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for _, b := range Binaries {
		if _, err := os.Stat(filepath.Join(dir, b)); err != nil {
			return "", fmt.Errorf("%s missing from the binary directory: %w (run `make kube`, which builds etcd and kube-apiserver into _output/bin, or set AIRLOCK_BIN_DIR)", b, err)
		}
	}
	return dir, nil
}

// ModuleRoot returns the directory of the go.mod above the working
// directory: the root of airlock's tree when a test runs.
func ModuleRoot() (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no go.mod above %s", wd)
		}
	}
}

// Options are what a control plane has beyond the admin user and RBAC.
type Options struct {
	// Users are more users of the token file, each with a token of its
	// own (ControlPlane.Tokens).
	Users []User
	// NodeAuthorization authorizes with the Node authorizer before RBAC
	// and admits with the NodeRestriction plugin, as kubeadm's clusters
	// do: what a kubelet's node identity (user system:node:NAME in group
	// system:nodes) may read and write is what it may on a real cluster.
	NodeAuthorization bool
}

// User is a user of the token file.
type User struct {
	Name   string
	Groups []string
}

// ServiceIP is the kubernetes Service's cluster IP, the first address of
// the service range: the apiserver's serving certificate names it, for
// clients in pods, whose in-cluster configuration addresses the apiserver
// there (a test must carry that address to the apiserver itself: no
// kube-proxy runs).
var ServiceIP = net.IPv4(10, 0, 0, 1)

// Start starts a control plane for the test and stops it, removing its
// state, when the test ends. Under -short it skips the test; otherwise it
// fails it when the binaries are missing or the control plane does not
// become ready, with the processes' logs.
func Start(tb testing.TB) *ControlPlane {
	tb.Helper()
	return StartWith(tb, Options{})
}

// StartWith is Start with opts.
func StartWith(tb testing.TB, opts Options) *ControlPlane {
	tb.Helper()
	if testing.Short() {
		tb.Skip("control-plane test skipped in -short mode")
	}
	bin, err := BinDir()
	if err != nil {
		tb.Fatal(err)
	}
	var cp *ControlPlane
	began := time.Now()
	// A port drawn free may be taken before etcd or the apiserver binds
	// it; a few fresh tries make that race harmless.
	for attempt := 1; ; attempt++ {
		// Under /tmp, not t.TempDir(): the paths stay short, and Close
		// removes the directory after both processes stopped.
		dir, err := os.MkdirTemp("", "kubetest-")
		if err != nil {
			tb.Fatal(err)
		}
		cp, err = NewWith(tb.Context(), bin, dir, opts)
		if err == nil {
			break
		}
		os.RemoveAll(dir)
		if !errors.Is(err, ErrPortTaken) || attempt == 3 {
			tb.Fatal(err)
		}
		tb.Logf("control plane, try %d: %v", attempt, err)
	}
	// Said in the test's log: most of a short Kubernetes test's time is
	// the control plane's start.
	tb.Logf("control plane (etcd, kube-apiserver) ready in %s", time.Since(began).Round(time.Millisecond))
	tb.Cleanup(func() {
		began := time.Now()
		if err := cp.Close(); err != nil {
			tb.Error(err)
		}
		tb.Logf("control plane stopped in %s", time.Since(began).Round(time.Millisecond))
	})
	return cp
}

// New starts etcd and kube-apiserver from binDir, with their state under
// dir (which must exist), and waits until the apiserver's /readyz answers
// ok. On error it stops what it started; the caller removes dir.
func New(ctx context.Context, binDir, dir string) (_ *ControlPlane, retErr error) {
	return NewWith(ctx, binDir, dir, Options{})
}

// NewWith is New with opts.
func NewWith(ctx context.Context, binDir, dir string, opts Options) (_ *ControlPlane, retErr error) {
	cp := &ControlPlane{Dir: dir, Tokens: map[string]string{}}
	defer func() {
		if retErr != nil {
			cp.stop()
		}
	}()
	ports, err := drawPorts(3)
	if err != nil {
		return nil, err
	}
	etcdPort, peerPort, apiPort := ports[0], ports[1], ports[2]

	cp.EtcdURL = "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	peerURL := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	etcd, err := cp.start(filepath.Join(binDir, "etcd"),
		"--name=kubetest",
		"--data-dir="+filepath.Join(dir, "etcd"),
		"--listen-client-urls="+cp.EtcdURL,
		"--advertise-client-urls="+cp.EtcdURL,
		"--listen-peer-urls="+peerURL,
		"--initial-advertise-peer-urls="+peerURL,
		"--initial-cluster=kubetest="+peerURL,
		// A test's data need not survive a crash of the machine.
		"--unsafe-no-fsync",
		"--log-level=warn",
	)
	if err != nil {
		return nil, err
	}
	// A timeout on each request: a port taken by something that never
	// answers must not hold the wait past etcd's exit.
	etcdClient := &http.Client{Timeout: 2 * time.Second}
	defer etcdClient.CloseIdleConnections()
	if err := waitReady(ctx, etcd, etcdClient, cp.EtcdURL+"/health", func(b []byte) bool {
		return bytes.Contains(b, []byte(`"health":"true"`))
	}); err != nil {
		return nil, err
	}

	certPEM, keyPEM, err := servingCert()
	if err != nil {
		return nil, err
	}
	saKey, saPub, err := keyPairPEM()
	if err != nil {
		return nil, err
	}
	token, err := randomToken()
	if err != nil {
		return nil, err
	}
	// token,user,uid,"group,..."
	tokens := fmt.Appendf(nil, "%s,%s,%s,\"system:masters\"\n", token, AdminUser, AdminUser)
	for _, u := range opts.Users {
		tok, err := randomToken()
		if err != nil {
			return nil, err
		}
		cp.Tokens[u.Name] = tok
		tokens = fmt.Appendf(tokens, "%s,%s,%s,\"%s\"\n", tok, u.Name, u.Name, strings.Join(u.Groups, ","))
	}
	pki := filepath.Join(dir, "pki")
	if err := os.Mkdir(pki, 0o700); err != nil {
		return nil, err
	}
	for name, b := range map[string][]byte{
		"serving.crt": certPEM,
		"serving.key": keyPEM,
		"sa.key":      saKey,
		"sa.pub":      saPub,
		// token,user,uid,"group,..."
		"tokens.csv":        tokens,
		"audit-policy.yaml": []byte(auditPolicy),
	} {
		if err := os.WriteFile(filepath.Join(pki, name), b, 0o600); err != nil {
			return nil, err
		}
	}

	cp.APIServerURL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	cp.AuditLog = filepath.Join(dir, "audit.log")
	authz := []string{"--authorization-mode=RBAC"}
	if opts.NodeAuthorization {
		authz = []string{"--authorization-mode=Node,RBAC", "--enable-admission-plugins=NodeRestriction"}
	}
	api, err := cp.start(filepath.Join(binDir, "kube-apiserver"), append(authz,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(apiPort),
		"--etcd-servers="+cp.EtcdURL,
		"--tls-cert-file="+filepath.Join(pki, "serving.crt"),
		"--tls-private-key-file="+filepath.Join(pki, "serving.key"),
		"--token-auth-file="+filepath.Join(pki, "tokens.csv"),
		// As clusters that run node daemons are (kubeadm sets it):
		// deploy/kubernetes's DaemonSet is privileged.
		"--allow-privileged=true",
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file="+filepath.Join(pki, "sa.pub"),
		"--service-account-signing-key-file="+filepath.Join(pki, "sa.key"),
		"--service-cluster-ip-range=10.0.0.0/24",
		// The kubernetes service's endpoints would name a loopback
		// address, which Endpoints validation refuses.
		"--endpoint-reconciler-type=none",
		"--profiling=false",
		"--audit-policy-file="+filepath.Join(pki, "audit-policy.yaml"),
		"--audit-log-path="+cp.AuditLog,
		// Written as each request completes, so that a test reading the
		// log right after its requests sees them.
		"--audit-log-mode=blocking",
	)...)
	if err != nil {
		return nil, err
	}
	cp.Config = &rest.Config{
		Host:            cp.APIServerURL,
		BearerToken:     token,
		TLSClientConfig: rest.TLSClientConfig{CAData: certPEM},
		// The default (5 qps, burst 10) slows tests that create many
		// objects for no gain against a private apiserver.
		QPS:   100,
		Burst: 200,
	}
	tlsConf, err := rest.TLSConfigFor(cp.Config)
	if err != nil {
		return nil, err
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tlsConf}, Timeout: 5 * time.Second}
	defer client.CloseIdleConnections()
	if err := waitReady(ctx, api, client, cp.APIServerURL+"/readyz", func(b []byte) bool {
		return bytes.Equal(bytes.TrimSpace(b), []byte("ok"))
	}); err != nil {
		return nil, err
	}
	return cp, nil
}

// WriteKubeconfig writes a kubeconfig file for the admin configuration at
// path (mode 0600), for processes the test starts (airlockd --kubeconfig).
func (cp *ControlPlane) WriteKubeconfig(path string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: cp.Config.Host, CertificateAuthorityData: cp.Config.CAData}
	cfg.AuthInfos["kubetest"] = &clientcmdapi.AuthInfo{Token: cp.Config.BearerToken}
	cfg.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "kubetest"}
	cfg.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*cfg, path)
}

// Kubeconfig writes the admin kubeconfig (WriteKubeconfig) into a
// directory of the test's, removed after it, and returns its path; it
// fails the test on error.
func (cp *ControlPlane) Kubeconfig(tb testing.TB) string {
	tb.Helper()
	p := filepath.Join(tb.TempDir(), "kubeconfig")
	if err := cp.WriteKubeconfig(p); err != nil {
		tb.Fatal(err)
	}
	return p
}

// Close stops the apiserver, then etcd (each by its pid: SIGTERM, then
// SIGKILL after 10 s), and removes Dir.
func (cp *ControlPlane) Close() error {
	err := cp.stop()
	return errors.Join(err, os.RemoveAll(cp.Dir))
}

// stop stops the processes started so far, last first.
func (cp *ControlPlane) stop() error {
	var errs []error
	for i := len(cp.procs) - 1; i >= 0; i-- {
		errs = append(errs, cp.procs[i].stop(10*time.Second))
	}
	cp.procs = nil
	return errors.Join(errs...)
}

// start starts bin with args, its output in Dir/NAME.log.
func (cp *ControlPlane) start(bin string, args ...string) (*proc, error) {
	name := filepath.Base(bin)
	log, err := os.Create(filepath.Join(cp.Dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		log.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: log, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	cp.procs = append(cp.procs, p)
	return p, nil
}

// stop sends SIGTERM to p's pid, SIGKILL after grace, and waits for it.
func (p *proc) stop(grace time.Duration) error {
	defer p.log.Close()
	select {
	case <-p.done:
		return nil // it had exited; waitReady reported why
	default:
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("stop %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	select {
	case <-p.done:
		return nil
	case <-time.After(grace):
	}
	if err := p.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("kill %s (pid %d): %w", p.name, p.cmd.Process.Pid, err)
	}
	<-p.done
	return fmt.Errorf("%s (pid %d) did not stop within %s of SIGTERM; killed", p.name, p.cmd.Process.Pid, grace)
}

// tail returns the last lines of p's log, for errors.
func (p *proc) tail() string {
	b, err := os.ReadFile(p.log.Name())
	if err != nil {
		return err.Error()
	}
	const max = 4 << 10
	if len(b) > max {
		b = b[len(b)-max:]
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			b = b[i+1:]
		}
	}
	return string(b)
}

// exitError says that p exited before it was ready, with the end of its
// log; it wraps ErrPortTaken when p could not bind its port.
func (p *proc) exitError() error {
	tail := p.tail()
	err := fmt.Errorf("%s exited before it was ready (%v); its log ends:\n%s", p.name, p.err, tail)
	// The process's own words are the only sign there is.
	if strings.Contains(tail, "address already in use") {
		err = fmt.Errorf("%w: %w", ErrPortTaken, err)
	}
	return err
}

// waitReady polls url until ok accepts a 200 answer's body, p exits, ctx
// ends or readyTimeout passes.
func waitReady(ctx context.Context, p *proc, c *http.Client, url string, ok func([]byte) bool) error {
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return err
		}
		if resp, err := c.Do(req); err != nil {
			last = err.Error()
		} else {
			b, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && ok(b) {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, bytes.TrimSpace(b))
		}
		// An exit wins over a tick that is also ready.
		select {
		case <-p.done:
			return p.exitError()
		default:
		}
		select {
		case <-p.done:
			return p.exitError()
		case <-ctx.Done():
			return fmt.Errorf("%s not ready at %s: %w (last answer: %s); its log ends:\n%s", p.name, url, ctx.Err(), last, p.tail())
		case <-tick.C:
		}
	}
}

// drawPorts is freePorts; a test replaces it to take a port on purpose.
var drawPorts = freePorts

// portsMu serialises freePorts within the test binary, so that two
// control planes started in parallel do not draw the same ports.
var portsMu sync.Mutex

// freePorts returns n distinct loopback TCP ports that were free a moment
// ago. Another process may take one before etcd or the apiserver binds it;
// New then fails with ErrPortTaken.
func freePorts(n int) ([]int, error) {
	portsMu.Lock()
	defer portsMu.Unlock()
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		// Held until all are drawn, so none is drawn twice.
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// servingCert returns a self-signed certificate for 127.0.0.1, localhost
// and ServiceIP, valid for a day, and its key, in PEM. The certificate is its
// own CA: clients trust it directly.
func servingCert() (certPEM, keyPEM []byte, _ error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: "kubetest-apiserver"},
		NotBefore:             now.Add(-time.Minute),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1), ServiceIP},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, nil, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	// Checked here, so a bad pair fails with this error, not in the
	// apiserver's log.
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	if _, err := tls.X509KeyPair(certPEM, keyPEM); err != nil {
		return nil, nil, err
	}
	return certPEM, keyPEM, nil
}

// keyPairPEM returns a new P-256 key and its public key in PEM, for
// service-account tokens (ES256).
func keyPairPEM() (keyPEM, pubPEM []byte, _ error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, nil, err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return nil, nil, err
	}
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), nil
}

// randomToken returns 32 random bytes in hex.
func randomToken() (string, error) {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}
