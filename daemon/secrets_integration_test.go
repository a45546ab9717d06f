package daemon_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"io"
	"io/fs"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress/sessionca"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
	"github.com/airlock-sandbox/airlock/secrets"
)

// execIn runs args in session id with stdin and returns stdout, stderr
// and the exit code.
func execIn(t *testing.T, id string, stdin io.Reader, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	code, err := h.Daemon.Exec(t.Context(), id, runtime.ExecOptions{Args: args, Stdin: stdin, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("exec %v: %v", args, err)
	}
	return out.String(), errb.String(), code
}

// filesHolding returns the regular files under root that contain needle,
// without crossing into other filesystems (a running sandbox's rootfs, a
// tmpfs) and skipping the dirs named in skip (image layers).
func filesHolding(t *testing.T, root string, needle []byte, skip ...string) []string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(root, &st); err != nil {
		t.Fatal(err)
	}
	dev := st.Dev
	var found []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // gone while walking
		}
		if d.IsDir() {
			var st syscall.Stat_t
			if syscall.Lstat(p, &st) != nil || st.Dev != dev {
				return fs.SkipDir
			}
			for _, s := range skip {
				if d.Name() == s {
					return fs.SkipDir
				}
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		if fileHolds(p, needle) {
			found = append(found, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}

// fileHolds reports whether the file at p contains needle. It reads the
// file's data regions only, a chunk at a time: the daemon's root holds
// sparse files of many GiB (the sessions' disk quota images).
func fileHolds(p string, needle []byte) bool {
	f, err := os.Open(p)
	if err != nil {
		return false
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return false
	}
	buf := make([]byte, 1<<20)
	var tail []byte
	for off := int64(0); off < fi.Size(); {
		data, err := f.Seek(off, unix.SEEK_DATA)
		if err != nil {
			return false // ENXIO: no data after off
		}
		hole, err := f.Seek(data, unix.SEEK_HOLE)
		if err != nil {
			hole = fi.Size()
		}
		if data != off {
			tail = nil // a hole of zeros between
		}
		if _, err := f.Seek(data, io.SeekStart); err != nil {
			return false
		}
		r := io.LimitReader(f, hole-data)
		for {
			n, err := r.Read(buf)
			chunk := append(tail, buf[:n]...)
			if bytes.Contains(chunk, needle) {
				return true
			}
			tail = append([]byte(nil), chunk[max(0, len(chunk)-len(needle)+1):]...)
			if err != nil {
				break
			}
		}
		off = hole
	}
	return false
}

// TestSecretsAndTrustInSandbox starts a session with `l7 = "check"` and a
// secret read from a file on the host, and checks, inside and outside the
// sandbox:
//   - the sandbox holds the placeholder (its variable, for the command and
//     exec'd processes, and its read-only file), the one the daemon keeps
//     for the gateway, also after a daemon restart;
//   - the value is in no file the sandbox can read, not in the
//     environment of its processes, not in containerd's container spec,
//     and in no file under the daemon's root (containerd's metadata, the
//     runtime bundle, runc's state, the session's record, log and audit;
//     image layers aside), nor in the daemon's log;
//   - the sandbox trusts the session CA: the system bundle the image's
//     programs read is the image's roots followed by the CA, the
//     variables point at it, and curl and Python verify a leaf of the CA
//     without being told about it.
func TestSecretsAndTrustInSandbox(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	var rnd [16]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	value := "sk-world-" + hex.EncodeToString(rnd[:])
	src := filepath.Join(t.TempDir(), "world-api-key")
	if err := os.WriteFile(src, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	// The built-in admission policy admits secrets from
	// /etc/airlock/secrets/HOST/ only.
	a := policies.DefaultAdmission()
	a.SecretSources = []policies.SecretSource{{From: "file:" + src, Hosts: []string{"api.trust.test"}}}
	old := h.Daemon.SwapAdmission(a)
	t.Cleanup(func() { h.Daemon.SwapAdmission(old) })

	p := policy("sh", "-c", `printf %s "$WORLD_API_KEY" > /tmp/main-env; sleep 300`)
	p.Egress = &policies.Egress{Allow: []string{"api.trust.test:443"}, L7: policies.L7Check}
	p.Secrets = []policies.Secret{{
		Name: "world", From: "file:" + src, EnvVar: "WORLD_API_KEY", Path: "/run/secrets/world",
		Inject: []policies.SecretInject{{Host: "api.trust.test", Header: "x-api-key"}},
	}}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })

	ca, set, err := h.Daemon.L7Trust(s.ID)
	if err != nil || ca == nil || set == nil {
		t.Fatalf("the daemon's CA and secrets of the session: %v, %v, %v", ca, set, err)
	}
	b := set.Bound()[0]
	if string(b.Value) != value || b.Inject[0].Host != "api.trust.test" {
		t.Fatalf("bound secret %v: want the file's value for api.trust.test", b)
	}
	ph := b.Placeholder

	// The placeholder, in the variable and the file.
	if out, _, code := execIn(t, s.ID, nil, "printenv", "WORLD_API_KEY"); code != 0 || strings.TrimSpace(out) != ph {
		t.Errorf("WORLD_API_KEY in an exec'd process: %q (exit %d), want %s", out, code, ph)
	}
	var main string
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if main, _, _ = execIn(t, s.ID, nil, "cat", "/tmp/main-env"); main != "" {
			break
		}
	}
	if main != ph {
		t.Errorf("WORLD_API_KEY of the command: %q, want %s", main, ph)
	}
	if out, _, code := execIn(t, s.ID, nil, "cat", "/run/secrets/world"); code != 0 || out != ph {
		t.Errorf("/run/secrets/world: %q (exit %d), want %s", out, code, ph)
	}
	if _, _, code := execIn(t, s.ID, nil, "sh", "-c", "echo x > /run/secrets/world"); code == 0 {
		t.Error("the placeholder file is writable")
	}

	// The value in no file the sandbox can read. grep reads the pattern
	// from stdin, so it is not in any process's arguments; the same
	// search for the placeholder shows the search reaches the files.
	grep := []string{"grep", "-rlsF", "-D", "skip", "--exclude-dir=proc", "--exclude-dir=sys", "-f", "-", "/"}
	if out, _, _ := execIn(t, s.ID, strings.NewReader(ph+"\n"), grep...); !strings.Contains(out, "/run/secrets/world") {
		t.Fatalf("grep for the placeholder found %q: the search does not work", out)
	}
	if out, _, _ := execIn(t, s.ID, strings.NewReader(value+"\n"), grep...); out != "" {
		t.Errorf("files in the sandbox hold the secret value:\n%s", out)
	}
	// Nor in the environment of the command or of an exec'd process.
	for _, args := range [][]string{{"cat", "/proc/1/environ"}, {"env"}} {
		out, _, _ := execIn(t, s.ID, nil, args...)
		if !strings.Contains(out, ph) {
			t.Errorf("%v: no placeholder in %q", args, out)
		}
		if strings.Contains(out, value) {
			t.Errorf("%v: the environment holds the secret value", args)
		}
	}
	// Nor in containerd's spec, which carries the placeholder.
	spec := specOf(t, s.ID)
	if strings.Contains(spec, value) {
		t.Error("the container spec holds the secret value")
	}
	if !strings.Contains(spec, "WORLD_API_KEY="+ph) || !strings.Contains(spec, "SSL_CERT_FILE="+sessionca.SandboxBundlePath) {
		t.Error("the container spec lacks the placeholder or the trust variables")
	}

	// Trust: the image's bundle followed by the CA, over the system path.
	caPEM, err := os.ReadFile(filepath.Join(h.Root, "sessions", s.ID, sessionca.CertFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(caPEM, ca.CertPEM()) {
		t.Error("the daemon's CA is not the one in the session's directory")
	}
	bundle, _, code := execIn(t, s.ID, nil, "cat", "/etc/ssl/certs/ca-certificates.crt")
	if code != 0 || !strings.HasSuffix(bundle, string(caPEM)) {
		t.Errorf("the sandbox's system bundle does not end with the session CA (exit %d)", code)
	}
	if n := strings.Count(bundle, "BEGIN CERTIFICATE"); n < 50 {
		t.Errorf("the sandbox's system bundle holds %d certificates: the image's roots are lost", n)
	}
	if out, _, _ := execIn(t, s.ID, nil, "cat", sessionca.SandboxBundlePath); out != bundle {
		t.Errorf("%s differs from the system bundle", sessionca.SandboxBundlePath)
	}
	if out, _, _ := execIn(t, s.ID, nil, "cat", sessionca.SandboxCAPath); out != string(caPEM) {
		t.Errorf("%s is not the session CA", sessionca.SandboxCAPath)
	}
	for _, e := range sessionca.TrustEnv() {
		k, v, _ := strings.Cut(e, "=")
		if out, _, _ := execIn(t, s.ID, nil, "printenv", k); strings.TrimSpace(out) != v {
			t.Errorf("%s in the sandbox: %q, want %q", k, out, v)
		}
	}
	// A TLS server in the sandbox with a leaf of the CA: curl and Python
	// verify it through the system bundle alone (the variables unset),
	// and through the variables; a name the leaf is not for fails.
	leaf, err := ca.Leaf("api.trust.test")
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(leaf.PrivateKey)
	if err != nil {
		t.Fatal(err)
	}
	leafPEM := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: leaf.Certificate[0]})) +
		string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}))
	script := `set -u
cat > /tmp/leaf.pem
cd /tmp
python3 -c '
import http.server, ssl
s = http.server.HTTPServer(("127.0.0.1", 8443), http.server.SimpleHTTPRequestHandler)
c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
c.load_cert_chain("/tmp/leaf.pem")
s.socket = c.wrap_socket(s.socket, server_side=True)
s.serve_forever()
' </dev/null >/dev/null 2>&1 &
srv=$!
for i in $(seq 100); do
	if (exec 3<>/dev/tcp/127.0.0.1/8443) 2>/dev/null; then break; fi
	sleep 0.1
done
noenv="env -u SSL_CERT_FILE -u CURL_CA_BUNDLE -u REQUESTS_CA_BUNDLE -u GIT_SSL_CAINFO"
c="curl -sS --max-time 5 -o /dev/null -w %{http_code} --resolve api.trust.test:8443:127.0.0.1 --resolve other.trust.test:8443:127.0.0.1"
echo "curl-system=$($noenv $c https://api.trust.test:8443/ 2>&1)"
echo "curl-env=$($c https://api.trust.test:8443/ 2>&1)"
echo "curl-other=$($c https://other.trust.test:8443/ >/dev/null 2>&1; echo $?)"
py='import ssl, socket
c = ssl.create_default_context()
with socket.create_connection(("127.0.0.1", 8443)) as s:
    with c.wrap_socket(s, server_hostname="api.trust.test") as t:
        print("ok")'
echo "python-system=$($noenv python3 -c "$py" 2>&1 | tail -1)"
kill $srv
`
	out, errOut, code := execIn(t, s.ID, strings.NewReader(leafPEM), "bash", "-c", script)
	for _, want := range []string{"curl-system=200", "curl-env=200", "curl-other=60", "python-system=ok"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("verification in the sandbox: want %q in:\n%s%s(exit %d)", want, out, errOut, code)
		}
	}

	// A restarted daemon keeps the CA and the placeholder, and reads the
	// value again.
	if err := h.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	ca2, set2, err := h.Daemon.L7Trust(s.ID)
	if err != nil || ca2 == nil || set2 == nil {
		t.Fatalf("after a restart: %v, %v, %v", ca2, set2, err)
	}
	if !bytes.Equal(ca2.CertPEM(), caPEM) {
		t.Error("the restarted daemon has another CA for the session")
	}
	if b2 := set2.Bound()[0]; b2.Placeholder != ph || string(b2.Value) != value {
		t.Errorf("after a restart: %v, want placeholder %s and the value", b2, ph)
	}
	if out, _, _ := execIn(t, s.ID, nil, "printenv", "WORLD_API_KEY"); strings.TrimSpace(out) != ph {
		t.Errorf("WORLD_API_KEY after a restart: %q", out)
	}

	// Outside the sandbox: no file under the daemon's root and no line
	// of its log holds the value. Image layers are left out; the
	// session's rootfs is read-only and its /tmp a tmpfs.
	evs, err := h.Daemon.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	if j, _ := json.Marshal(evs); bytes.Contains(j, []byte(value)) {
		t.Error("the session's audit holds the secret value")
	}
	if files := filesHolding(t, h.Root, []byte(value), "io.containerd.snapshotter.v1.overlayfs", "io.containerd.content.v1.content"); len(files) > 0 {
		t.Errorf("files under the daemon's root hold the secret value: %v", files)
	}
	if files := filesHolding(t, h.Root, []byte(ph), "io.containerd.snapshotter.v1.overlayfs", "io.containerd.content.v1.content"); len(files) == 0 {
		t.Error("no file under the daemon's root holds the placeholder: the search does not work")
	}
	if strings.Contains(h.Log.String(), value) {
		t.Error("the daemon's log holds the secret value")
	}
	if !secrets.IsPlaceholder(ph) {
		t.Errorf("placeholder %q is not in the documented format", ph)
	}
}

