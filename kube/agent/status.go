package agent

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// writeStatus changes a Session's status through the status subresource
// with optimistic concurrency: mutate changes a copy (false: nothing to
// write) and the copy is written with the resourceVersion it came with.
// The first attempt starts from cur, the caller's latest copy of the
// Session (from its cache, a read, or the answer to its last write), when
// it has one; a conflict (409) means that copy was stale, and every retry
// starts from a fresh read (never from a cache). On a write, cur becomes
// the Session as written, for the caller's next write to start from.
// Nothing is written when mutate leaves the status as it was. It reports
// whether it wrote.
//
// Starting from the caller's copy saves the API server a read per write:
// a Session's writes are its agent's and the placement controller's, and
// a copy is stale only when the other wrote meanwhile.
func writeStatus(ctx context.Context, c client.Client, fresh client.Reader, key client.ObjectKey, cur *v1alpha1.Session, mutate func(*v1alpha1.Session) bool) (bool, error) {
	return writeSession(ctx, fresh, key, cur, func(s *v1alpha1.Session) (bool, error) {
		before := s.Status.DeepCopy()
		if !mutate(s) || equality.Semantic.DeepEqual(before, &s.Status) {
			return false, nil
		}
		return true, c.Status().Update(ctx, s)
	})
}

// claimStatus is writeStatus that sends the write even when mutate changes
// nothing: a compare-and-swap on the copy's resourceVersion. A claim that
// finds the status already as it would make it (this node's, Placed) must
// still learn whether its copy is stale: a cache that lags behind this
// agent's own write of Failed would otherwise have it run the Session
// again.
func claimStatus(ctx context.Context, c client.Client, fresh client.Reader, key client.ObjectKey, cur *v1alpha1.Session, mutate func(*v1alpha1.Session) bool) (bool, error) {
	return writeSession(ctx, fresh, key, cur, func(s *v1alpha1.Session) (bool, error) {
		if !mutate(s) {
			return false, nil
		}
		return true, c.Status().Update(ctx, s)
	})
}

// updateFresh is writeStatus for the Session itself (its finalizers).
func updateFresh(ctx context.Context, c client.Client, fresh client.Reader, key client.ObjectKey, cur *v1alpha1.Session, mutate func(*v1alpha1.Session) bool) (bool, error) {
	return writeSession(ctx, fresh, key, cur, func(s *v1alpha1.Session) (bool, error) {
		if !mutate(s) {
			return false, nil
		}
		return true, c.Update(ctx, s)
	})
}

// writeSession runs write on a copy of cur, then on fresh reads while
// write's error is a conflict; see writeStatus.
func writeSession(ctx context.Context, fresh client.Reader, key client.ObjectKey, cur *v1alpha1.Session, write func(*v1alpha1.Session) (bool, error)) (bool, error) {
	wrote := false
	attempt := 0
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		attempt++
		wrote = false
		var s v1alpha1.Session
		if attempt == 1 && cur != nil && cur.ResourceVersion != "" {
			cur.DeepCopyInto(&s)
		} else if err := fresh.Get(ctx, key, &s); err != nil {
			return err
		}
		w, err := write(&s)
		if err != nil {
			return err
		}
		wrote = w
		if w && cur != nil {
			s.DeepCopyInto(cur) // the API server's answer
		}
		return nil
	})
	return wrote, err
}

// timeOf is t as the API server keeps it (whole seconds), nil for nil.
func timeOf(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	m := metav1.NewTime(t.UTC().Truncate(time.Second))
	return &m
}

