package sessionca

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	specs "github.com/opencontainers/runtime-spec/specs-go"
)

// applyTrust saves a new CA to a temporary directory and applies
// trustOpts with a reader that returns path and system.
func applyTrust(t *testing.T, path string, system []byte) (*CA, string, *oci.Spec) {
	t.Helper()
	dir := t.TempDir()
	ca, err := New("s")
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	read := func(context.Context, oci.Client, *containers.Container) (string, []byte, error) {
		return path, system, nil
	}
	spec := &oci.Spec{Process: &specs.Process{Env: []string{"PATH=/bin", "SSL_CERT_FILE=/elsewhere.pem"}}}
	for _, opt := range trustOpts(dir, read) {
		if err := opt(t.Context(), nil, &containers.Container{ID: "s"}, spec); err != nil {
			t.Fatal(err)
		}
	}
	return ca, dir, spec
}

func TestTrustOpts(t *testing.T) {
	system := []byte("-----BEGIN CERTIFICATE-----\nroot\n-----END CERTIFICATE-----") // no final newline
	ca, dir, spec := applyTrust(t, "/etc/pki/tls/certs/ca-bundle.crt", system)

	bundle, err := os.ReadFile(filepath.Join(dir, BundleFile))
	if err != nil {
		t.Fatal(err)
	}
	want := append(append(append([]byte{}, system...), '\n'), ca.CertPEM()...)
	if !bytes.Equal(bundle, want) {
		t.Errorf("bundle:\n%s\nwant the system's roots, a newline and the CA:\n%s", bundle, want)
	}
	if st, _ := os.Stat(filepath.Join(dir, BundleFile)); st.Mode().Perm() != 0o444 {
		t.Errorf("bundle mode %v, want 0444", st.Mode().Perm())
	}
	mounts := map[string]string{}
	for _, m := range spec.Mounts {
		if m.Type != "bind" || !slices.Equal(m.Options, []string{"rbind", "ro", "nosuid", "nodev", "noexec"}) {
			t.Errorf("mount %s: type %q options %v, want a read-only bind", m.Destination, m.Type, m.Options)
		}
		mounts[m.Destination] = m.Source
	}
	wantMounts := map[string]string{
		"/etc/pki/tls/certs/ca-bundle.crt": filepath.Join(dir, BundleFile),
		SandboxBundlePath:                  filepath.Join(dir, BundleFile),
		SandboxCAPath:                      filepath.Join(dir, CertFile),
	}
	if len(mounts) != len(wantMounts) {
		t.Errorf("mounts %v, want %v", mounts, wantMounts)
	}
	for dst, src := range wantMounts {
		if mounts[dst] != src {
			t.Errorf("mount on %s from %q, want %q", dst, mounts[dst], src)
		}
	}
	env := spec.Process.Env
	for _, e := range TrustEnv() {
		if !slices.Contains(env, e) {
			t.Errorf("env %v lacks %q", env, e)
		}
	}
	if slices.Contains(env, "SSL_CERT_FILE=/elsewhere.pem") || !slices.Contains(env, "PATH=/bin") {
		t.Errorf("env %v: want SSL_CERT_FILE replaced and PATH kept", env)
	}
}

// TestTrustOptsNoSystemBundle: an image without a bundle trusts the CA
// alone, at the usual path.
func TestTrustOptsNoSystemBundle(t *testing.T) {
	ca, dir, spec := applyTrust(t, "", nil)
	bundle, err := os.ReadFile(filepath.Join(dir, BundleFile))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(bundle, ca.CertPEM()) {
		t.Errorf("bundle %q, want the CA alone", bundle)
	}
	if !slices.ContainsFunc(spec.Mounts, func(m specs.Mount) bool { return m.Destination == SystemBundlePaths[0] }) {
		t.Errorf("no mount on %s: %v", SystemBundlePaths[0], spec.Mounts)
	}
}

