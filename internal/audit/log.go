// Package audit owns a session's audit log: the file of JSON lines
// (File, audit.jsonl) in the session's directory, one api.AuditEvent per
// line. Log appends to it within a size cap, with reserves for lifecycle
// events and for what the daemon did to the host, and merges repeated
// policy decisions within a window; AppendEvent is its encoding, byte for
// byte what encoding/json gives; Each reads a log back, one event at a
// time. The daemon decides what to record and when; this package decides
// how it is written and read.
package audit

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/policies"
)

// eventClass says how a session's audit log treats an event.
type eventClass uint8

const (
	// classRecord events are written one by one and never merged: commit
	// decisions, credential events, and the L7 gateway's action log (one
	// event per connection or request, see daemon's egressAudit). They
	// count against the cap.
	classRecord eventClass = iota
	// classDecision events are repeatable policy decisions (DNS answers
	// and refusals, blocked connections). An event identical to one
	// written less than the aggregation window ago, its time aside, is
	// counted instead of written; when the window ends, one event with
	// the count and the first and last time stands for all of them.
	classDecision
	// classControl events are the session's lifecycle and the log's own
	// notices. Once the cap is reached they still fit in a reserve kept
	// for them.
	classControl
	// classOutcome events are what the daemon did to the host for the
	// session (commit decisions, modes normalised): records the sandbox
	// does not pace, written after everything it could flood the log
	// with. They fit in a reserve of their own, below the control one, so
	// that a sandbox cannot crowd them out with decisions or refused
	// reads.
	classOutcome
)

// Aggregation window and its bound on distinct pending events.
const (
	aggregateWindow = 10 * time.Second
	maxAggregates   = 4096
)

// Log appends events to a session's audit.jsonl, within a size cap.
//
// An event is in the file (the page cache) when Emit returns, so a read
// that starts after an Emit sees its event; a decision merged into an
// earlier identical one is in the file when its window ends. Events
// emitted concurrently are written together: the first Emit to find no
// write in progress writes every event queued so far in one write(2) while
// the others wait for it. Each write holds whole lines and writes are
// serialized, so a reader never sees a torn line from a live writer, only,
// at the end of the file, part of a line still being written.
//
// With a limit, the file never grows beyond it: once ordinary events no
// longer fit below limit minus the control and outcome reserves, the log
// writes one "audit truncated" event and from then on counts what it
// drops; Flush and Close write the count ("audit dropped").
type Log struct {
	path   string
	limit  int64 // bytes; 0: no cap
	window time.Duration
	now    func() time.Time

	mu   sync.Mutex
	cond sync.Cond // signalled when a write ends; L is &mu
	// f is opened by the first write and used only by the writer.
	f *os.File // +checklocks:mu
	// queue holds encoded events not yet handed to a writer; spare is the
	// buffer of the last write, reused as the next queue.
	queue, spare []byte // +checklocks:mu
	// queued counts the events ever queued, written those whose write has
	// ended (in failure too: a failed write is logged, not retried).
	queued, written uint64 // +checklocks:mu
	writing         bool   // +checklocks:mu
	// size is the file's size plus what is queued; -1 until the file's
	// size has been read.
	size int64 // +checklocks:mu
	// truncated is set once the cap made the log drop an event; dropped
	// counts what was dropped since, reported the counts already written.
	truncated bool            // +checklocks:mu
	dropped   drops           // +checklocks:mu
	reported  drops           // +checklocks:mu
	aggs      map[string]*agg // +checklocks:mu
	timer     *time.Timer     // +checklocks:mu

	// observe, if set, sees every event as it is emitted (see
	// WithObserver).
	observe func(*api.AuditEvent)
	// version is the session's policy version, given to events that
	// carry none (SetPolicyVersion).
	version atomic.Int64
}

// SetPolicyVersion sets the policy version events emitted from now on
// carry when they name none of their own (an event decided under an
// earlier version, such as a DNS answer in flight, names it itself).
func (a *Log) SetPolicyVersion(v int) { a.version.Store(int64(v)) }

// Option configures a Log.
type Option func(*Log)

