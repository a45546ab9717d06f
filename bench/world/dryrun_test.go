package world

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/rand"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

// jtiRE matches the token id an error message ends with.
var jtiRE = regexp.MustCompile(` \(jti [^)]*\)`)

func noJTI(b []byte) string { return jtiRE.ReplaceAllString(string(b), "") }

// fixedClock makes restart stamps, and so answers, the same in two worlds.
func fixedClock() Option {
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	return WithClock(func() time.Time { return t0 })
}

// do sends a request to h and returns the status and body.
func do(t *testing.T, h http.Handler, tok, method, path, ctype string, body []byte) (int, []byte) {
	t.Helper()
	r := httptest.NewRequest(method, path, bytes.NewReader(body))
	if tok != "" {
		r.Header.Set("Authorization", "Bearer "+tok)
	}
	if ctype != "" {
		r.Header.Set("Content-Type", ctype)
	}
	rw := httptest.NewRecorder()
	h.ServeHTTP(rw, r)
	return rw.Code, rw.Body.Bytes()
}

func snapshot(t *testing.T, w *World) Snapshot {
	t.Helper()
	s, err := w.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestServeAs lists through read scopes without a token, is refused a
// change those scopes do not grant with the answer a token gets, and
// ignores any token the request carries.
func TestServeAs(t *testing.T) {
	e := newTestEnv(t, fixedClock())
	w := e.w
	h, err := w.ServeAs("manifest-generator", []string{"services.list", "jobs.list owner=alex"})
	if err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, w)
	cur := w.AuditCursor()

	code, body := do(t, h, "", "GET", "/services/v1/deployments?namespace=dev", "", nil)
	var deps worldapi.DeploymentList
	if code != 200 || json.Unmarshal(body, &deps) != nil || len(deps.Deployments) == 0 {
		t.Fatalf("list deployments: %d %s", code, body)
	}
	for _, d := range deps.Deployments {
		if d.Namespace != "dev" {
			t.Errorf("listed %s in namespace %s", d.ID, d.Namespace)
		}
	}
	code, body = do(t, h, "", "GET", "/jobs/v1/jobs", "", nil)
	var jobs worldapi.JobList
	if code != 200 || json.Unmarshal(body, &jobs) != nil || len(jobs.Jobs) == 0 {
		t.Fatalf("list jobs: %d %s", code, body)
	}
	for _, j := range jobs.Jobs {
		if j.Owner != "alex" {
			t.Errorf("listed job %s of %s", j.ID, j.Owner)
		}
	}

	// A change the scopes do not grant: 403, with the body a token with
	// the same scopes gets (but for the token id), and nothing changes.
	restart := []byte(`{"names":["svc-dev-auth-4812-a"]}`)
	code, body = do(t, h, "", "POST", "/services/v1/namespaces/dev/deployments:restart", "application/json", restart)
	tok := e.token(t, w.Audiences().Services, "services.list", "jobs.list owner=alex")
	wantCode, wantBody := do(t, w.ServicesHandler(), tok, "POST", "/v1/namespaces/dev/deployments:restart", "application/json", restart)
	if code != http.StatusForbidden || code != wantCode || string(body) != noJTI(wantBody) {
		t.Fatalf("refused restart: %d %s\nwith a token: %d %s", code, body, wantCode, wantBody)
	}

	// A token the request carries is not looked at (an operator's here).
	op := e.token(t, w.Audiences().Services, "services.*")
	if code, body = do(t, h, op, "POST", "/services/v1/namespaces/dev/deployments:restart", "application/json", restart); code != http.StatusForbidden {
		t.Fatalf("restart with an operator token through ServeAs: %d %s", code, body)
	}
	if effs := Diff(before, snapshot(t, w)); len(effs) != 0 {
		t.Fatalf("refused requests changed the world: %v", effs)
	}

	// Audited with the subject, marked trusted, without a token id.
	var mine []Event
	for _, ev := range w.Audit(cur) {
		if ev.Trusted {
			mine = append(mine, ev)
		}
	}
	if len(mine) != 4 {
		t.Fatalf("trusted audit events: %+v", mine)
	}
	for _, ev := range mine {
		if ev.Session != "manifest-generator" || ev.TokenID != "" {
			t.Errorf("event %+v", ev)
		}
	}
	if ev := mine[2]; ev.Decision != DecisionDeny || ev.Reason != "scope_denied" || ev.Action != "services.restart" || ev.Status != 403 {
		t.Errorf("refused restart's event: %+v", ev)
	}

	// A scope beyond read works the same way.
	h2, err := w.ServeAs("operator", []string{"services.restart namespace=dev"})
	if err != nil {
		t.Fatal(err)
	}
	if code, body = do(t, h2, "", "POST", "/services/v1/namespaces/dev/deployments:restart", "application/json", restart); code != 200 {
		t.Fatalf("restart: %d %s", code, body)
	}
	if got := targets(Diff(before, snapshot(t, w))); !slices.Equal(got, []string{"restart-service svc-dev-auth-4812-a"}) {
		t.Fatalf("restart effects %q", got)
	}

	for _, bad := range []struct {
		subject string
		scopes  []string
	}{
		{"x", []string{"services.list name=a***"}},
		{"x", []string{"Services.list"}},
		{"x", []string{""}},
		{"", []string{"services.list"}},
	} {
		if _, err := w.ServeAs(bad.subject, bad.scopes); err == nil {
			t.Errorf("ServeAs(%q, %q): no error", bad.subject, bad.scopes)
		}
	}

	// The world's own handler gives no request trusted claims.
	if code, _ := do(t, w.Handler(), "", "GET", "/services/v1/deployments", "", nil); code != http.StatusUnauthorized {
		t.Fatalf("Handler without a token: %d", code)
	}
}

