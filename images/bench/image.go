// Package benchimage builds airlock/bench:bookworm, the image of `airlock
// bench`'s sessions: the agent image plus one layer with the benchmark's
// multi-call client (squeue, scontrol, scancel, kubectl, aws and
// git-credential-airlock) and a system git configuration that uses the
// credential helper.
//
// The image is made by appending a layer to the agent image's OCI archive:
// the agent's blobs are copied unchanged, and a new layer, configuration,
// manifest and index are written after them. Nothing is unpacked.
package benchimage

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/errdefs"
	"github.com/opencontainers/go-digest"
	specs "github.com/opencontainers/image-spec/specs-go"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/airlock-sandbox/airlock/internal/ocipack"
)

// Ref is the image's name.
const Ref = "airlock/bench:bookworm"

// CLIPath is where the client binary is installed in the image.
const CLIPath = "/usr/local/bin/airlock-bench-cli"

// Links are the command names installed as symlinks to the client, beside
// it.
var Links = []string{"squeue", "scontrol", "scancel", "kubectl", "aws", "git-credential-airlock"}

// Env is added to the image's environment: git fails instead of prompting
// when the helper has no credential for a host.
var Env = []string{"GIT_TERMINAL_PROMPT=0"}

// GitConfig is the image's /etc/gitconfig.
//
//go:embed gitconfig
var GitConfig []byte

// builderVersion changes whenever the layer's content rules change, so that
// cached archives of older rules are not reused.
const builderVersion = "airlock-bench-image/1"

// epoch is the time stamp of the layer's files and of the image (the agent
// recipe's SOURCE_DATE_EPOCH), so that equal inputs give equal archives.
var epoch = time.Unix(1767225600, 0).UTC()

// smallBlob bounds the archive entries kept in memory while reading an
// archive: index, manifests and configurations are far smaller.
const smallBlob = 4 << 20

