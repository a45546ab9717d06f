package httpapi

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"

	"github.com/airlock-sandbox/airlock/internal/log"
)

// handleAudit streams the session's events as a JSON array, one event per
// line, in constant memory. An error after the array has begun aborts the
// response, so that a client never takes a cut-off array for the whole log.
func (h *server) handleAudit(w http.ResponseWriter, r *http.Request) {
	var bw *bufio.Writer
	err := h.d.AuditEach(r.Context(), r.PathValue("id"), func(raw json.RawMessage) error {
		sep := ",\n"
		if bw == nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			bw = bufio.NewWriterSize(w, 32<<10)
			sep = "[\n"
		}
		_, _ = bw.WriteString(sep)
		_, err := bw.Write(raw)
		return err
	})
	switch {
	case err != nil && bw == nil:
		writeError(w, r, err)
	case err != nil:
		if r.Context().Err() == nil {
			log.G(r.Context()).Error("audit: read aborted", "session", r.PathValue("id"), "error", err)
		}
		panic(http.ErrAbortHandler)
	case bw == nil:
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "[]\n")
	default:
		_, _ = bw.WriteString("\n]\n")
		_ = bw.Flush()
	}
}
