package ocipack

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"path"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/images/archive"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

var (
	created = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	older   = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	later   = time.Date(2026, 11, 29, 8, 45, 0, 500, time.UTC)
)

type entry struct {
	hdr  tar.Header
	body string
}

func dir(name string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}}
}

func file(name, body string) entry {
	return entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}, body: body}
}

func buildTar(t testing.TB, entries ...entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		hdr := e.hdr
		if hdr.ModTime.IsZero() {
			hdr.ModTime = older
		}
		if err := tw.WriteHeader(&hdr); err != nil {
			t.Fatalf("WriteHeader(%q): %v", hdr.Name, err)
		}
		if _, err := io.WriteString(tw, e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// sampleRootfs is a small root filesystem in the shape mmdebstrap writes:
// "./" names, device nodes under dev/, a FIFO, links and an xattr.
func sampleRootfs(t testing.TB) []byte {
	return buildTar(t,
		dir("./dev/"),
		entry{hdr: tar.Header{Typeflag: tar.TypeChar, Name: "./dev/null", Mode: 0o666, Devmajor: 1, Devminor: 3}},
		entry{hdr: tar.Header{Typeflag: tar.TypeBlock, Name: "./dev/loop0", Mode: 0o660, Devmajor: 7}},
		entry{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "./dev/initctl", Mode: 0o600}},
		entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "./dev/fd", Linkname: "/proc/self/fd", Mode: 0o777}},
		entry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "./dev/null2", Linkname: "./dev/null"}},
		dir("./"),
		entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "./bin", Linkname: "usr/bin", Mode: 0o777}},
		dir("./etc/"),
		entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "./etc/passwd", Mode: 0o644, Size: 5, ModTime: later}, body: "root\n"},
		dir("./usr/"),
		dir("./usr/bin/"),
		entry{hdr: tar.Header{
			Typeflag: tar.TypeReg, Name: "./usr/bin/ping", Mode: 0o4755, Uid: 0, Gid: 2, Size: 4,
			PAXRecords: map[string]string{
				"SCHILY.xattr.security.capability": "\x01\x00\x00\x02",
				"comment":                          "dropped",
			},
		}, body: "ping"},
		entry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "./usr/bin/ping6", Linkname: "./usr/bin/ping"}},
		entry{hdr: tar.Header{Typeflag: tar.TypeDir, Name: "./home/agent/", Mode: 0o700, Uid: 1000, Gid: 1000, Uname: "agent", Gname: "agent"}},
	)
}

var sampleConfig = Config{
	Ref:        "airlock/agent:bookworm",
	Env:        []string{"PATH=/usr/bin:/bin", "LANG=C.UTF-8"},
	User:       "1000:1000",
	WorkingDir: "/workspace",
	Cmd:        []string{"/bin/bash"},
	Labels:     map[string]string{"dev.airlock.image.recipe": "abc"},
	Created:    created,
	CreatedBy:  "test",
}

func pack(t testing.TB, rootfs []byte, cfg Config) ([]byte, ocispec.Descriptor) {
	t.Helper()
	cfg.TempDir = t.TempDir()
	var out bytes.Buffer
	desc, err := Pack(&out, bytes.NewReader(rootfs), cfg)
	if err != nil {
		t.Fatalf("Pack: %v", err)
	}
	return out.Bytes(), desc
}

// readArchive returns the regular files of a tar archive by name, and checks
// that every entry's mtime is want.
func readArchive(t *testing.T, b []byte, wantMtime time.Time) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files
		}
		if err != nil {
			t.Fatalf("read archive: %v", err)
		}
		if !hdr.ModTime.Equal(wantMtime) {
			t.Errorf("archive entry %q mtime %v, want %v", hdr.Name, hdr.ModTime, wantMtime)
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		files[hdr.Name] = body
	}
}

// blob returns the blob desc names, after checking its size and digest.
func blob(t *testing.T, files map[string][]byte, desc ocispec.Descriptor) []byte {
	t.Helper()
	b, ok := files[blobPath(desc.Digest)]
	if !ok {
		t.Fatalf("archive has no blob %s", desc.Digest)
	}
	if int64(len(b)) != desc.Size {
		t.Errorf("blob %s has %d bytes, descriptor says %d", desc.Digest, len(b), desc.Size)
	}
	if got := digest.FromBytes(b); got != desc.Digest {
		t.Errorf("blob %s has digest %s", desc.Digest, got)
	}
	return b
}