// WithObserver has fn called with every event the log is given, once
// each, before it is merged or checked against the cap, and with the
// log's own notices (audit truncated, audit dropped): a decision merged
// into an earlier identical one is seen each time, a dropped event is
// seen all the same. The counts of merged decisions written when their
// window ends are not seen again. fn runs on the emitter's goroutine,
// sometimes with the log's lock held: it must be quick and must not call
// the log. It must not keep ev.
func WithObserver(fn func(ev *api.AuditEvent)) Option { return func(a *Log) { a.observe = fn } }

// drops counts events the cap kept out of the log.
type drops struct {
	events, bytes uint64
	byLayer       map[string]uint64
}

// agg is one decision written at start and the identical ones merged
// into it since.
type agg struct {
	ev          api.AuditEvent
	start       time.Time
	count       uint64
	first, last time.Time
}

// reserve is the part of a capped log kept for control events, and
// as much again for outcome events.
func reserve(limit int64) int64 { return min(64<<10, limit/4) }

// New returns the audit log of the session directory dir, capped
// at limit bytes (0: policies.DefaultAuditSize).
func New(dir string, limit int64, opts ...Option) *Log {
	if limit <= 0 {
		limit = policies.DefaultAuditSize
	}
	a := Open(filepath.Join(dir, File))
	a.limit = limit
	for _, o := range opts {
		o(a)
	}
	return a
}

// Open returns a log appending to path, which is created on the first
// Emit, without a cap. Emit writes exactly as a session's log does (the
// proxy benchmarks use it to measure the daemon's audit path). A Log is
// safe for concurrent use.
func Open(path string) *Log {
	a := &Log{path: path, size: -1, window: aggregateWindow, now: time.Now}
	a.cond.L = &a.mu
	return a
}

// encodeBufs holds buffers for encoding one event.
var encodeBufs = sync.Pool{New: func() any { b := make([]byte, 0, 512); return &b }}

// maxPooledBuf keeps buffers that grew for an unusual event out of the
// pools.
const maxPooledBuf = 64 << 10

// Emit records ev, an event never merged with others; Time defaults to
// now. It returns once ev is in the log file, or counted as dropped.
func (a *Log) Emit(ctx context.Context, ev api.AuditEvent) { a.emit(ctx, ev, classRecord) }

// EmitDecision records ev, a policy decision: merged with identical ones
// within the aggregation window.
func (a *Log) EmitDecision(ctx context.Context, ev api.AuditEvent) {
	a.emit(ctx, ev, classDecision)
}

// EmitControl records ev, a lifecycle event, from the reserve if the cap
// is reached.
func (a *Log) EmitControl(ctx context.Context, ev api.AuditEvent) { a.emit(ctx, ev, classControl) }

// EmitOutcome records ev, what the daemon did to the host for the
// session, from the outcome reserve if the cap is reached.
func (a *Log) EmitOutcome(ctx context.Context, ev api.AuditEvent) { a.emit(ctx, ev, classOutcome) }

func (a *Log) emit(ctx context.Context, ev api.AuditEvent, class eventClass) {
	if ev.Time.IsZero() {
		ev.Time = a.now().UTC()
	}
	if ev.PolicyVersion == 0 {
		ev.PolicyVersion = int(a.version.Load())
	}
	if a.observe != nil {
		a.observe(&ev)
	}
	bp := encodeBufs.Get().(*[]byte)
	b, err := AppendEvent((*bp)[:0], &ev)
	if err != nil {
		encodeBufs.Put(bp)
		log.G(ctx).Error("audit: encode event", "error", err)
		return
	}
	b = append(b, '\n')

	a.mu.Lock()
	if class == classDecision && a.window > 0 && a.mergeLocked(ctx, &ev, b) {
		a.mu.Unlock()
		encodeBufs.Put(bp)
		return
	}
	a.queueLocked(ctx, b, ev.Layer, class)
	seq := a.queued
	if cap(b) <= maxPooledBuf {
		*bp = b
		encodeBufs.Put(bp)
	}
	a.waitLocked(ctx, seq)
	a.mu.Unlock()
}