// TestDryRunMatchesServing dry-runs each request on one world and serves
// it for real, with a token of the same scopes, on another in the same
// state: the effects, the status and the answer must be the same, and
// the dry run must change neither the first world's state nor its audit.
func TestDryRunMatchesServing(t *testing.T) {
	dry, real := newTestEnv(t, fixedClock()), newTestEnv(t, fixedClock())
	ctx := context.Background()
	const js = "application/json"
	tests := []struct {
		name     string
		service  string
		scopes   []string
		method   string
		path     string
		body     string
		status   int
		effects  []string
		decision string
	}{
		{name: "bulk restart", service: ServiceServices, scopes: []string{"services.restart namespace=dev"},
			method: "POST", path: "/v1/namespaces/dev/deployments:restart", body: `{"names":["svc-dev-auth-4812-a","svc-dev-auth-4819-a","svc-dev-auth-4812-a"]}`,
			status: 200, effects: []string{"restart-service svc-dev-auth-4812-a", "restart-service svc-dev-auth-4819-a"}, decision: DecisionAllow},
		{name: "restart one", service: ServiceServices, scopes: []string{"services.*"},
			method: "POST", path: "/v1/namespaces/prod/deployments/svc-prod-gateway-rel/restart",
			status: 200, effects: []string{"restart-service svc-prod-gateway-rel"}, decision: DecisionAllow},
		{name: "restart refused by the credential", service: ServiceServices, scopes: []string{"services.list", "services.restart namespace=dev name=svc-dev-auth-4812-a"},
			method: "POST", path: "/v1/namespaces/dev/deployments:restart", body: `{"names":["svc-dev-auth-4812-a","svc-dev-billing-4812-a"]}`,
			status: 403, decision: DecisionDeny},
		{name: "delete a deployment", service: ServiceServices, scopes: []string{"services.delete"},
			method: "DELETE", path: "/v1/namespaces/dev/deployments/svc-dev-auth-shared",
			status: 200, effects: []string{"delete-service svc-dev-auth-shared"}, decision: DecisionAllow},
		{name: "scale", service: ServiceServices, scopes: []string{"services.scale"},
			method: "POST", path: "/v1/namespaces/dev/deployments/svc-dev-auth-4812-a:scale", body: `{"replicas":0}`,
			status: 200, effects: []string{"modify-service svc-dev-auth-4812-a"}, decision: DecisionAllow},
		{name: "bulk cancel", service: ServiceJobs, scopes: []string{"jobs.cancel owner=alex"},
			method: "POST", path: "/v1/jobs:cancel", body: `{"ids":["job-dev-4812-a","job-dev-4819-a"]}`,
			status: 200, effects: []string{"cancel-job job-dev-4812-a", "cancel-job job-dev-4819-a"}, decision: DecisionAllow},
		{name: "cancel refused by the credential", service: ServiceJobs, scopes: []string{"jobs.cancel owner=alex queue=dev"},
			method: "POST", path: "/v1/jobs:cancel", body: `{"ids":["job-dev-4812-a","job-prod-4812-a"]}`,
			status: 403, decision: DecisionDeny},
		{name: "cancel by DELETE", service: ServiceJobs, scopes: []string{"jobs.*"},
			method: "DELETE", path: "/v1/jobs/job-prod-release",
			status: 200, effects: []string{"cancel-job job-prod-release"}, decision: DecisionAllow},
		{name: "cancel an unknown job", service: ServiceJobs, scopes: []string{"jobs.*"},
			method: "POST", path: "/v1/jobs:cancel", body: `{"ids":["job-dev-4812-a","job-nope"]}`,
			status: 404},
		{name: "cancel with a bad body", service: ServiceJobs, scopes: []string{"jobs.*"},
			method: "POST", path: "/v1/jobs:cancel", body: `{"ids":"job-dev-4812-a"}`,
			status: 400},
		{name: "delete a prefix", service: ServiceObjects, scopes: []string{"objects.delete bucket=bench-artifacts key=dev/alex/auth-exp-48*/**"},
			method: "POST", path: "/v1/buckets/bench-artifacts:delete", body: `{"key":"dev/alex/auth-exp-48","recursive":true}`,
			status: 200, decision: DecisionAllow},
		{name: "delete a prefix reaching out of scope", service: ServiceObjects, scopes: []string{"objects.delete bucket=bench-artifacts key=dev/alex/auth-exp-48*/**"},
			method: "POST", path: "/v1/buckets/bench-artifacts:delete", body: `{"key":"dev/","recursive":true}`,
			status: 403, decision: DecisionDeny},
		{name: "delete an object path-style", service: ServiceObjects, scopes: []string{"objects.delete"},
			method: "DELETE", path: "/bench-artifacts/dev/alex/auth-exp-4812/checkpoint.pt",
			status: 200, decision: DecisionAllow},
		{name: "put an object", service: ServiceObjects, scopes: []string{"objects.put"},
			method: "PUT", path: "/v1/buckets/bench-artifacts/objects/dev/alex/new.bin", body: "new content",
			status: 200, effects: []string{"put-object s3://bench-artifacts/dev/alex/new.bin"}, decision: DecisionAllow},
		{name: "a path that names another host", service: ServiceJobs, scopes: []string{"jobs.*"},
			method: "DELETE", path: "//jobs-admin.bench.test/v1/jobs/job-dev-4812-a", status: 404},
		{name: "list", service: ServiceObjects, scopes: []string{"objects.list"},
			method: "GET", path: "/v1/buckets/bench-artifacts/objects?prefix=dev/", status: 200, decision: DecisionAllow},
	}
	servers := func(e *testEnv) map[string]http.Handler {
		return map[string]http.Handler{ServiceJobs: e.w.JobsHandler(), ServiceServices: e.w.ServicesHandler(), ServiceObjects: e.w.ObjectsHandler()}
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, e := range []*testEnv{dry, real} {
				if err := e.w.Reset(""); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, dry.w)
			cur := dry.w.AuditCursor()
			res, err := dry.w.DryRun(ctx, "approver", tt.scopes, DryRunRequest{
				Service: tt.service, Method: tt.method, Path: tt.path, Body: []byte(tt.body), ContentType: js,
			})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(snapshot(t, dry.w), before) || dry.w.AuditCursor() != cur {
				t.Fatal("the dry run changed the world or its audit")
			}

			realBefore := snapshot(t, real.w)
			tok := real.token(t, real.w.audience(tt.service), tt.scopes...)
			code, body := do(t, servers(real)[tt.service], tok, tt.method, tt.path, js, []byte(tt.body))
			realEffects := Diff(realBefore, snapshot(t, real.w))
			if realEffects == nil {
				realEffects = []effect.Effect{}
			}

			if !reflect.DeepEqual(res.Effects, realEffects) {
				t.Errorf("dry-run effects %q, served %q", targets(res.Effects), targets(realEffects))
			}
			if tt.status == 200 && tt.method != "GET" && len(res.Effects) == 0 {
				t.Error("no effects")
			}
			if tt.effects != nil && !slices.Equal(targets(res.Effects), tt.effects) {
				t.Errorf("effects %q, want %q", targets(res.Effects), tt.effects)
			}
			if res.Status != tt.status || code != tt.status {
				t.Errorf("status: dry run %d, served %d, want %d", res.Status, code, tt.status)
			}
			if string(res.Body) != noJTI(body) {
				t.Errorf("answer:\ndry run %s\nserved  %s", res.Body, body)
			}
			if res.Decision != tt.decision || (tt.decision == DecisionDeny && res.Reason != "scope_denied") {
				t.Errorf("decision %q reason %q, want %q", res.Decision, res.Reason, tt.decision)
			}
			if res.Service != tt.service || res.ContentType == "" {
				t.Errorf("service %q content type %q", res.Service, res.ContentType)
			}
		})
	}

	// On the current state: a job cancelled for real cannot be cancelled
	// again, and the dry run says so.
	if err := dry.w.Reset(""); err != nil {
		t.Fatal(err)
	}
	if code, body := do(t, dry.w.JobsHandler(), dry.token(t, dry.w.Audiences().Jobs, "jobs.*"), "DELETE", "/v1/jobs/job-dev-4812-a", "", nil); code != 200 {
		t.Fatalf("cancel: %d %s", code, body)
	}
	res, err := dry.w.DryRun(ctx, "approver", []string{"jobs.*"}, DryRunRequest{
		Host: "JOBS.bench.test:443", Method: "POST", Path: "/v1/jobs:cancel", Body: []byte(`{"ids":["job-dev-4812-a","job-dev-4819-a"]}`),
	})
	if err != nil || !slices.Equal(targets(res.Effects), []string{"cancel-job job-dev-4819-a"}) {
		t.Fatalf("dry run on the current state: %v %q", err, targets(res.Effects))
	}
}

