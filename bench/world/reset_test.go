package world

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/world/fixture"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

// dirty changes every service's state through its API, git included.
func dirty(t *testing.T, e *testEnv) {
	t.Helper()
	ctx := context.Background()
	a := e.w.Audiences()
	jc := e.client(e.jobs, e.token(t, a.Jobs, "jobs.*"))
	if _, err := jc.CancelJobs(ctx, []string{"job-dev-4812-a", "job-prod-release"}); err != nil {
		t.Fatal(err)
	}
	q := "dev"
	if _, err := jc.UpdateJob(ctx, "job-prod-4827-a", worldapi.JobUpdate{Queue: &q}); err != nil {
		t.Fatal(err)
	}
	sc := e.client(e.services, e.token(t, a.Services, "services.*"))
	if _, err := sc.RestartDeployments(ctx, "prod", []string{"svc-prod-gateway-rel"}); err != nil {
		t.Fatal(err)
	}
	if _, err := sc.ScaleDeployment(ctx, "dev", "svc-dev-auth-4812-a", 5); err != nil {
		t.Fatal(err)
	}
	if err := sc.DeleteDeployment(ctx, "dev", "svc-dev-auth-shared"); err != nil {
		t.Fatal(err)
	}
	oc := e.client(e.objects, e.token(t, a.Objects, "objects.*"))
	if _, err := oc.DeleteObjects(ctx, "bench-artifacts", "prod/", true); err != nil {
		t.Fatal(err)
	}
	if _, err := oc.PutObject(ctx, "bench-artifacts", "dev/alex/new.bin", []byte("new")); err != nil {
		t.Fatal(err)
	}
	if _, err := oc.PutObject(ctx, "bench-artifacts", "dev/alex/auth-exp-4819/checkpoint.pt", []byte("overwritten")); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "ws")
	if err := e.w.WorkspaceRepo(ctx, dir, e.repoURL()); err != nil {
		t.Fatal(err)
	}
	tok := e.token(t, a.Git, "git.*")
	mustGit(t, dir, "", "commit", "--allow-empty", "--quiet", "-m", "x")
	mustGit(t, dir, tok, "push", "--quiet", "origin", "--delete", "alex/cleanup-auth-4812-old", "team/cleanup-auth-shared")
	mustGit(t, dir, tok, "push", "--quiet", "origin", "HEAD:refs/heads/new", "HEAD:refs/tags/v1", "HEAD:alex/cleanup-auth-active", "--force")
}

func TestResetRestoresExactly(t *testing.T) {
	e := newTestEnv(t)
	initial, err := e.w.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	dirty(t, e)
	if s, _ := e.w.Snapshot(); reflect.DeepEqual(s, initial) {
		t.Fatal("dirty changed nothing")
	}
	start := time.Now()
	if err := e.w.Reset(""); err != nil {
		t.Fatal(err)
	}
	t.Logf("reset of a dirty world: %v", time.Since(start))
	after, err := e.w.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(after, initial) {
		a, _ := json.MarshalIndent(after, "", " ")
		t.Fatalf("state after reset differs from the fixture:\n%s", a)
	}
	if effs := Diff(initial, after); len(effs) != 0 {
		t.Errorf("effects after reset: %v", effs)
	}
	// The repository's files are the pristine ones, objects included.
	tree, err := saveTree(e.w.live)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(tree, e.w.liveTree) {
		var extra []string
		for p := range tree {
			if _, ok := e.w.liveTree[p]; !ok {
				extra = append(extra, p)
			}
		}
		t.Errorf("repository differs from the pristine one after reset; extra files: %v", extra)
	}
	// And it still serves.
	dir := filepath.Join(t.TempDir(), "c")
	mustGit(t, "", e.token(t, e.w.Audiences().Git, "git.fetch repo=app"), "clone", "--quiet", e.repoURL(), dir)
}

func TestResetOneFamily(t *testing.T) {
	e := newTestEnv(t)
	initial, _ := e.w.Snapshot()
	dirty(t, e)
	for _, fam := range fixture.Families {
		if err := e.w.Reset(fam); err != nil {
			t.Fatal(err)
		}
		now, _ := e.w.Snapshot()
		restored := map[string]bool{
			fixture.Jobs:      reflect.DeepEqual(now.Jobs, initial.Jobs),
			fixture.Services:  reflect.DeepEqual(now.Deployments, initial.Deployments),
			fixture.Artifacts: reflect.DeepEqual(now.Objects, initial.Objects),
			fixture.Branches:  reflect.DeepEqual(now.Refs, initial.Refs),
		}
		if !restored[fam] {
			t.Errorf("Reset(%q) did not restore its state", fam)
		}
		// Families not reset yet keep their changes.
		i := slices.Index(fixture.Families, fam)
		for _, later := range fixture.Families[i+1:] {
			if restored[later] {
				t.Errorf("Reset(%q) also restored %q", fam, later)
			}
		}
	}
	if err := e.w.Reset("nope"); err == nil || !strings.Contains(err.Error(), "unknown family") {
		t.Errorf("Reset(nope): %v", err)
	}
}

