package ocipack

import (
	"archive/tar"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/klauspost/compress/gzip"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
)

// smallBlob bounds the archive entries kept in memory while reading an
// archive: index, manifests and configurations are far smaller. A variable
// for the tests of the second pass.
var smallBlob int64 = 4 << 20

// AppendConfig says how Append changes the base image.
type AppendConfig struct {
	// Ref names the new image (required), normalized as Config.Ref.
	Ref string
	// Env entries "KEY=VALUE" replace the base's value of KEY or are
	// appended.
	Env []string
	// Labels are merged into the base's labels.
	Labels map[string]string
	// CreatedBy is recorded in the image history.
	CreatedBy string
	// Created is the new image's creation time; zero keeps the base's.
	Created time.Time
	// TempDir holds the compressed layer while the archive is written;
	// empty means os.TempDir().
	TempDir string
}

// Append reads the OCI image layout archive base, holding one image (or
// one image per platform, of which the running platform's is taken), and
// writes to w an archive of a new image: base's image with layer (an
// uncompressed tar stream, taken as it is) added on top as a gzip layer,
// and cfg applied to its configuration. The base's blobs are copied
// unchanged, after checking their digests; nothing is unpacked. It returns
// the new image's manifest descriptor.
func Append(w io.Writer, base io.ReadSeeker, layer io.Reader, cfg AppendConfig) (_ ocispec.Descriptor, retErr error) {
	name, tag, err := NormalizeRef(cfg.Ref)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	small, err := readSmall(base)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	mdesc, man, img, err := baseImage(small)
	if err != nil {
		return ocispec.Descriptor{}, err
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
	layerDesc, diffID, err := compressLayer(spool, gzip.BestSpeed, func(out io.Writer) error {
		if _, err := io.Copy(out, layer); err != nil {
			return fmt.Errorf("read layer: %w", err)
		}
		return nil
	})
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	if _, err := spool.Seek(0, io.SeekStart); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("rewind layer spool: %w", err)
	}

	img.RootFS.DiffIDs = append(img.RootFS.DiffIDs, diffID)
	img.Config.Env = mergeEnv(img.Config.Env, cfg.Env)
	if len(cfg.Labels) > 0 && img.Config.Labels == nil {
		img.Config.Labels = map[string]string{}
	}
	for k, v := range cfg.Labels {
		img.Config.Labels[k] = v
	}
	hist := ocispec.History{CreatedBy: cfg.CreatedBy}
	if !cfg.Created.IsZero() {
		t := cfg.Created.UTC().Truncate(time.Second)
		img.Created, hist.Created = &t, &t
	}
	img.History = append(img.History, hist)
	baseLayers := man.Layers
	man.Layers = append(slices.Clone(man.Layers), layerDesc)
	platform := mdesc.Platform
	if platform == nil {
		platform = &img.Platform
	}
	files, err := encodeImage(img, man, platform, map[string]string{images.AnnotationImageName: name, ocispec.AnnotationRefName: tag})
	if err != nil {
		return ocispec.Descriptor{}, err
	}

	mtime := time.Unix(0, 0)
	if img.Created != nil {
		mtime = *img.Created
	}
	var baseErr error // a fault of the base archive, reported as it is
	err = writeArchive(w, mtime, files, func(aw *archiveWriter) {
		// The base's layers: those kept in memory first, then the others
		// in a second pass over the archive.
		want := map[string]ocispec.Descriptor{}
		kept := map[string]bool{}
		for _, l := range baseLayers {
			p := blobPath(l.Digest)
			if kept[p] {
				continue // a layer listed twice is one blob
			}
			b, ok := small[p]
			if !ok {
				want[p] = l
				continue
			}
			if digest.FromBytes(b) != l.Digest || int64(len(b)) != l.Size {
				baseErr = fmt.Errorf("base archive: %s does not match its descriptor", p)
				aw.fail(baseErr)
				return
			}
			aw.bytes(p, b)
			kept[p] = true
		}
		if len(want) > 0 {
			if baseErr = copyBlobs(base, want, aw); baseErr != nil {
				aw.fail(baseErr)
				return
			}
		}
		aw.file(blobPath(layerDesc.Digest), layerDesc.Size, spool)
	})
	if baseErr != nil {
		return ocispec.Descriptor{}, baseErr
	}
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	return files.manifestDesc, nil
}