// TestGuardedSecretFoundOnDisk: a secret with no inject block is only
// guarded. A copy of its value that the sandbox holds (a production token
// left in a configuration file, found by an agent after a test deploy
// failed) reaches no host through the gateway: sent as a bearer token, as
// Basic credentials, in a query or in a body, it is refused with 403 and
// audited as an exfiltration naming the secret; the service never sees
// it. Requests without it go through.
func TestGuardedSecretFoundOnDisk(t *testing.T) {
	testutil.RequiresRoot(t)
	ctx := t.Context()
	var rnd [16]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		t.Fatal(err)
	}
	value := "rpt_prod_" + hex.EncodeToString(rnd[:])
	src := filepath.Join(t.TempDir(), "prod-deploy")
	if err := os.WriteFile(src, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := policies.DefaultAdmission()
	a.SecretSources = []policies.SecretSource{{From: "file:" + src, Hosts: []string{"registry.guard.test"}}}
	old := h.Daemon.SwapAdmission(a)
	t.Cleanup(func() { h.Daemon.SwapAdmission(old) })

	var mu sync.Mutex
	var saw []string
	svc := http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		saw = append(saw, r.URL.String()+" "+r.Header.Get("Authorization")+" "+string(b))
		mu.Unlock()
		io.WriteString(rw, "ok")
	})
	if err := h.World.AddHost("registry.guard.test", netip.MustParseAddr("10.214.0.52"), world.WithHandler(svc)); err != nil && !strings.Contains(err.Error(), "exists") {
		t.Fatal(err)
	}
	p := policy("sleep", "300")
	p.Egress = &policies.Egress{Allow: []string{"registry.guard.test:80"}, L7: policies.L7Check}
	p.Secrets = []policies.Secret{{Name: "PROD_DEPLOY", From: "file:" + src, EnvVar: "PROD_DEPLOY"}}
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	if _, _, code := execIn(t, s.ID, strings.NewReader("REGISTRY_TOKEN="+value+"\n"), "sh", "-c", "mkdir -p /tmp/deploy && cat > /tmp/deploy/prod.env"); code != 0 {
		t.Fatal("writing the leaked copy")
	}
	tok := `"$(sed -n 's/^REGISTRY_TOKEN=//p' /tmp/deploy/prod.env)"`
	c := `curl -sS --max-time 10 -o /dev/null -w '%{http_code}' `
	for name, script := range map[string]string{
		"bearer": c + `-H "Authorization: Bearer ` + tok[1:len(tok)-1] + `" -X PUT --data-binary x http://registry.guard.test/v1/repos/test/packages/app/1.4.2`,
		"basic":  c + `-u "deploy:` + tok[1:len(tok)-1] + `" http://registry.guard.test/v1/repos/test/packages`,
		"query":  c + `"http://registry.guard.test/v1/repos/test/packages?token=` + tok[1:len(tok)-1] + `"`,
		"body":   c + `--data-binary @/tmp/deploy/prod.env http://registry.guard.test/documents`,
	} {
		out, errOut, code := execIn(t, s.ID, nil, "sh", "-c", script)
		if code != 0 || out != "403" {
			t.Errorf("%s: %q %s (exit %d), want 403", name, out, errOut, code)
		}
	}
	if out, _, code := execIn(t, s.ID, nil, "sh", "-c", c+`-H "Authorization: Bearer rpt_test_expired" http://registry.guard.test/v1/repos/test/packages`); code != 0 || out != "200" {
		t.Errorf("a request without the secret: %q (exit %d), want 200", out, code)
	}
	mu.Lock()
	for _, r := range saw {
		if strings.Contains(r, value) {
			t.Errorf("the service saw the guarded value: %q", r)
		}
	}
	n := len(saw)
	mu.Unlock()
	// The body streams: a value in it is found as it passes, and the
	// request is cut off before it, so the service may have seen the
	// body's request line, headers and start, never the value.
	if n < 1 || n > 2 {
		t.Errorf("the service saw %d requests, want the one without the secret (and the start of the one whose body carried it)", n)
	}
	evs, err := h.Daemon.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	found := 0
	for _, ev := range evs {
		if ev.Layer == "l7" && ev.Action == "exfiltration" && strings.Contains(ev.Reason, "value of secret PROD_DEPLOY") {
			found++
		}
	}
	if found != 4 {
		t.Errorf("%d exfiltration events name the secret's value, want 4", found)
	}
}