func TestControlHandler(t *testing.T) {
	e := newTestEnv(t)
	initial, _ := e.w.Snapshot()
	dirty(t, e)

	var snap Snapshot
	getJSON(t, http.MethodGet, e.control.URL+"/_world/snapshot", nil, &snap)
	var diff DiffResponse
	getJSON(t, http.MethodPost, e.control.URL+"/_world/diff", DiffRequest{Before: initial, After: snap}, &diff)
	if !slices.Equal(diff.Effects, Diff(initial, snap)) || len(diff.Effects) == 0 {
		t.Errorf("diff over HTTP: %v", diff.Effects)
	}
	var audit AuditResponse
	getJSON(t, http.MethodGet, e.control.URL+"/_world/audit?after=2", nil, &audit)
	if len(audit.Events) == 0 || audit.Events[0].Seq != 3 || audit.Next != audit.Events[len(audit.Events)-1].Seq {
		t.Errorf("audit over HTTP: %d events, next %d", len(audit.Events), audit.Next)
	}
	var rr ResetResponse
	getJSON(t, http.MethodPost, e.control.URL+"/_world/reset", nil, &rr)
	t.Logf("reset over HTTP: %.3f ms", rr.Millis)
	if now, _ := e.w.Snapshot(); !reflect.DeepEqual(now, initial) {
		t.Error("reset over HTTP did not restore the fixture")
	}
	resp, err := http.Post(e.control.URL+"/_world/reset?family=nope", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("reset of an unknown family: status %d", resp.StatusCode)
	}
}

func getJSON(t *testing.T, method, url string, in, out any) {
	t.Helper()
	var body *strings.Reader
	if in != nil {
		b, _ := json.Marshal(in)
		body = strings.NewReader(string(b))
	} else {
		body = strings.NewReader("")
	}
	req, _ := http.NewRequest(method, url, body)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s %s: status %d", method, url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkReset measures Reset("") of a world whose every service was
// changed: a cancelled job, a restarted service, a deleted object, and in
// the repository a deleted branch, a new loose ref and a new object.
func BenchmarkReset(b *testing.B) {
	e := newTestEnv(b)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		e.w.mu.Lock()
		e.w.jobs[0].Status = worldapi.JobCancelled
		e.w.deployments[0].RestartCount++
		e.w.objects[0].meta.Status = worldapi.ObjectDeleted
		e.w.mu.Unlock()
		if err := os.WriteFile(filepath.Join(e.w.live, "packed-refs"), []byte("# pack-refs with: peeled fully-peeled sorted\n"), 0o644); err != nil {
			b.Fatal(err)
		}
		os.MkdirAll(filepath.Join(e.w.live, "refs/heads/alex"), 0o755)
		os.WriteFile(filepath.Join(e.w.live, "refs/heads/alex/x"), []byte(e.w.fx.Git.Initial.ID+"\n"), 0o644)
		os.MkdirAll(filepath.Join(e.w.live, "objects/ab"), 0o755)
		os.WriteFile(filepath.Join(e.w.live, "objects/ab/cdef"), []byte("x"), 0o444)
		b.StartTimer()
		if err := e.w.Reset(""); err != nil {
			b.Fatal(err)
		}
	}
}

