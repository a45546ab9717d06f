package runtime

import (
	"context"
	"fmt"
	"io"
	"os"
	"sort"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/ocipack"
)

// Images lists the images sessions can use, by name.
func (r *Runtime) Images(ctx context.Context) ([]api.Image, error) {
	ctx = r.ctx(ctx)
	imgs, err := r.client.ListImages(ctx)
	if err != nil {
		return nil, err
	}
	out := make([]api.Image, 0, len(imgs))
	for _, img := range imgs {
		size, _ := img.Size(ctx)
		var labels map[string]string
		if spec, err := img.Spec(ctx); err == nil && len(spec.Config.Labels) > 0 {
			labels = spec.Config.Labels
		}
		out = append(out, api.Image{Name: img.Name(), Digest: img.Target().Digest.String(), Size: size, Created: img.Metadata().CreatedAt, Labels: labels})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

// ImportImage imports the images of the OCI or Docker archive in rd and
// unpacks them for sessions; name is ocipack.ImportOptions.Name.
func (r *Runtime) ImportImage(ctx context.Context, rd io.Reader, name string) ([]api.Image, error) {
	imgs, err := ocipack.Import(r.ctx(ctx), r.client, rd, ocipack.ImportOptions{Name: name, Snapshotter: r.cfg.Snapshotter})
	if err != nil {
		return nil, err
	}
	out := make([]api.Image, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, api.Image{Name: img.Name, Digest: img.Target.Digest.String(), Size: img.Target.Size, Created: img.CreatedAt})
	}
	return out, nil
}

// ImportImageFile imports the image archive at path as ImportImage does
// (with no name), unless every image the archive names is in the store
// already with the same manifest and unpacked: then it returns those images
// and imported is false, having read only the archive's index. A Docker
// archive, which names its images differently, is always imported.
func (r *Runtime) ImportImageFile(ctx context.Context, path string) (_ []api.Image, imported bool, _ error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false, err
	}
	defer f.Close()
	names, err := ocipack.ArchiveImages(f)
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	var have []api.Image
	cctx := r.ctx(ctx)
	for name, dgst := range names {
		img, err := r.client.GetImage(cctx, name)
		if err != nil || img.Target().Digest != dgst {
			have = nil
			break
		}
		if ok, err := img.IsUnpacked(cctx, r.cfg.Snapshotter); err != nil || !ok {
			have = nil
			break
		}
		have = append(have, api.Image{Name: img.Name(), Digest: dgst.String(), Size: img.Target().Size, Created: img.Metadata().CreatedAt})
	}
	if len(have) > 0 {
		sort.Slice(have, func(i, j int) bool { return have[i].Name < have[j].Name })
		return have, false, nil
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, false, err
	}
	imgs, err := r.ImportImage(ctx, f, "")
	if err != nil {
		return nil, false, fmt.Errorf("%s: %w", path, err)
	}
	return imgs, true, nil
}