func decode[T any](t *testing.T, b []byte) T {
	t.Helper()
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatalf("decode %T: %v", v, err)
	}
	return v
}

type layerEntry struct {
	Type     byte
	Name     string
	Linkname string
	Mode     int64
	Uid, Gid int
	ModTime  time.Time
	PAX      map[string]string
	Body     string
}

func TestPack(t *testing.T) {
	out, desc := pack(t, sampleRootfs(t), sampleConfig)
	files := readArchive(t, out, created)

	if got := decode[ocispec.ImageLayout](t, files[ocispec.ImageLayoutFile]); got.Version != ocispec.ImageLayoutVersion {
		t.Errorf("oci-layout version %q, want %q", got.Version, ocispec.ImageLayoutVersion)
	}
	index := decode[ocispec.Index](t, files[ocispec.ImageIndexFile])
	if index.SchemaVersion != 2 || index.MediaType != ocispec.MediaTypeImageIndex {
		t.Errorf("index schema %d media type %q", index.SchemaVersion, index.MediaType)
	}
	if len(index.Manifests) != 1 {
		t.Fatalf("index lists %d manifests, want 1", len(index.Manifests))
	}
	mdesc := index.Manifests[0]
	if diff := cmp.Diff(desc, mdesc); diff != "" {
		t.Errorf("Pack's descriptor differs from index.json (-returned +index):\n%s", diff)
	}
	wantAnnotations := map[string]string{
		"io.containerd.image.name":          "docker.io/airlock/agent:bookworm",
		"org.opencontainers.image.ref.name": "bookworm",
	}
	if diff := cmp.Diff(wantAnnotations, mdesc.Annotations); diff != "" {
		t.Errorf("manifest annotations (-want +got):\n%s", diff)
	}
	wantPlatform := &ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if diff := cmp.Diff(wantPlatform, mdesc.Platform); diff != "" {
		t.Errorf("manifest platform (-want +got):\n%s", diff)
	}

	manifest := decode[ocispec.Manifest](t, blob(t, files, mdesc))
	if mdesc.MediaType != ocispec.MediaTypeImageManifest || manifest.MediaType != ocispec.MediaTypeImageManifest {
		t.Errorf("manifest media types %q / %q", mdesc.MediaType, manifest.MediaType)
	}
	if manifest.Config.MediaType != ocispec.MediaTypeImageConfig {
		t.Errorf("config media type %q", manifest.Config.MediaType)
	}
	if len(manifest.Layers) != 1 || manifest.Layers[0].MediaType != ocispec.MediaTypeImageLayerGzip {
		t.Fatalf("manifest layers %+v, want one gzip layer", manifest.Layers)
	}
	img := decode[ocispec.Image](t, blob(t, files, manifest.Config))
	compressed := blob(t, files, manifest.Layers[0])

	zr, err := gzip.NewReader(bytes.NewReader(compressed))
	if err != nil {
		t.Fatal(err)
	}
	layer, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	if got := []digest.Digest{digest.FromBytes(layer)}; !slices.Equal(img.RootFS.DiffIDs, got) {
		t.Errorf("config diff_ids %v, uncompressed layer digest %v", img.RootFS.DiffIDs, got)
	}
	if img.RootFS.Type != "layers" {
		t.Errorf("rootfs type %q", img.RootFS.Type)
	}

	wantConfig := ocispec.ImageConfig{
		User: "1000:1000", Env: sampleConfig.Env, WorkingDir: "/workspace", Cmd: []string{"/bin/bash"},
		Labels: map[string]string{"dev.airlock.image.recipe": "abc"},
	}
	if diff := cmp.Diff(wantConfig, img.Config); diff != "" {
		t.Errorf("image config (-want +got):\n%s", diff)
	}
	if img.Created == nil || !img.Created.Equal(created) {
		t.Errorf("image created %v, want %v", img.Created, created)
	}
	if img.OS != "linux" || img.Architecture != runtime.GOARCH {
		t.Errorf("image platform %s/%s", img.OS, img.Architecture)
	}
	if len(img.History) != 1 || img.History[0].CreatedBy != "test" {
		t.Errorf("image history %+v", img.History)
	}

	var got []layerEntry
	tr := tar.NewReader(bytes.NewReader(layer))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, layerEntry{hdr.Typeflag, hdr.Name, hdr.Linkname, hdr.Mode, hdr.Uid, hdr.Gid, hdr.ModTime.UTC(), hdr.PAXRecords, string(body)})
	}
	want := []layerEntry{
		{Type: tar.TypeDir, Name: "dev/", Mode: 0o755, ModTime: older},
		{Type: tar.TypeSymlink, Name: "dev/fd", Linkname: "/proc/self/fd", Mode: 0o777, ModTime: older},
		{Type: tar.TypeSymlink, Name: "bin", Linkname: "usr/bin", Mode: 0o777, ModTime: older},
		{Type: tar.TypeDir, Name: "etc/", Mode: 0o755, ModTime: older},
		{Type: tar.TypeReg, Name: "etc/passwd", Mode: 0o644, ModTime: created, Body: "root\n"},
		{Type: tar.TypeDir, Name: "usr/", Mode: 0o755, ModTime: older},
		{Type: tar.TypeDir, Name: "usr/bin/", Mode: 0o755, ModTime: older},
		{Type: tar.TypeReg, Name: "usr/bin/ping", Mode: 0o4755, Gid: 2, ModTime: older,
			PAX: map[string]string{"SCHILY.xattr.security.capability": "\x01\x00\x00\x02"}, Body: "ping"},
		{Type: tar.TypeLink, Name: "usr/bin/ping6", Linkname: "usr/bin/ping", ModTime: older},
		{Type: tar.TypeDir, Name: "home/agent/", Mode: 0o700, Uid: 1000, Gid: 1000, ModTime: older},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layer entries (-want +got):\n%s", diff)
	}
}

