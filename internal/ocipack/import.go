package ocipack

// Importing image archives into containerd and unpacking them into a
// snapshotter, so that containers can be created from them without a
// registry.
//
// Both archive formats containerd understands are accepted: OCI image layout
// tars (as written by Pack, `ctr export`, skopeo or buildah) and Docker
// archives (`docker save`). Images are named from the archive: the
// io.containerd.image.name annotation, Docker RepoTags, or a full reference in
// org.opencontainers.image.ref.name. Names are stored fully qualified
// ("airlock/agent:bookworm" is stored as "docker.io/airlock/agent:bookworm").

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	containerd "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/leases"
	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/errdefs"
	"github.com/containerd/platforms"
	"github.com/distribution/reference"
	digest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"golang.org/x/sys/unix"

	"github.com/airlock-sandbox/airlock/internal/log"
)

// ImportOptions control an import.
type ImportOptions struct {
	// Name, when set, names the archive's index as a whole (and so the
	// archive's image for the selected platform). It also completes
	// tag-only org.opencontainers.image.ref.name annotations: with Name
	// "example/app:1", a manifest annotated "v2" is named
	// "docker.io/example/app:v2". An archive that names no image needs it.
	Name string

	// Snapshotter to unpack into; empty means containerd's default
	// (overlayfs on Linux).
	Snapshotter string

	// Platform selects what is imported and unpacked; nil means the
	// client's default platform.
	Platform platforms.MatchComparer
}

// Import reads an OCI or Docker image archive from r into client's content
// store, creates or updates an image record for each name the archive gives
// (and for opts.Name), and unpacks each image into the snapshotter. Only
// content for the selected platform is imported.
//
// It returns the images named, each name once. If unpacking fails the image
// records stay, and the error says which image could not be unpacked.
func Import(ctx context.Context, client *containerd.Client, r io.Reader, opts ImportOptions) ([]images.Image, error) {
	imgs, err := importArchive(ctx, client, r, opts)
	if err != nil {
		return nil, err
	}
	for _, img := range imgs {
		var i containerd.Image
		if opts.Platform != nil {
			i = containerd.NewImageWithPlatform(client, img, opts.Platform)
		} else {
			i = containerd.NewImage(client, img)
		}
		if err := i.Unpack(ctx, opts.Snapshotter); err != nil {
			return nil, fmt.Errorf("unpack image %q: %w", img.Name, err)
		}
		if err := CheckNoDevices(ctx, client, i, opts.Snapshotter); err != nil {
			// Refused as a whole: none of the archive's names stays,
			// also when the caller has gone meanwhile. (A session of
			// one of them checks its image itself: see CheckNoDevices.)
			dctx := context.WithoutCancel(ctx)
			is := client.ImageService()
			for _, img := range imgs {
				if derr := is.Delete(dctx, img.Name); derr != nil && !errdefs.IsNotFound(derr) {
					log.G(ctx).Warn("refused image: delete its record", "image", img.Name, "error", derr)
				}
			}
			return nil, fmt.Errorf("the archive was not imported: %w", err)
		}
		log.G(ctx).Info("image imported", "image", img.Name, "target", img.Target.Digest.String(),
			"snapshotter", opts.Snapshotter)
	}
	return imgs, nil
}

