package sessionca

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/pkg/oci"
	continuityfs "github.com/containerd/continuity/fs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/internal/atomicfile"
)

// Where the sandbox finds the session CA.
const (
	// SandboxCAPath is the CA certificate alone (NODE_EXTRA_CA_CERTS:
	// Node.js keeps its own roots and adds these).
	SandboxCAPath = "/run/airlock/ca.pem"
	// SandboxBundlePath is the image's system roots followed by the CA
	// (SSL_CERT_FILE, REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, GIT_SSL_CAINFO).
	// The same file is also bound over the image's own bundle.
	SandboxBundlePath = "/run/airlock/ca-bundle.pem"
	// BundleFile is that file in the session's state directory.
	BundleFile = "ca-bundle.pem"
	// MaxSystemBundle bounds the image's bundle that is read (Debian's is
	// about 220 KiB).
	MaxSystemBundle = 8 << 20
)

// SystemBundlePaths are where images keep their system's trusted roots as
// one PEM file, in the order they are looked for (those Go's crypto/x509
// reads on Linux): Debian, Ubuntu, Alpine, Arch; Fedora and RHEL; openSUSE;
// OpenELEC; CentOS and RHEL 7; Alpine's older name.
var SystemBundlePaths = []string{
	"/etc/ssl/certs/ca-certificates.crt",
	"/etc/pki/tls/certs/ca-bundle.crt",
	"/etc/ssl/ca-bundle.pem",
	"/etc/pki/tls/cacert.pem",
	"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
	"/etc/ssl/cert.pem",
}

// TrustEnv is the environment that points the sandbox's TLS clients at the
// session CA: OpenSSL and Go (SSL_CERT_FILE), Python requests
// (REQUESTS_CA_BUNDLE), curl (CURL_CA_BUNDLE), git (GIT_SSL_CAINFO) and
// Node.js (NODE_EXTRA_CA_CERTS). None of it is secret.
func TrustEnv() []string {
	return []string{
		"SSL_CERT_FILE=" + SandboxBundlePath,
		"REQUESTS_CA_BUNDLE=" + SandboxBundlePath,
		"CURL_CA_BUNDLE=" + SandboxBundlePath,
		"GIT_SSL_CAINFO=" + SandboxBundlePath,
		"NODE_EXTRA_CA_CERTS=" + SandboxCAPath,
	}
}

// TrustOpts make the sandbox trust the CA, whose certificate Save wrote
// to the session's state directory dir:
//   - the image's system bundle (the first of SystemBundlePaths the
//     image has, read from the container's rootfs snapshot) followed by
//     the CA is written to dir/BundleFile and bound read-only over that
//     path, so programs that read the system bundle trust the CA without
//     being told; an image with none gets the CA alone, over the first of
//     SystemBundlePaths;
//   - the same file at SandboxBundlePath and the CA at SandboxCAPath,
//     read-only;
//   - TrustEnv in the process environment, replacing what the image or
//     the manifest set for those variables.
//
// The binds are "rbind", "ro", "nosuid", "nodev", "noexec" of files under
// dir, which the sandbox cannot change. What it does not cover: programs
// with roots of their own that read no variable above (Java's keystore,
// certificate pinning), and other bundle paths an image may use.
//
// It must come after the image config and the manifest's environment.
func TrustOpts(dir string) []oci.SpecOpts {
	return trustOpts(dir, readImageBundle)
}

// bundleReader returns the image's system bundle and its path in the
// image, or an empty path when the image has none.
type bundleReader func(ctx context.Context, client oci.Client, c *containers.Container) (string, []byte, error)

func trustOpts(dir string, read bundleReader) []oci.SpecOpts {
	return []oci.SpecOpts{
		func(ctx context.Context, client oci.Client, c *containers.Container, s *oci.Spec) error {
			caPEM, err := os.ReadFile(filepath.Join(dir, CertFile))
			if err != nil {
				return fmt.Errorf("session CA: %w", err)
			}
			target, system, err := read(ctx, client, c)
			if err != nil {
				return fmt.Errorf("session CA: the image's trusted roots: %w", err)
			}
			if target == "" {
				target = SystemBundlePaths[0]
			}
			if err := atomicfile.WriteParts(dir, BundleFile, bundleParts(system, caPEM), 0o444, -1, -1); err != nil {
				return fmt.Errorf("session CA: write the sandbox's bundle: %w", err)
			}
			opts := []string{"rbind", "ro", "nosuid", "nodev", "noexec"}
			bundle := filepath.Join(dir, BundleFile)
			s.Mounts = append(s.Mounts,
				specs.Mount{Destination: target, Type: "bind", Source: bundle, Options: opts},
				specs.Mount{Destination: SandboxBundlePath, Type: "bind", Source: bundle, Options: opts},
				specs.Mount{Destination: SandboxCAPath, Type: "bind", Source: filepath.Join(dir, CertFile), Options: opts},
			)
			return nil
		},
		oci.WithEnv(TrustEnv()),
	}
}