// localStatus is st brought up to date with v, the Session's local
// session on node: its state, exit, timestamps, id and policy version.
// Placement's fields (placedAt) and conditions are kept.
func localStatus(st v1alpha1.SessionStatus, v *api.Session, node string, generation int64) v1alpha1.SessionStatus {
	st = *st.DeepCopy()
	st.ObservedGeneration = generation
	st.Node, st.ID = node, v.ID
	st.PolicyVersion = int32(v.PolicyVersion)
	st.Warm = v.Warm
	st.StartedAt, st.FinishedAt = timeOf(v.Started), timeOf(v.Finished)
	st.ExitCode = nil
	if v.ExitCode != nil {
		c := int32(*v.ExitCode)
		st.ExitCode = &c
	}
	st.Reason, st.Message = v.Reason, ""
	switch v.State {
	case api.StateCreated:
		st.State = v1alpha1.SessionPlaced
	case api.StateRunning:
		st.State = v1alpha1.SessionRunning
	case api.StateStopped:
		st.State = v1alpha1.SessionExited
		if v.Review {
			st.State = v1alpha1.SessionReview
			st.Message = "workspace changes wait for airlock commit or discard on node " + node
		}
	default: // api.StateUnknown
		st.State, st.Reason = v1alpha1.SessionFailed, "error"
		st.Message = "a cleanup step failed on node " + node + " (local session " + v.ID + "): delete the Session to remove what is left"
	}
	return st
}

// DefaultAuditStatusEvery is the shortest time between two writes of a
// Session's status made for its audit counts alone, unless
// Config.AuditStatusEvery says otherwise: a busy session's perimeter
// decides many times a second, and each write costs the API server a
// write to etcd and every watcher of the Session a copy. A change of
// state or of the changes under review is written at once, one of the
// held requests within followedEvery, and takes the audit counts of that
// moment with it.
const DefaultAuditStatusEvery = 5 * time.Second

// followedEvery is the shortest time between two writes of a Session's
// status made for what it follows of its local session alone (the held
// requests, the audit counts): a sandbox that holds requests and gives
// them up as fast as it can would otherwise set the rate of its
// Session's writes, each one the whole Session (some 60 KB with 64 held
// requests) kept in etcd until compaction. A change of state is written
// at once.
const followedEvery = time.Second

// followedDue is how long until a Session's status may be written again
// for a change of what it follows alone; zero or less: now.
func (a *nodeAgent) followedDue(uid types.UID) time.Duration {
	a.mu.Lock()
	defer a.mu.Unlock()
	last, ok := a.statusWritten[uid]
	if !ok {
		return 0
	}
	return followedEvery - time.Since(last)
}

// onlyFollowed reports whether st differs from old in its held requests
// and audit counts only.
func onlyFollowed(st, old *v1alpha1.SessionStatus) bool {
	c := st.DeepCopy()
	c.PendingApprovals, c.PendingApprovalsOmitted, c.Audit = old.PendingApprovals, old.PendingApprovalsOmitted, old.Audit
	return equality.Semantic.DeepEqual(c, old)
}

// Bounds of a held request's fields in status: its method, host and path
// are the sandbox's text (a rule that names no method holds any method
// token, up to the L7 gateway's 64 KiB request head), and up to
// approvals.DefaultMaxPerSession are listed: uncut, a sandbox could make
// the status larger than the API server stores, and so stop every write
// of it while its requests are held.
const (
	maxStatusMethod = 64
	maxStatusHost   = 256
	maxStatusPath   = 512
	maxStatusRule   = 256
	maxStatusQuery  = 1024
	// maxStatusContentType, maxStatusRefs and maxStatusPreview bound a
	// held request's content type, refs and body preview.
	maxStatusContentType = 128
	maxStatusRefs        = 16
	maxStatusRefBytes    = 1024
	maxStatusHeaderNames = 512
	maxStatusPreview     = 256
	// maxStatusMessage bounds a message the agent writes from an error.
	maxStatusMessage = 1024
)

// summaries are what a Session's status says of its local session's
// audit, workspace changes and held requests, as its daemon reported them
// for one write.
type summaries struct {
	// audit is nil when the daemon could not count (the status's stays).
	audit *v1alpha1.AuditSummary
	// diff is the change summary when diffKnown (nil: none); otherwise
	// the status's stays.
	diff      *v1alpha1.DiffSummary
	diffKnown bool
	pending   []v1alpha1.PendingApproval
	omitted   int32
}

