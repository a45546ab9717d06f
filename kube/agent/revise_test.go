package agent

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/policies"
)

// A running Session's changed spec is applied to its local session as
// the daemon's Update, once per generation, with its workspace sources'
// workspaces as they run; a refusal is a False condition that is not
// retried until the spec changes again, a transient failure is retried.
func TestReviseRunningSession(t *testing.T) {
	d := &reviewDaemon{store: approvals.New()}
	pol := policies.Policy{Label: "x", Image: "img", Command: []string{"sleep", "300"}}
	s := reviewSession(pol)
	s.Generation = 1
	s.Spec.WorkspaceSources = []v1alpha1.WorkspaceSource{{Target: "/src", Volume: &v1alpha1.VolumeSource{ClaimName: "data"}}}
	a, c := reviewAgent(t, d, s)
	ctx := context.Background()
	// The daemon made it (as run would) with the labels of generation 1;
	// the source's workspace is in its running policy.
	v, err := d.Create(ctx, apiCreate(s, "/srv/volumes/pv-1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Reconcile(ctx, reconcile.Request{NamespacedName: client.ObjectKeyFromObject(s)}); err != nil {
		t.Fatal(err)
	}
	if err := c.Get(ctx, client.ObjectKeyFromObject(s), s); err != nil {
		t.Fatal(err)
	}
	if cnd := meta.FindStatusCondition(s.Status.Conditions, ConditionPolicy); cnd == nil || cnd.Status != metav1.ConditionTrue || cnd.Reason != ReasonAdmitted || cnd.ObservedGeneration != 1 {
		t.Fatalf("after the start: condition %+v, want Admitted for generation 1", cnd)
	}
	if len(d.updates) != 0 {
		t.Fatalf("%d updates with an unchanged spec", len(d.updates))
	}

	// Generation 2 adds a credential: revised, the source's workspace
	// carried over.
	s.Generation = 2
	s.Spec.Policy.Credentials = []policies.Credential{{Name: "tok", Issuer: "airlock", Audience: "a.test", TTL: policies.Duration(time.Minute)}}
	nv, cnd, err := a.revise(ctx, s, v)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.updates) != 1 || len(d.updates[0].Policy.Credentials) != 1 || len(d.updates[0].Policy.Workspaces) != 1 || d.updates[0].Policy.Workspaces[0].HostPath != "/srv/volumes/pv-1" {
		t.Fatalf("updates %+v, want one with the credential and the source's running workspace", d.updates)
	}
	if cnd == nil || cnd.Status != metav1.ConditionTrue || cnd.Reason != ReasonRevised || cnd.ObservedGeneration != 2 || nv.PolicyVersion != 2 {
		t.Fatalf("revised: condition %+v, version %d; want Revised for generation 2, version 2", cnd, nv.PolicyVersion)
	}
	meta.SetStatusCondition(&s.Status.Conditions, *cnd)
	if _, cnd, _ := a.revise(ctx, s, nv); cnd != nil || len(d.updates) != 1 {
		t.Errorf("generation 2 again: condition %+v, %d updates; want nothing done", cnd, len(d.updates))
	}

	// Generation 3 is refused by the daemon: False, not retried.
	s.Generation = 3
	s.Spec.Policy.Image = "other"
	d.updateErr = fmt.Errorf("session: revision refused, nothing changed: image: not revisable: %w", errdefs.ErrFailedPrecondition)
	_, cnd, err = a.revise(ctx, s, nv)
	if err != nil || cnd == nil || cnd.Status != metav1.ConditionFalse || cnd.Reason != ReasonRevisionRefused || cnd.ObservedGeneration != 3 ||
		!strings.Contains(cnd.Message, "image: not revisable") || !strings.Contains(cnd.Message, "runs on under policy version 2") {
		t.Fatalf("refused: condition %+v, error %v", cnd, err)
	}
	meta.SetStatusCondition(&s.Status.Conditions, *cnd)
	if _, cnd, _ := a.revise(ctx, s, nv); cnd != nil || len(d.updates) != 2 {
		t.Errorf("a refused generation again: condition %+v, %d updates; want no retry", cnd, len(d.updates))
	}

	// Generation 4: the daemon is unavailable: an error, tried again.
	s.Generation = 4
	d.updateErr = fmt.Errorf("containerd: %w", errdefs.ErrUnavailable)
	if _, cnd, err := a.revise(ctx, s, nv); err == nil || cnd != nil {
		t.Errorf("unavailable: condition %+v, error %v; want the error alone", cnd, err)
	}

	// Generation 5 changes the workspace sources: refused on the node,
	// the daemon not asked.
	s.Generation = 5
	d.updateErr = nil
	s.Spec.WorkspaceSources[0].Volume.ClaimName = "other-data"
	_, cnd, err = a.revise(ctx, s, nv)
	if err != nil || cnd == nil || cnd.Status != metav1.ConditionFalse || !strings.Contains(cnd.Message, "spec.workspaceSources cannot change") || len(d.updates) != 3 {
		t.Errorf("changed sources: condition %+v, error %v, %d updates; want refused without an update", cnd, err, len(d.updates))
	}
}

// apiCreate is the create run makes for s, its one workspace source's
// directory dir.
func apiCreate(s *v1alpha1.Session, dir string) api.CreateRequest {
	pol := *s.Spec.Policy.Clone()
	pol.Workspaces = append(pol.Workspaces, policies.Workspace{HostPath: dir, Target: s.Spec.WorkspaceSources[0].Target, Mode: policies.ModeOverlay})
	return api.CreateRequest{Policy: pol, Start: true, Labels: map[string]string{
		LabelSessionUID:        string(s.UID),
		LabelSession:           s.Namespace + "/" + s.Name,
		LabelSessionGeneration: strconv.FormatInt(s.Generation, 10),
		LabelSessionSources:    sourcesDigest(s.Spec.WorkspaceSources),
	}}
}

// A spec workspace with a source's target is that source's (its mode,
// its rules; the node fills its directory in): a revision fills it in as
// the start did, not a second copy that every revision was refused for.
func TestReviseSourceWorkspaceInSpec(t *testing.T) {
	d := &reviewDaemon{store: approvals.New()}
	s := reviewSession(policies.Policy{Label: "x", Image: "img", Command: []string{"sleep", "300"},
		Workspaces: []policies.Workspace{{Target: "/src/", Mode: policies.ModeRO}}})
	s.Generation = 1
	s.Spec.WorkspaceSources = []v1alpha1.WorkspaceSource{{Target: "/src", Volume: &v1alpha1.VolumeSource{ClaimName: "data"}}}
	a, _ := reviewAgent(t, d, s)
	req := apiCreate(s, "/srv/volumes/pv-1")
	req.Policy.Workspaces = []policies.Workspace{{Target: "/src/", Mode: policies.ModeRO, HostPath: "/srv/volumes/pv-1"}}
	v, err := d.Create(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	s.Generation = 2
	s.Spec.Policy.Credentials = []policies.Credential{{Name: "tok", Issuer: "airlock", Audience: "a.test", TTL: policies.Duration(time.Minute)}}
	if _, cnd, err := a.revise(context.Background(), s, v); err != nil || cnd == nil || cnd.Reason != ReasonRevised {
		t.Fatalf("revise: condition %+v, error %v", cnd, err)
	}
	if ws := d.updates[0].Policy.Workspaces; len(ws) != 1 || ws[0].HostPath != "/srv/volumes/pv-1" || ws[0].Mode != policies.ModeRO {
		t.Errorf("revised workspaces %+v, want the spec's one, its directory filled in", ws)
	}
}
