package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/policies"
)

// pinTimes gives an approval times relative to testNow, the CLI's clock:
// held 30s ago, 4m30s left, decided now.
func pinTimes(a api.Approval) api.Approval {
	a.Created, a.Deadline = testNow.Add(-30*time.Second), testNow.Add(270*time.Second)
	if a.Decided != nil {
		now := testNow
		a.Decided = &now
	}
	return a
}

func (f *fakeDaemon) listApprovals(w http.ResponseWriter, r *http.Request) {
	session := r.URL.Query().Get("session")
	if session != "" {
		if _, ok := f.session(session); !ok {
			writeError(w, api.ClassNotFound, fmt.Sprintf("no session %q", session))
			return
		}
	}
	if r.URL.Query().Get("follow") != "1" {
		list := f.approvals.List(session)
		for i := range list {
			list[i] = pinTimes(list[i])
		}
		writeJSON(w, 200, list)
		return
	}
	fl, pending := f.approvals.Follow(session)
	defer fl.Close()
	w.Header().Set("Content-Type", "application/x-ndjson")
	enc := json.NewEncoder(w)
	for _, a := range pending {
		a = pinTimes(a)
		_ = enc.Encode(api.ApprovalEvent{Type: api.ApprovalHeld, Approval: &a})
	}
	w.(http.Flusher).Flush()
	f.followingApprovals <- struct{}{}
	for {
		ev, err := fl.Next(r.Context())
		if err != nil {
			return
		}
		if ev.Approval != nil {
			a := pinTimes(*ev.Approval)
			ev.Approval = &a
		}
		_ = enc.Encode(ev)
		w.(http.Flusher).Flush()
	}
}

func (f *fakeDaemon) decideApproval(w http.ResponseWriter, r *http.Request) {
	var req api.ApprovalDecision
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || (req.Decision != api.DecisionAllow && req.Decision != api.DecisionDeny) {
		writeError(w, api.ClassInvalidArgument, fmt.Sprintf("decision must be allow or deny (%v)", err))
		return
	}
	if req.Revise {
		// The daemon revises the policy with the repair it computes again;
		// the fake takes the one held.
		held, err := f.approvals.Held(r.PathValue("id"))
		if err != nil || held.Repair == nil || !held.Repair.Revisable {
			writeError(w, api.ClassFailedPrecondition, "approval "+r.PathValue("id")+" cannot be made a revision, nothing changed and the request is still held (approve or deny it)")
			return
		}
		a, err := f.approvals.Decide(r.Context(), held.ID, true, "approved by revising the policy to version 2", "tester (uid 1000)")
		if err != nil {
			writeError(w, api.ClassFailedPrecondition, err.Error())
			return
		}
		a.RevisedTo = 2
		writeJSON(w, 200, pinTimes(a))
		return
	}
	a, err := f.approvals.Decide(r.Context(), r.PathValue("id"), req.Decision == api.DecisionAllow, req.Reason, "tester (uid 1000)")
	// As the daemon does, the class is not repeated in the message.
	msg := func(class error) string { return strings.TrimSuffix(err.Error(), ": "+class.Error()) }
	switch {
	case errdefs.IsNotFound(err):
		writeError(w, api.ClassNotFound, msg(errdefs.ErrNotFound))
	case errdefs.IsFailedPrecondition(err):
		writeError(w, api.ClassFailedPrecondition, msg(errdefs.ErrFailedPrecondition))
	case errdefs.IsInvalidArgument(err):
		writeError(w, api.ClassInvalidArgument, msg(errdefs.ErrInvalidArgument))
	case err != nil:
		writeError(w, api.ClassInternal, err.Error())
	default:
		writeJSON(w, 200, pinTimes(a))
	}
}

// hold makes the fake daemon hold a request of session and returns its
// id and the channel of its decision.
func hold(t *testing.T, f *fakeDaemon, session, path string) (string, <-chan approvals.Decision) {
	t.Helper()
	return holdRequest(t, f, approvals.Request{Session: session, Method: "POST", Host: "git.corp.test",
		Path: path, Rule: `ask POST "/repo.git/git-receive-pack"`, Refs: []string{"refs/heads/main"}, Timeout: time.Minute})
}

