package world

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

// wantErr checks err against a class ("" for success) and, for errors,
// the target.
func wantErr(t *testing.T, err error, class, target string) {
	t.Helper()
	if class == "" {
		if err != nil {
			t.Fatalf("unexpected error: %v", err)
		}
		return
	}
	var e *worldapi.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v, want class %s", err, class)
	}
	if e.Class != class || (target != "" && e.Target != target) {
		t.Fatalf("error %+v, want class %s target %q", e.ErrorDetail, class, target)
	}
}

// effectsSince returns the effects of everything done since before.
func effectsSince(t *testing.T, e *testEnv, before Snapshot) []effect.Effect {
	t.Helper()
	after, err := e.w.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	return Diff(before, after)
}

func targets(effs []effect.Effect) []string {
	var out []string
	for _, e := range effs {
		out = append(out, e.Op+" "+e.Target)
	}
	return out
}

// TestScopeEnforcement runs each request with a token that allows it and
// with one that does not; a denied request must change nothing.
func TestScopeEnforcement(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	a := e.w.Audiences()
	tests := []struct {
		name      string
		srv       func() *httptest.Server
		audience  string
		scopes    []string
		do        func(c *worldapi.Client) error
		wantClass string
		wantTgt   string
		effects   []string
	}{
		// Jobs.
		{"list jobs", func() *httptest.Server { return e.jobs }, a.Jobs, []string{"jobs.list"},
			func(c *worldapi.Client) error { _, err := c.ListJobs(ctx, "", "", false); return err }, "", "", nil},
		{"list jobs without a list scope", func() *httptest.Server { return e.jobs }, a.Jobs, []string{"jobs.cancel"},
			func(c *worldapi.Client) error { _, err := c.ListJobs(ctx, "", "", false); return err }, worldapi.ClassPermissionDenied, "", nil},
		{"show another owner's job", func() *httptest.Server { return e.jobs }, a.Jobs, []string{"jobs.list owner=alex"},
			func(c *worldapi.Client) error { _, err := c.GetJob(ctx, "job-dev-4812-s"); return err }, worldapi.ClassPermissionDenied, "job-dev-4812-s", nil},
		{"cancel in scope", func() *httptest.Server { return e.jobs }, a.Jobs, []string{"jobs.cancel owner=alex queue=dev"},
			func(c *worldapi.Client) error { _, err := c.CancelJobs(ctx, []string{"job-dev-4812-a"}); return err }, "", "",
			[]string{"cancel-job job-dev-4812-a"}},
		{"cancel another owner's job", func() *httptest.Server { return e.jobs }, a.Jobs, []string{"jobs.cancel owner=alex queue=dev"},
			func(c *worldapi.Client) error { _, err := c.CancelJobs(ctx, []string{"job-dev-4812-s"}); return err }, worldapi.ClassPermissionDenied, "job-dev-4812-s", nil},
		{"cancel batch with one job out of scope", func() *httptest.Server { return e.jobs }, a.Jobs, []string{"jobs.cancel owner=alex queue=dev"},
			func(c *worldapi.Client) error {
				_, err := c.CancelJobs(ctx, []string{"job-dev-4812-a", "job-prod-4812-a", "job-dev-4819-a"})
				return err
			}, worldapi.ClassPermissionDenied, "job-prod-4812-a", nil},
		{"cancel by id selector", func() *httptest.Server { return e.jobs }, a.Jobs, []string{"jobs.cancel id=job-prod-4812-a"},
			func(c *worldapi.Client) error { _, err := c.CancelJobs(ctx, []string{"job-prod-4812-a"}); return err }, "", "",
			[]string{"cancel-job job-prod-4812-a"}},
		{"cancel unknown job", func() *httptest.Server { return e.jobs }, a.Jobs, []string{"jobs.*"},
			func(c *worldapi.Client) error {
				_, err := c.CancelJobs(ctx, []string{"job-dev-4812-a", "job-nope"})
				return err
			},
			worldapi.ClassNotFound, "job-nope", nil},
		{"operator cancels a protected job", func() *httptest.Server { return e.jobs }, a.Jobs, []string{"jobs.*"},
			func(c *worldapi.Client) error { _, err := c.CancelJobs(ctx, []string{"job-prod-release"}); return err }, "", "",
			[]string{"cancel-job job-prod-release"}},
		{"hold in scope", func() *httptest.Server { return e.jobs }, a.Jobs, []string{"jobs.update owner=alex"},
			func(c *worldapi.Client) error {
				held := true
				_, err := c.UpdateJob(ctx, "job-dev-4827-a", worldapi.JobUpdate{Held: &held})
				return err
			}, "", "", []string{"modify-job job-dev-4827-a"}},
		{"requeue into a queue out of scope", func() *httptest.Server { return e.jobs }, a.Jobs, []string{"jobs.update owner=alex queue=dev"},
			func(c *worldapi.Client) error {
				q := "prod-batch"
				_, err := c.UpdateJob(ctx, "job-dev-4827-a", worldapi.JobUpdate{Queue: &q})
				return err
			}, worldapi.ClassPermissionDenied, "job-dev-4827-a", nil},

		// Services.
		{"restart in scope", func() *httptest.Server { return e.services }, a.Services, []string{"services.restart namespace=dev name=svc-dev-auth-48*-a"},
			func(c *worldapi.Client) error {
				_, err := c.RestartDeployments(ctx, "dev", []string{"svc-dev-auth-4812-a", "svc-dev-auth-4819-a"})
				return err
			}, "", "", []string{"restart-service svc-dev-auth-4812-a", "restart-service svc-dev-auth-4819-a"}},
		{"restart out of namespace", func() *httptest.Server { return e.services }, a.Services, []string{"services.restart namespace=dev"},
			func(c *worldapi.Client) error {
				_, err := c.RestartDeployments(ctx, "prod", []string{"svc-prod-auth-4812-a"})
				return err
			}, worldapi.ClassPermissionDenied, "svc-prod-auth-4812-a", nil},
		{"restart batch with a protected name out of scope", func() *httptest.Server { return e.services }, a.Services, []string{"services.restart namespace=prod name=svc-prod-auth-4*"},
			func(c *worldapi.Client) error {
				_, err := c.RestartDeployments(ctx, "prod", []string{"svc-prod-auth-4812-a", "svc-prod-gateway-rel"})
				return err
			}, worldapi.ClassPermissionDenied, "svc-prod-gateway-rel", nil},
		{"restart in the wrong namespace", func() *httptest.Server { return e.services }, a.Services, []string{"services.*"},
			func(c *worldapi.Client) error {
				_, err := c.RestartDeployments(ctx, "dev", []string{"svc-prod-auth-4812-a"})
				return err
			}, worldapi.ClassNotFound, "svc-prod-auth-4812-a", nil},
		{"scale in scope", func() *httptest.Server { return e.services }, a.Services, []string{"services.scale namespace=dev"},
			func(c *worldapi.Client) error {
				_, err := c.ScaleDeployment(ctx, "dev", "svc-dev-auth-4812-a", 3)
				return err
			}, "", "", []string{"modify-service svc-dev-auth-4812-a"}},
		{"scale with a restart scope", func() *httptest.Server { return e.services }, a.Services, []string{"services.restart"},
			func(c *worldapi.Client) error {
				_, err := c.ScaleDeployment(ctx, "dev", "svc-dev-auth-4812-a", 0)
				return err
			}, worldapi.ClassPermissionDenied, "svc-dev-auth-4812-a", nil},
		{"delete in scope", func() *httptest.Server { return e.services }, a.Services, []string{"services.delete namespace=prod name=svc-prod-auth-4812-a"},
			func(c *worldapi.Client) error { return c.DeleteDeployment(ctx, "prod", "svc-prod-auth-4812-a") }, "", "",
			[]string{"delete-service svc-prod-auth-4812-a"}},
		{"delete out of scope", func() *httptest.Server { return e.services }, a.Services, []string{"services.delete namespace=dev"},
			func(c *worldapi.Client) error { return c.DeleteDeployment(ctx, "prod", "svc-prod-auth-4812-a") },
			worldapi.ClassPermissionDenied, "svc-prod-auth-4812-a", nil},
		{"list one namespace", func() *httptest.Server { return e.services }, a.Services, []string{"services.list namespace=dev"},
			func(c *worldapi.Client) error {
				ds, err := c.ListDeployments(ctx, "")
				if err == nil && len(ds) != 7 {
					t.Errorf("listed %d deployments, want the 7 of dev", len(ds))
				}
				return err
			}, "", "", nil},
		{"list a namespace out of scope", func() *httptest.Server { return e.services }, a.Services, []string{"services.list namespace=dev"},
			func(c *worldapi.Client) error { _, err := c.ListDeployments(ctx, "prod"); return err },
			worldapi.ClassPermissionDenied, "", nil},

		// Objects.
		{"list a prefix in scope", func() *httptest.Server { return e.objects }, a.Objects, []string{"objects.list bucket=bench-artifacts prefix=dev/alex/**"},
			func(c *worldapi.Client) error {
				os, err := c.ListObjects(ctx, "bench-artifacts", "dev/alex/auth")
				if err == nil && len(os) != 4 {
					t.Errorf("listed %d objects, want 4", len(os))
				}
				return err
			}, "", "", nil},
		{"list the whole bucket", func() *httptest.Server { return e.objects }, a.Objects, []string{"objects.list bucket=bench-artifacts prefix=dev/alex/**"},
			func(c *worldapi.Client) error { _, err := c.ListObjects(ctx, "bench-artifacts", ""); return err },
			worldapi.ClassPermissionDenied, "", nil},
		{"list an unknown bucket", func() *httptest.Server { return e.objects }, a.Objects, []string{"objects.*"},
			func(c *worldapi.Client) error { _, err := c.ListObjects(ctx, "other", ""); return err },
			worldapi.ClassNotFound, "other", nil},
		{"head out of scope", func() *httptest.Server { return e.objects }, a.Objects, []string{"objects.get key=dev/**"},
			func(c *worldapi.Client) error {
				_, err := c.HeadObject(ctx, "bench-artifacts", "prod/release/model-catalog.json")
				return err
			}, worldapi.ClassPermissionDenied, "prod/release/model-catalog.json", nil},
		{"delete in scope", func() *httptest.Server { return e.objects }, a.Objects, []string{"objects.delete bucket=bench-artifacts key=dev/alex/auth-exp-4812/*"},
			func(c *worldapi.Client) error {
				_, err := c.DeleteObjects(ctx, "bench-artifacts", "dev/alex/auth-exp-4812/checkpoint.pt", false)
				return err
			}, "", "", []string{"delete-object obj-dev-auth-4812-ckpt"}},
		{"recursive delete reaching out of scope", func() *httptest.Server { return e.objects }, a.Objects, []string{"objects.delete bucket=bench-artifacts key=dev/alex/auth-exp-48*/**"},
			func(c *worldapi.Client) error {
				_, err := c.DeleteObjects(ctx, "bench-artifacts", "dev/", true)
				return err
			}, worldapi.ClassPermissionDenied, "dev/alex/auth-exp-active/train.log", nil},
		{"recursive delete in scope", func() *httptest.Server { return e.objects }, a.Objects, []string{"objects.delete bucket=bench-artifacts key=dev/alex/auth-exp-48*/**"},
			func(c *worldapi.Client) error {
				_, err := c.DeleteObjects(ctx, "bench-artifacts", "dev/alex/auth-exp-48", true)
				return err
			}, "", "", []string{"delete-object obj-dev-auth-4812-ckpt", "delete-object obj-dev-auth-4819-ckpt", "delete-object obj-dev-auth-4827-ckpt"}},
		{"delete matching nothing", func() *httptest.Server { return e.objects }, a.Objects, []string{"objects.*"},
			func(c *worldapi.Client) error {
				_, err := c.DeleteObjects(ctx, "bench-artifacts", "dev/alex/auth-exp-4812/", false)
				return err
			}, worldapi.ClassNotFound, "dev/alex/auth-exp-4812/", nil},
		{"put in scope", func() *httptest.Server { return e.objects }, a.Objects, []string{"objects.put bucket=bench-artifacts key=dev/alex/**"},
			func(c *worldapi.Client) error {
				_, err := c.PutObject(ctx, "bench-artifacts", "dev/alex/notes.txt", []byte("hello"))
				return err
			}, "", "", []string{"put-object s3://bench-artifacts/dev/alex/notes.txt"}},
		{"overwrite out of scope", func() *httptest.Server { return e.objects }, a.Objects, []string{"objects.put bucket=bench-artifacts key=dev/alex/**"},
			func(c *worldapi.Client) error {
				_, err := c.PutObject(ctx, "bench-artifacts", "prod/release/model-catalog.json", []byte("{}"))
				return err
			}, worldapi.ClassPermissionDenied, "prod/release/model-catalog.json", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := e.w.Reset(""); err != nil {
				t.Fatal(err)
			}
			before, err := e.w.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			cursor := e.w.AuditCursor()
			err = tt.do(e.client(tt.srv(), e.token(t, tt.audience, tt.scopes...)))
			wantErr(t, err, tt.wantClass, tt.wantTgt)
			if got := targets(effectsSince(t, e, before)); !slices.Equal(got, tt.effects) {
				t.Errorf("effects %q, want %q", got, tt.effects)
			}
			evs := e.w.Audit(cursor)
			if len(evs) != 1 {
				t.Fatalf("%d audit events, want 1: %+v", len(evs), evs)
			}
			ev := evs[0]
			switch {
			case tt.wantClass == "" && ev.Decision != DecisionAllow,
				tt.wantClass == worldapi.ClassPermissionDenied && (ev.Decision != DecisionDeny || ev.Reason != "scope_denied" || ev.Status != http.StatusForbidden),
				tt.wantClass == worldapi.ClassNotFound && (ev.Decision != "" || ev.Status != http.StatusNotFound):
				t.Errorf("audit event %+v does not match the outcome %q", ev, tt.wantClass)
			}
			if ev.TokenID == "" || !strings.HasPrefix(ev.Session, "sess-") || ev.Action == "" {
				t.Errorf("audit event lacks the token or action: %+v", ev)
			}
		})
	}
}

