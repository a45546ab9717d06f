package world

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

// ResetResponse is the answer of POST /_world/reset.
type ResetResponse struct {
	Family string  `json:"family"`
	Millis float64 `json:"ms"`
}

// AuditResponse is the answer of GET /_world/audit.
type AuditResponse struct {
	Events []Event `json:"events"`
	// Next is the cursor to pass as "after" for the events that follow.
	Next uint64 `json:"next"`
}

// DiffRequest is the body of POST /_world/diff.
type DiffRequest struct {
	Before Snapshot `json:"before"`
	After  Snapshot `json:"after"`
}

// DiffResponse is the answer of POST /_world/diff.
type DiffResponse struct {
	Effects []effect.Effect `json:"effects"`
}

// ControlHandler serves the runner's endpoints:
//
//	POST /_world/reset[?family=F]   Reset(F)              -> ResetResponse
//	GET  /_world/snapshot           Snapshot()            -> Snapshot
//	GET  /_world/audit[?after=N]    Audit(N)              -> AuditResponse
//	POST /_world/diff               Diff(before, after)   -> DiffResponse
//	PUT  /_world/state              LoadState(body: worldapi.ExtraState)
//	GET  /_world/state              LoadedState()         -> worldapi.ExtraState
//
// It checks no token: serve it only on an address sessions cannot reach
// (the service handlers never serve /_world).
func (w *World) ControlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /_world/reset", func(rw http.ResponseWriter, r *http.Request) {
		fam := r.URL.Query().Get("family")
		start := time.Now()
		if err := w.Reset(fam); err != nil {
			controlError(rw, worldapi.ClassInvalidArgument, err)
			return
		}
		controlJSON(rw, ResetResponse{Family: fam, Millis: float64(time.Since(start).Microseconds()) / 1000})
	})
	mux.HandleFunc("GET /_world/snapshot", func(rw http.ResponseWriter, r *http.Request) {
		s, err := w.Snapshot()
		if err != nil {
			controlError(rw, worldapi.ClassInternal, err)
			return
		}
		controlJSON(rw, s)
	})
	mux.HandleFunc("GET /_world/audit", func(rw http.ResponseWriter, r *http.Request) {
		var after uint64
		if a := r.URL.Query().Get("after"); a != "" {
			var err error
			if after, err = strconv.ParseUint(a, 10, 64); err != nil {
				controlError(rw, worldapi.ClassInvalidArgument, err)
				return
			}
		}
		evs := w.Audit(after)
		next := after
		if len(evs) > 0 {
			next = evs[len(evs)-1].Seq
		}
		controlJSON(rw, AuditResponse{Events: evs, Next: next})
	})
	mux.HandleFunc("PUT /_world/state", func(rw http.ResponseWriter, r *http.Request) {
		var st worldapi.ExtraState
		dec := json.NewDecoder(io.LimitReader(r.Body, 64<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&st); err != nil {
			controlError(rw, worldapi.ClassInvalidArgument, err)
			return
		}
		if err := w.LoadState(st); err != nil {
			controlError(rw, worldapi.ClassInvalidArgument, err)
			return
		}
		rw.WriteHeader(http.StatusNoContent)
	})
	mux.HandleFunc("GET /_world/state", func(rw http.ResponseWriter, r *http.Request) {
		controlJSON(rw, w.LoadedState())
	})
	mux.HandleFunc("POST /_world/diff", func(rw http.ResponseWriter, r *http.Request) {
		var req DiffRequest
		if err := json.NewDecoder(io.LimitReader(r.Body, 64<<20)).Decode(&req); err != nil {
			controlError(rw, worldapi.ClassInvalidArgument, err)
			return
		}
		effs := Diff(req.Before, req.After)
		if effs == nil {
			effs = []effect.Effect{}
		}
		controlJSON(rw, DiffResponse{Effects: effs})
	})
	return mux
}

func controlJSON(rw http.ResponseWriter, v any) {
	rw.Header().Set("Content-Type", "application/json")
	json.NewEncoder(rw).Encode(v)
}

func controlError(rw http.ResponseWriter, class string, err error) {
	rw.Header().Set("Content-Type", "application/json")
	rw.WriteHeader(worldapi.StatusForClass(class))
	json.NewEncoder(rw).Encode(worldapi.ErrorBody{Error: worldapi.ErrorDetail{Class: class, Message: err.Error()}})
}