// readSmall reads the regular files of the archive no larger than
// smallBlob, keyed by clean name.
func readSmall(r io.ReadSeeker) (map[string][]byte, error) {
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read base archive: %w", err)
		}
		if h.Typeflag != tar.TypeReg || h.Size > smallBlob {
			continue
		}
		name, err := CleanName(h.Name)
		if err != nil {
			return nil, fmt.Errorf("read base archive: %w", err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			return nil, fmt.Errorf("read base archive %s: %w", name, err)
		}
		out[name] = b
	}
}

// copyBlobs copies the archive entries named in want to aw, verifying
// their digests.
func copyBlobs(r io.ReadSeeker, want map[string]ocispec.Descriptor, aw *archiveWriter) error {
	if _, err := r.Seek(0, io.SeekStart); err != nil {
		return err
	}
	tr := tar.NewReader(r)
	for len(want) > 0 {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return fmt.Errorf("read base archive: %w", err)
		}
		name, err := CleanName(h.Name)
		if err != nil {
			return fmt.Errorf("read base archive: %w", err)
		}
		d, ok := want[name]
		if !ok || h.Typeflag != tar.TypeReg {
			continue
		}
		if h.Size != d.Size {
			return fmt.Errorf("base archive: %s has %d bytes, its descriptor says %d", name, h.Size, d.Size)
		}
		v := d.Digest.Verifier()
		aw.file(name, h.Size, io.TeeReader(tr, v))
		if aw.err != nil {
			return nil // reported by the archive writer
		}
		if !v.Verified() {
			return fmt.Errorf("base archive: %s does not match its digest", name)
		}
		delete(want, name)
	}
	for name := range want {
		return fmt.Errorf("base archive: layer %s is missing: %w", name, errdefs.ErrNotFound)
	}
	return nil
}

// baseImage finds the base archive's image for the running platform.
func baseImage(small map[string][]byte) (ocispec.Descriptor, ocispec.Manifest, ocispec.Image, error) {
	var (
		idx ocispec.Index
		man ocispec.Manifest
		img ocispec.Image
	)
	raw, ok := small[ocispec.ImageIndexFile]
	if !ok {
		return ocispec.Descriptor{}, man, img, fmt.Errorf("base archive: no %s (not an OCI image layout): %w", ocispec.ImageIndexFile, errdefs.ErrInvalidArgument)
	}
	if err := json.Unmarshal(raw, &idx); err != nil {
		return ocispec.Descriptor{}, man, img, fmt.Errorf("base archive: %s: %w", ocispec.ImageIndexFile, err)
	}
	var cands []ocispec.Descriptor
	for _, m := range idx.Manifests {
		if m.MediaType != ocispec.MediaTypeImageManifest && m.MediaType != images.MediaTypeDockerSchema2Manifest {
			continue
		}
		if m.Platform == nil || (m.Platform.OS == "linux" && m.Platform.Architecture == runtime.GOARCH) {
			cands = append(cands, m)
		}
	}
	if len(cands) != 1 {
		return ocispec.Descriptor{}, man, img, fmt.Errorf("base archive: want one image manifest for linux/%s, found %d: %w", runtime.GOARCH, len(cands), errdefs.ErrInvalidArgument)
	}
	mdesc := cands[0]
	if err := blobJSON(small, mdesc, &man); err != nil {
		return ocispec.Descriptor{}, man, img, err
	}
	if err := blobJSON(small, man.Config, &img); err != nil {
		return ocispec.Descriptor{}, man, img, err
	}
	if len(img.RootFS.DiffIDs) != len(man.Layers) {
		return ocispec.Descriptor{}, man, img, fmt.Errorf("base archive: %d layers but %d diff ids: %w", len(man.Layers), len(img.RootFS.DiffIDs), errdefs.ErrInvalidArgument)
	}
	return mdesc, man, img, nil
}

func blobJSON(small map[string][]byte, d ocispec.Descriptor, v any) error {
	if err := d.Digest.Validate(); err != nil {
		return fmt.Errorf("base archive: %w", err)
	}
	b, ok := small[blobPath(d.Digest)]
	if !ok {
		return fmt.Errorf("base archive: blob %s is missing: %w", d.Digest, errdefs.ErrNotFound)
	}
	if digest.FromBytes(b) != d.Digest {
		return fmt.Errorf("base archive: blob %s does not match its digest", d.Digest)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("base archive: blob %s: %w", d.Digest, err)
	}
	return nil
}

func mergeEnv(base, add []string) []string {
	out := slices.Clone(base)
	for _, e := range add {
		k, _, _ := strings.Cut(e, "=")
		i := slices.IndexFunc(out, func(o string) bool { ok, _, _ := strings.Cut(o, "="); return ok == k })
		if i >= 0 {
			out[i] = e
		} else {
			out = append(out, e)
		}
	}
	return out
}
