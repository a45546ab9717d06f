package approvals

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// A held request's body reaches the list, the followers and the approver
// hook's stdin exactly; the audit records its length only, the logs not
// even that much of it, and a decided request no longer carries it.
func TestHeldBody(t *testing.T) {
	marker := `{"names":["billing-api","billing-worker"],"token":"MARKER-7d1e"}`
	dir := t.TempDir()
	stdin := filepath.Join(dir, "stdin")
	e, err := NewExecApprover([]string{script(t, `cat > `+stdin+`; echo '{"decision":"deny","reason":"wrong service"}'`)})
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, WithApprover(e))
	f, _ := s.Follow("")
	defer f.Close()
	var logs bytes.Buffer
	ctx := log.WithLogger(t.Context(), slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	rec := &recorder{}
	r := push("s1", rec)
	r.Method, r.Path, r.Refs = "POST", "/v1/namespaces/dev/deployments:restart", nil
	r.Body, r.ContentType = []byte(marker), "application/json"
	ch := ask(ctx, s, r)

	a := held(t, f)
	if string(a.Body) != marker || a.BodyTruncated || a.ContentType != "application/json" {
		t.Errorf("follower: body %q (truncated %v), type %q", a.Body, a.BodyTruncated, a.ContentType)
	}
	d := decision(t, ch)
	if d.Allow || d.By != ByApprover {
		t.Fatalf("Ask = %+v, want denied by the approver", d)
	}
	b, err := os.ReadFile(stdin)
	if err != nil {
		t.Fatal(err)
	}
	var got api.Approval
	if err := json.Unmarshal(b, &got); err != nil || string(got.Body) != marker || got.ContentType != "application/json" {
		t.Errorf("hook's stdin %s: body %q, %v", b, got.Body, err)
	}
	if !strings.Contains(string(b), `"body":"`+base64.StdEncoding.EncodeToString([]byte(marker))+`"`) {
		t.Errorf("hook's stdin has no base64 body: %s", b)
	}
	ev := nextEvent(t, f)
	if ev.Type != api.ApprovalDecided || ev.Approval.Body != nil {
		t.Errorf("decided event %+v still carries the body", ev)
	}

	evs := rec.events()
	if len(evs) != 2 || evs[0].Fields["body_bytes"] != len(marker) {
		t.Errorf("audit %+v: want held with body_bytes %d, and decided", evs, len(marker))
	}
	for _, where := range []string{fmt.Sprintf("%+v", evs), logs.String()} {
		if strings.Contains(where, "MARKER-7d1e") || strings.Contains(where, base64.StdEncoding.EncodeToString([]byte(marker))[:20]) {
			t.Errorf("the body was recorded: %s", where)
		}
	}
	if !strings.Contains(logs.String(), `"body_bytes":`) {
		t.Errorf("the log does not say the body's length: %s", logs.String())
	}
}

// A body over MaxBody is kept cut, marked truncated; an empty one is none.
func TestHeldBodyBounded(t *testing.T) {
	s := newStore(t)
	f, _ := s.Follow("")
	defer f.Close()
	for _, tc := range []struct {
		body      []byte
		trunc     bool
		wantLen   int
		wantTrunc bool
	}{
		{bytes.Repeat([]byte("x"), MaxBody+100), false, MaxBody, true},
		{bytes.Repeat([]byte("x"), MaxBody), true, MaxBody, true},
		{[]byte{}, false, 0, false},
	} {
		r := push("s1", nil)
		r.Body, r.BodyTruncated = tc.body, tc.trunc
		ch := ask(t.Context(), s, r)
		a := held(t, f)
		if len(a.Body) != tc.wantLen || a.BodyTruncated != tc.wantTrunc || (tc.wantLen == 0 && a.Body != nil) {
			t.Errorf("body of %d bytes (truncated %v): held %d bytes, truncated %v", len(tc.body), tc.trunc, len(a.Body), a.BodyTruncated)
		}
		if _, err := s.Decide(t.Context(), a.ID, false, "", "test"); err != nil {
			t.Fatal(err)
		}
		decision(t, ch)
		nextEvent(t, f)
	}
}

// A held request's query and headers reach the list, the followers and
// the approver hook's stdin; the decided request keeps the query, not the
// headers; neither is audited nor logged.
func TestHeldQueryAndHeaders(t *testing.T) {
	dir := t.TempDir()
	stdin := filepath.Join(dir, "stdin")
	e, err := NewExecApprover([]string{script(t, `cat > `+stdin+`; echo '{"decision":"deny"}'`)})
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, WithApprover(e))
	f, _ := s.Follow("")
	defer f.Close()
	var logs bytes.Buffer
	ctx := log.WithLogger(t.Context(), slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	rec := &recorder{}
	r := push("s1", rec)
	r.Method, r.Path, r.Refs = "POST", "/deploy", nil
	r.Query = "env=production&force=QMARK-51"
	headers := []api.HeaderField{
		{Name: "X-Api-Key", Value: "airlock-secret-placeholder", Secret: "API_KEY"},
		{Name: "X-Http-Method-Override", Value: "DELETE-HMARK-52"},
	}
	r.Headers = headers
	ch := ask(ctx, s, r)

	a := held(t, f)
	if a.Query != r.Query || a.QueryTruncated || !slices.Equal(a.Headers, headers) || a.HeadersTruncated {
		t.Errorf("follower: query %q, headers %+v", a.Query, a.Headers)
	}
	if l := s.List(""); len(l) != 1 || l[0].Query != r.Query || !slices.Equal(l[0].Headers, headers) {
		t.Errorf("list: %+v", l)
	}
	decision(t, ch)
	b, err := os.ReadFile(stdin)
	if err != nil {
		t.Fatal(err)
	}
	var got api.Approval
	if err := json.Unmarshal(b, &got); err != nil || got.Query != r.Query || !slices.Equal(got.Headers, headers) {
		t.Errorf("hook's stdin %s: %v", b, err)
	}
	if !strings.Contains(string(b), `"query":"env=production\u0026force=QMARK-51"`) ||
		!strings.Contains(string(b), `{"name":"X-Api-Key","value":"airlock-secret-placeholder","secret":"API_KEY"}`) {
		t.Errorf("hook's stdin lacks the query or the headers: %s", b)
	}
	ev := nextEvent(t, f)
	if ev.Type != api.ApprovalDecided || ev.Approval.Headers != nil || ev.Approval.Query != r.Query {
		t.Errorf("decided event %+v: want the query, no headers", ev.Approval)
	}
	for _, where := range []string{fmt.Sprintf("%+v", rec.events()), logs.String()} {
		if strings.Contains(where, "QMARK-51") || strings.Contains(where, "HMARK-52") {
			t.Errorf("the query or a header was recorded: %s", where)
		}
	}

	// Over the bounds, kept cut and marked.
	r = push("s1", nil)
	r.Query = strings.Repeat("q", MaxQuery+1)
	r.Headers = make([]api.HeaderField, MaxHeaders+1)
	ch = ask(t.Context(), s, r)
	a = held(t, f)
	if len(a.Query) != MaxQuery || !a.QueryTruncated || len(a.Headers) != MaxHeaders || !a.HeadersTruncated {
		t.Errorf("held query of %d bytes (truncated %v), %d headers (truncated %v)", len(a.Query), a.QueryTruncated, len(a.Headers), a.HeadersTruncated)
	}
	decision(t, ch) // the hook denies it
}
