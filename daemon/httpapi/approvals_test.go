package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
)

// holdOne holds a request of session in store and returns its id and
// the channel of its decision.
func holdOne(t *testing.T, store *approvals.Store, session string) (string, <-chan approvals.Decision) {
	t.Helper()
	f, _ := store.Follow(session)
	defer f.Close()
	ch := make(chan approvals.Decision, 1)
	go func() {
		ch <- store.Ask(quietCtx(), approvals.Request{Session: session, Method: "DELETE", Host: "api.corp.test",
			Path: "/v1/jobs/4812", Rule: "ask DELETE /v1/jobs/*", Timeout: time.Minute})
	}()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	ev, err := f.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ev.Approval.ID, ch
}

func TestApprovalsRoutes(t *testing.T) {
	store := approvals.New()
	t.Cleanup(func() { store.Close(quietCtx()) })
	f := &fakeDaemon{known: map[string]bool{"s1": true, "s2": true}, approvals: store}
	s := serve(t, f)
	id, ch := holdOne(t, store, "s1")

	for _, tc := range []struct {
		method, path, body string
		status             int
		class              string
	}{
		{"GET", "/v1/approvals?session=nope", "", 404, api.ClassNotFound},
		{"GET", "/v1/approvals?session=..", "", 404, api.ClassNotFound},
		{"GET", "/v1/approvals?follow=often", "", 400, api.ClassInvalidArgument},
		{"POST", "/v1/approvals/" + id, `{"decision":"maybe"}`, 400, api.ClassInvalidArgument},
		{"POST", "/v1/approvals/" + id, `{"decision":"allow"`, 400, api.ClassInvalidArgument},
		{"POST", "/v1/approvals/" + id, `{"decision":"allow","by":"root"}`, 400, api.ClassInvalidArgument},
		{"POST", "/v1/approvals/" + id, `{"decision":"allow","reason":"ok\u001b[2J"}`, 400, api.ClassInvalidArgument},
		{"POST", "/v1/approvals/" + id, ``, 400, api.ClassInvalidArgument},
		{"POST", "/v1/approvals/0123456789abcdef", `{"decision":"allow"}`, 404, api.ClassNotFound},
		{"POST", "/v1/approvals/" + id, `{"decision":"deny","revise":true}`, 400, api.ClassInvalidArgument},
		// The fake refuses every revision, as the daemon does one a
		// running session cannot take.
		{"POST", "/v1/approvals/" + id, `{"decision":"allow","revise":true}`, 409, api.ClassFailedPrecondition},
	} {
		resp, body := s.do(tc.method, tc.path, tc.body)
		if resp.StatusCode != tc.status || errorBody(t, body).Class != tc.class {
			t.Errorf("%s %s %s: %d %s, want %d %s", tc.method, tc.path, tc.body, resp.StatusCode, body, tc.status, tc.class)
		}
	}

	list, err := s.client.ListApprovals(t.Context(), "")
	if err != nil || len(list) != 1 || list[0].ID != id || list[0].State != api.ApprovalPending {
		t.Fatalf("ListApprovals = %+v, %v; want the hold", list, err)
	}
	if list, err := s.client.ListApprovals(t.Context(), "s2"); err != nil || len(list) != 0 {
		t.Errorf("ListApprovals(s2) = %+v, %v; want none", list, err)
	}
	if resp, body := s.do("GET", "/v1/approvals?session=s2", ""); resp.StatusCode != 200 || strings.TrimSpace(body) != "[]" {
		t.Errorf("no approvals: %d %q, want an empty array", resp.StatusCode, body)
	}

	a, err := s.client.DecideApproval(t.Context(), id, api.ApprovalDecision{Decision: api.DecisionDeny, Reason: "wrong job"})
	if err != nil {
		t.Fatal(err)
	}
	// The decision is taken in the name of the socket's peer: this test.
	wantBy := fmt.Sprintf("uid %d", os.Getuid())
	if a.ID != id || a.State != api.ApprovalDenied || a.Reason != "wrong job" || !strings.Contains(a.By, wantBy) {
		t.Errorf("decided %+v, want denied by %s", a, wantBy)
	}
	select {
	case d := <-ch:
		if d.Allow || d.Reason != "wrong job" || d.By != a.By {
			t.Errorf("Ask = %+v", d)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Ask did not return")
	}
	_, err = s.client.DecideApproval(t.Context(), id, api.ApprovalDecision{Decision: api.DecisionAllow})
	if ae, ok := err.(*api.Error); !ok || ae.Status != http.StatusConflict || !strings.Contains(ae.Message, "already denied by "+a.By) {
		t.Errorf("second decision: %v, want 409 saying who decided", err)
	}
}

// A follower gets what is held, then each hold and decision as a JSON
// line, and its stream ends when it goes away.
func TestApprovalsFollow(t *testing.T) {
	store := approvals.New()
	t.Cleanup(func() { store.Close(quietCtx()) })
	f := &fakeDaemon{known: map[string]bool{"s1": true, "s2": true}, approvals: store}
	s := serve(t, f)
	first, _ := holdOne(t, store, "s1")

	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", "http://airlock/v1/approvals?follow=1&session=s1", nil)
	resp, err := s.http.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != ndjson {
		t.Fatalf("follow: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	lines := bufio.NewScanner(resp.Body)
	next := func() api.ApprovalEvent {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("stream ended: %v", lines.Err())
		}
		var ev api.ApprovalEvent
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			t.Fatalf("line %q: %v", lines.Text(), err)
		}
		return ev
	}
	if ev := next(); ev.Type != api.ApprovalHeld || ev.Approval.ID != first {
		t.Errorf("first line %+v, want the hold of %s", ev, first)
	}
	holdOne(t, store, "s2") // another session's: not in this stream
	second, _ := holdOne(t, store, "s1")
	if ev := next(); ev.Type != api.ApprovalHeld || ev.Approval.ID != second {
		t.Errorf("line %+v, want the hold of %s", ev, second)
	}
	if _, err := s.client.DecideApproval(t.Context(), first, api.ApprovalDecision{Decision: api.DecisionAllow}); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Type != api.ApprovalDecided || ev.Approval.ID != first || ev.Approval.State != api.ApprovalAllowed {
		t.Errorf("line %+v, want the decision of %s", ev, first)
	}

	// The client's FollowApprovals sees the same, and returns with its
	// context.
	cctx, ccancel := context.WithCancel(t.Context())
	var got []string
	err = s.client.FollowApprovals(cctx, "s1", func(ev api.ApprovalEvent) error {
		got = append(got, ev.Type+" "+ev.Approval.ID)
		ccancel()
		return nil
	})
	if err != context.Canceled || len(got) != 1 || got[0] != "held "+second {
		t.Errorf("FollowApprovals = %v with %q, want cancelled after the hold of %s", err, got, second)
	}
}