// holdRequest makes the fake daemon hold r.
func holdRequest(t *testing.T, f *fakeDaemon, r approvals.Request) (string, <-chan approvals.Decision) {
	t.Helper()
	fl, _ := f.approvals.Follow(r.Session)
	defer fl.Close()
	ch := make(chan approvals.Decision, 1)
	go func() { ch <- f.approvals.Ask(context.Background(), r) }()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ev, err := fl.Next(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return ev.Approval.ID, ch
}

func decided(t *testing.T, ch <-chan approvals.Decision) approvals.Decision {
	t.Helper()
	select {
	case d := <-ch:
		return d
	case <-time.After(10 * time.Second):
		t.Fatal("the request was not decided")
		return approvals.Decision{}
	}
}

func TestApprovals(t *testing.T) {
	h := newHarness(t)
	const header = "ID  SESSION  AGE  LEFT  METHOD  HOST  PATH  RULE  REPAIR  HEADERS  BODY\n"
	h.run("", "approvals").check(t, exitOK, header, "")
	h.run("", "approvals", "--json").check(t, exitOK, "[]\n", "")

	h.d.mu.Lock()
	h.d.sessions["3f9c2a1b7d04"] = &fakeSession{Session: api.Session{ID: "3f9c2a1b7d04"}}
	h.d.mu.Unlock()
	id, ch := hold(t, h.d, "3f9c2a1b7d04", "/repo.git/git-receive-pack\x1b[2J")
	// The path's control characters are escaped: a "?" would read as
	// the start of a query.
	want := "ID                SESSION       AGE  LEFT   METHOD  HOST           PATH                               RULE                                   REPAIR  HEADERS  BODY\n" +
		id + "  3f9c2a1b7d04  30s  4m30s  POST    git.corp.test  /repo.git/git-receive-pack\\x1b[2J  ask POST \"/repo.git/git-receive-pack\"  -       -        -\n"
	h.run("", "approvals").check(t, exitOK, want, "")
	h.run("", "approvals", "--session", "3f9c2a1b7d04").check(t, exitOK, want, "")
	h.run("", "approvals", "--session", "77d0e415aaaa").check(t, exitFailure, "", "airlock: no session \"77d0e415aaaa\"\n")
	r := h.run("", "approvals", "--json")
	var list []api.Approval
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || r.code != 0 || len(list) != 1 || list[0].ID != id {
		t.Errorf("approvals --json: %+v (%v)", r, err)
	}

	h.run("", "deny", "--reason", "bad\x07", id).check(t, exitFailure, "",
		"airlock: reason has a control character at byte 3\n")
	h.run("", "approve", "--reason", "release ticket 4812", id).check(t, exitOK, id+"\n", "")
	if d := decided(t, ch); !d.Allow || d.By != "tester (uid 1000)" || d.Reason != "release ticket 4812" {
		t.Errorf("decision %+v", d)
	}
	h.run("", "deny", id).check(t, exitFailure, "",
		"airlock: approval "+id+" was already allowed by tester (uid 1000)\n")
	h.run("", "deny", "0123456789abcdef").check(t, exitFailure, "",
		"airlock: no approval \"0123456789abcdef\" is pending\n")

	id, ch = hold(t, h.d, "3f9c2a1b7d04", "/repo.git/git-receive-pack")
	h.run("", "deny", id).check(t, exitOK, id+"\n", "")
	if d := decided(t, ch); d.Allow || d.By != "tester (uid 1000)" {
		t.Errorf("decision %+v", d)
	}
}

func TestApprovalsUsage(t *testing.T) {
	h := newHarness(t)
	h.run("", "approve").check(t, exitUsage, "", "airlock: airlock approve takes one approval ID (see 'airlock approve --help')\n")
	h.run("", "deny", "a", "b").check(t, exitUsage, "", "airlock: airlock deny takes one approval ID (see 'airlock deny --help')\n")
	h.run("", "approvals", "x").check(t, exitUsage, "", "airlock: airlock approvals takes no arguments (see 'airlock approvals --help')\n")
	if n := h.d.requestCount(); n != 0 {
		t.Errorf("%d requests reached the daemon, want 0", n)
	}
}

// -f prints what is held, then each hold and decision as a line of its
// own, until the daemon ends the stream.
func TestApprovalsFollow(t *testing.T) {
	h := newHarness(t)
	first, _ := hold(t, h.d, "3f9c2a1b7d04", "/repo.git/git-receive-pack")
	done := make(chan result, 1)
	go func() { done <- h.run("", "approvals", "-f") }()
	select {
	case <-h.d.followingApprovals:
	case r := <-done:
		t.Fatalf("approvals -f ended early: %+v", r)
	case <-time.After(10 * time.Second):
		t.Fatal("approvals -f never followed")
	}
	second, _ := hold(t, h.d, "77d0e415aaaa", "/other.git/git-receive-pack")
	if _, err := h.d.approvals.Decide(context.Background(), first, false, "wrong repo", "alice (uid 1000)"); err != nil {
		t.Fatal(err)
	}
	// The events are out once the follower's stream has them; closing the
	// store ends it after them.
	h.d.approvals.Close(context.Background())
	var r result
	select {
	case r = <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("approvals -f did not end with the stream")
	}
	row := "%-8s  %-16s  %-12s  %-6s  %-6s  %-7s  %-24s  %-32s  %s\n"
	want := fmt.Sprintf(row, "EVENT", "ID", "SESSION", "AGE", "LEFT", "METHOD", "HOST", "PATH", "RULE / DECISION") +
		fmt.Sprintf(row, "held", first, "3f9c2a1b7d04", "30s", "4m30s", "POST", "git.corp.test", "/repo.git/git-receive-pack", `ask POST "/repo.git/git-receive-pack"`) +
		fmt.Sprintf(row, "held", second, "77d0e415aaaa", "30s", "4m30s", "POST", "git.corp.test", "/other.git/git-receive-pack", `ask POST "/repo.git/git-receive-pack"`) +
		fmt.Sprintf(row, "denied", first, "3f9c2a1b7d04", "30s", "-", "POST", "git.corp.test", "/repo.git/git-receive-pack", "by alice (uid 1000): wrong repo") +
		fmt.Sprintf(row, "denied", second, "77d0e415aaaa", "30s", "-", "POST", "git.corp.test", "/other.git/git-receive-pack", "by daemon stopping: airlockd is stopping")
	r.check(t, exitFailure, want, "airlock: airlockd ended the approvals stream (is it stopping?)\n")
}

func TestShortDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		-time.Second: "0s", 0: "0s", 1499 * time.Millisecond: "1s", 59 * time.Second: "59s",
		time.Minute: "1m00s", 4*time.Minute + 5*time.Second: "4m05s", time.Hour + 2*time.Minute: "1h02m",
	} {
		if got := shortDuration(d); got != want {
			t.Errorf("shortDuration(%s) = %q, want %q", d, got, want)
		}
	}
	if got := printable("a\x1b[2J\tb"); strings.ContainsFunc(got, func(r rune) bool { return r < ' ' }) {
		t.Errorf("printable left control characters: %q", got)
	}
	// A path the gateway passes decoded ("/%E2%80%AE" is U+202E): a bidi
	// override, an isolate or a zero-width space would make the PATH
	// column read as another path.
	if got := printable("/v1/deployments/\u202etrats\u2066x\u200by\u009b"); got != "/v1/deployments/?trats?x?y?" {
		t.Errorf("printable(a path with format characters) = %q", got)
	}
}

