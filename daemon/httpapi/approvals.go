package httpapi

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/caller"
)

// ndjson is the media type of a stream of JSON lines.
const ndjson = "application/x-ndjson"

// handleApprovals lists the requests held for approval (of one session
// with ?session=ID), or with ?follow=1 streams them and then every new
// hold and decision as JSON lines (api.ApprovalEvent) until the client
// goes away.
func (h *server) handleApprovals(w http.ResponseWriter, r *http.Request) {
	follow, err := boolQuery(r, "follow", false)
	if err != nil {
		writeError(w, r, err)
		return
	}
	session := r.URL.Query().Get("session")
	if session != "" {
		if err := h.d.CheckSession(session); err != nil {
			writeError(w, r, err)
			return
		}
	}
	store := h.d.Approvals()
	if !follow {
		writeJSON(w, http.StatusOK, store.List(session))
		return
	}
	f, pending := store.Follow(session)
	defer f.Close()
	flush := flusher(w)
	w.Header().Set("Content-Type", ndjson)
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	for i := range pending {
		if enc.Encode(api.ApprovalEvent{Type: api.ApprovalHeld, Approval: &pending[i]}) != nil {
			return
		}
	}
	flush()
	for {
		ev, err := f.Next(r.Context())
		if err != nil {
			return
		}
		if enc.Encode(ev) != nil {
			return
		}
		flush()
	}
}

// handleDecide allows or denies a held request, in the name of the API's
// caller as its socket connection shows it; with revise, allows it by a
// revision of its session's policy (Daemon.ApproveRevise).
func (h *server) handleDecide(w http.ResponseWriter, r *http.Request) {
	var req api.ApprovalDecision
	if err := decodeJSON(r, &req); err != nil {
		writeError(w, r, err)
		return
	}
	var allow bool
	switch req.Decision {
	case api.DecisionAllow:
		allow = true
	case api.DecisionDeny:
	default:
		writeError(w, r, fmt.Errorf("decision must be %q or %q, not %q: %w", api.DecisionAllow, api.DecisionDeny, req.Decision, errdefs.ErrInvalidArgument))
		return
	}
	if req.Revise && !allow {
		writeError(w, r, fmt.Errorf("revise goes with decision %q: a denial changes no policy: %w", api.DecisionAllow, errdefs.ErrInvalidArgument))
		return
	}
	var a api.Approval
	var err error
	if req.Revise {
		a, err = h.d.ApproveRevise(r.Context(), r.PathValue("id"), req.Reason, caller.Name(r.Context()))
	} else {
		a, err = h.d.Approvals().Decide(r.Context(), r.PathValue("id"), allow, req.Reason, caller.Name(r.Context()))
	}
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, a)
}
