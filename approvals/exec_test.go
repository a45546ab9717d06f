package approvals

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
)

// script writes an executable shell script and returns its path.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "approver")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func pendingApproval() api.Approval {
	now := time.Now().UTC()
	return api.Approval{ID: "0123456789abcdef", Session: "s1", Method: "POST", Host: "git.corp.test",
		Path: "/repo.git/git-receive-pack", Rule: "ask", Refs: []string{"refs/heads/main"},
		Created: now, Deadline: now.Add(time.Minute), State: api.ApprovalPending}
}

func TestExecApprover(t *testing.T) {
	for _, tc := range []struct {
		name, body string
		want       *Verdict
		wantErr    string // substring; empty: no error
	}{
		{"allow", `in=$(cat); echo "$in" | grep -q '"id":"0123456789abcdef"' && echo "$in" | grep -q '"refs":\["refs/heads/main"\]' && echo '{"decision":"allow","reason":"on the list"}'`,
			&Verdict{Allow: true, Reason: "on the list"}, ""},
		{"deny without reading stdin", `echo '{"decision":"deny"}'`, &Verdict{}, ""},
		{"no output", `cat >/dev/null`, nil, ""},
		{"empty decision", `echo '{"decision":""}'`, nil, ""},
		{"exit status", `echo 'no such channel' >&2; echo '{"decision":"allow"}'; exit 3`, nil, "exited with status 3: no such channel"},
		{"signal", `kill -9 $$`, nil, "ended: signal: killed"},
		{"unknown decision", `echo '{"decision":"yes"}'`, nil, `decision "yes" is neither`},
		{"unknown field", `echo '{"decision":"allow","scope":"all"}'`, nil, "not a decision object"},
		{"not JSON", `echo 'allow'`, nil, "not valid JSON"},
		{"cut short", `printf '{"decision":'`, nil, "ends early"},
		{"two values", `echo '{"decision":"deny"} {"decision":"allow"}'`, nil, "more than one JSON value"},
		{"too much output", `head -c 70000 /dev/zero | tr '\0' ' '; echo '{"decision":"allow"}'`, nil, "output larger than"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e, err := NewExecApprover([]string{script(t, tc.body)})
			if err != nil {
				t.Fatal(err)
			}
			v, err := e.Approve(t.Context(), pendingApproval())
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) || v != nil {
					t.Fatalf("Approve = %+v, %v; want an error with %q", v, err, tc.wantErr)
				}
				if !errdefs.IsUnavailable(err) {
					t.Errorf("error %v is not of class unavailable", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if (v == nil) != (tc.want == nil) || (v != nil && *v != *tc.want) {
				t.Errorf("Approve = %+v, want %+v", v, tc.want)
			}
		})
	}
}