// importArchive is Import without the unpacking.
func importArchive(ctx context.Context, client *containerd.Client, r io.Reader, opts ImportOptions) ([]images.Image, error) {
	var name string
	if opts.Name != "" {
		var err error
		if name, _, err = NormalizeRef(opts.Name); err != nil {
			return nil, err
		}
	}
	iopts := []containerd.ImportOpt{
		containerd.WithAllPlatforms(false),
		containerd.WithImageRefTranslator(refTranslator(name)),
	}
	if opts.Platform != nil {
		iopts = append(iopts, containerd.WithImportPlatform(opts.Platform))
	}
	if name != "" {
		iopts = append(iopts, containerd.WithIndexName(name))
	}
	imgs, err := client.Import(ctx, r, iopts...)
	if errors.Is(err, images.ErrEmptyWalk) {
		return nil, fmt.Errorf("image archive has no image for the selected platform: %w", errdefs.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("import image archive: %w", err)
	}
	imgs = lastByName(imgs)
	if len(imgs) == 0 {
		return nil, fmt.Errorf("image archive names no image; give it a name: %w", errdefs.ErrInvalidArgument)
	}
	return imgs, nil
}

// refTranslator turns an org.opencontainers.image.ref.name annotation into a
// stored image name. A full reference is normalized; a bare tag is added to
// the repository of name, or dropped when there is no name. Invalid
// references are dropped.
func refTranslator(name string) func(string) string {
	var repo string
	if name != "" {
		if named, err := reference.ParseNormalizedNamed(name); err == nil {
			repo = named.Name()
		}
	}
	return func(ref string) string {
		if !strings.ContainsAny(ref, "/:@") {
			if repo == "" {
				return ""
			}
			ref = repo + ":" + ref
		}
		named, err := reference.ParseDockerRef(ref)
		if err != nil {
			return ""
		}
		return named.String()
	}
}

// lastByName keeps one image per name: the last, which is the record the
// image store holds after the import. Order of first appearance is kept.
func lastByName(imgs []images.Image) []images.Image {
	idx := make(map[string]int, len(imgs))
	var out []images.Image
	for _, img := range imgs {
		if i, ok := idx[img.Name]; ok {
			out[i] = img
			continue
		}
		idx[img.Name] = len(out)
		out = append(out, img)
	}
	return out
}

// ArchiveImages reads the index of the OCI image layout archive r and
// returns the images Import without a Name would store from it: each stored
// name with the digest of its manifest. Blobs are skipped, not read, when r
// can seek. A Docker archive, or an OCI archive that names no image, gives
// an empty map.
func ArchiveImages(r io.Reader) (map[string]digest.Digest, error) {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return map[string]digest.Digest{}, nil
		}
		if err != nil {
			return nil, fmt.Errorf("read image archive: %w", err)
		}
		if name, err := CleanName(h.Name); err != nil || name != ocispec.ImageIndexFile || h.Typeflag != tar.TypeReg {
			continue
		}
		if h.Size > smallBlob {
			return nil, fmt.Errorf("image archive: %s has %d bytes", ocispec.ImageIndexFile, h.Size)
		}
		var idx ocispec.Index
		if err := json.NewDecoder(tr).Decode(&idx); err != nil {
			return nil, fmt.Errorf("image archive: %s: %w", ocispec.ImageIndexFile, err)
		}
		out := map[string]digest.Digest{}
		translate := refTranslator("")
		for _, m := range idx.Manifests {
			name := m.Annotations[images.AnnotationImageName]
			if name == "" {
				name = translate(m.Annotations[ocispec.AnnotationRefName])
			}
			if name != "" {
				out[name] = m.Digest
			}
		}
		return out, nil
	}
}

// LabelNoDevices marks the top snapshot of an image's unpacked layers
// whose files CheckNoDevices found free of device nodes.
const LabelNoDevices = "dev.airlock.no-devices"

