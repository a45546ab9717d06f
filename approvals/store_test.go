package approvals

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
)

// recorder collects audit events.
type recorder struct {
	mu  sync.Mutex
	evs []api.AuditEvent
}

func (r *recorder) audit(_ context.Context, ev api.AuditEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.evs = append(r.evs, ev)
}

func (r *recorder) events() []api.AuditEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.evs)
}

func newStore(t *testing.T, opts ...Option) *Store {
	t.Helper()
	s := New(opts...)
	t.Cleanup(func() { s.Close(context.Background()) })
	return s
}

// ask runs s.Ask in a goroutine and returns its decision's channel.
func ask(ctx context.Context, s *Store, r Request) <-chan Decision {
	ch := make(chan Decision, 1)
	go func() { ch <- s.Ask(ctx, r) }()
	return ch
}

// nextEvent returns f's next event within 10s.
func nextEvent(t *testing.T, f *Follower) api.ApprovalEvent {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := f.Next(ctx)
	if err != nil {
		t.Fatalf("follower: %v", err)
	}
	return ev
}

// held waits for f's next event, which must be a hold.
func held(t *testing.T, f *Follower) api.Approval {
	t.Helper()
	ev := nextEvent(t, f)
	if ev.Type != api.ApprovalHeld || ev.Approval == nil {
		t.Fatalf("event %+v, want a hold", ev)
	}
	return *ev.Approval
}

func decision(t *testing.T, ch <-chan Decision) Decision {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("Ask did not return")
		return Decision{}
	}
}

var idRE = regexp.MustCompile(`^[0-9a-f]{16}$`)

// push is a request of session to hold for a minute, audited to rec
// (nil: not audited).
func push(session string, rec *recorder) Request {
	r := Request{Session: session, Method: "POST", Host: "git.corp.test", Path: "/repo.git/git-receive-pack",
		Rule: `ask POST "/repo.git/*"`, Refs: []string{"refs/heads/main"}, Timeout: time.Minute}
	if rec != nil {
		r.Audit = rec.audit
	}
	return r
}

// A person's decision reaches the Ask, the follower and the audit; the
// request leaves the list, and a second decision is refused.
func TestAskDecide(t *testing.T) {
	for _, allow := range []bool{true, false} {
		t.Run(fmt.Sprint("allow=", allow), func(t *testing.T) {
			s := newStore(t)
			f, pending := s.Follow("")
			defer f.Close()
			if len(pending) != 0 {
				t.Fatalf("pending at start: %v", pending)
			}
			rec := &recorder{}
			ch := ask(t.Context(), s, push("s1", rec))
			a := held(t, f)
			if !idRE.MatchString(a.ID) || a.Session != "s1" || a.State != api.ApprovalPending ||
				a.Deadline.Sub(a.Created) != time.Minute || !slices.Equal(a.Refs, []string{"refs/heads/main"}) {
				t.Errorf("held %+v", a)
			}
			if l := s.List("s1"); len(l) != 1 || l[0].ID != a.ID {
				t.Errorf("List(s1) = %v, want the hold", l)
			}
			if l := s.List("s2"); len(l) != 0 {
				t.Errorf("List(s2) = %v, want none", l)
			}
			got, err := s.Decide(t.Context(), a.ID, allow, "looked fine", "alice (uid 1000)")
			if err != nil {
				t.Fatal(err)
			}
			want := api.ApprovalDenied
			if allow {
				want = api.ApprovalAllowed
			}
			if got.State != want || got.By != "alice (uid 1000)" || got.Reason != "looked fine" || got.Decided == nil {
				t.Errorf("Decide returned %+v", got)
			}
			d := decision(t, ch)
			if d.Allow != allow || d.ID != a.ID || d.By != "alice (uid 1000)" || d.Reason != "looked fine" || d.Rule != a.Rule {
				t.Errorf("Ask = %+v", d)
			}
			if ev := nextEvent(t, f); ev.Type != api.ApprovalDecided || ev.Approval.ID != a.ID || ev.Approval.State != want {
				t.Errorf("follower: %+v, want the decision", ev)
			}
			if l := s.List(""); len(l) != 0 {
				t.Errorf("List after decision: %v", l)
			}
			if _, err := s.Decide(t.Context(), a.ID, !allow, "", "bob"); !errdefs.IsFailedPrecondition(err) {
				t.Errorf("second decision: %v, want failed precondition", err)
			}
			if _, err := s.Decide(t.Context(), "0123456789abcdef", true, "", "bob"); !errdefs.IsNotFound(err) {
				t.Errorf("unknown id: %v, want not found", err)
			}
			evs := rec.events()
			if len(evs) != 2 {
				t.Fatalf("audit %+v, want held and decided", evs)
			}
			h, dec := evs[0], evs[1]
			if h.Layer != "approval" || h.Action != ActionHeld || h.Session != "s1" || h.Subject != "git.corp.test/repo.git/git-receive-pack" ||
				h.Fields["id"] != a.ID || h.Fields["method"] != "POST" || h.Fields["rule"] != a.Rule {
				t.Errorf("held event %+v", h)
			}
			wantAction := ActionDenied
			if allow {
				wantAction = ActionAllowed
			}
			if dec.Action != wantAction || dec.Reason != "looked fine" || dec.Fields["by"] != "alice (uid 1000)" ||
				dec.Fields["id"] != a.ID || !slices.Equal(dec.Fields["refs"].([]string), a.Refs) {
				t.Errorf("decision event %+v", dec)
			}
			if _, ok := dec.Fields["waited_ms"].(int64); !ok {
				t.Errorf("decision event has no waited_ms: %+v", dec.Fields)
			}
		})
	}
}

