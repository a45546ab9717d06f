// Package ocipack builds and imports image archives. Pack turns a root
// filesystem tar stream into a single-layer OCI image, written as an OCI
// image layout tar archive ("oci-archive") that containerd's importer, ctr,
// skopeo and podman accept. Append adds a layer on top of the image in such
// an archive (the bench image is the agent image plus one layer), copying
// the base's blobs unchanged. Import loads an OCI or Docker archive into
// containerd and unpacks it into a snapshotter. This package is the one
// writer of image archives in the tree.
//
// The layer is the input stream rewritten: names are made relative and
// clean, entries that could land outside the root (absolute names, ".."
// elements, hard links to missing targets) are refused, device nodes and
// FIFOs are dropped (a container's /dev comes from the runtime), and only
// the metadata a layer needs is kept: mode, owner, times, link targets and
// extended attributes. Equal input and Config give a byte-identical archive.
package ocipack

import (
	"archive/tar"
	_ "crypto/sha256" // registers digest.Canonical
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"runtime"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/klauspost/compress/gzip"
	digest "github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// Config describes the image built around the layer.
type Config struct {
	// Ref names the image, e.g. "airlock/agent:bookworm". It is normalized
	// ("docker.io/airlock/agent:bookworm") and recorded on the manifest in
	// index.json as containerd's exporter does: the full name in
	// io.containerd.image.name, the tag in org.opencontainers.image.ref.name.
	// Empty leaves the image unnamed. A reference by digest is refused.
	Ref string

	// Process defaults for containers of this image.
	Env        []string
	User       string
	WorkingDir string
	Entrypoint []string
	Cmd        []string

	// Labels are recorded in the image configuration.
	Labels map[string]string

	// Created is the image's creation time. When set, file modification
	// times later than Created are clamped to it (SOURCE_DATE_EPOCH
	// semantics). Zero leaves the creation time out and times unclamped.
	Created time.Time

	// CreatedBy is recorded in the image history; empty is "ocipack".
	CreatedBy string

	// Platform defaults to linux on the running architecture.
	Platform *ocispec.Platform

	// TempDir holds the compressed layer while the archive is written;
	// empty means os.TempDir().
	TempDir string
}

// NormalizeRef returns the fully qualified form of an image reference, as
// containerd stores it: "airlock/agent:bookworm" becomes
// "docker.io/airlock/agent:bookworm", and a missing tag becomes "latest".
// It also returns the tag. References by digest are refused: a digest names
// content, not an image to create.
func NormalizeRef(ref string) (name, tag string, _ error) {
	named, err := reference.ParseDockerRef(ref)
	if err != nil {
		return "", "", fmt.Errorf("image reference %q: %v: %w", ref, err, errdefs.ErrInvalidArgument)
	}
	if _, ok := named.(reference.Digested); ok {
		return "", "", fmt.Errorf("image reference %q: a digest cannot name a new image: %w", ref, errdefs.ErrInvalidArgument)
	}
	tagged, ok := named.(reference.Tagged)
	if !ok {
		return "", "", fmt.Errorf("image reference %q: no tag: %w", ref, errdefs.ErrInvalidArgument)
	}
	return named.String(), tagged.Tag(), nil
}

// Pack reads a root filesystem tar stream from rootfs and writes an OCI image
// layout tar archive holding it as one gzip layer to w. It returns the
// descriptor of the image manifest, as listed in the archive's index.json.
func Pack(w io.Writer, rootfs io.Reader, cfg Config) (_ ocispec.Descriptor, retErr error) {
	var annotations map[string]string
	if cfg.Ref != "" {
		name, tag, err := NormalizeRef(cfg.Ref)
		if err != nil {
			return ocispec.Descriptor{}, err
		}
		annotations = map[string]string{
			images.AnnotationImageName: name,
			ocispec.AnnotationRefName:  tag,
		}
	}
	platform := ocispec.Platform{OS: "linux", Architecture: runtime.GOARCH}
	if cfg.Platform != nil {
		platform = *cfg.Platform
	}

	spool, err := os.CreateTemp(cfg.TempDir, "ocipack-layer-*")
	if err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("create layer spool: %w", err)
	}
	defer func() {
		if err := spool.Close(); err != nil && retErr == nil {
			retErr = fmt.Errorf("close layer spool: %w", err)
		}
		os.Remove(spool.Name())
	}()

	layer, diffID, err := writeLayer(spool, rootfs, cfg.Created)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("rewind layer spool: %w", err)
	}

	img := ocispec.Image{
		Platform: platform,
		Config: ocispec.ImageConfig{
			User:       cfg.User,
			Env:        cfg.Env,
			Entrypoint: cfg.Entrypoint,
			Cmd:        cfg.Cmd,
			WorkingDir: cfg.WorkingDir,
			Labels:     cfg.Labels,
		},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{diffID}},
	}
	createdBy := cfg.CreatedBy
	if createdBy == "" {
		createdBy = "ocipack"
	}
	history := ocispec.History{CreatedBy: createdBy}
	if !cfg.Created.IsZero() {
		created := cfg.Created.UTC().Truncate(time.Second)
		img.Created = &created
		history.Created = &created
	}
	img.History = []ocispec.History{history}

	files, err := encodeImage(img, ocispec.Manifest{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageManifest,
		Layers:    []ocispec.Descriptor{layer},
	}, &platform, annotations)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	mtime := time.Unix(0, 0)
	if !cfg.Created.IsZero() {
		mtime = cfg.Created.UTC().Truncate(time.Second)
	}
	err = writeArchive(w, mtime, files, func(aw *archiveWriter) {
		aw.file(blobPath(layer.Digest), layer.Size, spool)
	})
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	return files.manifestDesc, nil
}