// Layer returns the bench layer, an uncompressed tar stream, holding the
// client binary cli.
func Layer(cli []byte) ([]byte, error) {
	if len(cli) == 0 {
		return nil, fmt.Errorf("bench layer: empty client binary: %w", errdefs.ErrInvalidArgument)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	hdr := func(h *tar.Header) error {
		h.ModTime, h.Uname, h.Gname = epoch, "root", "root"
		h.Format = tar.FormatPAX
		return tw.WriteHeader(h)
	}
	for _, d := range []string{"etc/", "usr/", "usr/local/", "usr/local/bin/"} {
		if err := hdr(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755}); err != nil {
			return nil, err
		}
	}
	if err := hdr(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/gitconfig", Mode: 0o644, Size: int64(len(GitConfig))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(GitConfig); err != nil {
		return nil, err
	}
	bin := strings.TrimPrefix(CLIPath, "/")
	if err := hdr(&tar.Header{Typeflag: tar.TypeReg, Name: bin, Mode: 0o755, Size: int64(len(cli))}); err != nil {
		return nil, err
	}
	if _, err := tw.Write(cli); err != nil {
		return nil, err
	}
	for _, l := range Links {
		if err := hdr(&tar.Header{Typeflag: tar.TypeSymlink, Name: path.Join(path.Dir(bin), l), Linkname: path.Base(bin), Mode: 0o777}); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// AppendConfig says how AppendLayer changes the base image.
type AppendConfig struct {
	// Ref names the new image (required).
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
}

// AppendLayer reads the OCI image layout archive base, holding one image
// (or one image per platform, of which the running platform's is taken),
// and writes to w an archive of a new image: base's image with layer (an
// uncompressed tar stream) added on top as a gzip layer, and cfg applied to
// its configuration. It returns the new image's manifest descriptor.
func AppendLayer(w io.Writer, base io.ReadSeeker, layer io.Reader, cfg AppendConfig) (ocispec.Descriptor, error) {
	name, tag, err := ocipack.NormalizeRef(cfg.Ref)
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

	// The new layer, compressed, with its digests.
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzip.BestSpeed)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	diffID := digest.Canonical.Digester()
	if _, err := io.Copy(io.MultiWriter(zw, diffID.Hash()), layer); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("read layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return ocispec.Descriptor{}, err
	}
	layerDesc := ocispec.Descriptor{MediaType: ocispec.MediaTypeImageLayerGzip, Digest: digest.FromBytes(gz.Bytes()), Size: int64(gz.Len())}

	img.RootFS.DiffIDs = append(img.RootFS.DiffIDs, diffID.Digest())
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
	configJSON, configDesc, err := marshalBlob(ocispec.MediaTypeImageConfig, img)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	man.Config = configDesc
	man.Layers = append(slices.Clone(man.Layers), layerDesc)
	manifestJSON, manifestDesc, err := marshalBlob(ocispec.MediaTypeImageManifest, man)
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	manifestDesc.Platform = mdesc.Platform
	if manifestDesc.Platform == nil {
		manifestDesc.Platform = &img.Platform
	}
	manifestDesc.Annotations = map[string]string{images.AnnotationImageName: name, ocispec.AnnotationRefName: tag}
	indexJSON, _, err := marshalBlob(ocispec.MediaTypeImageIndex, ocispec.Index{
		Versioned: specs.Versioned{SchemaVersion: 2},
		MediaType: ocispec.MediaTypeImageIndex,
		Manifests: []ocispec.Descriptor{manifestDesc},
	})
	if err != nil {
		return ocispec.Descriptor{}, err
	}
	layoutJSON, err := json.Marshal(ocispec.ImageLayout{Version: ocispec.ImageLayoutVersion})
	if err != nil {
		return ocispec.Descriptor{}, err
	}

	tw := tar.NewWriter(w)
	mtime := epoch
	if img.Created != nil {
		mtime = *img.Created
	}
	put := func(name string, typ byte, size int64, r io.Reader) error {
		mode := int64(0o644)
		if typ == tar.TypeDir {
			mode = 0o755
		}
		if err := tw.WriteHeader(&tar.Header{Typeflag: typ, Name: name, Mode: mode, Size: size, ModTime: mtime}); err != nil {
			return fmt.Errorf("write image archive: %w", err)
		}
		if r == nil {
			return nil
		}
		n, err := io.Copy(tw, r)
		if err == nil && n != size {
			err = fmt.Errorf("%s: wrote %d bytes, want %d", name, n, size)
		}
		if err != nil {
			return fmt.Errorf("write image archive: %w", err)
		}
		return nil
	}
	if err := put(ocispec.ImageLayoutFile, tar.TypeReg, int64(len(layoutJSON)), bytes.NewReader(layoutJSON)); err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := put("blobs/", tar.TypeDir, 0, nil); err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := put("blobs/sha256/", tar.TypeDir, 0, nil); err != nil {
		return ocispec.Descriptor{}, err
	}
	// The base's layers, in a second pass over the archive for those too
	// large to have been kept.
	want := map[string]ocispec.Descriptor{}
	for _, l := range man.Layers[:len(man.Layers)-1] {
		want[blobPath(l.Digest)] = l
	}
	for p, l := range want {
		if b, ok := small[p]; ok {
			if digest.FromBytes(b) != l.Digest || int64(len(b)) != l.Size {
				return ocispec.Descriptor{}, fmt.Errorf("base archive: %s does not match its descriptor", p)
			}
			if err := put(p, tar.TypeReg, l.Size, bytes.NewReader(b)); err != nil {
				return ocispec.Descriptor{}, err
			}
			delete(want, p)
		}
	}
	if len(want) > 0 {
		if err := copyBlobs(base, want, put); err != nil {
			return ocispec.Descriptor{}, err
		}
	}
	for _, b := range []struct {
		d    ocispec.Descriptor
		data []byte
	}{{layerDesc, gz.Bytes()}, {configDesc, configJSON}, {manifestDesc, manifestJSON}} {
		if err := put(blobPath(b.d.Digest), tar.TypeReg, int64(len(b.data)), bytes.NewReader(b.data)); err != nil {
			return ocispec.Descriptor{}, err
		}
	}
	if err := put(ocispec.ImageIndexFile, tar.TypeReg, int64(len(indexJSON)), bytes.NewReader(indexJSON)); err != nil {
		return ocispec.Descriptor{}, err
	}
	if err := tw.Close(); err != nil {
		return ocispec.Descriptor{}, fmt.Errorf("write image archive: %w", err)
	}
	return manifestDesc, nil
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
		name, err := ocipack.CleanName(h.Name)
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

// copyBlobs copies the archive entries named in want, verifying their
// digests.
func copyBlobs(r io.ReadSeeker, want map[string]ocispec.Descriptor, put func(string, byte, int64, io.Reader) error) error {
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
		name, err := ocipack.CleanName(h.Name)
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
		if err := put(name, tar.TypeReg, h.Size, io.TeeReader(tr, v)); err != nil {
			return err
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

// Build returns the path of the bench image archive made from the agent
// image archive and the client binary, building it into cacheDir unless an
// archive of the same inputs is there already. Inputs are identified by the
// agent archive's path, size and modification time and by the client's
// content.
func Build(agentArchive, cliBinary, cacheDir string) (string, error) {
	cli, err := os.ReadFile(cliBinary)
	if err != nil {
		return "", fmt.Errorf("bench image: client binary: %w", err)
	}
	abs, err := filepath.Abs(agentArchive)
	if err != nil {
		return "", err
	}
	base, err := os.Open(abs)
	if err != nil {
		return "", fmt.Errorf("bench image: agent image archive: %w", err)
	}
	defer base.Close()
	fi, err := base.Stat()
	if err != nil {
		return "", err
	}
	h := sha256.New()
	fmt.Fprintf(h, "%s\n%s\n%d\n%d\n", builderVersion, abs, fi.Size(), fi.ModTime().UnixNano())
	h.Write(GitConfig)
	cliSum := sha256.Sum256(cli)
	h.Write(cliSum[:])
	fmt.Fprintf(h, "%q %q\n", Links, Env)
	key := hex.EncodeToString(h.Sum(nil))[:16]
	out := filepath.Join(cacheDir, "airlock-bench-"+key+".tar")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	if err := os.MkdirAll(cacheDir, 0o755); err != nil {
		return "", err
	}
	layer, err := Layer(cli)
	if err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(cacheDir, ".airlock-bench-*.tar")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	_, err = AppendLayer(tmp, base, bytes.NewReader(layer), AppendConfig{
		Ref:       Ref,
		Env:       Env,
		Labels:    map[string]string{"dev.airlock.image.bench": key},
		CreatedBy: "airlock bench: airlock-bench-cli and /etc/gitconfig",
		Created:   epoch,
	})
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("bench image: %w", err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return "", err
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}