func TestAskTimeout(t *testing.T) {
	s := newStore(t)
	rec := &recorder{}
	r := push("s1", rec)
	r.Timeout = 50 * time.Millisecond
	start := time.Now()
	d := s.Ask(t.Context(), r)
	if d.Allow || d.By != ByTimeout || !strings.Contains(d.Reason, "50ms") || d.ID == "" {
		t.Errorf("Ask = %+v, want denied by timeout", d)
	}
	if waited := time.Since(start); waited < 50*time.Millisecond || d.Waited < 50*time.Millisecond {
		t.Errorf("returned after %s (Waited %s), before the timeout", waited, d.Waited)
	}
	if _, err := s.Decide(t.Context(), d.ID, true, "", "alice"); !errdefs.IsFailedPrecondition(err) || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("decision after the timeout: %v, want already denied by timeout", err)
	}
	evs := rec.events()
	if len(evs) != 2 || evs[1].Action != ActionDenied || evs[1].Fields["by"] != ByTimeout {
		t.Errorf("audit %+v", evs)
	}
}

func TestAskDefaultTimeout(t *testing.T) {
	s := newStore(t)
	f, _ := s.Follow("")
	defer f.Close()
	r := push("s1", nil)
	r.Audit, r.Timeout = nil, 0
	ch := ask(t.Context(), s, r)
	a := held(t, f)
	if got := a.Deadline.Sub(a.Created); got != DefaultTimeout {
		t.Errorf("deadline %s after creation, want %s", got, DefaultTimeout)
	}
	s.CancelSession(t.Context(), "s1")
	decision(t, ch)
}

// The client going away denies the request, by "cancelled".
func TestAskCancelled(t *testing.T) {
	s := newStore(t)
	f, _ := s.Follow("")
	defer f.Close()
	rec := &recorder{}
	ctx, cancel := context.WithCancel(t.Context())
	ch := ask(ctx, s, push("s1", rec))
	held(t, f)
	cancel()
	d := decision(t, ch)
	if d.Allow || d.By != ByCancelled {
		t.Errorf("Ask = %+v, want denied by cancelled", d)
	}
	if evs := rec.events(); len(evs) != 2 || evs[1].Fields["by"] != ByCancelled {
		t.Errorf("audit %+v", evs)
	}
}

// CancelSession denies its session's requests only, and has audited
// them when it returns.
func TestCancelSession(t *testing.T) {
	s := newStore(t)
	f, _ := s.Follow("")
	defer f.Close()
	rec1, rec2 := &recorder{}, &recorder{}
	a1 := ask(t.Context(), s, push("s1", rec1))
	b1 := ask(t.Context(), s, push("s1", rec1))
	a2 := ask(t.Context(), s, push("s2", rec2))
	for range 3 {
		held(t, f)
	}
	if n := s.Pending(); n != 3 {
		t.Errorf("Pending with three held = %d, want 3", n)
	}
	if n := s.CancelSession(t.Context(), "s1"); n != 2 {
		t.Errorf("CancelSession = %d, want 2", n)
	}
	if evs := rec1.events(); len(evs) != 4 || evs[2].Fields["by"] != BySessionEnded || evs[3].Fields["by"] != BySessionEnded {
		t.Errorf("s1's audit when CancelSession returned: %+v", evs)
	}
	for _, ch := range []<-chan Decision{a1, b1} {
		if d := decision(t, ch); d.Allow || d.By != BySessionEnded {
			t.Errorf("s1's Ask = %+v", d)
		}
	}
	if l := s.List(""); len(l) != 1 || l[0].Session != "s2" {
		t.Errorf("left pending: %+v, want s2's request", l)
	}
	if n := s.Pending(); n != 1 {
		t.Errorf("Pending after CancelSession = %d, want 1", n)
	}
	select {
	case d := <-a2:
		t.Fatalf("s2's request decided: %+v", d)
	default:
	}
	s.Close(t.Context())
	if d := decision(t, a2); d.By != ByDaemon {
		t.Errorf("s2's Ask after Close = %+v", d)
	}
	if d := s.Ask(t.Context(), push("s2", rec2)); d.Allow || d.By != ByDaemon || d.ID != "" {
		t.Errorf("Ask after Close = %+v, want denied at once", d)
	}
	// The follower ends once the events queued before Close are read.
	var err error
	for n := 0; err == nil && n < 100; n++ {
		_, err = f.Next(t.Context())
	}
	if !errors.Is(err, io.EOF) {
		t.Errorf("follower after Close: %v, want EOF", err)
	}
}