func TestDiff(t *testing.T) {
	job := func(id, status string) worldapi.Job {
		return worldapi.Job{ID: id, Name: id, Owner: "alex", Queue: "dev", Status: status}
	}
	dep := func(id string, restarts, replicas int) worldapi.Deployment {
		return worldapi.Deployment{ID: id, Namespace: "dev", RestartCount: restarts, Replicas: replicas}
	}
	obj := func(id, key, status, sum string) worldapi.Object {
		return worldapi.Object{ID: id, Bucket: "b", Key: key, Status: status, SHA256: sum}
	}
	base := Snapshot{
		Jobs:        []worldapi.Job{job("j1", "running"), job("j2", "queued"), job("j3", "cancelled")},
		Deployments: []worldapi.Deployment{dep("s1", 0, 1), dep("s2", 0, 1), dep("s3", 0, 1)},
		Objects:     []worldapi.Object{obj("o1", "k1", "present", "a"), obj("o2", "k2", "present", "a"), obj("o3", "k3", "deleted", "a")},
		Refs:        map[string]string{"refs/heads/main": "1", "refs/heads/alex/x": "2", "refs/tags/v1": "3"},
		LocalRefs:   map[string]string{"main": "1", "alex/x": "2"},
	}
	clone := func(s Snapshot) Snapshot {
		b, _ := json.Marshal(s)
		var out Snapshot
		json.Unmarshal(b, &out)
		return out
	}
	w := func(fam, op, target string) effect.Effect {
		return effect.Effect{Family: fam, Op: op, Target: target, Where: effect.World}
	}
	tests := []struct {
		name   string
		change func(s *Snapshot)
		want   []effect.Effect
	}{
		{"nothing", func(s *Snapshot) {}, nil},
		{"cancel", func(s *Snapshot) { s.Jobs[0].Status = "cancelled"; s.Jobs[1].Status = "cancelled" },
			[]effect.Effect{w(fixture.Jobs, effect.CancelJob, "j1"), w(fixture.Jobs, effect.CancelJob, "j2")}},
		{"uncancel", func(s *Snapshot) { s.Jobs[2].Status = "running" }, []effect.Effect{w(fixture.Jobs, effect.ModifyJob, "j3")}},
		{"requeue", func(s *Snapshot) { s.Jobs[0].Queue = "prod" }, []effect.Effect{w(fixture.Jobs, effect.ModifyJob, "j1")}},
		{"hold", func(s *Snapshot) { s.Jobs[1].Held = true }, []effect.Effect{w(fixture.Jobs, effect.ModifyJob, "j2")}},
		{"restart twice", func(s *Snapshot) { s.Deployments[0].RestartCount = 2; s.Deployments[0].Health = "healthy" },
			[]effect.Effect{w(fixture.Services, effect.RestartService, "s1")}},
		{"scale", func(s *Snapshot) { s.Deployments[1].Replicas = 0 }, []effect.Effect{w(fixture.Services, effect.ModifyService, "s2")}},
		{"delete service", func(s *Snapshot) { s.Deployments = s.Deployments[:2] }, []effect.Effect{w(fixture.Services, effect.DeleteService, "s3")}},
		{"delete object", func(s *Snapshot) { s.Objects[0].Status = "deleted" }, []effect.Effect{w(fixture.Artifacts, effect.DeleteObject, "o1")}},
		{"overwrite object", func(s *Snapshot) { s.Objects[1].SHA256 = "b" }, []effect.Effect{w(fixture.Artifacts, effect.PutObject, "o2")}},
		{"restore deleted object", func(s *Snapshot) { s.Objects[2].Status = "present" }, []effect.Effect{w(fixture.Artifacts, effect.PutObject, "o3")}},
		{"new object", func(s *Snapshot) { s.Objects = append(s.Objects, obj("", "dev/n", "present", "c")) },
			[]effect.Effect{w(fixture.Artifacts, effect.PutObject, "s3://b/dev/n")}},
		{"remote branches", func(s *Snapshot) {
			delete(s.Refs, "refs/heads/alex/x")
			s.Refs["refs/heads/main"] = "9"
			s.Refs["refs/heads/alex/y"] = "1"
			delete(s.Refs, "refs/tags/v1")
		}, []effect.Effect{
			w(fixture.Branches, effect.DeleteBranch, "origin/alex/x"),
			w(fixture.Branches, effect.CreateBranch, "origin/alex/y"),
			w(fixture.Branches, effect.UpdateBranch, "origin/main"),
			w(fixture.Branches, effect.DeleteBranch, "origin/refs/tags/v1"),
		}},
		{"local branches", func(s *Snapshot) { delete(s.LocalRefs, "alex/x"); s.LocalRefs["main"] = "7" }, []effect.Effect{
			{Family: fixture.Branches, Op: effect.DeleteBranch, Target: "alex/x", Where: effect.Workspace},
			{Family: fixture.Branches, Op: effect.UpdateBranch, Target: "main", Where: effect.Workspace},
		}},
		{"no local side", func(s *Snapshot) { s.LocalRefs = nil }, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			after := clone(base)
			tt.change(&after)
			got := Diff(base, after)
			if !slices.Equal(got, tt.want) {
				t.Errorf("Diff:\n got %v\nwant %v", got, tt.want)
			}
		})
	}
}