// mergeLocked counts ev into a pending identical decision and reports
// true, or opens a window for it and reports false (ev is then to be
// written).
func (a *Log) mergeLocked(ctx context.Context, ev *api.AuditEvent, line []byte) bool {
	rest := line[timeEnd(line):]
	// The lookup does not copy the key; only a new window's does.
	if g := a.aggs[string(rest)]; g != nil {
		if ev.Time.Before(g.start.Add(a.window)) {
			if g.count == 0 {
				g.first = ev.Time
			}
			g.count++
			g.last = ev.Time
			return true
		}
		a.flushAggLocked(ctx, string(rest), g)
	}
	key := string(rest)
	if a.aggs == nil {
		a.aggs = map[string]*agg{}
	}
	if len(a.aggs) >= maxAggregates {
		a.flushAggsLocked(ctx, time.Time{})
	}
	a.aggs[key] = &agg{ev: *ev, start: ev.Time}
	if a.timer == nil {
		a.timer = time.AfterFunc(a.window, a.tick)
	}
	return false
}

// timeEnd is the offset just past the time in an encoded event:
// events that differ only there are identical decisions.
func timeEnd(line []byte) int {
	const prefix = len(`{"time":"`)
	for i := prefix; i < len(line); i++ {
		if line[i] == '"' {
			return i + 1
		}
	}
	return 0
}

// tick writes the merged counts of windows that have ended, and re-arms
// while windows are open.
func (a *Log) tick() {
	ctx := context.Background()
	a.mu.Lock()
	a.timer = nil
	a.flushAggsLocked(ctx, a.now())
	if len(a.aggs) > 0 {
		a.timer = time.AfterFunc(a.window, a.tick)
	}
	seq := a.queued
	a.waitLocked(ctx, seq)
	a.mu.Unlock()
}

// flushAggsLocked ends every window opened before now minus the window
// (every window, for the zero time) and queues its count.
func (a *Log) flushAggsLocked(ctx context.Context, now time.Time) {
	for key, g := range a.aggs {
		if now.IsZero() || !now.Before(g.start.Add(a.window)) {
			a.flushAggLocked(ctx, key, g)
		}
	}
}

// flushAggLocked ends one window: if identical decisions were merged into
// it, one event says how many and when.
func (a *Log) flushAggLocked(ctx context.Context, key string, g *agg) {
	delete(a.aggs, key)
	if g.count == 0 {
		return
	}
	ev := g.ev
	ev.Time = g.last
	f := make(map[string]any, len(ev.Fields)+3)
	for k, v := range ev.Fields {
		f[k] = v
	}
	f["repeated"] = g.count
	f["first"] = g.first
	f["last"] = g.last
	ev.Fields = f
	b, err := AppendEvent(nil, &ev)
	if err != nil {
		log.G(ctx).Error("audit: encode event", "error", err)
		return
	}
	a.queueLocked(ctx, append(b, '\n'), ev.Layer, classDecision)
}

// queueLocked queues one encoded event if the cap lets it in, and
// otherwise counts it as dropped (writing the truncation notice the
// first time).
func (a *Log) queueLocked(ctx context.Context, b []byte, layer string, class eventClass) {
	if a.limit > 0 && a.size < 0 {
		a.size = 0
		if st, err := os.Stat(a.path); err == nil {
			a.size = st.Size()
		}
	}
	n := int64(len(b))
	if a.limit > 0 {
		room := a.limit - a.size
		switch class {
		case classControl:
		case classOutcome:
			room -= reserve(a.limit)
		default:
			room -= 2 * reserve(a.limit)
		}
		if n > room {
			if class != classControl && !a.truncated {
				a.truncated = true
				a.queueLocked(ctx, a.noticeLocked(api.AuditEvent{
					Layer: "audit", Action: "truncated",
					Reason: fmt.Sprintf("the audit log reached its cap of %s (resources.audit_size): later events are counted, not written", policies.FormatSize(a.limit)),
					Fields: map[string]any{"limit": a.limit},
				}), "audit", classControl)
			}
			a.dropped.events++
			a.dropped.bytes += uint64(n)
			if a.dropped.byLayer == nil {
				a.dropped.byLayer = map[string]uint64{}
			}
			a.dropped.byLayer[layer]++
			return
		}
	}
	a.queue = append(a.queue, b...)
	a.queued++
	if a.size >= 0 {
		a.size += n
	}
}

