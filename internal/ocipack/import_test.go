package ocipack

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"testing"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/plugins/content/local"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/google/go-cmp/cmp"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// memImages is an in-memory images.Store.
type memImages struct {
	mu     sync.Mutex
	images map[string]images.Image // +checklocks:mu
}

func (s *memImages) Get(_ context.Context, name string) (images.Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	img, ok := s.images[name]
	if !ok {
		return images.Image{}, fmt.Errorf("image %q: %w", name, errdefs.ErrNotFound)
	}
	return img, nil
}

func (s *memImages) List(context.Context, ...string) ([]images.Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []images.Image
	for _, img := range s.images {
		out = append(out, img)
	}
	return out, nil
}

func (s *memImages) Create(_ context.Context, img images.Image) (images.Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.images[img.Name]; ok {
		return images.Image{}, fmt.Errorf("image %q: %w", img.Name, errdefs.ErrAlreadyExists)
	}
	s.images[img.Name] = img
	return img, nil
}

func (s *memImages) Update(_ context.Context, img images.Image, _ ...string) (images.Image, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.images[img.Name]; !ok {
		return images.Image{}, fmt.Errorf("image %q: %w", img.Name, errdefs.ErrNotFound)
	}
	s.images[img.Name] = img
	return img, nil
}

func (s *memImages) Delete(_ context.Context, name string, _ ...images.DeleteOpt) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.images, name)
	return nil
}

// memLabels is an in-memory local.LabelStore.
type memLabels struct {
	mu     sync.Mutex
	labels map[digest.Digest]map[string]string // +checklocks:mu
}

func (s *memLabels) Get(d digest.Digest) (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.labels[d]), nil
}

func (s *memLabels) Set(d digest.Digest, l map[string]string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.labels[d] = maps.Clone(l)
	return nil
}

func (s *memLabels) Update(d digest.Digest, update map[string]string) (map[string]string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := s.labels[d]
	if l == nil {
		l = map[string]string{}
	}
	for k, v := range update {
		if v == "" {
			delete(l, k)
		} else {
			l[k] = v
		}
	}
	s.labels[d] = l
	return maps.Clone(l), nil
}

// newClient returns a containerd client backed by a local content store and
// an in-memory image store, and a context holding a lease, so that
// importArchive runs without a daemon.
func newClient(t *testing.T) (context.Context, *containerd.Client, *memImages) {
	t.Helper()
	cs, err := local.NewLabeledStore(t.TempDir(), &memLabels{labels: map[digest.Digest]map[string]string{}})
	if err != nil {
		t.Fatal(err)
	}
	is := &memImages{images: map[string]images.Image{}}
	client, err := containerd.New("", containerd.WithServices(
		containerd.WithContentStore(cs),
		containerd.WithImageStore(is),
	))
	if err != nil {
		t.Fatal(err)
	}
	return leases.WithLease(t.Context(), "test"), client, is
}

func ociArchive(t *testing.T, ref string) ([]byte, ocispec.Descriptor) {
	t.Helper()
	rootfs := tarOf(t, map[string]string{"etc/hostname": "sandbox\n"})
	var out bytes.Buffer
	desc, err := Pack(&out, bytes.NewReader(rootfs), Config{
		Ref: ref, Created: time.Unix(1767225600, 0), TempDir: t.TempDir(),
	})
	if err != nil {
		t.Fatal(err)
	}
	return out.Bytes(), desc
}