// summaries asks the daemon about local session v.
func (a *nodeAgent) summaries(ctx context.Context, v *api.Session) summaries {
	var out summaries
	if sum, err := a.d.AuditSummary(ctx, v.ID); err == nil {
		out.audit = auditStatus(sum)
	} else {
		log.G(ctx).Debug("audit not summarised", "id", v.ID, "error", err)
	}
	if v.State != api.StateRunning && v.State != api.StateCreated {
		if c, err := a.d.ChangeSummary(ctx, v.ID); err == nil {
			out.diff, out.diffKnown = diffStatus(c), true
		} else {
			log.G(ctx).Warn("workspace changes not summarised", "id", v.ID, "error", err)
		}
	} else {
		out.diffKnown = true
	}
	out.pending, out.omitted = pendingApprovals(a.d.Approvals().List(v.ID))
	return out
}

// maxStatusPending bounds the held requests' list in a Session's status,
// as the API server stores it (JSON, in which '&', '<' and '>' take six
// bytes each): whatever a sandbox's requests hold, the status stays
// writable (etcd takes 1.5 MiB).
const maxStatusPending = 256 << 10

// pendingApprovals is what a Session's status lists of the requests held,
// oldest first, up to maxStatusPending, and how many it leaves out.
func pendingApprovals(held []api.Approval) ([]v1alpha1.PendingApproval, int32) {
	var out []v1alpha1.PendingApproval
	size := 0
	for i, p := range held {
		e := pendingApproval(p)
		b, err := json.Marshal(&e)
		if err != nil || size+len(b) > maxStatusPending {
			return out, int32(len(held) - i)
		}
		size += len(b) + 1
		out = append(out, e)
	}
	return out, 0
}

// pendingApproval is what a Session's status shows of a held request:
// what tells it apart from the others (its query, the refs of a push, its
// headers' names and digest, its body's digest and start), each bounded
// and escaped; never its headers' values nor its whole body.
func pendingApproval(p api.Approval) v1alpha1.PendingApproval {
	query, cut := shownASCII(p.Query, maxStatusQuery)
	out := v1alpha1.PendingApproval{
		ID: p.ID, Method: shown(p.Method, maxStatusMethod), Host: shown(p.Host, maxStatusHost),
		Path: shown(p.Path, maxStatusPath), Rule: shown(p.Rule, maxStatusRule),
		Query: query, QueryTruncated: p.QueryTruncated || cut,
		Created: *timeOf(&p.Created), Deadline: *timeOf(&p.Deadline),
	}
	out.ContentType, _ = shownASCII(p.ContentType, maxStatusContentType)
	out.ContentEncoding, _ = shownASCII(p.ContentEncoding, maxStatusContentType)
	if len(p.Refs) > 0 {
		out.RefsCount = int32(len(p.Refs))
		left := maxStatusRefBytes
		for _, r := range p.Refs {
			e, _ := shownASCII(r, left)
			if len(out.Refs) == maxStatusRefs || len(e) < len(escapeBytes([]byte(r))) {
				break // RefsCount says how many are left out
			}
			out.Refs = append(out.Refs, e)
			left -= len(e)
		}
	}
	if len(p.Headers) > 0 {
		h := sha256.New()
		seen := map[string]bool{}
		left := maxStatusHeaderNames
		for _, f := range p.Headers {
			fmt.Fprintf(h, "%s: %s\n", f.Name, f.Value)
			if seen[f.Name] {
				continue
			}
			seen[f.Name] = true
			if e, _ := shownASCII(f.Name, left); len(e) == len(escapeBytes([]byte(f.Name))) && e != "" {
				out.HeaderNames = append(out.HeaderNames, e)
				left -= len(e)
			}
		}
		out.HeadersSHA256 = hex.EncodeToString(h.Sum(nil))
	}
	if len(p.Body) > 0 {
		sum := sha256.Sum256(p.Body)
		out.BodyBytes, out.BodySHA256, out.BodyTruncated = int32(len(p.Body)), hex.EncodeToString(sum[:]), p.BodyTruncated
		out.BodyPreview = escapeBytes(p.Body[:min(len(p.Body), maxStatusPreview)])
	}
	return out
}

