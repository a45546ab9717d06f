package daemon

import (
	"context"
	"io"
	"sort"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/ocipack"
)

// Images lists the runtime's images by name.
func (d *Daemon) Images(ctx context.Context) ([]api.Image, error) {
	imgs, err := d.runtime.Client().ListImages(ctx)
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

// ImportImage imports the images of the OCI or Docker archive r into the
// runtime; name is ocipack.ImportOptions.Name.
func (d *Daemon) ImportImage(ctx context.Context, r io.Reader, name string) ([]api.Image, error) {
	imgs, err := ocipack.Import(ctx, d.runtime.Client(), r, ocipack.ImportOptions{
		Name: name, Snapshotter: d.runtime.Snapshotter(),
	})
	if err != nil {
		return nil, err
	}
	out := make([]api.Image, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, api.Image{Name: img.Name, Digest: img.Target.Digest.String(), Size: img.Target.Size, Created: img.CreatedAt})
	}
	return out, nil
}
