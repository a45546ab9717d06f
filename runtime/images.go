package runtime

import (
	"context"
	"io"
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
		out = append(out, api.Image{Name: img.Name(), Digest: img.Target().Digest.String(), Size: size, Created: img.Metadata().CreatedAt})
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
