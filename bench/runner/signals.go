package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/bench/manifest"
	"github.com/airlock-sandbox/airlock/bench/policy"
	"github.com/airlock-sandbox/airlock/bench/world"
)

// DefaultAskTimeout is how long a request the perimeter holds waits for
// the runner's approver, which decides at once: a request still held
// after it is denied by the daemon, as nobody answering would be.
const DefaultAskTimeout = 30 * time.Second

// signalsSubject is the subject the generator's listing is read as.
const signalsSubject = "bench-signals"

// readSignals lists the items of op's family in w, reset to the family's
// initial state (what a session created now would list), with the
// operator policy's read scopes alone, as its signals say. A family
// without signals has no listing.
func readSignals(ctx context.Context, w *world.World, op *policy.Operator) (*manifest.Listing, error) {
	sig := op.Signals
	if sig == nil {
		return nil, nil
	}
	if err := w.Reset(op.Family); err != nil {
		return nil, err
	}
	h, err := w.ServeAs(signalsSubject, op.ReadScopes)
	if err != nil {
		return nil, fmt.Errorf("signals of %s: %w", op.Family, err)
	}
	req := httptest.NewRequestWithContext(ctx, http.MethodGet, "/"+op.Service.Name+sig.List, nil)
	req.Host = op.Service.Hosts[0]
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, req)
	if rec.Code != http.StatusOK {
		return nil, fmt.Errorf("signals of %s: GET %s%s with %s: %d %s", op.Family, req.Host, sig.List, strings.Join(op.ReadScopes, ", "), rec.Code, strings.TrimSpace(rec.Body.String()))
	}
	items, err := manifest.ParseListing(rec.Body.Bytes(), sig.Items)
	if err != nil {
		return nil, fmt.Errorf("signals of %s: %w", op.Family, err)
	}
	return &manifest.Listing{
		Source: fmt.Sprintf("GET %s%s with %s: %d items", req.Host, sig.List, strings.Join(op.ReadScopes, ", "), len(items)),
		Items:  items,
	}, nil
}

// decisionsFile is what writeDecisions writes next to a manifest.
type decisionsFile struct {
	Prompt    string              `json:"prompt"`
	Signals   string              `json:"signals,omitempty"`
	Request   manifest.Request    `json:"request"`
	Decisions []manifest.Decision `json:"decisions"`
}

// writeDecisions writes dir/PROMPTID.decisions.json: what the generator
// read of the request and of the world, and how it granted each scope.
func writeDecisions(dir, promptID string, m *manifest.Manifest) error {
	f := decisionsFile{Prompt: promptID, Request: m.Request, Decisions: m.Decisions}
	if m.Signals != nil {
		f.Signals = m.Signals.Source
	}
	if f.Decisions == nil {
		f.Decisions = []manifest.Decision{}
	}
	b, err := json.MarshalIndent(f, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, promptID+".decisions.json"), append(b, '\n'), 0o644)
}