// Over a bound a new ask is denied at once, audited, and never held;
// a decision makes room again.
func TestLimits(t *testing.T) {
	s := newStore(t, WithLimits(2, 3))
	f, _ := s.Follow("")
	defer f.Close()
	rec := &recorder{}
	var ids []string
	for _, sess := range []string{"a", "a", "b"} {
		ask(t.Context(), s, push(sess, rec))
		ids = append(ids, held(t, f).ID)
	}
	d := s.Ask(t.Context(), push("a", rec))
	if d.Allow || d.By != ByLimit || d.ID != "" || !strings.Contains(d.Reason, "session a already holds 2") {
		t.Errorf("third ask of session a: %+v, want refused by the session limit", d)
	}
	d = s.Ask(t.Context(), push("c", rec))
	if d.Allow || d.By != ByLimit || !strings.Contains(d.Reason, "3 requests are held") {
		t.Errorf("ask beyond the total: %+v, want refused by the total limit", d)
	}
	evs := rec.events()
	last := evs[len(evs)-1]
	if last.Action != ActionDenied || last.Fields["by"] != ByLimit || last.Session != "c" {
		t.Errorf("refusal audited as %+v", last)
	}
	if _, err := s.Decide(t.Context(), ids[0], true, "", "alice"); err != nil {
		t.Fatal(err)
	}
	ask(t.Context(), s, push("a", rec))
	if ev := nextEvent(t, f); ev.Type != api.ApprovalDecided {
		t.Fatalf("event %+v, want the decision", ev)
	}
	held(t, f)
}

// A follower that never reads does not slow Ask down: its events beyond
// the buffer are dropped, and it is told how many.
func TestSlowFollower(t *testing.T) {
	s := newStore(t)
	slow, _ := s.Follow("")
	defer slow.Close()
	const n = 600
	start := time.Now()
	for range n {
		r := push("s1", nil)
		r.Timeout = time.Nanosecond
		if d := s.Ask(t.Context(), r); d.By != ByTimeout {
			t.Fatalf("Ask = %+v", d)
		}
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("%d asks took %s", n, el)
	}
	var got int
	for {
		ev := nextEvent(t, slow)
		if ev.Type == api.ApprovalDropped {
			if ev.Dropped != 2*n-followBuffer || got != followBuffer {
				t.Errorf("dropped %d after %d events, want %d after %d", ev.Dropped, got, 2*n-followBuffer, followBuffer)
			}
			break
		}
		got++
	}
	// Later events arrive again.
	ch := ask(t.Context(), s, push("s1", nil))
	held(t, slow)
	s.CancelSession(t.Context(), "s1")
	decision(t, ch)
}

// A follower made while requests are held gets them in its snapshot,
// and only its session's events.
func TestFollowSnapshotAndSession(t *testing.T) {
	s := newStore(t)
	all, _ := s.Follow("")
	defer all.Close()
	ask(t.Context(), s, push("s1", nil))
	first := held(t, all)
	f, pending := s.Follow("s2")
	defer f.Close()
	if len(pending) != 0 {
		t.Errorf("s2's snapshot: %v", pending)
	}
	g, pending := s.Follow("s1")
	defer g.Close()
	if len(pending) != 1 || pending[0].ID != first.ID {
		t.Errorf("s1's snapshot: %v, want %s", pending, first.ID)
	}
	ask(t.Context(), s, push("s2", nil))
	if a := held(t, f); a.Session != "s2" {
		t.Errorf("s2's follower got %+v", a)
	}
	s.CancelSession(t.Context(), "s1")
	if ev := nextEvent(t, g); ev.Type != api.ApprovalDecided || ev.Approval.ID != first.ID {
		t.Errorf("s1's follower got %+v, want the decision of %s", ev, first.ID)
	}
}

