package httpapi

import (
	"fmt"
	"net/http"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
)

func (h *server) handleDiff(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	switch r.URL.Query().Get("format") {
	case "", "json":
		cs, err := h.d.Diff(r.Context(), id)
		if err != nil {
			writeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, cs)
	case "unified":
		diff, err := h.d.UnifiedDiff(id)
		if err != nil {
			writeError(w, r, err)
			return
		}
		w.Header().Set("Content-Type", "text/x-diff; charset=utf-8")
		if err := diff(r.Context(), w); err != nil {
			log.G(r.Context()).Error("unified diff", "session", id, "error", err)
		}
	default:
		writeError(w, r, fmt.Errorf("format must be json or unified: %w", errdefs.ErrInvalidArgument))
	}
}

func (h *server) handleCommit(w http.ResponseWriter, r *http.Request) {
	var req api.CommitRequest
	if r.ContentLength != 0 {
		if err := decodeJSON(r, &req); err != nil {
			writeError(w, r, err)
			return
		}
	}
	res, err := h.d.Commit(r.Context(), r.PathValue("id"), req)
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (h *server) handleDiscard(w http.ResponseWriter, r *http.Request) {
	if err := h.d.Discard(r.Context(), r.PathValue("id")); err != nil {
		writeError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