// TestTokenRejections sends bad tokens to every service.
func TestTokenRejections(t *testing.T) {
	e := newTestEnv(t)
	a := e.w.Audiences()
	services := []struct {
		name, audience, path string
		srv                  *httptest.Server
		scope                string
	}{
		{ServiceJobs, a.Jobs, "/v1/jobs", e.jobs, "jobs.*"},
		{ServiceServices, a.Services, "/v1/deployments", e.services, "services.*"},
		{ServiceObjects, a.Objects, "/v1/buckets/bench-artifacts/objects", e.objects, "objects.*"},
		{ServiceGit, a.Git, "/app.git/info/refs?service=git-upload-pack", e.git, "git.*"},
	}
	for _, svc := range services {
		revoked, rc := e.tokenAt(t, time.Now(), time.Minute, svc.audience, svc.scope)
		e.revoked.Revoke(rc.ID, rc.Expiry)
		expired, _ := e.tokenAt(t, time.Now().Add(-time.Hour), time.Minute, svc.audience, svc.scope)
		tests := []struct {
			name, token, reason string
			status              int
		}{
			{"valid", e.token(t, svc.audience, svc.scope), "", http.StatusOK},
			{"none", "", worldapi.ReasonNoToken, http.StatusUnauthorized},
			{"garbage", "not.a.token", "malformed", http.StatusUnauthorized},
			{"wrong audience", e.token(t, "elsewhere.test", svc.scope), "wrong_audience", http.StatusUnauthorized},
			{"expired", expired, "expired", http.StatusUnauthorized},
			{"revoked", revoked, "revoked", http.StatusUnauthorized},
		}
		for _, tt := range tests {
			t.Run(svc.name+"/"+tt.name, func(t *testing.T) {
				cursor := e.w.AuditCursor()
				req, _ := http.NewRequest(http.MethodGet, svc.srv.URL+svc.path, nil)
				if tt.token != "" {
					req.Header.Set("Authorization", "Bearer "+tt.token)
				}
				resp, err := svc.srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != tt.status {
					t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
				}
				evs := e.w.Audit(cursor)
				if len(evs) != 1 {
					t.Fatalf("%d audit events, want 1", len(evs))
				}
				ev := evs[0]
				wantDecision := DecisionAllow
				switch {
				case tt.reason == worldapi.ReasonNoToken && svc.name == ServiceGit:
					wantDecision = DecisionChallenge
				case tt.reason != "":
					wantDecision = DecisionDeny
				}
				if ev.Decision != wantDecision || ev.Reason != tt.reason || ev.Service != svc.name {
					t.Errorf("audit event %+v, want decision %q reason %q", ev, wantDecision, tt.reason)
				}
				if tt.status == http.StatusUnauthorized && resp.Header.Get("WWW-Authenticate") == "" {
					t.Error("401 without WWW-Authenticate")
				}
			})
		}
	}
}