// CheckNoDevices refuses an image whose files hold a device node. A
// session's devices are the runtime's, made in its own /dev; one shipped in
// an image's files would be opened wherever the runtime's devices cgroup
// admits its numbers (crun's always admits /dev/console, 5:1, the host's
// console), and crun's read-only remount of the root drops the nodev the
// snapshot is mounted with. It walks a read-only view of the unpacked
// image, in which whiteouts are hidden, once: the top snapshot of a clean
// image is labelled (LabelNoDevices), and a labelled one is not walked
// again. Import calls it, so that a bad archive is refused at once, and so
// does every session's rootfs (runtime.PrepareRootfs), so that no image
// reaches a session unchecked: one put into the store otherwise, one of an
// archive whose import failed before its turn, one imported before the
// check existed.
func CheckNoDevices(ctx context.Context, client *containerd.Client, img containerd.Image, snapshotter string) error {
	diffIDs, err := img.RootFS(ctx)
	if err != nil {
		return fmt.Errorf("image %q: %w", img.Name(), err)
	}
	if len(diffIDs) == 0 {
		return nil // no layer, no file
	}
	chain := identity.ChainID(diffIDs).String()
	sn := client.SnapshotService(snapshotter)
	info, err := sn.Stat(ctx, chain)
	if err != nil {
		return fmt.Errorf("image %q: its unpacked files: %w", img.Name(), err)
	}
	if info.Labels[LabelNoDevices] == "true" {
		return nil
	}
	if err := walkNoDevices(ctx, client, sn, img.Name(), chain); err != nil {
		return err
	}
	if info.Labels == nil {
		info.Labels = map[string]string{}
	}
	info.Labels[LabelNoDevices] = "true"
	if _, err := sn.Update(ctx, info, "labels."+LabelNoDevices); err != nil {
		log.G(ctx).Warn("label a checked image's snapshot", "image", img.Name(), "error", err)
	}
	return nil
}

// walkNoDevices walks a read-only view of snapshot chain for device nodes.
func walkNoDevices(ctx context.Context, client *containerd.Client, sn snapshots.Snapshotter, name, chain string) error {
	// The view is removed below; the lease keeps containerd's collector
	// off it meanwhile and removes it should this process die first.
	ctx, done, err := client.WithLease(ctx, leases.WithRandomID(), leases.WithExpiration(time.Hour))
	if err != nil {
		return fmt.Errorf("image %q: %w", name, err)
	}
	defer func() {
		if err := done(context.WithoutCancel(ctx)); err != nil {
			log.G(ctx).Warn("remove the image view's lease", "error", err)
		}
	}()
	start := time.Now()
	defer func() { log.G(ctx).Debug("image checked for device nodes", "image", name, "took", time.Since(start)) }()
	key := fmt.Sprintf("ocipack-devices-%s-%d", strings.TrimPrefix(chain, "sha256:")[:12], time.Now().UnixNano())
	mounts, err := sn.View(ctx, key, chain)
	if err != nil {
		return fmt.Errorf("image %q: view its files: %w", name, err)
	}
	defer func() {
		if err := sn.Remove(context.WithoutCancel(ctx), key); err != nil && !errdefs.IsNotFound(err) {
			log.G(ctx).Warn("remove image view", "key", key, "error", err)
		}
	}()
	var found []string
	err = mount.WithReadonlyTempMount(ctx, mounts, func(root string) error {
		return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if d.Type()&(fs.ModeDevice|fs.ModeCharDevice) == 0 {
				return nil
			}
			var st unix.Stat_t
			if err := unix.Lstat(path, &st); err != nil {
				if errors.Is(err, unix.ENOENT) {
					return nil // a whiteout readdir still listed: nothing there
				}
				return err
			}
			kind := "block"
			if st.Mode&unix.S_IFMT == unix.S_IFCHR {
				if st.Rdev == 0 {
					return nil // a whiteout (0:0): opens as nothing
				}
				kind = "char"
			} else if st.Mode&unix.S_IFMT != unix.S_IFBLK {
				return nil
			}
			rel := "/" + strings.TrimPrefix(strings.TrimPrefix(path, root), "/")
			found = append(found, fmt.Sprintf("%s (%s %d:%d)", rel, kind, unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))))
			if len(found) == 5 {
				return fs.SkipAll
			}
			return nil
		})
	})
	if err != nil {
		return fmt.Errorf("image %q: read its files: %w", name, err)
	}
	if len(found) > 0 {
		return fmt.Errorf("image %q holds device nodes (%s): a session's devices are the runtime's, not its image's; "+
			"remove them from the image: %w", name, strings.Join(found, ", "), errdefs.ErrInvalidArgument)
	}
	return nil
}