// A held body is listed escaped and cut (whole with --no-trunc), and
// printed under its hold with -f: no byte of it reaches the terminal raw.
func TestApprovalsBody(t *testing.T) {
	h := newHarness(t)
	body := "{\"names\":[\"billing-api\"]}\x1b]0;approved\x07\x1b[2J\u202e\r\n" + strings.Repeat("x", 100)
	id, _ := holdRequest(t, h.d, approvals.Request{Session: "3f9c2a1b7d04", Method: "POST", Host: "k8s.test",
		Path: "/v1/namespaces/dev/deployments:restart", Rule: "ask", Timeout: time.Minute,
		Body: []byte(body), ContentType: "application/json"})
	escaped := `{"names":["billing-api"]}\x1b]0;approved\x07\x1b[2J\u202e\r\n` + strings.Repeat("x", 100)
	r := h.run("", "approvals")
	if r.code != 0 || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, escaped[:40]+"… (147 bytes, cut)\n") {
		t.Errorf("approvals: %+v; want the body escaped, cut at 40", r)
	}
	r = h.run("", "approvals", "--no-trunc")
	if r.code != 0 || !strings.Contains(r.stdout, "  "+escaped+"\n") {
		t.Errorf("approvals --no-trunc: %+v; want the body escaped, whole", r)
	}
	r = h.run("", "approvals", "--json")
	var list []api.Approval
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || string(list[0].Body) != body {
		t.Errorf("approvals --json: %+v (%v); want the body's bytes", r, err)
	}

	done := make(chan result, 1)
	go func() { done <- h.run("", "approvals", "-f", "--no-trunc") }()
	select {
	case <-h.d.followingApprovals:
	case <-time.After(10 * time.Second):
		t.Fatal("approvals -f never followed")
	}
	h.d.approvals.Close(context.Background())
	r = <-done
	if !strings.Contains(r.stdout, "\n          body: "+escaped+"\n") {
		t.Errorf("approvals -f: %q; want the body under its hold", r.stdout)
	}
	for _, out := range []string{r.stdout, r.stderr} {
		if strings.ContainsAny(out, "\x1b\x07\r\u202e") {
			t.Errorf("raw control bytes reached the terminal: %q", out)
		}
	}
}