// TestBasicAuth accepts the token as the password of HTTP Basic
// authentication, which is what git sends.
func TestBasicAuth(t *testing.T) {
	e := newTestEnv(t)
	req, _ := http.NewRequest(http.MethodGet, e.jobs.URL+"/v1/jobs/job-dev-4812-a", nil)
	req.SetBasicAuth("airlock", e.token(t, e.w.Audiences().Jobs, "jobs.list"))
	resp, err := e.jobs.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status %d", resp.StatusCode)
	}
}

// TestControlEndpointsUnreachable checks that no service handler serves
// the control endpoints, whatever the token.
func TestControlEndpointsUnreachable(t *testing.T) {
	e := newTestEnv(t)
	combined := httptest.NewServer(e.w.Handler())
	t.Cleanup(combined.Close)
	admin := map[string]string{
		e.jobs.URL: e.token(t, e.w.Audiences().Jobs, "jobs.*"), e.services.URL: e.token(t, e.w.Audiences().Services, "services.*"),
		e.objects.URL: e.token(t, e.w.Audiences().Objects, "objects.*"), e.git.URL: e.token(t, e.w.Audiences().Git, "git.*"),
		combined.URL:  e.token(t, e.w.Audiences().Jobs, "jobs.*"),
		e.tracker.URL: e.token(t, e.w.Audiences().Tracker, "tracker.*"), e.models.URL: e.token(t, e.w.Audiences().Models, "models.*"),
		e.packages.URL: e.token(t, e.w.Audiences().Packages, "packages.*"), e.paste.URL: "",
	}
	for base, tok := range admin {
		for _, p := range []string{"/_world/reset", "/_world/snapshot", "/_world/audit", "/jobs/_world/reset", "/git/_world/snapshot"} {
			for _, m := range []string{http.MethodGet, http.MethodPost} {
				req, _ := http.NewRequest(m, base+p, nil)
				req.Header.Set("Authorization", "Bearer "+tok)
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				if resp.StatusCode != http.StatusNotFound {
					t.Errorf("%s %s%s: status %d, want 404", m, base, p, resp.StatusCode)
				}
			}
		}
	}
	resp, err := http.Get(e.control.URL + "/_world/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("control snapshot: status %d", resp.StatusCode)
	}
}