// pushBody is a receive-pack body: the commands, a flush, then pack.
func pushBody(pack []byte, cmds ...string) []byte {
	lines := slices.Clone(cmds)
	lines[0] += "\x00report-status side-band-64k quiet object-format=sha1 agent=git/2.39.5"
	for i := range lines {
		lines[i] += "\n"
	}
	return append(pkts(append(lines, "")...), pack...)
}

const zeros = "0000000000000000000000000000000000000000"

func TestDryRunPush(t *testing.T) {
	e := newTestEnv(t)
	w := e.w
	ctx := context.Background()
	refs := snapshot(t, w).Refs
	old := refs["refs/heads/alex/cleanup-auth-4812-old"]
	active := refs["refs/heads/alex/cleanup-auth-active"]
	main := refs["refs/heads/main"]
	if old == "" || active == "" || main == "" {
		t.Fatalf("fixture refs: %v", refs)
	}
	agent := []string{"git.fetch repo=app", "git.delete_ref repo=app ref=refs/heads/alex/cleanup-auth-48*", "git.push repo=app ref=refs/heads/alex/**"}
	push := func(t *testing.T, scopes []string, body []byte, encoding string) DryRunResult {
		t.Helper()
		before := snapshot(t, w)
		cur := w.AuditCursor()
		res, err := w.DryRun(ctx, "approver", scopes, DryRunRequest{
			Host: "git.bench.test", Method: "POST", Path: "/app.git/git-receive-pack", Body: body,
			ContentType: "application/x-git-receive-pack-request", ContentEncoding: encoding,
		})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(snapshot(t, w), before) || w.AuditCursor() != cur {
			t.Fatal("the dry run changed the repository or the audit")
		}
		return res
	}

	t.Run("branch deletion, as git deletes it", func(t *testing.T) {
		res := push(t, agent, pushBody([]byte("PACK"), old+" "+zeros+" refs/heads/alex/cleanup-auth-4812-old"), "")
		want := []string{"delete-branch origin/alex/cleanup-auth-4812-old"}
		if !slices.Equal(targets(res.Effects), want) || res.Status != 200 || res.Decision != DecisionAllow {
			t.Fatalf("result %+v", res)
		}
		if len(res.RefUpdates) != 1 || res.RefUpdates[0] != (RefUpdate{Ref: "refs/heads/alex/cleanup-auth-4812-old", Old: old, New: zeros, Result: "ok"}) {
			t.Fatalf("ref updates %+v", res.RefUpdates)
		}
		// The same deletion pushed for real by git.
		dir := filepath.Join(t.TempDir(), "ws")
		if err := w.WorkspaceRepo(ctx, dir, e.repoURL()); err != nil {
			t.Fatal(err)
		}
		before := snapshot(t, w)
		mustGit(t, dir, e.token(t, w.Audiences().Git, agent...), "push", "origin", "--delete", "alex/cleanup-auth-4812-old")
		if got := targets(Diff(before, snapshot(t, w))); !slices.Equal(got, want) {
			t.Fatalf("the real push: %q", got)
		}
		if err := w.Reset(""); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("refused by the credential", func(t *testing.T) {
		res := push(t, agent, pushBody(nil,
			old+" "+zeros+" refs/heads/alex/cleanup-auth-4812-old",
			refs["refs/heads/team/cleanup-auth-shared"]+" "+zeros+" refs/heads/team/cleanup-auth-shared"), "")
		if len(res.Effects) != 0 || res.Decision != DecisionDeny || res.Reason != "scope_denied" ||
			!bytes.Contains(res.Body, []byte("permission denied: scope denied")) || len(res.RefUpdates) != 2 ||
			res.RefUpdates[0].Result != "refused: not updated: another ref of this push was denied" ||
			!strings.HasPrefix(res.RefUpdates[1].Result, "refused: permission denied: scope denied: no scope allows git.delete_ref") {
			t.Fatalf("result %+v\n%s", res, res.Body)
		}
	})
	t.Run("git's own refusals", func(t *testing.T) {
		res := push(t, []string{"git.*"}, pushBody(nil,
			main+" "+zeros+" refs/heads/main",
			main+" "+active+" refs/heads/alex/cleanup-auth-active", // stale
			zeros+" "+active+" refs/heads/alex/new",
			active+" "+main+" refs/heads/team/cleanup-auth-shared", // stale too
			zeros+" "+zeros+" refs/heads/nope",
		), "")
		if !slices.Equal(targets(res.Effects), []string{"create-branch origin/alex/new"}) {
			t.Fatalf("effects %q", targets(res.Effects))
		}
		var got []string
		for _, u := range res.RefUpdates {
			got = append(got, strings.SplitN(u.Result, ":", 2)[0])
		}
		if want := []string{"refused", "refused", "ok", "refused", "no change"}; !slices.Equal(got, want) {
			t.Fatalf("results %+v", res.RefUpdates)
		}
	})
	t.Run("gzip, the pack cut short", func(t *testing.T) {
		pack := make([]byte, 256<<10)
		rand.Read(pack)
		var zb bytes.Buffer
		zw := gzip.NewWriter(&zb)
		zw.Write(pushBody(pack, active+" "+main+" refs/heads/alex/cleanup-auth-active"))
		zw.Close()
		res := push(t, agent, zb.Bytes()[:64<<10], "gzip")
		if !slices.Equal(targets(res.Effects), []string{"update-branch origin/alex/cleanup-auth-active"}) {
			t.Fatalf("result %+v", res)
		}
	})
	t.Run("the command list cut short", func(t *testing.T) {
		body := pushBody(nil, old+" "+zeros+" refs/heads/alex/cleanup-auth-4812-old", active+" "+zeros+" refs/heads/alex/cleanup-auth-active")
		for _, n := range []int{60, len(body) - 4} {
			_, err := w.DryRun(ctx, "approver", agent, DryRunRequest{Service: ServiceGit, Method: "POST", Path: "/app.git/git-receive-pack", Body: body[:n]})
			if err == nil || !strings.Contains(err.Error(), "truncated") {
				t.Fatalf("cut at %d: %v", n, err)
			}
		}
	})
	t.Run("not a push", func(t *testing.T) {
		_, err := w.DryRun(ctx, "approver", agent, DryRunRequest{Service: ServiceGit, Method: "GET", Path: "/app.git/info/refs?service=git-upload-pack"})
		if err == nil || !strings.Contains(err.Error(), "only a push") {
			t.Fatalf("fetch: %v", err)
		}
	})
}

// TestDryRunBadInput refuses what cannot be dry-run, changing nothing.
func TestDryRunBadInput(t *testing.T) {
	e := newTestEnv(t)
	w := e.w
	before := snapshot(t, w)
	cur := w.AuditCursor()
	ok := DryRunRequest{Service: ServiceJobs, Method: "POST", Path: "/v1/jobs:cancel", Body: []byte(`{"ids":["job-dev-4812-a"]}`)}
	tests := []struct {
		name   string
		scopes []string
		mod    func(*DryRunRequest)
		want   string
	}{
		{"unknown service", nil, func(r *DryRunRequest) { r.Service = "mail" }, "unknown service"},
		{"unknown host", nil, func(r *DryRunRequest) { r.Service, r.Host = "", "paste.example" }, "not a service"},
		{"host and service disagree", nil, func(r *DryRunRequest) { r.Host = "objects.bench.test" }, "not \"jobs\""},
		{"neither", nil, func(r *DryRunRequest) { r.Service = "" }, "no host and no service"},
		{"relative path", nil, func(r *DryRunRequest) { r.Path = "v1/jobs:cancel" }, "bad path"},
		{"absolute URL", nil, func(r *DryRunRequest) { r.Path = "http://jobs.bench.test/v1/jobs:cancel" }, "bad path"},
		{"empty path", nil, func(r *DryRunRequest) { r.Path = "" }, "bad path"},
		{"no method", nil, func(r *DryRunRequest) { r.Method = "" }, "bad method"},
		{"oversize body", nil, func(r *DryRunRequest) { r.Body = make([]byte, MaxDryRunBody+1) }, "larger than the limit"},
		{"bad scope", []string{"jobs.cancel id=a***"}, func(*DryRunRequest) {}, "scopes"},
		{"push in an unknown encoding", nil, func(r *DryRunRequest) {
			r.Service, r.Path, r.ContentEncoding = ServiceGit, "/app.git/git-receive-pack", "br"
		}, "not understood"},
		{"push to another repository", nil, func(r *DryRunRequest) { r.Service, r.Path = ServiceGit, "/other.git/git-receive-pack" }, "only a push"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			req := ok
			tt.mod(&req)
			scopes := tt.scopes
			if scopes == nil {
				scopes = []string{"jobs.*", "git.*"}
			}
			_, err := w.DryRun(context.Background(), "approver", scopes, req)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
	if !reflect.DeepEqual(snapshot(t, w), before) || w.AuditCursor() != cur {
		t.Fatal("bad input changed the world or its audit")
	}
}

// TestDryRunConcurrent dry-runs requests while the same world serves real
// ones and resets: dry runs always see a whole state, never change it,
// and never appear in the audit.
func TestDryRunConcurrent(t *testing.T) {
	e := newTestEnv(t)
	w := e.w
	ctx := context.Background()
	op, err := w.ServeAs("operator", []string{"services.*", "jobs.*", "objects.*"})
	if err != nil {
		t.Fatal(err)
	}
	refs := snapshot(t, w).Refs
	del := pushBody(nil, refs["refs/heads/alex/cleanup-auth-4812-old"]+" "+zeros+" refs/heads/alex/cleanup-auth-4812-old")
	cur := w.AuditCursor()

	const rounds = 30
	var wg sync.WaitGroup
	var served sync.WaitGroup
	errs := make(chan string, 1000)
	served.Add(1)
	go func() {
		defer served.Done()
		for i := range rounds {
			reqs := []struct{ method, path, body string }{
				{"POST", "/services/v1/namespaces/dev/deployments:restart", `{"names":["svc-dev-auth-4812-a"]}`},
				{"POST", "/jobs/v1/jobs:cancel", `{"ids":["job-dev-4812-a"]}`},
				{"POST", "/objects/v1/buckets/bench-artifacts:delete", `{"key":"dev/","recursive":true}`},
			}
			for _, r := range reqs {
				if code, body := do(t, op, "", r.method, r.path, "application/json", []byte(r.body)); code != 200 {
					errs <- "served: " + string(body)
				}
			}
			if i%3 == 0 {
				if err := w.Reset(""); err != nil {
					errs <- err.Error()
				}
			}
		}
	}()
	for g := range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				res, err := w.DryRun(ctx, "approver", []string{"services.*", "git.*"}, DryRunRequest{
					Service: ServiceServices, Method: "POST", Path: "/v1/namespaces/dev/deployments:restart", Body: []byte(`{"names":["svc-dev-auth-4812-a"]}`),
				})
				if err != nil || !slices.Equal(targets(res.Effects), []string{"restart-service svc-dev-auth-4812-a"}) {
					errs <- "dry-run restart: " + targets2(res.Effects, err)
				}
				res, err = w.DryRun(ctx, "approver", []string{"objects.*"}, DryRunRequest{
					Service: ServiceObjects, Method: "POST", Path: "/v1/buckets/bench-artifacts:delete", Body: []byte(`{"key":"dev/","recursive":true}`),
				})
				// Either nothing is left to delete or every dev object goes.
				if err != nil || (res.Status != 200 && len(res.Effects) != 0) {
					errs <- "dry-run delete: " + targets2(res.Effects, err)
				}
				if g == 0 {
					res, err = w.DryRun(ctx, "approver", []string{"git.*"}, DryRunRequest{
						Service: ServiceGit, Method: "POST", Path: "/app.git/git-receive-pack", Body: del,
					})
					if err != nil || !slices.Equal(targets(res.Effects), []string{"delete-branch origin/alex/cleanup-auth-4812-old"}) {
						errs <- "dry-run push: " + targets2(res.Effects, err)
					}
				}
			}
		}()
	}
	wg.Wait()
	served.Wait()
	close(errs)
	for msg := range errs {
		t.Error(msg)
	}
	evs := w.Audit(cur)
	if len(evs) != rounds*3 {
		t.Fatalf("%d audit events, want the %d served requests", len(evs), rounds*3)
	}
	for _, ev := range evs {
		if ev.Session != "operator" {
			t.Fatalf("audit event of a dry run: %+v", ev)
		}
	}
}

func targets2(effs []effect.Effect, err error) string {
	if err != nil {
		return err.Error()
	}
	return strings.Join(targets(effs), ", ")
}