func TestDecideBadReason(t *testing.T) {
	s := newStore(t)
	f, _ := s.Follow("")
	defer f.Close()
	ch := ask(t.Context(), s, push("s1", nil))
	a := held(t, f)
	for _, reason := range []string{strings.Repeat("x", MaxReason+1), "ok\x1b[2J", "bad \xff"} {
		if _, err := s.Decide(t.Context(), a.ID, true, reason, "alice"); !errdefs.IsInvalidArgument(err) {
			t.Errorf("reason %q: %v, want invalid argument", reason, err)
		}
	}
	if _, err := s.Decide(t.Context(), a.ID, true, "", ""); !errdefs.IsInvalidArgument(err) {
		t.Errorf("no decider: %v, want invalid argument", err)
	}
	if l := s.List(""); len(l) != 1 {
		t.Errorf("a refused decision decided: %v", l)
	}
	s.CancelSession(t.Context(), "s1")
	decision(t, ch)
}

// Decisions racing each other (a person, another person, the session's
// end, the client going away, the timeout): exactly one wins, everyone
// agrees which, and the audit has the hold before exactly one decision.
func TestRaceExactlyOneOutcome(t *testing.T) {
	s := newStore(t)
	f, _ := s.Follow("")
	defer f.Close()
	const rounds = 200
	for i := range rounds {
		rec := &recorder{}
		ctx, cancel := context.WithCancel(t.Context())
		r := push(fmt.Sprintf("s%d", i), rec)
		r.Timeout = time.Duration(1+rand.IntN(2000)) * time.Microsecond
		ch := ask(ctx, s, r)
		ev := nextEvent(t, f)
		if ev.Type != api.ApprovalHeld {
			t.Fatalf("round %d: %+v, want a hold", i, ev)
		}
		id := ev.Approval.ID
		var wg sync.WaitGroup
		var mu sync.Mutex
		var winners []string
		for _, by := range []string{"alice", "bob"} {
			wg.Go(func() {
				if _, err := s.Decide(context.Background(), id, by == "alice", "", by); err == nil {
					mu.Lock()
					winners = append(winners, by)
					mu.Unlock()
				} else if !errdefs.IsFailedPrecondition(err) {
					t.Errorf("round %d: Decide by %s: %v", i, by, err)
				}
			})
		}
		wg.Go(func() {
			if s.CancelSession(context.Background(), r.Session) == 1 {
				mu.Lock()
				winners = append(winners, BySessionEnded)
				mu.Unlock()
			}
		})
		wg.Go(cancel)
		d := decision(t, ch)
		wg.Wait()
		dev := nextEvent(t, f)
		if dev.Type != api.ApprovalDecided || dev.Approval.ID != id || dev.Approval.By != d.By {
			t.Fatalf("round %d: follower %+v, Ask %+v", i, dev, d)
		}
		if len(winners) > 1 || (len(winners) == 1 && winners[0] != d.By) {
			t.Fatalf("round %d: winners %v, Ask decided by %s", i, winners, d.By)
		}
		if len(winners) == 0 && d.By != ByTimeout && d.By != ByCancelled {
			t.Fatalf("round %d: no caller won, yet decided by %s", i, d.By)
		}
		if d.Allow != (d.By == "alice") {
			t.Fatalf("round %d: %+v", i, d)
		}
		evs := rec.events()
		if len(evs) != 2 || evs[0].Action != ActionHeld || evs[1].Fields["by"] != d.By {
			t.Fatalf("round %d: audit %+v, want the hold then one decision by %s", i, evs, d.By)
		}
	}
	if l := s.List(""); len(l) != 0 {
		t.Errorf("left pending: %v", l)
	}
}

func TestRemembersBoundedDecisions(t *testing.T) {
	s := newStore(t)
	var first string
	for i := range keepDecided + 1 {
		r := push("s1", nil)
		r.Timeout = time.Nanosecond
		d := s.Ask(t.Context(), r)
		if i == 0 {
			first = d.ID
		}
	}
	s.mu.Lock()
	n := len(s.decided)
	s.mu.Unlock()
	if n != keepDecided {
		t.Errorf("remembers %d decisions, want %d", n, keepDecided)
	}
	if _, err := s.Decide(t.Context(), first, true, "", "alice"); !errdefs.IsNotFound(err) {
		t.Errorf("the oldest decision, forgotten: %v, want not found", err)
	}
}

func TestCleanReason(t *testing.T) {
	for in, want := range map[string]string{
		"fine":                         "fine",
		" two\nlines\x1b[31m ":         "two lines [31m",
		"\xffbad":                      "bad",
		strings.Repeat("é", MaxReason): strings.Repeat("é", (MaxReason-len("…"))/2) + "…",
	} {
		got := cleanReason(in)
		if got != want {
			t.Errorf("cleanReason(%q) = %q, want %q", in, got, want)
		}
		if err := checkReason(got); err != nil {
			t.Errorf("cleanReason(%q) = %q, which checkReason refuses: %v", in, got, err)
		}
	}
}

func TestMain(m *testing.M) {
	// The store logs every hold and decision.
	slog.SetDefault(slog.New(slog.DiscardHandler))
	os.Exit(m.Run())
}
