package httpapi

import (
	"fmt"
	"io"
	"net/http"

	"github.com/containerd/errdefs"
)

// maxImageArchive bounds an uploaded image archive.
const maxImageArchive = 8 << 30

func (h *server) handleImages(w http.ResponseWriter, r *http.Request) {
	out, err := h.d.Images(r.Context())
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}

func (h *server) handleImageImport(w http.ResponseWriter, r *http.Request) {
	name := r.URL.Query().Get("name")
	if r.Body == nil || r.ContentLength == 0 {
		writeError(w, r, fmt.Errorf("import needs an OCI or Docker archive as the request body: %w", errdefs.ErrInvalidArgument))
		return
	}
	out, err := h.d.ImportImage(r.Context(), io.LimitReader(r.Body, maxImageArchive), name)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, out)
}
