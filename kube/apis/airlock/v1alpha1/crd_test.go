package v1alpha1_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/policies"
)

// setup starts a control plane, installs the generated CRDs and returns a
// typed client for airlock.dev/v1alpha1.
func setup(t *testing.T) client.Client {
	t.Helper()
	cp, crds := kubetest.StartWithCRDs(t)
	var names []string
	for _, c := range crds {
		names = append(names, c.Name)
	}
	slices.Sort(names)
	if want := []string{"airlocknodes.airlock.dev", "sessionapprovals.airlock.dev", "sessionpools.airlock.dev", "sessions.airlock.dev"}; !slices.Equal(names, want) {
		t.Fatalf("installed CRDs %v, want %v", names, want)
	}
	scheme := runtime.NewScheme()
	if err := v1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	// The API server's discovery may lag behind the CRDs' being
	// established: a client whose mapper does not know every kind yet is
	// made again.
	var c client.Client
	kubetest.Eventually(t, 30*time.Second, "a client that maps every airlock.dev kind", func() (bool, string) {
		var err error
		if c, err = client.New(cp.Config, client.Options{Scheme: scheme}); err != nil {
			return false, err.Error()
		}
		for _, kind := range []string{"Session", "SessionPool", "SessionApproval", "AirlockNode"} {
			if _, err := c.RESTMapper().RESTMapping(schema.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: kind}, v1alpha1.GroupVersion.Version); err != nil {
				return false, err.Error()
			}
		}
		return true, ""
	})
	return c
}