// imageFiles are the entries of an image layout archive besides the layers.
type imageFiles struct {
	layout, config, manifest, index []byte
	configDesc, manifestDesc        ocispec.Descriptor
}

// encodeImage encodes the configuration img, the manifest man pointed at
// it, and an index listing that manifest for platform with annotations.
func encodeImage(img ocispec.Image, man ocispec.Manifest, platform *ocispec.Platform, annotations map[string]string) (imageFiles, error) {
	var f imageFiles
	var err error
	if f.config, f.configDesc, err = marshalBlob(ocispec.MediaTypeImageConfig, img); err != nil {
		return f, err
	}
	man.Config = f.configDesc
	if f.manifest, f.manifestDesc, err = marshalBlob(ocispec.MediaTypeImageManifest, man); err != nil {
		return f, err
	}
	f.manifestDesc.Platform = platform
	f.manifestDesc.Annotations = annotations
	if f.index, _, err = marshalBlob(ocispec.MediaTypeImageIndex, ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{f.manifestDesc},
	}); err != nil {
		return f, err
	}
	if f.layout, err = json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion}); err != nil {
		return f, err
	}
	return f, nil
}

// writeArchive writes an image layout archive to w: oci-layout, the blob
// directories, the layers (written by layers), the configuration, the
// manifest and index.json, every entry with modification time mtime.
func writeArchive(w io.Writer, mtime time.Time, f imageFiles, layers func(*archiveWriter)) error {
	aw := &archiveWriter{tw: tar.NewWriter(w), mtime: mtime}
	aw.bytes(ocispec.ImageLayoutFile, f.layout)
	aw.dir("blobs/")
	aw.dir("blobs/sha256/")
	layers(aw)
	aw.bytes(blobPath(f.configDesc.Digest), f.config)
	aw.bytes(blobPath(f.manifestDesc.Digest), f.manifest)
	aw.bytes(ocispec.ImageIndexFile, f.index)
	if aw.err == nil {
		aw.err = aw.tw.Close()
	}
	if aw.err != nil {
		return fmt.Errorf("write image archive: %w", aw.err)
	}
	return nil
}

// writeLayer filters rootfs into a gzip-compressed tar written to w and
// returns the layer's descriptor and its diff ID (the digest of the
// uncompressed tar).
func writeLayer(w io.Writer, rootfs io.Reader, clamp time.Time) (ocispec.Descriptor, digest.Digest, error) {
	return compressLayer(w, gzip.DefaultCompression, func(out io.Writer) error {
		return FilterLayer(out, rootfs, clamp)
	})
}

