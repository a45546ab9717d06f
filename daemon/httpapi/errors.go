package httpapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/errdefs"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

func flusher(w http.ResponseWriter) func() {
	rc := http.NewResponseController(w)
	return func() { _ = rc.Flush() }
}

func boolQuery(r *http.Request, key string, def bool) (bool, error) {
	v := r.URL.Query().Get(key)
	if v == "" {
		return def, nil
	}
	b, err := strconv.ParseBool(v)
	if err != nil {
		return false, fmt.Errorf("query parameter %s=%q is not a boolean: %w", key, v, errdefs.ErrInvalidArgument)
	}
	return b, nil
}

func decodeJSON(r *http.Request, v any) error {
	dec := json.NewDecoder(io.LimitReader(r.Body, maxJSONBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("request body: %v: %w", err, errdefs.ErrInvalidArgument)
	}
	return nil
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// ErrorDetail converts an error into the API's error envelope.
func ErrorDetail(err error) (int, api.ErrorDetail) {
	status, class := http.StatusInternalServerError, api.ClassInternal
	switch {
	case errdefs.IsInvalidArgument(err):
		status, class = http.StatusBadRequest, api.ClassInvalidArgument
	case errdefs.IsNotFound(err):
		status, class = http.StatusNotFound, api.ClassNotFound
	case errdefs.IsAlreadyExists(err):
		status, class = http.StatusConflict, api.ClassAlreadyExists
	case errdefs.IsFailedPrecondition(err), errdefs.IsConflict(err):
		status, class = http.StatusConflict, api.ClassFailedPrecondition
	case errdefs.IsPermissionDenied(err):
		status, class = http.StatusForbidden, api.ClassPermissionDenied
	case errdefs.IsUnavailable(err):
		status, class = http.StatusServiceUnavailable, api.ClassUnavailable
	case errdefs.IsResourceExhausted(err), errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		status, class = http.StatusInsufficientStorage, api.ClassResourceExhausted
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		status, class = http.StatusServiceUnavailable, api.ClassUnavailable
	}
	detail := api.ErrorDetail{Class: class, Message: cleanMessage(err.Error())}
	if st, ok := grpcstatus.FromError(err); ok && st.Code() == codes.Unavailable {
		// The daemon's one gRPC peer is containerd; while it is down,
		// the daemon restarts (or reconnects to) it.
		detail.Message = "containerd unavailable, retrying: " + detail.Message
	}
	var ve *policies.ValidationError
	var ae *policies.AdmissionError
	switch {
	case errors.As(err, &ve):
		detail.Message = "invalid policy"
		detail.Details = ve.Problems
	case errors.As(err, &ae):
		detail.Message = "admission"
		detail.Details = ae.Problems
	}
	return status, detail
}

func writeError(w http.ResponseWriter, r *http.Request, err error) {
	status, detail := ErrorDetail(err)
	if status >= 500 {
		log.G(r.Context()).Error("request failed", "method", r.Method, "path", r.URL.Path, "error", err)
	}
	writeJSON(w, status, api.ErrorBody{Error: detail})
}

func writeErrorFrame(fw *api.FrameWriter, err error) {
	_, detail := ErrorDetail(err)
	b, _ := json.Marshal(detail)
	_, _ = fw.Kind(api.FrameError).Write(b)
}

// classTexts are the messages of errdefs' class errors, which wrapping
// leaves at the start or end of a message; the class already says them.
var classTexts = []string{
	errdefs.ErrInvalidArgument.Error(), errdefs.ErrNotFound.Error(), errdefs.ErrAlreadyExists.Error(),
	errdefs.ErrFailedPrecondition.Error(), errdefs.ErrPermissionDenied.Error(), errdefs.ErrUnavailable.Error(),
	errdefs.ErrConflict.Error(),
}

func cleanMessage(m string) string {
	for _, c := range classTexts {
		m = strings.TrimSuffix(m, ": "+c)
		m = strings.TrimPrefix(m, c+": ")
	}
	return m
}