// A held request's query is shown after its path and its headers in
// their own column (and under the hold with -f), escaped; a header bound
// to a secret names it; --json has them all.
func TestApprovalsQueryAndHeaders(t *testing.T) {
	h := newHarness(t)
	headers := []api.HeaderField{
		{Name: "Authorization", Value: "Bearer airlock-secret-0123", Secret: "TOKEN"},
		{Name: "X-Http-Method-Override", Value: "DELETE"},
		{Name: "X-Note", Value: "a\"b\x1b[2J\u202e"},
	}
	id, _ := holdRequest(t, h.d, approvals.Request{Session: "3f9c2a1b7d04", Method: "POST", Host: "rules.test",
		Path: "/deploy", Query: "env=production&force=true\x1b[2J", Rule: "ask", Timeout: time.Minute, Headers: headers})
	const path = `/deploy?env=production&force=true\x1b[2J`
	const shown = `Authorization="Bearer airlock-secret-0123" (secret TOKEN) X-Http-Method-Override="DELETE" X-Note="a\"b\x1b[2J\u202e"`
	r := h.run("", "approvals", "--no-trunc")
	if r.code != 0 || !strings.Contains(r.stdout, id) || !strings.Contains(r.stdout, "  "+path+"  ") || !strings.Contains(r.stdout, "  "+shown+"  ") {
		t.Errorf("approvals --no-trunc: %q; want the path with its query and the headers", r.stdout)
	}
	r = h.run("", "approvals")
	if r.code != 0 || !strings.Contains(r.stdout, "  "+path+"  ") || !strings.Contains(r.stdout, "  "+shown[:39]+"… (3 fields)  ") {
		t.Errorf("approvals: %q; want the headers cut at 40", r.stdout)
	}
	r = h.run("", "approvals", "--json")
	var list []api.Approval
	if err := json.Unmarshal([]byte(r.stdout), &list); err != nil || len(list) != 1 || list[0].Query != "env=production&force=true\x1b[2J" || len(list[0].Headers) != 3 || list[0].Headers[2] != headers[2] {
		t.Errorf("approvals --json: %+v (%v); want the query and headers", r, err)
	}

	done := make(chan result, 1)
	go func() { done <- h.run("", "approvals", "-f", "--no-trunc") }()
	select {
	case <-h.d.followingApprovals:
	case <-time.After(10 * time.Second):
		t.Fatal("approvals -f never followed")
	}
	h.d.approvals.Close(context.Background())
	r = <-done
	if !strings.Contains(r.stdout, "  "+path+"  ") || !strings.Contains(r.stdout, "\n          headers: "+shown+"\n") {
		t.Errorf("approvals -f: %q; want the query, and the headers under the hold", r.stdout)
	}
	for _, out := range []string{r.stdout, r.stderr} {
		if strings.ContainsAny(out, "\x1b\u202e") {
			t.Errorf("raw control bytes reached the terminal: %q", out)
		}
	}
}

func TestApproveRevise(t *testing.T) {
	h := newHarness(t)
	rule := policies.HTTPRule{Methods: []string{"DELETE"}, Path: "/jobs/42", Action: "allow"}
	rep := &policies.Repair{Changes: []policies.RepairChange{{Field: policies.RepairEgressHTTP, Block: "jobs.test", Op: policies.RepairInsert, Rule: &rule, Before: 2}}, Revisable: true}
	id, ch := holdRequest(t, h.d, approvals.Request{Session: "3f9c2a1b7d04", Method: "DELETE", Host: "jobs.test", Path: "/jobs/42", Rule: "ask", Timeout: time.Minute, Repair: rep})
	want := `egress.http["jobs.test"]: insert rule DELETE /jobs/42 -> allow before rule 2`
	if r := h.run("", "approvals", "--no-trunc"); r.code != 0 || !strings.Contains(r.stdout, want) {
		t.Errorf("approvals: %+v; want the repair %s", r, want)
	}
	h.run("", "deny", "--revise", id).check(t, exitUsage, "", "airlock: unknown flag: --revise (see 'airlock deny --help')\n")
	h.run("", "approve", "--revise", id).check(t, exitOK, id+"\npolicy version 2: "+want+"\n", "")
	if d := decided(t, ch); !d.Allow {
		t.Errorf("decision %+v", d)
	}
	unrevisable := *rep
	unrevisable.Revisable, unrevisable.Reason = false, "a running session cannot take it: egress.http: not revisable yet"
	id, _ = holdRequest(t, h.d, approvals.Request{Session: "3f9c2a1b7d04", Method: "DELETE", Host: "jobs.test", Path: "/jobs/42", Rule: "ask", Timeout: time.Minute, Repair: &unrevisable})
	if r := h.run("", "approvals", "--no-trunc"); !strings.Contains(r.stdout, "(not revisable: a running session cannot take it: egress.http: not revisable yet)") {
		t.Errorf("approvals: %+v; want why not", r)
	}
	h.run("", "approve", "--revise", id).check(t, exitFailure, "", "airlock: approval "+id+" cannot be made a revision, nothing changed and the request is still held (approve or deny it)\n")
}