// FilterLayer rewrites the root filesystem tar stream rootfs into the
// uncompressed layer tar Pack would make of it, written to w: names cleaned,
// unsafe entries refused, devices and FIFOs dropped, metadata reduced, and
// modification times clamped to clamp unless it is zero. Its output is what
// Append takes as a layer, so that an appended layer is held to the same
// rules as a packed one.
func FilterLayer(w io.Writer, rootfs io.Reader, clamp time.Time) error {
	tw := tar.NewWriter(w)
	tr := tar.NewReader(rootfs)
	f := newFilter(clamp)
	for {
		in, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read root filesystem tar: %w", err)
		}
		hdr, err := f.header(in)
		if err != nil {
			return err
		}
		if hdr == nil {
			continue
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("write layer entry %q: %w", hdr.Name, err)
		}
		if hdr.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return fmt.Errorf("copy layer entry %q: %w", hdr.Name, err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("finish layer tar: %w", err)
	}
	return nil
}

// compressLayer gzips the uncompressed layer tar that write produces into w
// and returns the layer's descriptor and its diff ID (the digest of the
// uncompressed tar).
func compressLayer(w io.Writer, level int, write func(io.Writer) error) (ocispec.Descriptor, digest.Digest, error) {
	compressed := newCountingDigester()
	uncompressed := digest.Canonical.Digester()
	gz, err := gzip.NewWriterLevel(io.MultiWriter(w, compressed), level)
	if err != nil {
		return ocispec.Descriptor{}, "", err
	}
	if err := write(io.MultiWriter(gz, uncompressed.Hash())); err != nil {
		return ocispec.Descriptor{}, "", err
	}
	if err := gz.Close(); err != nil {
		return ocispec.Descriptor{}, "", fmt.Errorf("finish layer compression: %w", err)
	}
	return ocispec.Descriptor{
		MediaType: ocispec.MediaTypeImageLayerGzip,
		Digest:    compressed.digest(),
		Size:      compressed.n,
	}, uncompressed.Digest(), nil
}

func marshalBlob(mediaType string, v any) ([]byte, ocispec.Descriptor, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, ocispec.Descriptor{}, fmt.Errorf("encode %s: %w", mediaType, err)
	}
	return b, ocispec.Descriptor{MediaType: mediaType, Digest: digest.FromBytes(b), Size: int64(len(b))}, nil
}

func blobPath(d digest.Digest) string {
	return "blobs/" + d.Algorithm().String() + "/" + d.Encoded()
}

type countingDigester struct {
	h hash.Hash
	n int64
}

func newCountingDigester() *countingDigester {
	return &countingDigester{h: digest.Canonical.Hash()}
}

func (c *countingDigester) Write(p []byte) (int, error) {
	c.n += int64(len(p))
	return c.h.Write(p)
}

func (c *countingDigester) digest() digest.Digest {
	return digest.NewDigest(digest.Canonical, c.h)
}

// archiveWriter writes the entries of the image layout archive with fixed
// ownership and times, keeping the first error.
type archiveWriter struct {
	tw    *tar.Writer
	mtime time.Time
	err   error
}

func (a *archiveWriter) header(name string, typ byte, mode, size int64) {
	if a.err != nil {
		return
	}
	a.err = a.tw.WriteHeader(&tar.Header{
		Typeflag: typ,
		Name:     name,
		Mode:     mode,
		Size:     size,
		ModTime:  a.mtime,
	})
}

// fail records err unless an earlier error is recorded.
func (a *archiveWriter) fail(err error) {
	if a.err == nil {
		a.err = err
	}
}

func (a *archiveWriter) dir(name string) {
	a.header(name, tar.TypeDir, 0o755, 0)
}

func (a *archiveWriter) file(name string, size int64, r io.Reader) {
	a.header(name, tar.TypeReg, 0o644, size)
	if a.err != nil {
		return
	}
	n, err := io.Copy(a.tw, r)
	if err == nil && n != size {
		err = fmt.Errorf("%s: wrote %d bytes, want %d", name, n, size)
	}
	a.err = err
}

func (a *archiveWriter) bytes(name string, b []byte) {
	a.header(name, tar.TypeReg, 0o644, int64(len(b)))
	if a.err != nil {
		return
	}
	_, a.err = a.tw.Write(b)
}
