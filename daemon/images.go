package daemon

import (
	"fmt"
	"io"
	"net/http"
	"sort"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/ocipack"
)

// maxImageArchive bounds an uploaded image archive.
const maxImageArchive = 8 << 30

func (d *Daemon) handleImages(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	imgs, err := d.runtime.Client().ListImages(ctx)
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]api.Image, 0, len(imgs))
	for _, img := range imgs {
		size, _ := img.Size(ctx)
		out = append(out, api.Image{Name: img.Name(), Digest: img.Target().Digest.String(), Size: size, Created: img.Metadata().CreatedAt})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	writeJSON(w, http.StatusOK, out)
}

func (d *Daemon) handleImageImport(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if r.Body == nil || r.ContentLength == 0 {
		writeError(w, r, fmt.Errorf("import needs an OCI or Docker archive as the request body: %w", errdefs.ErrInvalidArgument))
		return
	}
	imgs, err := ocipack.Import(r.Context(), d.runtime.Client(), io.LimitReader(r.Body, maxImageArchive), ocipack.ImportOptions{
		Name: name, Snapshotter: d.runtime.Snapshotter(),
	})
	if err != nil {
		writeError(w, r, err)
		return
	}
	out := make([]api.Image, 0, len(imgs))
	for _, img := range imgs {
		out = append(out, api.Image{Name: img.Name, Digest: img.Target.Digest.String(), Size: img.Target.Size, Created: img.CreatedAt})
	}
	writeJSON(w, http.StatusOK, out)
}