// bundleParts are the parts of the sandbox's bundle: system (a PEM
// bundle, possibly empty; the image's cached copy, written as it is, not
// copied) followed by the CA certificate caPEM, with a newline between
// them when system lacks one.
func bundleParts(system, caPEM []byte) [][]byte {
	if len(system) > 0 && system[len(system)-1] != '\n' {
		return [][]byte{system, []byte("\n"), caPEM}
	}
	return [][]byte{system, caPEM}
}

// imageBundles caches the system bundle of each image's rootfs, keyed by
// the snapshotter and the session snapshot's parent (a committed snapshot
// never changes): every session of an image needs the same one.
var imageBundles = struct {
	mu sync.Mutex
	m  map[string]imageBundle // +checklocks:mu
}{m: map[string]imageBundle{}}

// maxCachedBundles bounds imageBundles; it is emptied when full.
const maxCachedBundles = 16

type imageBundle struct {
	path string
	data []byte
}

// readImageBundle reads the system bundle of the container's rootfs
// snapshot, as containerd's oci.WithUsername reads /etc/passwd: the
// snapshot's mounts, mounted read-only on a temporary directory. Without a
// snapshot (a client that gives none) there is no bundle.
func readImageBundle(ctx context.Context, client oci.Client, c *containers.Container) (string, []byte, error) {
	if client == nil || c == nil || c.Snapshotter == "" || c.SnapshotKey == "" {
		return "", nil, nil
	}
	sn := client.SnapshotService(c.Snapshotter)
	info, err := sn.Stat(ctx, c.SnapshotKey)
	if err != nil {
		return "", nil, err
	}
	key := c.Snapshotter + "\x00" + info.Parent
	if info.Parent != "" {
		imageBundles.mu.Lock()
		b, ok := imageBundles.m[key]
		imageBundles.mu.Unlock()
		if ok {
			return b.path, b.data, nil
		}
	}
	mounts, err := sn.Mounts(ctx, c.SnapshotKey)
	if err != nil {
		return "", nil, err
	}
	var b imageBundle
	err = mount.WithReadonlyTempMount(ctx, mounts, func(root string) error {
		var err error
		b.path, b.data, err = findBundle(root)
		return err
	})
	if err != nil {
		return "", nil, err
	}
	if info.Parent != "" {
		imageBundles.mu.Lock()
		if len(imageBundles.m) >= maxCachedBundles {
			clear(imageBundles.m)
		}
		imageBundles.m[key] = b
		imageBundles.mu.Unlock()
	}
	return b.path, b.data, nil
}

// findBundle returns the first of SystemBundlePaths that is a regular file
// under root (symlinks resolved within root) and its content, or an empty
// path when there is none.
func findBundle(root string) (string, []byte, error) {
	for _, p := range SystemBundlePaths {
		data, err := readRootFile(root, p)
		if errors.Is(err, fs.ErrNotExist) || errors.Is(err, errNotRegular) {
			continue
		}
		if err != nil {
			return "", nil, fmt.Errorf("%s: %w", p, err)
		}
		return p, data, nil
	}
	return "", nil, nil
}

var errNotRegular = errors.New("not a regular file")

// readRootFile reads path inside root, its symlinks bounded to root, at
// most MaxSystemBundle bytes.
func readRootFile(root, path string) ([]byte, error) {
	full, err := continuityfs.RootPath(root, path)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(full, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, errNotRegular
	}
	data, err := io.ReadAll(io.LimitReader(f, MaxSystemBundle+1))
	if err != nil {
		return nil, err
	}
	if len(data) > MaxSystemBundle {
		return nil, fmt.Errorf("larger than %d bytes", MaxSystemBundle)
	}
	if !bytes.Contains(data, []byte("-----BEGIN CERTIFICATE-----")) {
		// An empty or foreign file: no roots to keep.
		return nil, nil
	}
	return data, nil
}