// TestFindBundle reads an image's bundle from a root directory: the first
// path of SystemBundlePaths that is a regular file wins, and symlinks stay
// inside the root, so an image whose bundle points at a host file does not
// make the daemon read that file.
func TestFindBundle(t *testing.T) {
	pemRoot := []byte("-----BEGIN CERTIFICATE-----\nx\n-----END CERTIFICATE-----\n")
	write := func(root, p string, b []byte) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	symlink := func(root, p, target string) {
		t.Helper()
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, full); err != nil {
			t.Fatal(err)
		}
	}

	t.Run("debian", func(t *testing.T) {
		root := t.TempDir()
		write(root, "/etc/ssl/certs/ca-certificates.crt", pemRoot)
		write(root, "/etc/ssl/cert.pem", []byte("-----BEGIN CERTIFICATE-----\nother\n"))
		p, b, err := findBundle(root)
		if err != nil || p != "/etc/ssl/certs/ca-certificates.crt" || !bytes.Equal(b, pemRoot) {
			t.Errorf("findBundle = %q, %q, %v", p, b, err)
		}
	})
	t.Run("fedora via a relative symlink", func(t *testing.T) {
		root := t.TempDir()
		write(root, "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem", pemRoot)
		symlink(root, "/etc/pki/tls/certs/ca-bundle.crt", "../../ca-trust/extracted/pem/tls-ca-bundle.pem")
		p, b, err := findBundle(root)
		if err != nil || p != "/etc/pki/tls/certs/ca-bundle.crt" || !bytes.Equal(b, pemRoot) {
			t.Errorf("findBundle = %q, %q, %v", p, b, err)
		}
	})
	t.Run("absolute symlink stays in the root", func(t *testing.T) {
		host := filepath.Join(t.TempDir(), "host-secret.pem")
		if err := os.WriteFile(host, append([]byte("HOST "), pemRoot...), 0o600); err != nil {
			t.Fatal(err)
		}
		root := t.TempDir()
		symlink(root, "/etc/ssl/certs/ca-certificates.crt", host)
		p, b, err := findBundle(root)
		if err != nil || p != "" || b != nil {
			t.Errorf("findBundle through a symlink to a host file = %q, %q, %v; want nothing", p, b, err)
		}
		symlink(root, "/etc/ssl/cert.pem", "../../../../../../../../"+host)
		if p, b, err := findBundle(root); err != nil || p != "" || b != nil {
			t.Errorf("findBundle through a ../ symlink to a host file = %q, %q, %v; want nothing", p, b, err)
		}
	})
	t.Run("directory and foreign file", func(t *testing.T) {
		root := t.TempDir()
		if err := os.MkdirAll(filepath.Join(root, "/etc/ssl/certs/ca-certificates.crt"), 0o755); err != nil {
			t.Fatal(err)
		}
		write(root, "/etc/pki/tls/certs/ca-bundle.crt", []byte("no certificates here\n"))
		p, b, err := findBundle(root)
		if err != nil || p != "/etc/pki/tls/certs/ca-bundle.crt" || b != nil {
			t.Errorf("findBundle = %q, %q, %v; want the file's path and no roots", p, b, err)
		}
	})
	t.Run("none", func(t *testing.T) {
		if p, b, err := findBundle(t.TempDir()); err != nil || p != "" || b != nil {
			t.Errorf("findBundle of an empty root = %q, %q, %v", p, b, err)
		}
	})
}

// TestTrustOptsNoBundleCopy: every session writes the image's system
// bundle (Debian's is over 200 KiB) with its CA after it; the bundle is
// written from the image's cached copy, not copied whole into a new one
// for every session (a large allocation each, 8 at a time in the soak).
func TestTrustOptsNoBundleCopy(t *testing.T) {
	system := bytes.Repeat([]byte("-----BEGIN CERTIFICATE-----\nroot\n-----END CERTIFICATE-----\n"), 8<<10)
	dir := t.TempDir()
	ca, err := New("s")
	if err != nil {
		t.Fatal(err)
	}
	if err := ca.Save(dir); err != nil {
		t.Fatal(err)
	}
	read := func(context.Context, oci.Client, *containers.Container) (string, []byte, error) {
		return "/etc/ssl/certs/ca-certificates.crt", system, nil
	}
	opts := trustOpts(dir, read)
	apply := func() {
		spec := &oci.Spec{Process: &specs.Process{}}
		if err := opts[0](t.Context(), nil, &containers.Container{ID: "s"}, spec); err != nil {
			t.Fatal(err)
		}
	}
	apply()
	var before, after runtime.MemStats
	const runs = 5
	runtime.ReadMemStats(&before)
	for range runs {
		apply()
	}
	runtime.ReadMemStats(&after)
	perRun := (after.TotalAlloc - before.TotalAlloc) / runs
	t.Logf("%d bytes allocated a session, system bundle %d bytes", perRun, len(system))
	if perRun >= uint64(len(system))/2 {
		t.Errorf("writing the bundle allocated %d bytes a session with a system bundle of %d; want far less than the bundle", perRun, len(system))
	}
	got, err := os.ReadFile(filepath.Join(dir, BundleFile))
	if err != nil {
		t.Fatal(err)
	}
	if want := append(slices.Clone(system), ca.CertPEM()...); !bytes.Equal(got, want) {
		t.Errorf("bundle of %d bytes, want the system's %d and the CA", len(got), len(system))
	}
}