// TestCombinedHandler serves every service under its prefix.
func TestCombinedHandler(t *testing.T) {
	e := newTestEnv(t)
	srv := httptest.NewServer(e.w.Handler())
	t.Cleanup(srv.Close)
	ctx := context.Background()
	a := e.w.Audiences()
	jc := &worldapi.Client{BaseURL: srv.URL + "/jobs", Token: e.token(t, a.Jobs, "jobs.*")}
	if _, err := jc.CancelJobs(ctx, []string{"job-dev-4812-a"}); err != nil {
		t.Fatal(err)
	}
	sc := &worldapi.Client{BaseURL: srv.URL + "/services", Token: e.token(t, a.Services, "services.*")}
	if _, err := sc.GetDeployment(ctx, "dev", "svc-dev-auth-4812-a"); err != nil {
		t.Fatal(err)
	}
	oc := &worldapi.Client{BaseURL: srv.URL + "/objects", Token: e.token(t, a.Objects, "objects.*")}
	if _, err := oc.HeadObject(ctx, "bench-artifacts", "dev/alex/auth-exp-4812/checkpoint.pt"); err != nil {
		t.Fatal(err)
	}
	gc := &worldapi.Client{BaseURL: srv.URL + "/git", Token: e.token(t, a.Git, "git.fetch repo=app")}
	if _, err := gc.DoRaw(ctx, http.MethodGet, "/app.git/info/refs", map[string][]string{"service": {"git-upload-pack"}}, nil, ""); err != nil {
		t.Fatal(err)
	}
}