// withRefName rewrites an OCI archive's index so that its manifest carries
// only an org.opencontainers.image.ref.name annotation, as skopeo writes.
func withRefName(t *testing.T, archive []byte, refName string) []byte {
	t.Helper()
	var out bytes.Buffer
	tw := tar.NewWriter(&out)
	tr := tar.NewReader(bytes.NewReader(archive))
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
		if hdr.Name == ocispec.ImageIndexFile {
			var idx ocispec.Index
			if err := json.Unmarshal(body, &idx); err != nil {
				t.Fatal(err)
			}
			idx.Manifests[0].Annotations = map[string]string{ocispec.AnnotationRefName: refName}
			if body, err = json.Marshal(idx); err != nil {
				t.Fatal(err)
			}
			hdr.Size = int64(len(body))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func tarOf(t *testing.T, files map[string]string) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		body := files[name]
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := io.WriteString(tw, body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// dockerArchive is what `docker save example/app:1` writes (Docker v1.2
// layout, uncompressed layer).
func dockerArchive(t *testing.T) []byte {
	t.Helper()
	layer := tarOf(t, map[string]string{"hello": "world\n"})
	config, err := json.Marshal(ocispec.Image{
		Platform: platforms.DefaultSpec(),
		RootFS:   ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{digest.FromBytes(layer)}},
	})
	if err != nil {
		t.Fatal(err)
	}
	configName := digest.FromBytes(config).Encoded() + ".json"
	manifest, err := json.Marshal([]map[string]any{{
		"Config":   configName,
		"RepoTags": []string{"example/app:1"},
		"Layers":   []string{"abc/layer.tar"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return tarOf(t, map[string]string{
		"manifest.json": string(manifest),
		configName:      string(config),
		"abc/layer.tar": string(layer),
	})
}

func TestImportArchive(t *testing.T) {
	named, manifest := ociArchive(t, "airlock/agent:bookworm")
	unnamed, _ := ociArchive(t, "")
	tagOnly := withRefName(t, unnamed, "v2")
	docker := dockerArchive(t)

	const (
		toManifest = "manifest"
		toIndex    = "index"
	)
	tests := []struct {
		name    string
		archive []byte
		opts    ImportOptions
		want    map[string]string // image name -> target kind
		wantErr func(error) bool
	}{
		{
			name:    "named OCI archive",
			archive: named,
			want:    map[string]string{"docker.io/airlock/agent:bookworm": toManifest},
		},
		{
			name:    "named OCI archive given its own name",
			archive: named,
			opts:    ImportOptions{Name: "airlock/agent:bookworm"},
			want:    map[string]string{"docker.io/airlock/agent:bookworm": toManifest},
		},
		{
			name:    "named OCI archive given another name",
			archive: named,
			opts:    ImportOptions{Name: "example/other"},
			want: map[string]string{
				"docker.io/example/other:latest":   toIndex,
				"docker.io/airlock/agent:bookworm": toManifest,
			},
		},
		{
			name:    "unnamed archive given a name",
			archive: unnamed,
			opts:    ImportOptions{Name: "registry.test/x:1"},
			want:    map[string]string{"registry.test/x:1": toIndex},
		},
		{
			name:    "unnamed archive",
			archive: unnamed,
			wantErr: errdefs.IsInvalidArgument,
		},
		{
			name:    "tag-only ref name completed from the given name",
			archive: tagOnly,
			opts:    ImportOptions{Name: "example/app:1"},
			want: map[string]string{
				"docker.io/example/app:1":  toIndex,
				"docker.io/example/app:v2": toManifest,
			},
		},
		{
			name:    "tag-only ref name without a name",
			archive: tagOnly,
			wantErr: errdefs.IsInvalidArgument,
		},
		{
			name:    "docker archive",
			archive: docker,
			want:    map[string]string{"docker.io/example/app:1": toManifest},
		},
		{
			name:    "invalid name",
			archive: named,
			opts:    ImportOptions{Name: "Not A Name"},
			wantErr: errdefs.IsInvalidArgument,
		},
		{
			name:    "not an archive",
			archive: tarOf(t, map[string]string{"README": "hello"}),
			wantErr: func(err error) bool { return err != nil },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, client, store := newClient(t)
			imgs, err := importArchive(ctx, client, bytes.NewReader(tt.archive), tt.opts)
			if tt.wantErr != nil {
				if err == nil || !tt.wantErr(err) {
					t.Fatalf("importArchive: got error %v, want an error of the expected class", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("importArchive: %v", err)
			}
			got := map[string]string{}
			for _, img := range imgs {
				switch img.Target.MediaType {
				case ocispec.MediaTypeImageIndex:
					got[img.Name] = toIndex
				case ocispec.MediaTypeImageManifest, images.MediaTypeDockerSchema2Manifest:
					got[img.Name] = toManifest
				default:
					got[img.Name] = img.Target.MediaType
				}
				stored, err := store.Get(ctx, img.Name)
				if err != nil || stored.Target.Digest != img.Target.Digest {
					t.Errorf("stored image %q: %+v, %v; returned target %s", img.Name, stored.Target, err, img.Target.Digest)
				}
				// Everything the image needs on this platform is in the
				// content store.
				available, _, _, missing, err := images.Check(ctx, client.ContentStore(), img.Target, platforms.Default())
				if err != nil || !available || len(missing) > 0 {
					t.Errorf("image %q: available %v, missing %v, err %v", img.Name, available, missing, err)
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("imported images (-want +got):\n%s", diff)
			}
			if tt.want["docker.io/airlock/agent:bookworm"] == toManifest {
				img, _ := store.Get(ctx, "docker.io/airlock/agent:bookworm")
				if img.Target.Digest != manifest.Digest {
					t.Errorf("agent image target %s, want the packed manifest %s", img.Target.Digest, manifest.Digest)
				}
			}
		})
	}
}

func TestImportArchiveOtherPlatform(t *testing.T) {
	riscv := ocispec.Platform{OS: "linux", Architecture: "riscv64"}
	if platforms.Default().Match(riscv) {
		t.Skip("the archive would match the running platform")
	}
	ctx, client, store := newClient(t)
	archive, _ := ociArchive(t, "airlock/agent:bookworm")
	_, err := importArchive(ctx, client, bytes.NewReader(archive), ImportOptions{Platform: platforms.Only(riscv)})
	if !errdefs.IsNotFound(err) {
		t.Fatalf("importArchive for another platform: got %v, want a not-found error", err)
	}
	if imgs, _ := store.List(ctx); len(imgs) != 0 {
		t.Errorf("failed import left image records %v", imgs)
	}
}

func TestRefTranslator(t *testing.T) {
	tests := []struct {
		name, ref, want string
	}{
		{"", "docker.io/airlock/agent:bookworm", "docker.io/airlock/agent:bookworm"},
		{"", "airlock/agent:bookworm", "docker.io/airlock/agent:bookworm"},
		{"", "debian:12", "docker.io/library/debian:12"},
		{"", "localhost/x", "localhost/x:latest"},
		{"", "bookworm", ""},
		{"", "Bad Ref/x", ""},
		{"docker.io/example/app:1", "v2", "docker.io/example/app:v2"},
		{"example/app", "v2", "docker.io/example/app:v2"},
		{"registry.test:5000/a/b:c", "d", "registry.test:5000/a/b:d"},
		{"example/app:1", "other/app:3", "docker.io/other/app:3"},
		{"example/app:1", "bad tag!", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name+"+"+tt.ref, func(t *testing.T) {
			if got := refTranslator(tt.name)(tt.ref); got != tt.want {
				t.Errorf("refTranslator(%q)(%q) = %q, want %q", tt.name, tt.ref, got, tt.want)
			}
		})
	}
}

func TestLastByName(t *testing.T) {
	img := func(name string, d byte) images.Image {
		return images.Image{Name: name, Target: ocispec.Descriptor{Digest: digest.FromBytes([]byte{d})}}
	}
	got := lastByName([]images.Image{img("a", 1), img("b", 2), img("a", 3), img("c", 4), img("b", 5)})
	want := []images.Image{img("a", 3), img("b", 5), img("c", 4)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("lastByName (-want +got):\n%s", diff)
	}
	if got := lastByName(nil); len(got) != 0 {
		t.Errorf("lastByName(nil) = %v", got)
	}
}

func TestArchiveImages(t *testing.T) {
	archive, desc := ociArchive(t, "airlock/codex:bookworm")
	got, err := ArchiveImages(bytes.NewReader(archive))
	want := map[string]digest.Digest{"docker.io/airlock/codex:bookworm": desc.Digest}
	if err != nil || !maps.Equal(got, want) {
		t.Errorf("ArchiveImages(OCI archive) = %v, %v; want %v", got, err, want)
	}
	// skopeo's annotation: a full reference is a name, a bare tag is not.
	for refName, want := range map[string]map[string]digest.Digest{
		"example/app:2": {"docker.io/example/app:2": desc.Digest},
		"v2":            {},
	} {
		got, err := ArchiveImages(bytes.NewReader(withRefName(t, archive, refName)))
		if err != nil || !maps.Equal(got, want) {
			t.Errorf("ArchiveImages(ref.name %q) = %v, %v; want %v", refName, got, err, want)
		}
	}
	if got, err := ArchiveImages(bytes.NewReader(dockerArchive(t))); err != nil || len(got) != 0 {
		t.Errorf("ArchiveImages(docker archive) = %v, %v; want no names", got, err)
	}
	bad := tarOf(t, map[string]string{ocispec.ImageIndexFile: "{not json"})
	if _, err := ArchiveImages(bytes.NewReader(bad)); err == nil {
		t.Error("ArchiveImages(broken index.json): no error")
	}
	if _, err := ArchiveImages(bytes.NewReader(archive[:100])); err == nil {
		t.Error("ArchiveImages(truncated archive): no error")
	}
}