// noticeLocked encodes one of the log's own events.
func (a *Log) noticeLocked(ev api.AuditEvent) []byte {
	ev.Time = a.now().UTC()
	if ev.Session == "" {
		ev.Session = filepath.Base(filepath.Dir(a.path))
	}
	if a.observe != nil {
		a.observe(&ev)
	}
	b, _ := AppendEvent(nil, &ev)
	return append(b, '\n')
}

// dropReportLocked queues an event counting the events dropped since the
// last report, if any.
func (a *Log) dropReportLocked(ctx context.Context) {
	if a.dropped.events == a.reported.events {
		return
	}
	layers := map[string]uint64{}
	for l, n := range a.dropped.byLayer {
		if d := n - a.reported.byLayer[l]; d > 0 {
			layers[l] = d
		}
	}
	a.queueLocked(ctx, a.noticeLocked(api.AuditEvent{
		Layer: "audit", Action: "dropped",
		Reason: fmt.Sprintf("%d events (%s) did not fit under the audit log's cap of %s", a.dropped.events-a.reported.events,
			policies.FormatSize(int64(a.dropped.bytes-a.reported.bytes)), policies.FormatSize(a.limit)),
		Fields: map[string]any{"events": a.dropped.events - a.reported.events, "bytes": a.dropped.bytes - a.reported.bytes, "layers": layers},
	}), "audit", classControl)
	a.reported.events, a.reported.bytes = a.dropped.events, a.dropped.bytes
	a.reported.byLayer = map[string]uint64{}
	for l, n := range a.dropped.byLayer {
		a.reported.byLayer[l] = n
	}
}

// Size returns the bytes the log holds: its file's size and what is
// queued for it (0 when there is neither).
func (a *Log) Size() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.size >= 0 {
		return a.size
	}
	st, err := os.Stat(a.path)
	if err != nil {
		return int64(len(a.queue))
	}
	return st.Size() + int64(len(a.queue))
}

// Flush writes the counts of every pending merged decision and of the
// events dropped so far, and returns once they are in the file.
func (a *Log) Flush(ctx context.Context) {
	a.mu.Lock()
	a.flushAggsLocked(ctx, time.Time{})
	a.dropReportLocked(ctx)
	a.waitLocked(ctx, a.queued)
	a.mu.Unlock()
}

// waitLocked returns once event seq has been written, writing the queue
// itself if no write is in progress.
func (a *Log) waitLocked(ctx context.Context, seq uint64) {
	for a.written < seq {
		if a.writing {
			a.cond.Wait()
			continue
		}
		a.writeQueueLocked(ctx)
	}
}

// writeQueueLocked writes every queued event. It releases mu during the
// write, with writing set so that no other write starts.
func (a *Log) writeQueueLocked(ctx context.Context) {
	a.writing = true
	buf, upto := a.queue, a.queued
	a.queue = a.spare[:0]
	f := a.f
	a.mu.Unlock()

	var err error
	if f == nil {
		f, err = os.OpenFile(a.path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			err = fmt.Errorf("open log: %w", err)
		}
	}
	if err == nil {
		_, err = f.Write(buf)
	}
	if err != nil {
		log.G(ctx).Error("audit: write", "path", a.path, "error", err)
	}

	a.mu.Lock()
	a.f = f
	if cap(buf) <= maxPooledBuf {
		a.spare = buf[:0]
	} else {
		a.spare = nil
	}
	a.written = upto
	a.writing = false
	a.cond.Broadcast()
}

// Close writes what Flush writes, then closes the log file after a write
// in progress; a later Emit reopens it.
func (a *Log) Close() error {
	ctx := context.Background()
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.timer != nil {
		a.timer.Stop()
		a.timer = nil
	}
	a.flushAggsLocked(ctx, time.Time{})
	a.dropReportLocked(ctx)
	a.waitLocked(ctx, a.queued)
	for a.writing {
		a.cond.Wait()
	}
	if a.f == nil {
		return nil
	}
	err := a.f.Close()
	a.f = nil
	return err
}