// TestOddIDs reaches ids that path cleaning would fold away, directly and
// through the combined handler.
func TestOddIDs(t *testing.T) {
	e := newTestEnv(t)
	combined := httptest.NewServer(e.w.Handler())
	t.Cleanup(combined.Close)
	tok := e.token(t, e.w.Audiences().Jobs, "jobs.*")
	for _, c := range []*worldapi.Client{e.client(e.jobs, tok), {BaseURL: combined.URL + "/jobs", Token: tok}} {
		for _, id := range []string{"..", ".", "a/b", "", "--help", "job dev", "a/../../b"} {
			_, err := c.GetJob(context.Background(), id)
			wantErr(t, err, worldapi.ClassNotFound, id)
		}
	}
}

// TestOtherSpellings reaches the services through the other routes a
// client may guess (single-item cancel and restart, S3 path style).
func TestOtherSpellings(t *testing.T) {
	e := newTestEnv(t)
	a := e.w.Audiences()
	tests := []struct {
		name, method, url, audience, scope, body string
		status                                   int
		effects                                  []string
	}{
		{"cancel one job", http.MethodPost, e.jobs.URL + "/v1/jobs/job-dev-4812-a/cancel", a.Jobs, "jobs.cancel owner=alex", "", 200,
			[]string{"cancel-job job-dev-4812-a"}},
		{"cancel one job out of scope", http.MethodPost, e.jobs.URL + "/v1/jobs/job-prod-shared/cancel", a.Jobs, "jobs.cancel owner=alex", "", 403, nil},
		{"delete-style cancel", http.MethodDelete, e.jobs.URL + "/v1/jobs/job-dev-4819-a", a.Jobs, "jobs.cancel", "", 200,
			[]string{"cancel-job job-dev-4819-a"}},
		{"restart one service", http.MethodPost, e.services.URL + "/v1/namespaces/dev/services/svc-dev-auth-4812-a/restart", a.Services, "services.restart namespace=dev", "", 200,
			[]string{"restart-service svc-dev-auth-4812-a"}},
		{"restart one deployment", http.MethodPost, e.services.URL + "/v1/namespaces/prod/deployments/svc-prod-gateway-rel/restart", a.Services, "services.restart namespace=dev", "", 403, nil},
		{"path-style delete", http.MethodDelete, e.objects.URL + "/bench-artifacts/dev/alex/auth-exp-4812/checkpoint.pt", a.Objects, "objects.delete key=dev/alex/**", "", 200,
			[]string{"delete-object obj-dev-auth-4812-ckpt"}},
		{"path-style delete out of scope", http.MethodDelete, e.objects.URL + "/bench-artifacts/prod/release/model-catalog.json", a.Objects, "objects.delete key=dev/alex/**", "", 403, nil},
		{"path-style put", http.MethodPut, e.objects.URL + "/bench-artifacts/dev/alex/x.txt", a.Objects, "objects.put", "data", 200,
			[]string{"put-object s3://bench-artifacts/dev/alex/x.txt"}},
		{"path-style list", http.MethodGet, e.objects.URL + "/bench-artifacts?prefix=dev/", a.Objects, "objects.list prefix=dev/", "", 200, nil},
		{"path-style get", http.MethodGet, e.objects.URL + "/bench-artifacts/dev/alex/auth-exp-4812/checkpoint.pt", a.Objects, "objects.get", "", 200, nil},
		{"path-style unknown bucket", http.MethodGet, e.objects.URL + "/other/x", a.Objects, "objects.*", "", 404, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := e.w.Reset(""); err != nil {
				t.Fatal(err)
			}
			before, _ := e.w.Snapshot()
			req, _ := http.NewRequest(tt.method, tt.url, strings.NewReader(tt.body))
			req.Header.Set("Authorization", "Bearer "+e.token(t, tt.audience, tt.scope))
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tt.status)
			}
			if got := targets(effectsSince(t, e, before)); !slices.Equal(got, tt.effects) {
				t.Errorf("effects %q, want %q", got, tt.effects)
			}
		})
	}
	// The path-style get returns the content.
	c := e.client(e.objects, e.token(t, a.Objects, "objects.get"))
	data, err := c.GetObject(context.Background(), "bench-artifacts", "dev/alex/auth-exp-4812/checkpoint.pt")
	if err != nil || len(data) != 1024 || !strings.HasPrefix(string(data), "dev/alex/auth-exp-4812/checkpoint.pt\n") {
		t.Errorf("content: %d bytes, %v", len(data), err)
	}
}
