package benchimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/airlock-sandbox/airlock/bench/clients"
	"github.com/airlock-sandbox/airlock/internal/ocipack"
)

func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: n, Mode: 0o644, Size: int64(len(files[n])), ModTime: time.Unix(1, 0)}); err != nil {
			t.Fatal(err)
		}
		tw.Write([]byte(files[n]))
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// baseArchive packs a one-layer image as the agent image is packed.
func baseArchive(t *testing.T) []byte {
	t.Helper()
	var buf bytes.Buffer
	_, err := ocipack.Pack(&buf, bytes.NewReader(tarOf(t, map[string]string{"bin/sh": "shell", "etc/os-release": "debian"})), ocipack.Config{
		Ref: "airlock/agent:bookworm", Env: []string{"PATH=/usr/bin:/bin", "HOME=/home/agent"}, User: "1000:1000",
		WorkingDir: "/workspace", Labels: map[string]string{"base": "yes"}, Created: epoch, TempDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func blobPath(d digest.Digest) string {
	return "blobs/" + d.Algorithm().String() + "/" + d.Encoded()
}

// entries reads an archive into name -> content.
func entries(t *testing.T, b []byte) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if h.Typeflag == tar.TypeReg {
			out[h.Name] = data
		}
	}
}

func decodeBlob[T any](t *testing.T, files map[string][]byte, d ocispec.Descriptor) T {
	t.Helper()
	b, ok := files[blobPath(d.Digest)]
	if !ok {
		t.Fatalf("blob %s missing", d.Digest)
	}
	if digest.FromBytes(b) != d.Digest || int64(len(b)) != d.Size {
		t.Fatalf("blob %s: content does not match its descriptor", d.Digest)
	}
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func layerFiles(t *testing.T, gz []byte) map[string]*tar.Header {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(gz))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*tar.Header{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		out[h.Name] = h
	}
}

func TestBuild(t *testing.T) {
	dir := t.TempDir()
	agent := filepath.Join(dir, "agent.tar")
	cli := filepath.Join(dir, "cli")
	if err := os.WriteFile(agent, baseArchive(t), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cli, []byte("#!cli"), 0o755)
	archive, err := Build(agent, cli, filepath.Join(dir, "cache"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(archive)
	if err != nil {
		t.Fatal(err)
	}
	layer, err := Layer([]byte("#!cli"))
	if err != nil {
		t.Fatal(err)
	}
	files := entries(t, b)
	if _, ok := files[ocispec.ImageLayoutFile]; !ok {
		t.Fatal("no oci-layout")
	}
	idx := decodeIndex(t, files[ocispec.ImageIndexFile])
	if len(idx.Manifests) != 1 {
		t.Fatalf("index manifests = %+v, want one", idx.Manifests)
	}
	if got := idx.Manifests[0].Annotations[images.AnnotationImageName]; got != "docker.io/airlock/bench:bookworm" {
		t.Errorf("image name annotation = %q", got)
	}
	man := decodeBlob[ocispec.Manifest](t, files, idx.Manifests[0])
	if len(man.Layers) != 2 {
		t.Fatalf("layers = %d, want 2", len(man.Layers))
	}
	img := decodeBlob[ocispec.Image](t, files, man.Config)
	if len(img.RootFS.DiffIDs) != 2 || img.RootFS.DiffIDs[1] != digest.FromBytes(layer) {
		t.Errorf("diff ids = %v, want the base's and %s", img.RootFS.DiffIDs, digest.FromBytes(layer))
	}
	if want := []string{"PATH=/usr/bin:/bin", "HOME=/home/agent", "GIT_TERMINAL_PROMPT=0"}; !slices.Equal(img.Config.Env, want) {
		t.Errorf("env = %v, want %v", img.Config.Env, want)
	}
	if img.Config.Labels["base"] != "yes" || img.Config.Labels["dev.airlock.image.bench"] == "" {
		t.Errorf("labels = %v, want the base's and the bench key", img.Config.Labels)
	}
	if img.Config.User != "1000:1000" || img.Config.WorkingDir != "/workspace" {
		t.Errorf("user/workdir = %q/%q, want the base's", img.Config.User, img.Config.WorkingDir)
	}
	if len(img.History) != 2 || !strings.HasPrefix(img.History[1].CreatedBy, "airlock bench") || !img.Created.Equal(epoch) {
		t.Errorf("history/created = %+v / %v", img.History, img.Created)
	}
	// The base layer is copied unchanged; the new one holds the client.
	for i, l := range man.Layers {
		b := files[blobPath(l.Digest)]
		if digest.FromBytes(b) != l.Digest {
			t.Fatalf("layer %d does not match its digest", i)
		}
	}
	lf := layerFiles(t, files[blobPath(man.Layers[1].Digest)])
	if h := lf["usr/local/bin/airlock-bench-cli"]; h == nil || h.Mode != 0o755 || h.Size != 5 {
		t.Errorf("client entry = %+v", h)
	}
	for _, l := range Links {
		if h := lf["usr/local/bin/"+l]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "airlock-bench-cli" {
			t.Errorf("link %s = %+v", l, h)
		}
	}
	if h := lf["etc/gitconfig"]; h == nil || h.Size != int64(len(GitConfig)) {
		t.Errorf("gitconfig entry = %+v", h)
	}
	if !strings.Contains(string(GitConfig), "helper = /usr/local/bin/git-credential-airlock") {
		t.Error("gitconfig does not name the credential helper")
	}
}

func decodeIndex(t *testing.T, b []byte) ocispec.Index {
	t.Helper()
	var idx ocispec.Index
	if err := json.Unmarshal(b, &idx); err != nil {
		t.Fatal(err)
	}
	return idx
}

func TestLayerRefusesEmptyBinary(t *testing.T) {
	if _, err := Layer(nil); err == nil {
		t.Error("Layer of an empty binary succeeded")
	}
}

func TestBuildCaches(t *testing.T) {
	dir := t.TempDir()
	agent := filepath.Join(dir, "agent.tar")
	cli := filepath.Join(dir, "cli")
	if err := os.WriteFile(agent, baseArchive(t), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(cli, []byte("cli v1"), 0o755)
	cache := filepath.Join(dir, "cache")
	p1, err := Build(agent, cli, cache)
	if err != nil {
		t.Fatal(err)
	}
	st1, err := os.Stat(p1)
	if err != nil {
		t.Fatal(err)
	}
	p2, err := Build(agent, cli, cache)
	if err != nil {
		t.Fatal(err)
	}
	st2, _ := os.Stat(p2)
	if p1 != p2 || !st1.ModTime().Equal(st2.ModTime()) {
		t.Errorf("second build of equal inputs made a new archive: %s, %s", p1, p2)
	}
	os.WriteFile(cli, []byte("cli v2"), 0o755)
	p3, err := Build(agent, cli, cache)
	if err != nil {
		t.Fatal(err)
	}
	if p3 == p1 {
		t.Error("a changed client reused the cached archive")
	}
	left, _ := filepath.Glob(filepath.Join(cache, ".airlock-bench-*"))
	if len(left) > 0 {
		t.Errorf("temporary files left: %v", left)
	}
}

// TestLinksCoverCommands: every command of the client is installed under
// a name, and none under a name of coreutils, which the agent image has.
func TestLinksCoverCommands(t *testing.T) {
	for _, c := range clients.Commands {
		name := c
		if c == "git-credential" {
			name = "git-credential-airlock"
		}
		if !slices.Contains(Links, name) {
			t.Errorf("command %s is not installed (Links %v)", c, Links)
		}
	}
	for _, coreutil := range []string{"paste", "cat", "ls", "test", "join", "split"} {
		if slices.Contains(Links, coreutil) {
			t.Errorf("link %s would hide coreutils' %s", coreutil, coreutil)
		}
	}
}
