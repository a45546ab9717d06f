package daemon

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// auditFile is the name of a session's audit log: one JSON event per line.
const auditFile = "audit.jsonl"

// auditLog appends events to a session's audit.jsonl. Writes are
// serialized; each event is one write of one line, so a reader never sees a
// torn line from a live writer.
type auditLog struct {
	mu   sync.Mutex
	path string
	f    *os.File // +checklocks:mu
}

func newAuditLog(dir string) *auditLog { return &auditLog{path: filepath.Join(dir, auditFile)} }

// Emit records ev; Time defaults to now.
func (a *auditLog) Emit(ctx context.Context, ev api.AuditEvent) {
	if ev.Time.IsZero() {
		ev.Time = time.Now().UTC()
	}
	b, err := json.Marshal(ev)
	if err != nil {
		log.G(ctx).Error("audit: encode event", "error", err)
		return
	}
	b = append(b, '\n')
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		f, err := os.OpenFile(a.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			log.G(ctx).Error("audit: open log", "error", err)
			return
		}
		a.f = f
	}
	if _, err := a.f.Write(b); err != nil {
		log.G(ctx).Error("audit: write", "error", err)
	}
}

// Close closes the log file; a later Emit reopens it.
func (a *auditLog) Close() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}

// Audit returns a session's audit events in order.
func (d *Daemon) Audit(ctx context.Context, id string) ([]api.AuditEvent, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, err
	}
	var evs []api.AuditEvent
	f, err := os.Open(filepath.Join(s.dir, auditFile))
	switch {
	case errors.Is(err, os.ErrNotExist):
		evs = []api.AuditEvent{}
	case err != nil:
		return nil, err
	default:
		defer f.Close()
		if evs, err = readAudit(f); err != nil {
			return nil, err
		}
	}
	// Blocked connections of a live network are counted in the kernel;
	// they reach the log when the network is removed.
	return append(evs, d.liveDrops(ctx, id)...), nil
}

func readAudit(r io.Reader) ([]api.AuditEvent, error) {
	out := []api.AuditEvent{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for n := 1; sc.Scan(); n++ {
		var ev api.AuditEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return nil, fmt.Errorf("audit log line %d: %w", n, err)
		}
		out = append(out, ev)
	}
	return out, sc.Err()
}

func (d *Daemon) handleAudit(w http.ResponseWriter, r *http.Request) {
	evs, err := d.Audit(r.Context(), r.PathValue("id"))
	if err != nil {
		writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, evs)
}