func TestPackDeterministic(t *testing.T) {
	rootfs := sampleRootfs(t)
	a, _ := pack(t, rootfs, sampleConfig)
	b, _ := pack(t, rootfs, sampleConfig)
	if !bytes.Equal(a, b) {
		t.Fatal("two packs of the same input differ")
	}
	cfg := sampleConfig
	cfg.Env = append([]string{"X=1"}, cfg.Env...)
	c, _ := pack(t, rootfs, cfg)
	if bytes.Equal(a, c) {
		t.Fatal("packs with different configurations are equal")
	}
}

func TestPackDefaults(t *testing.T) {
	rootfs := buildTar(t, entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "f", Mode: 0o644, ModTime: later}})
	out, desc := pack(t, rootfs, Config{})
	if desc.Annotations != nil {
		t.Errorf("unnamed image has annotations %v", desc.Annotations)
	}
	files := readArchive(t, out, time.Unix(0, 0))
	manifest := decode[ocispec.Manifest](t, blob(t, files, desc))
	img := decode[ocispec.Image](t, blob(t, files, manifest.Config))
	if img.Created != nil {
		t.Errorf("image created %v, want none", img.Created)
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, manifest.Layers[0])))
	if err != nil {
		t.Fatal(err)
	}
	hdr, err := tar.NewReader(zr).Next()
	if err != nil {
		t.Fatal(err)
	}
	if want := later.Truncate(time.Second); !hdr.ModTime.Equal(want) {
		t.Errorf("unclamped mtime %v, want %v", hdr.ModTime, want)
	}
}

