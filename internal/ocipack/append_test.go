package ocipack

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/klauspost/compress/gzip"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

var appendEpoch = time.Unix(1767225600, 0).UTC()

// baseArchive packs a one-layer image as the agent image is packed.
func baseArchive(t *testing.T) []byte {
	t.Helper()
	b, _ := pack(t, buildTar(t, file("bin/sh", "shell"), file("etc/os-release", "debian")), Config{
		Ref: "airlock/agent:bookworm", Env: []string{"PATH=/usr/bin:/bin", "HOME=/home/agent"}, User: "1000:1000",
		WorkingDir: "/workspace", Labels: map[string]string{"base": "yes"}, Created: appendEpoch,
	})
	return b
}

// flatTar is an uncompressed tar of regular files, in the order given.
func flatTar(t *testing.T, nameBody ...string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := 0; i+1 < len(nameBody); i += 2 {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: nameBody[i], Mode: 0o644, Size: int64(len(nameBody[i+1])), ModTime: time.Unix(1, 0)}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(nameBody[i+1]))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func appendLayer(t *testing.T, base, layer []byte, cfg AppendConfig) ([]byte, ocispec.Descriptor, error) {
	t.Helper()
	cfg.TempDir = t.TempDir()
	var out bytes.Buffer
	desc, err := Append(&out, bytes.NewReader(base), bytes.NewReader(layer), cfg)
	return out.Bytes(), desc, err
}

func TestAppend(t *testing.T) {
	base := baseArchive(t)
	layer := flatTar(t, "usr/local/bin/cli", "#!cli", "etc/gitconfig", "[x]")
	created := appendEpoch.Add(time.Hour)
	out, desc, err := appendLayer(t, base, layer, AppendConfig{
		Ref: "airlock/bench:bookworm", Env: []string{"HOME=/root", "GIT_TERMINAL_PROMPT=0"}, Labels: map[string]string{"bench": "1"},
		CreatedBy: "test", Created: created,
	})
	if err != nil {
		t.Fatal(err)
	}
	files := readArchive(t, out, created)
	if _, ok := files[ocispec.ImageLayoutFile]; !ok {
		t.Fatal("no oci-layout")
	}
	idx := decode[ocispec.Index](t, files[ocispec.ImageIndexFile])
	if len(idx.Manifests) != 1 || idx.Manifests[0].Digest != desc.Digest {
		t.Fatalf("index manifests = %+v, want the returned %s", idx.Manifests, desc.Digest)
	}
	if got := idx.Manifests[0].Annotations[images.AnnotationImageName]; got != "docker.io/airlock/bench:bookworm" {
		t.Errorf("image name annotation = %q", got)
	}
	man := decode[ocispec.Manifest](t, blob(t, files, idx.Manifests[0]))
	if len(man.Layers) != 2 {
		t.Fatalf("layers = %d, want 2", len(man.Layers))
	}
	img := decode[ocispec.Image](t, blob(t, files, man.Config))
	if len(img.RootFS.DiffIDs) != 2 || img.RootFS.DiffIDs[1] != digest.FromBytes(layer) {
		t.Errorf("diff ids = %v, want the base's and %s", img.RootFS.DiffIDs, digest.FromBytes(layer))
	}
	if want := []string{"PATH=/usr/bin:/bin", "HOME=/root", "GIT_TERMINAL_PROMPT=0"}; !slices.Equal(img.Config.Env, want) {
		t.Errorf("env = %v, want %v", img.Config.Env, want)
	}
	if img.Config.Labels["base"] != "yes" || img.Config.Labels["bench"] != "1" {
		t.Errorf("labels = %v, want the base's and the added one", img.Config.Labels)
	}
	if img.Config.User != "1000:1000" || img.Config.WorkingDir != "/workspace" {
		t.Errorf("user/workdir = %q/%q, want the base's", img.Config.User, img.Config.WorkingDir)
	}
	if len(img.History) != 2 || img.History[1].CreatedBy != "test" || !img.Created.Equal(created) {
		t.Errorf("history/created = %+v / %v", img.History, img.Created)
	}
	// The base layer is copied unchanged; the new one is the layer as given.
	baseFiles := readArchive(t, base, appendEpoch)
	baseIdx := decode[ocispec.Index](t, baseFiles[ocispec.ImageIndexFile])
	baseMan := decode[ocispec.Manifest](t, blob(t, baseFiles, baseIdx.Manifests[0]))
	if man.Layers[0].Digest != baseMan.Layers[0].Digest || !bytes.Equal(blob(t, files, man.Layers[0]), blob(t, baseFiles, baseMan.Layers[0])) {
		t.Error("the base layer changed")
	}
	zr, err := gzip.NewReader(bytes.NewReader(blob(t, files, man.Layers[1])))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(zr)
	if err != nil || !bytes.Equal(got, layer) {
		t.Errorf("new layer uncompressed differs from the input (err %v)", err)
	}
}