// shownASCII is s, text that is ASCII by protocol (a query, a ref, a
// header's name or value), with escapeBytes's escapes, cut to at most n
// bytes between two escapes; cut says it was.
func shownASCII(s string, n int) (out string, cut bool) {
	e := escapeBytes([]byte(s))
	if len(e) <= n {
		return e, false
	}
	i := max(n, 0)
	// Not inside an escape: \xHH is four bytes.
	if j := strings.LastIndexByte(e[:i], '\\'); j >= 0 && j+4 > i {
		i = j
	}
	return e[:i], true
}

// escapeBytes writes b with every byte outside printable ASCII (and the
// backslash) as \xHH, so that no byte of the sandbox's reaches a
// terminal as it is.
func escapeBytes(b []byte) string {
	var s strings.Builder
	for _, c := range b {
		if c >= 0x20 && c < 0x7f && c != '\\' {
			s.WriteByte(c)
		} else {
			fmt.Fprintf(&s, "\\x%02x", c)
		}
	}
	return s.String()
}

// apply puts s into st, the status to write, whose current version is
// old: the changes and held requests always, the audit counts when they
// changed and either due is not positive (the audit interval has passed
// since they were last written) or st differs from old in anything else
// (it is written anyway). It returns how long until the counts are due
// when they changed and were held back (0 when they wait for another
// change: due is neverDue), and whether it set them.
func (s summaries) apply(st, old *v1alpha1.SessionStatus, due time.Duration) (later time.Duration, auditSet bool) {
	if s.diffKnown {
		st.Diff = s.diff
	}
	st.PendingApprovals, st.PendingApprovalsOmitted = s.pending, s.omitted
	if s.audit == nil || equality.Semantic.DeepEqual(st.Audit, s.audit) {
		return 0, false
	}
	if due <= 0 || !equality.Semantic.DeepEqual(st, old) {
		st.Audit = s.audit
		return 0, true
	}
	if due == neverDue {
		return 0, false
	}
	return due, false
}

// neverDue is auditDue's answer when the audit counts are never written
// on their own (Config.AuditStatusEvery 0).
const neverDue = time.Duration(math.MaxInt64)

// auditDue is how long until a Session's audit counts may be written
// again on their own; zero or less: now.
func (a *nodeAgent) auditDue(uid types.UID) time.Duration {
	if a.auditEvery == 0 {
		return neverDue
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	last, ok := a.auditWritten[uid]
	if !ok {
		return 0
	}
	return a.auditEvery - time.Since(last)
}

func auditStatus(s *api.AuditSummary) *v1alpha1.AuditSummary {
	out := &v1alpha1.AuditSummary{Events: s.Events, Refused: s.Refused, Last: timeOf(s.Last)}
	for _, c := range s.Counts {
		out.Counts = append(out.Counts, v1alpha1.AuditCount{Layer: c.Layer, Action: c.Action, Count: c.Count})
	}
	return out
}

func diffStatus(c *api.ChangeSummary) *v1alpha1.DiffSummary {
	if c == nil {
		return nil
	}
	return &v1alpha1.DiffSummary{Added: int32(c.Added), Modified: int32(c.Modified), Deleted: int32(c.Deleted),
		Bytes: c.Bytes, Rejected: int32(c.Rejected), Outcome: c.Outcome}
}

// shown is s as a held request's field is shown in status: every
// character that is not printable (a Unicode format character such as a
// right-to-left override, which a terminal obeys, or any other the
// sandbox's text may carry) written as a \u escape, then clipped to n
// bytes.
func shown(s string, n int) string {
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		var b strings.Builder
		for _, r := range s {
			if unicode.IsPrint(r) {
				b.WriteRune(r)
			} else {
				fmt.Fprintf(&b, "\\u%04X", r)
			}
		}
		s = b.String()
	}
	return clip(s, n)
}

// clip cuts s to at most n bytes of whole UTF-8 characters, marking the
// cut with "…".
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n-len("…")], "") + "…"
}