func TestPackRefuses(t *testing.T) {
	tests := []struct {
		name    string
		rootfs  []entry
		ref     string
		isClass func(error) bool
	}{
		{"absolute name", []entry{file("/etc/passwd", "x")}, "", errdefs.IsInvalidArgument},
		{"parent reference", []entry{file("./etc/../../x", "x")}, "", errdefs.IsInvalidArgument},
		{"hard link outside the root", []entry{
			file("a", "x"),
			{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "b", Linkname: "../a"}},
		}, "", errdefs.IsInvalidArgument},
		{"hard link to a later entry", []entry{
			{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "b", Linkname: "a"}},
			file("a", "x"),
		}, "", errdefs.IsInvalidArgument},
		{"hard link to a directory", []entry{
			dir("d/"),
			{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "b", Linkname: "d"}},
		}, "", errdefs.IsInvalidArgument},
		{"symlink without target", []entry{
			{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "l"}},
		}, "", errdefs.IsInvalidArgument},
		{"unsupported type", []entry{
			{hdr: tar.Header{Typeflag: tar.TypeCont, Name: "c"}},
		}, "", errdefs.IsNotImplemented},
		{"invalid reference", []entry{file("a", "x")}, "Airlock/Agent", errdefs.IsInvalidArgument},
		{"digest reference", []entry{file("a", "x")},
			"airlock/agent@sha256:" + strings.Repeat("a", 64), errdefs.IsInvalidArgument},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rootfs := buildTar(t, tt.rootfs...)
			_, err := Pack(io.Discard, bytes.NewReader(rootfs), Config{Ref: tt.ref, TempDir: t.TempDir()})
			if err == nil || !tt.isClass(err) {
				t.Fatalf("Pack: got error %v, want one of the expected class", err)
			}
		})
	}
}

func TestPackTruncatedInput(t *testing.T) {
	rootfs := sampleRootfs(t)
	if _, err := Pack(io.Discard, bytes.NewReader(rootfs[:700]), Config{TempDir: t.TempDir()}); err == nil {
		t.Fatal("Pack accepted a truncated tar stream")
	}
}

func TestCleanName(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{in: "./", want: "."},
		{in: ".", want: "."},
		{in: "./usr/bin/", want: "usr/bin"},
		{in: "usr//bin/./env", want: "usr/bin/env"},
		{in: "...", want: "..."},
		{in: "a/..b", want: "a/..b"},
		{in: "", wantErr: true},
		{in: "/etc/passwd", wantErr: true},
		{in: "..", wantErr: true},
		{in: "../etc", wantErr: true},
		{in: "a/../b", wantErr: true},
		{in: "a/..", wantErr: true},
		{in: "a/\x00b", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := CleanName(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("CleanName(%q) error %v, want error %v", tt.in, err, tt.wantErr)
			}
			if err == nil && got != tt.want {
				t.Errorf("CleanName(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if err != nil && !errdefs.IsInvalidArgument(err) {
				t.Errorf("CleanName(%q) error %v is not invalid-argument", tt.in, err)
			}
		})
	}
}

func TestNormalizeRef(t *testing.T) {
	tests := []struct {
		in, name, tag string
		wantErr       bool
	}{
		{in: "airlock/agent:bookworm", name: "docker.io/airlock/agent:bookworm", tag: "bookworm"},
		{in: "debian", name: "docker.io/library/debian:latest", tag: "latest"},
		{in: "registry.test:5000/x/y:1", name: "registry.test:5000/x/y:1", tag: "1"},
		{in: "", wantErr: true},
		{in: "airlock/Agent", wantErr: true},
		{in: "airlock/agent:", wantErr: true},
		{in: "a@sha256:" + strings.Repeat("0", 64), wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			name, tag, err := NormalizeRef(tt.in)
			if (err != nil) != tt.wantErr {
				t.Fatalf("NormalizeRef(%q) error %v, want error %v", tt.in, err, tt.wantErr)
			}
			if name != tt.name || tag != tt.tag {
				t.Errorf("NormalizeRef(%q) = %q, %q, want %q, %q", tt.in, name, tag, tt.name, tt.tag)
			}
		})
	}
}