func TestAppendDeterministic(t *testing.T) {
	base := baseArchive(t)
	layer := flatTar(t, "cli", "cli")
	cfg := AppendConfig{Ref: "airlock/bench:bookworm", Created: appendEpoch}
	a, _, err := appendLayer(t, base, layer, cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := appendLayer(t, base, layer, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(a, b) {
		t.Error("equal inputs gave different archives")
	}
}

func TestAppendRefuses(t *testing.T) {
	layer := flatTar(t, "cli", "cli")
	base := baseArchive(t)
	// A base whose layer blob is corrupt.
	files := readArchive(t, base, appendEpoch)
	idx := decode[ocispec.Index](t, files[ocispec.ImageIndexFile])
	man := decode[ocispec.Manifest](t, blob(t, files, idx.Manifests[0]))
	var corrupt bytes.Buffer
	tw := tar.NewWriter(&corrupt)
	for name, data := range files {
		if name == blobPath(man.Layers[0].Digest) {
			data = bytes.Repeat([]byte{'x'}, len(data))
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))})
		tw.Write(data)
	}
	tw.Close()
	for name, in := range map[string][]byte{
		"not an archive": []byte("hello"),
		"no index":       flatTar(t, "oci-layout", "{}"),
		"corrupt layer":  corrupt.Bytes(),
		"empty index":    flatTar(t, "index.json", `{"schemaVersion":2,"manifests":[]}`),
		"missing blob":   flatTar(t, "index.json", `{"schemaVersion":2,"manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:`+strings.Repeat("a", 64)+`","size":1}]}`),
	} {
		t.Run(name, func(t *testing.T) {
			if _, _, err := appendLayer(t, in, layer, AppendConfig{Ref: "airlock/bench:bookworm"}); err == nil {
				t.Error("Append succeeded")
			}
		})
	}
	if _, _, err := appendLayer(t, base, layer, AppendConfig{}); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Append without a ref: err %v, want invalid argument", err)
	}
}

// TestAppendLargeBaseLayers takes the base's layers in a second pass over
// the archive, as it does for the agent image's, checking their digests.
func TestAppendLargeBaseLayers(t *testing.T) {
	saved := smallBlob
	smallBlob = 1024 // above index, manifest and config; below the layer
	t.Cleanup(func() { smallBlob = saved })
	var sb strings.Builder
	for range 200 {
		sb.WriteString(rand.Text()) // incompressible enough
	}
	big := sb.String()
	base, _ := pack(t, buildTar(t, file("bin/sh", big+"shell"), file("etc/os-release", big+"debian")), Config{Ref: "airlock/agent:bookworm", Created: appendEpoch})
	files := readArchive(t, base, appendEpoch)
	man := decode[ocispec.Manifest](t, blob(t, files, decode[ocispec.Index](t, files[ocispec.ImageIndexFile]).Manifests[0]))
	if man.Layers[0].Size <= smallBlob {
		t.Fatalf("base layer of %d bytes is not large", man.Layers[0].Size)
	}
	layer := flatTar(t, "cli", "cli")
	out, _, err := appendLayer(t, base, layer, AppendConfig{Ref: "airlock/bench:bookworm", Created: appendEpoch})
	if err != nil {
		t.Fatal(err)
	}
	if got := readArchive(t, out, appendEpoch)[blobPath(man.Layers[0].Digest)]; !bytes.Equal(got, files[blobPath(man.Layers[0].Digest)]) {
		t.Error("the large base layer was not copied unchanged")
	}

	// The same archive with the large layer corrupted (same size).
	var corrupt bytes.Buffer
	tw := tar.NewWriter(&corrupt)
	for name, data := range files {
		if name == blobPath(man.Layers[0].Digest) {
			data = bytes.Repeat([]byte{'x'}, len(data))
		}
		tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(data))})
		tw.Write(data)
	}
	tw.Close()
	if _, _, err := appendLayer(t, corrupt.Bytes(), layer, AppendConfig{Ref: "airlock/bench:bookworm"}); err == nil {
		t.Errorf("a corrupt large layer: %v", err)
	}
}

// An agent image's layer goes through FilterLayer before Append: the same
// rules as a packed root filesystem.
func TestFilterLayer(t *testing.T) {
	clamp := time.Unix(1767225600, 0).UTC()
	in := buildTar(t,
		dir("./opt/"),
		entry{hdr: tar.Header{Typeflag: tar.TypeReg, Name: "./opt/agent", Mode: 0o100755, Uid: 1234, Size: 3, ModTime: clamp.Add(time.Hour), AccessTime: clamp.Add(time.Hour), Format: tar.FormatPAX}, body: "bin"},
		entry{hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "./opt/fifo", Mode: 0o644}},
		entry{hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "./usr/local/bin/agent", Linkname: "/opt/agent", Mode: 0o777}},
	)
	var out bytes.Buffer
	if err := FilterLayer(&out, bytes.NewReader(in), clamp); err != nil {
		t.Fatal(err)
	}
	var got []string
	tr := tar.NewReader(&out)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%s %o %d %d %s %v", h.Name, h.Mode, h.Uid, h.ModTime.Unix(), h.Linkname, h.PAXRecords))
	}
	// Times after the clamp are clamped, earlier ones kept; PAX records
	// but xattrs (here an access time) are dropped, the FIFO too.
	want := []string{
		fmt.Sprintf("opt/ 755 0 %d  map[]", older.Unix()),
		"opt/agent 755 1234 1767225600  map[]",
		fmt.Sprintf("usr/local/bin/agent 777 0 %d /opt/agent map[]", older.Unix()),
	}
	if !slices.Equal(got, want) {
		t.Errorf("FilterLayer:\n got %q\nwant %q", got, want)
	}
	for _, name := range []string{"../etc/passwd", "/etc/passwd", "opt/../../x"} {
		bad := buildTar(t, file(name, "x"))
		if err := FilterLayer(io.Discard, bytes.NewReader(bad), clamp); err == nil {
			t.Errorf("FilterLayer accepted an entry named %q", name)
		}
	}
}