// loadExamples decodes every examples/*.hcl manifest.
func loadExamples(t *testing.T) map[string]*policies.Policy {
	t.Helper()
	root, err := kubetest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	files, err := filepath.Glob(filepath.Join(root, "examples", "*.hcl"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples/*.hcl (%v)", err)
	}
	out := map[string]*policies.Policy{}
	for _, f := range files {
		p, err := policies.LoadFile(f, nil)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out[filepath.Base(f)] = p
	}
	return out
}

// TestSessionCRD applies the generated CRDs to a real apiserver and works a
// Session through them: every example manifest survives the round trip
// through the CRD's schema unchanged (nothing pruned), status is written
// through the status subresource with optimistic concurrency, and the
// schema refuses what it must with 422.
func TestSessionCRD(t *testing.T) {
	c := setup(t)
	ctx := t.Context()
	const ns = "default"

	t.Run("examples round-trip", func(t *testing.T) {
		examples := loadExamples(t)
		if _, ok := examples["reference.hcl"]; !ok {
			t.Fatal("examples/reference.hcl, which sets every attribute, is missing")
		}
		for name, p := range examples {
			s := &v1alpha1.Session{
				ObjectMeta: metav1.ObjectMeta{Name: "example-" + name[:len(name)-len(".hcl")], Namespace: ns},
				Spec:       v1alpha1.SessionSpec{Policy: *p},
			}
			if err := c.Create(ctx, s); err != nil {
				t.Fatalf("%s: create: %v", name, err)
			}
			var got v1alpha1.Session
			if err := c.Get(ctx, client.ObjectKeyFromObject(s), &got); err != nil {
				t.Fatalf("%s: get: %v", name, err)
			}
			want, _ := json.Marshal(p)
			have, _ := json.Marshal(got.Spec.Policy)
			if string(have) != string(want) {
				t.Errorf("%s: the policy read back differs from the one created:\n got %s\nwant %s", name, have, want)
			}
		}
	})

	t.Run("status subresource", func(t *testing.T) {
		s := &v1alpha1.Session{
			ObjectMeta: metav1.ObjectMeta{Name: "status", Namespace: ns},
			Spec: v1alpha1.SessionSpec{Policy: policies.Policy{
				Label: "status", Image: "airlock/agent:bookworm", Command: []string{"true"},
			}},
		}
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		// Status sent with the object itself is ignored: only the status
		// subresource writes it.
		s.Status.State = v1alpha1.SessionRunning
		s.Spec.NodeName = "node-a"
		if err := c.Update(ctx, s); err != nil {
			t.Fatal(err)
		}
		if s.Status.State != "" || s.Spec.NodeName != "node-a" {
			t.Fatalf("after update: state %q, nodeName %q, want the state dropped and the node kept", s.Status.State, s.Spec.NodeName)
		}

		stale := s.DeepCopy()
		exit := int32(0)
		now := metav1.NewTime(time.Now().Truncate(time.Second))
		s.Status = v1alpha1.SessionStatus{
			ObservedGeneration: s.Generation,
			State:              v1alpha1.SessionExited,
			Node:               "node-a",
			ID:                 "0123456789abcdef",
			ExitCode:           &exit,
			Reason:             "exited",
			StartedAt:          &now,
			FinishedAt:         &now,
			PolicyVersion:      1,
			Audit: &v1alpha1.AuditSummary{Events: 3, Refused: 1, Counts: []v1alpha1.AuditCount{
				{Layer: "dns", Action: "allowed", Count: 2}, {Layer: "dns", Action: "refused", Count: 1},
			}},
			Diff: &v1alpha1.DiffSummary{Added: 1, Modified: 2, Outcome: "committed"},
			PendingApprovals: []v1alpha1.PendingApproval{{
				ID: "00112233aabbccdd", Method: "POST", Host: "api.example.com", Path: "/v1/x",
				Rule: "POST /v1/** -> ask", Created: now, Deadline: now,
			}},
		}
		if err := c.Status().Update(ctx, s); err != nil {
			t.Fatalf("status update: %v", err)
		}
		var got v1alpha1.Session
		if err := c.Get(ctx, client.ObjectKeyFromObject(s), &got); err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(s.Status)
		have, _ := json.Marshal(got.Status)
		if string(have) != string(want) {
			t.Errorf("status read back:\n got %s\nwant %s", have, want)
		}
		if got.Generation != stale.Generation {
			t.Errorf("a status write moved the generation from %d to %d", stale.Generation, got.Generation)
		}

		// A writer that read before the status was written is refused.
		stale.Status.State = v1alpha1.SessionLost
		err := c.Status().Update(ctx, stale)
		if !apierrors.IsConflict(err) {
			t.Fatalf("status update from a stale read: %v, want a conflict (409)", err)
		}
	})

	t.Run("invalid refused", func(t *testing.T) {
		valid := func(name string) *v1alpha1.Session {
			return &v1alpha1.Session{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
				Spec: v1alpha1.SessionSpec{Policy: policies.Policy{
					Label: "invalid", Image: "airlock/agent:bookworm",
					Workspaces: []policies.Workspace{{HostPath: "/srv/app", Target: "/workspace"}},
				}},
			}
		}
		for _, tc := range []struct {
			name   string
			mutate func(*v1alpha1.Session)
			field  string
		}{
			// A Go client sends "image": "" (no omitempty), which
			// MinLength refuses.
			{"empty image", func(s *v1alpha1.Session) { s.Spec.Policy.Image = "" }, "spec.policy.image"},
			{"empty label", func(s *v1alpha1.Session) { s.Spec.Policy.Label = "" }, "spec.policy.label"},
			{"workspace without target", func(s *v1alpha1.Session) { s.Spec.Policy.Workspaces[0].Target = "" }, "spec.policy.workspaces[0].target"},
			{"credential without scopes", func(s *v1alpha1.Session) {
				s.Spec.Policy.Credentials = []policies.Credential{{Name: "git", Audience: "git.corp.test"}}
			}, "spec.policy.credentials[0].scopes"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				s := valid("invalid")
				tc.mutate(s)
				assertInvalid(t, c.Create(ctx, s), tc.field)
			})
		}

		// A manifest written as YAML leaves the field out altogether.
		t.Run("image left out", func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.GroupVersion.String(),
				"kind":       "Session",
				"metadata":   map[string]any{"name": "no-image", "namespace": ns},
				"spec":       map[string]any{"policy": map[string]any{"label": "no-image"}},
			}}
			assertInvalid(t, c.Create(ctx, u), "spec.policy.image")
		})
		t.Run("spec left out", func(t *testing.T) {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.GroupVersion.String(),
				"kind":       "Session",
				"metadata":   map[string]any{"name": "no-spec", "namespace": ns},
			}}
			assertInvalid(t, c.Create(ctx, u), "spec")
		})

		// The schema checks status too.
		s := valid("valid")
		if err := c.Create(ctx, s); err != nil {
			t.Fatalf("the valid session: %v", err)
		}
		s.Status.State = "Exploded"
		assertInvalid(t, c.Status().Update(ctx, s), "status.state")
	})
}

// TestSessionPoolCRD creates a SessionPool and checks that its size is
// bounded as a manifest's pool block is (policies.MaxPoolSize).
func TestSessionPoolCRD(t *testing.T) {
	c := setup(t)
	ctx := t.Context()
	pool := func(name string, size int32) *v1alpha1.SessionPool {
		return &v1alpha1.SessionPool{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: v1alpha1.SessionPoolSpec{
				Policy: policies.Policy{Label: "warm", Image: "airlock/agent:bookworm"},
				Size:   size,
			},
		}
	}
	p := pool("warm", 2)
	if err := c.Create(ctx, p); err != nil {
		t.Fatal(err)
	}
	p.Status = v1alpha1.SessionPoolStatus{Ready: 2, Nodes: []v1alpha1.PoolNodeStatus{{Node: "node-a", Ready: 2}}}
	if err := c.Status().Update(ctx, p); err != nil {
		t.Fatalf("status update: %v", err)
	}
	var got v1alpha1.SessionPool
	if err := c.Get(ctx, client.ObjectKeyFromObject(p), &got); err != nil {
		t.Fatal(err)
	}
	if got.Spec.Size != 2 || got.Status.Ready != 2 || len(got.Status.Nodes) != 1 {
		t.Fatalf("read back %+v %+v", got.Spec, got.Status)
	}
	assertInvalid(t, c.Create(ctx, pool("too-big", policies.MaxPoolSize+1)), "spec.size")
}

// assertInvalid checks that err is the apiserver's 422 for field.
func assertInvalid(t *testing.T, err error, field string) {
	t.Helper()
	var status apierrors.APIStatus
	if !apierrors.IsInvalid(err) || !errors.As(err, &status) || status.Status().Code != http.StatusUnprocessableEntity {
		t.Fatalf("got %v, want 422 Invalid", err)
	}
	var fields []string
	if d := status.Status().Details; d != nil {
		for _, c := range d.Causes {
			fields = append(fields, c.Field)
		}
	}
	if !slices.Contains(fields, field) {
		t.Fatalf("422 names fields %q, want %q: %v", fields, field, err)
	}
}

// TestPlacementFields: a Session's spec.nodeName, once set, cannot change
// (a placed session is never moved), and Sessions can be listed by it, as
// node agents watch them.
func TestPlacementFields(t *testing.T) {
	c := setup(t)
	ctx := t.Context()
	mk := func(name, node string) *v1alpha1.Session {
		s := &v1alpha1.Session{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: v1alpha1.SessionSpec{NodeName: node, Policy: policies.Policy{
				Label: name, Image: "airlock/agent:bookworm", Command: []string{"true"},
			}},
		}
		if err := c.Create(ctx, s); err != nil {
			t.Fatal(err)
		}
		return s
	}
	unplaced := mk("unplaced", "")
	mk("on-a", "node-a")
	mk("on-b", "node-b")

	unplaced.Spec.NodeName = "node-a"
	if err := c.Update(ctx, unplaced); err != nil {
		t.Fatalf("placing an unplaced session: %v", err)
	}
	unplaced.Spec.NodeName = "node-b"
	assertInvalid(t, c.Update(ctx, unplaced), "spec")
	unplaced.Spec.NodeName = ""
	assertInvalid(t, c.Update(ctx, unplaced), "spec")

	var list v1alpha1.SessionList
	if err := c.List(ctx, &list, client.MatchingFields{"spec.nodeName": "node-a"}); err != nil {
		t.Fatalf("list by spec.nodeName: %v", err)
	}
	var names []string
	for _, s := range list.Items {
		names = append(names, s.Name)
	}
	slices.Sort(names)
	if want := []string{"on-a", "unplaced"}; !slices.Equal(names, want) {
		t.Errorf("sessions with spec.nodeName=node-a: %v, want %v", names, want)
	}
}

// TestAirlockNodeCRD: an AirlockNode is cluster-scoped and its status is
// written through its status subresource.
func TestAirlockNodeCRD(t *testing.T) {
	c := setup(t)
	ctx := t.Context()
	n := &v1alpha1.AirlockNode{ObjectMeta: metav1.ObjectMeta{Name: "node-a", Labels: map[string]string{"zone": "z1"}}}
	if err := c.Create(ctx, n); err != nil {
		t.Fatal(err)
	}
	n.Status = v1alpha1.AirlockNodeStatus{Capacity: 4, Sessions: 1, Version: "v", Runtime: "runc", HolderIdentity: "id"}
	if err := c.Status().Update(ctx, n); err != nil {
		t.Fatalf("status update: %v", err)
	}
	var got v1alpha1.AirlockNode
	if err := c.Get(ctx, client.ObjectKey{Name: "node-a"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.Namespace != "" || got.Status != n.Status || got.Labels["zone"] != "z1" {
		t.Errorf("read back %+v", got)
	}
	got.Status.Capacity = -1
	assertInvalid(t, c.Status().Update(ctx, &got), "status.capacity")
}

// TestSessionYAMLDefaults: a Session written in YAML (kubectl apply) that
// leaves out a workspace's or a mount's default_deny_read, or a mount's
// read_only, gets them on, as the HCL manifest's decoder does; the API
// server fills them in (CRD defaults), so no Session is less confined
// for being written in YAML. One set to false stays false.
func TestSessionYAMLDefaults(t *testing.T) {
	c := setup(t)
	ctx := t.Context()
	u := &unstructured.Unstructured{}
	if err := json.Unmarshal([]byte(`{
		"apiVersion": "airlock.dev/v1alpha1", "kind": "Session",
		"metadata": {"namespace": "default", "name": "from-yaml"},
		"spec": {"policy": {"label": "from-yaml", "image": "airlock/agent:dev", "command": ["true"],
			"workspaces": [{"host_path": "/srv/ws", "target": "/workspace"}],
			"mounts": [
				{"host_path": "/srv/data", "target": "/data"},
				{"host_path": "/srv/scratch", "target": "/scratch", "read_only": false, "default_deny_read": false}
			]}}}`), &u.Object); err != nil {
		t.Fatal(err)
	}
	if err := c.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	var s v1alpha1.Session
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "from-yaml"}, &s); err != nil {
		t.Fatal(err)
	}
	p := s.Spec.Policy
	if len(p.Workspaces) != 1 || !p.Workspaces[0].DefaultDenyRead {
		t.Errorf("a workspace without default_deny_read: %+v, want it on", p.Workspaces)
	}
	if len(p.Mounts) != 2 || !p.Mounts[0].ReadOnly || !p.Mounts[0].DefaultDenyRead {
		t.Errorf("a mount without read_only and default_deny_read: %+v, want both on", p.Mounts)
	}
	if len(p.Mounts) == 2 && (p.Mounts[1].ReadOnly || p.Mounts[1].DefaultDenyRead) {
		t.Errorf("a mount with read_only and default_deny_read false: %+v, want them kept false", p.Mounts[1])
	}
}

// TestWorkspaceSourcesSchema: a Session's git source gets depth 1 when
// it leaves it out; a URL carrying credentials, or of another scheme, is
// refused with the field named; a workspace may leave its host_path for a
// source to fill.
func TestWorkspaceSourcesSchema(t *testing.T) {
	c := setup(t)
	ctx := t.Context()
	create := func(name, url string) error {
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(fmt.Appendf(nil, `{
		"apiVersion": "airlock.dev/v1alpha1", "kind": "Session",
		"metadata": {"namespace": "default", "name": %q},
		"spec": {"policy": {"label": "src", "image": "airlock/agent:dev", "command": ["true"],
			"workspaces": [{"target": "/work", "protect": ["src/**"]}]},
			"workspaceSources": [{"target": "/work", "git": {"url": %q, "ref": "main"}}]}}`, name, url), &u.Object); err != nil {
			t.Fatal(err)
		}
		return c.Create(ctx, u)
	}
	if err := create("ok", "https://git.corp.test/agents/a.git"); err != nil {
		t.Fatal(err)
	}
	var s v1alpha1.Session
	if err := c.Get(ctx, client.ObjectKey{Namespace: "default", Name: "ok"}, &s); err != nil {
		t.Fatal(err)
	}
	if src := s.Spec.WorkspaceSources; len(src) != 1 || src[0].Git == nil || src[0].Git.Depth != 1 || src[0].Git.Ref != "main" {
		t.Errorf("workspaceSources %+v, want depth 1 by default", src)
	}
	if ws := s.Spec.Policy.Workspaces; len(ws) != 1 || ws[0].HostPath != "" || !ws[0].DefaultDenyRead {
		t.Errorf("workspaces %+v, want no host_path and the masks on", ws)
	}
	// ssh: the canonical form, its user named.
	for i, url := range []string{"ssh://git@git.corp.test/agents/a.git", "ssh://deploy@127.0.0.1:2222/srv/repo.git"} {
		if err := create(fmt.Sprintf("ssh-%d", i), url); err != nil {
			t.Errorf("url %q: %v, want it taken", url, err)
		}
	}
	for _, url := range []string{"https://tok:x@git.corp.test/a.git", "ssh://git.corp.test/a.git", "https://git.corp.test/a.git?x=1",
		"git@git.corp.test:agents/a.git", "git.corp.test:a.git", "ssh://git:pw@git.corp.test/a.git", "ssh://git@git.corp.test:agents/a.git",
		"ssh://git@git.corp.test", "ssh://git@git.corp.test/a.git?x=1", "ext::ssh -oProxyCommand=x git@h/a", "git+ssh://git@git.corp.test/a.git"} {
		err := create("bad", url)
		if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.workspaceSources[0].git.url") {
			t.Errorf("url %q: %v, want 422 naming spec.workspaceSources[0].git.url", url, err)
		}
	}
	// A volume source: a claim's name; exactly one of git and volume.
	for name, tt := range map[string]struct{ src, want string }{
		"vol":      {`{"target": "/work", "volume": {"claimName": "data"}}`, ""},
		"both":     {`{"target": "/work", "volume": {"claimName": "data"}, "git": {"url": "https://git.corp.test/a.git"}}`, "set exactly one of git and volume"},
		"neither":  {`{"target": "/work"}`, "set exactly one of git and volume"},
		"noclaim":  {`{"target": "/work", "volume": {"claimName": ""}}`, "spec.workspaceSources[0].volume.claimName"},
		"badclaim": {`{"target": "/work", "volume": {"claimName": "a/b"}}`, "spec.workspaceSources[0].volume.claimName"},
		"dotclaim": {`{"target": "/work", "volume": {"claimName": ".."}}`, "spec.workspaceSources[0].volume.claimName"},
		// A subPath: relative, no "." or ".." name, no empty one.
		"sub":         {`{"target": "/work", "volume": {"claimName": "data", "subPath": "repos/app"}}`, ""},
		"sub-dots":    {`{"target": "/work", "volume": {"claimName": "data", "subPath": "..a/.b/c..d"}}`, ""},
		"sub-up":      {`{"target": "/work", "volume": {"claimName": "data", "subPath": ".."}}`, "spec.workspaceSources[0].volume.subPath"},
		"sub-upper":   {`{"target": "/work", "volume": {"claimName": "data", "subPath": "a/../../b"}}`, "spec.workspaceSources[0].volume.subPath"},
		"sub-dot":     {`{"target": "/work", "volume": {"claimName": "data", "subPath": "./a"}}`, "spec.workspaceSources[0].volume.subPath"},
		"sub-abs":     {`{"target": "/work", "volume": {"claimName": "data", "subPath": "/etc"}}`, "spec.workspaceSources[0].volume.subPath"},
		"sub-slashes": {`{"target": "/work", "volume": {"claimName": "data", "subPath": "a//b"}}`, "spec.workspaceSources[0].volume.subPath"},
		"sub-trail":   {`{"target": "/work", "volume": {"claimName": "data", "subPath": "a/"}}`, "spec.workspaceSources[0].volume.subPath"},
		"sub-nul":     {`{"target": "/work", "volume": {"claimName": "data", "subPath": "a\u0000b"}}`, "spec.workspaceSources[0].volume.subPath"},
	} {
		u := &unstructured.Unstructured{}
		if err := json.Unmarshal(fmt.Appendf(nil, `{
		"apiVersion": "airlock.dev/v1alpha1", "kind": "Session",
		"metadata": {"namespace": "default", "name": %q},
		"spec": {"policy": {"label": "src", "image": "airlock/agent:dev", "command": ["true"]},
			"workspaceSources": [%s]}}`, name, tt.src), &u.Object); err != nil {
			t.Fatal(err)
		}
		err := c.Create(ctx, u)
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("%s: %v", name, err)
		case tt.want != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("%s: %v, want 422 saying %q", name, err, tt.want)
		}
	}
}