// TestContainerdImport checks the archive with containerd's own importer and
// image walkers, against a local content store.
func TestContainerdImport(t *testing.T) {
	ctx := t.Context()
	out, desc := pack(t, sampleRootfs(t), sampleConfig)

	store, err := local.NewStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	index, err := archive.ImportIndex(ctx, store, bytes.NewReader(out))
	if err != nil {
		t.Fatalf("ImportIndex: %v", err)
	}
	if index.MediaType != ocispec.MediaTypeImageIndex {
		t.Errorf("imported index media type %q", index.MediaType)
	}
	manifests, err := images.Children(ctx, store, index)
	if err != nil {
		t.Fatal(err)
	}
	if len(manifests) != 1 || manifests[0].Digest != desc.Digest ||
		manifests[0].Annotations[images.AnnotationImageName] != "docker.io/airlock/agent:bookworm" {
		t.Fatalf("index children %+v", manifests)
	}

	available, _, _, missing, err := images.Check(ctx, store, index, platforms.Default())
	if err != nil || !available || len(missing) != 0 {
		t.Fatalf("images.Check: available %v, missing %v, err %v", available, missing, err)
	}
	configDesc, err := images.Config(ctx, store, index, platforms.Default())
	if err != nil {
		t.Fatal(err)
	}
	diffIDs, err := images.RootFS(ctx, store, configDesc)
	if err != nil {
		t.Fatal(err)
	}
	manifest, err := images.Manifest(ctx, store, index, platforms.Default())
	if err != nil {
		t.Fatal(err)
	}
	if len(diffIDs) != len(manifest.Layers) || len(diffIDs) != 1 {
		t.Fatalf("%d diff ids for %d layers", len(diffIDs), len(manifest.Layers))
	}
	size, err := images.Manifest(ctx, store, index, platforms.Only(ocispec.Platform{OS: "linux", Architecture: "s390x"}))
	if runtime.GOARCH != "s390x" && err == nil {
		t.Errorf("found a manifest for another platform: %+v", size)
	}
}

// FuzzPack feeds arbitrary streams to Pack: whatever it accepts must come out
// as a layer with only clean relative names, no device nodes, and a diff ID
// that matches.
func FuzzPack(f *testing.F) {
	f.Add(sampleRootfs(f))
	f.Add(buildTar(f, file("/abs", "x")))
	f.Add(buildTar(f, entry{hdr: tar.Header{Typeflag: tar.TypeLink, Name: "b", Linkname: "../a"}}))
	f.Add([]byte("not a tar"))
	tmp := f.TempDir()
	f.Fuzz(func(t *testing.T, rootfs []byte) {
		var out bytes.Buffer
		desc, err := Pack(&out, bytes.NewReader(rootfs), Config{TempDir: tmp})
		if err != nil {
			if desc.Digest != "" {
				t.Fatal("Pack returned both a descriptor and an error")
			}
			return
		}
		files := map[string][]byte{}
		tr := tar.NewReader(&out)
		for {
			hdr, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(tr)
			files[hdr.Name] = b
		}
		var manifest ocispec.Manifest
		if err := json.Unmarshal(files[blobPath(desc.Digest)], &manifest); err != nil {
			t.Fatal(err)
		}
		var img ocispec.Image
		if err := json.Unmarshal(files[blobPath(manifest.Config.Digest)], &img); err != nil {
			t.Fatal(err)
		}
		zr, err := gzip.NewReader(bytes.NewReader(files[blobPath(manifest.Layers[0].Digest)]))
		if err != nil {
			t.Fatal(err)
		}
		layer, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		if digest.FromBytes(layer) != img.RootFS.DiffIDs[0] {
			t.Fatal("diff ID does not match the layer")
		}
		lr := tar.NewReader(bytes.NewReader(layer))
		for {
			hdr, err := lr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			name := strings.TrimSuffix(hdr.Name, "/")
			if c, err := CleanName(name); err != nil || c != name || name == "." {
				t.Fatalf("layer entry %q is not a clean relative name", hdr.Name)
			}
			switch hdr.Typeflag {
			case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
			case tar.TypeLink:
				if path.IsAbs(hdr.Linkname) || strings.Contains("/"+hdr.Linkname+"/", "/../") {
					t.Fatalf("hard link %q to %q", hdr.Name, hdr.Linkname)
				}
			default:
				t.Fatalf("layer entry %q has type %q", hdr.Name, hdr.Typeflag)
			}
		}
	})
}

func FuzzCleanName(f *testing.F) {
	for _, s := range []string{"./", "./usr/bin/", "/etc", "a/../b", "..", "a//b/./c", "..."} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, name string) {
		got, err := CleanName(name)
		if err != nil {
			if got != "" {
				t.Fatalf("CleanName(%q) returned %q and an error", name, got)
			}
			return
		}
		if path.IsAbs(got) || path.Clean(got) != got || got == ".." || strings.HasPrefix(got, "../") ||
			strings.Contains(got, "/../") || strings.HasSuffix(got, "/..") {
			t.Fatalf("CleanName(%q) = %q, not a clean relative name", name, got)
		}
	})
}