// The command's environment holds a PATH and what WithExecEnv adds,
// nothing of airlockd's.
func TestExecApproverEnvironment(t *testing.T) {
	t.Setenv("AIRLOCK_TEST_SECRET", "s3cret-value")
	out := filepath.Join(t.TempDir(), "env")
	e, err := NewExecApprover([]string{script(t, `env > "$1"`), out}, WithExecEnv("CHANNEL=#ops"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Approve(t.Context(), pendingApproval()); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	env := string(b)
	if strings.Contains(env, "s3cret-value") || !strings.Contains(env, "CHANNEL=#ops") || !strings.Contains(env, "PATH=/usr/local/sbin:") {
		t.Errorf("approver's environment:\n%s", env)
	}
}

func TestExecApproverTimeout(t *testing.T) {
	e, err := NewExecApprover([]string{script(t, `echo waiting >&2; sleep 30`)}, WithExecTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	_, err = e.Approve(t.Context(), pendingApproval())
	if err == nil || !strings.Contains(err.Error(), "timed out after 100ms: waiting") {
		t.Errorf("Approve = %v, want a timeout quoting stderr", err)
	}
	if el := time.Since(start); el > 10*time.Second {
		t.Errorf("Approve returned after %s", el)
	}
}

func TestParseApprover(t *testing.T) {
	for _, spec := range []string{"", "exec:", "exec:  ", "exec:approve.sh", "slack:#ops", "/bin/approve"} {
		if _, err := ParseApprover(spec); !errdefs.IsInvalidArgument(err) {
			t.Errorf("ParseApprover(%q) = %v, want invalid argument", spec, err)
		}
	}
	a, err := ParseApprover("exec:/usr/local/bin/approve --channel ops")
	if err != nil {
		t.Fatal(err)
	}
	if e, ok := a.(*ExecApprover); !ok || strings.Join(e.argv, "|") != "/usr/local/bin/approve|--channel|ops" {
		t.Errorf("ParseApprover = %#v", a)
	}
}

// notifying wraps an approver and reports each run's end.
type notifying struct {
	Approver
	ran chan error
}

func (n notifying) Approve(ctx context.Context, a api.Approval) (*Verdict, error) {
	v, err := n.Approver.Approve(ctx, a)
	n.ran <- err
	return v, err
}

// The hook decides held requests; its reason is cleaned for the audit.
func TestStoreApproverDecides(t *testing.T) {
	e, err := NewExecApprover([]string{script(t, `printf '{"decision":"deny","reason":"not during\\nthe freeze"}'`)})
	if err != nil {
		t.Fatal(err)
	}
	s := newStore(t, WithApprover(e))
	rec := &recorder{}
	d := s.Ask(t.Context(), push("s1", rec))
	if d.Allow || d.By != ByApprover || d.Reason != "not during the freeze" {
		t.Errorf("Ask = %+v, want denied by the approver", d)
	}
	if evs := rec.events(); len(evs) != 2 || evs[1].Fields["by"] != ByApprover || evs[1].Reason != "not during the freeze" {
		t.Errorf("audit %+v", evs)
	}
}

// A failing approver, or one without a decision, leaves the request to a
// person.
func TestStoreApproverFailureWaitsForPerson(t *testing.T) {
	for name, body := range map[string]string{
		"failure":     `echo 'cannot reach chat' >&2; exit 1`,
		"no decision": `cat >/dev/null`,
	} {
		t.Run(name, func(t *testing.T) {
			e, err := NewExecApprover([]string{script(t, body)})
			if err != nil {
				t.Fatal(err)
			}
			n := notifying{Approver: e, ran: make(chan error, 1)}
			s := newStore(t, WithApprover(n))
			f, _ := s.Follow("")
			defer f.Close()
			ch := ask(t.Context(), s, push("s1", nil))
			a := held(t, f)
			select {
			case <-n.ran:
			case <-time.After(10 * time.Second):
				t.Fatal("the approver never ran")
			}
			if l := s.List(""); len(l) != 1 {
				t.Fatalf("pending after the approver: %v", l)
			}
			if _, err := s.Decide(t.Context(), a.ID, true, "", "alice"); err != nil {
				t.Fatal(err)
			}
			if d := decision(t, ch); !d.Allow || d.By != "alice" {
				t.Errorf("Ask = %+v, want allowed by alice", d)
			}
		})
	}
}

// A person who decides first wins, and the approver's run (its children
// too) is killed.
func TestStoreApproverPersonFirst(t *testing.T) {
	pidfile := filepath.Join(t.TempDir(), "pid")
	e, err := NewExecApprover([]string{script(t, `sleep 60 & echo $! > "$1.tmp"; mv "$1.tmp" "$1"; wait; echo '{"decision":"allow"}'`), pidfile})
	if err != nil {
		t.Fatal(err)
	}
	n := notifying{Approver: e, ran: make(chan error, 1)}
	s := newStore(t, WithApprover(n))
	f, _ := s.Follow("")
	defer f.Close()
	ch := ask(t.Context(), s, push("s1", nil))
	a := held(t, f)
	pid := waitPidfile(t, pidfile)
	if _, err := s.Decide(t.Context(), a.ID, false, "not now", "alice"); err != nil {
		t.Fatal(err)
	}
	if d := decision(t, ch); d.Allow || d.By != "alice" {
		t.Errorf("Ask = %+v, want denied by alice", d)
	}
	select {
	case err := <-n.ran:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("the approver's run ended with %v, want cancelled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the approver's run was not ended by the decision")
	}
	waitGone(t, pid)
}

// waitPidfile waits for the script to write its child's pid.
func waitPidfile(t *testing.T, p string) int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile(p)
		if err == nil {
			pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
			if err != nil {
				t.Fatal(err)
			}
			return pid
		}
		if time.Now().After(deadline) {
			t.Fatal("the approver did not start its child")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// waitGone waits for pid to be dead (gone, or a zombie waiting for its
// new parent to reap it).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		if _, rest, ok := strings.Cut(string(b), ") "); ok && strings.HasPrefix(rest, "Z") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the approver's child %d still runs", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func FuzzParseVerdict(f *testing.F) {
	for _, s := range []string{``, `{"decision":"allow"}`, `{"decision":"deny","reason":"x"}`, `{"decision":""}`,
		`{"decision":"yes"}`, `{"decision":1}`, `[]`, `{"decision":"allow"} {}`, `{"decision":"allow","x":1}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		v, err := parseVerdict(b)
		if v != nil && err != nil {
			t.Fatalf("parseVerdict(%q) = %+v and %v", b, v, err)
		}
		if v != nil && !json.Valid(b) {
			t.Fatalf("parseVerdict(%q) = %+v from output that is not JSON", b, v)
		}
	})
}
