package v1alpha1_test

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// TestSessionApprovalDecidedByIsCreator applies
// deploy/kubernetes/admission/sessionapproval-decider.yaml to a real API
// server and, as a user the RBAC lets create SessionApprovals (mallory),
// tries to decide in another's name: a SessionApproval whose decidedBy is
// alice, or empty, is refused, one with mallory is taken; and the
// decision cannot be changed afterwards, decidedBy included.
func TestSessionApprovalDecidedByIsCreator(t *testing.T) {
	cp, _ := kubetest.StartWithCRDs(t)
	scheme := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{v1alpha1.AddToScheme, rbacv1.AddToScheme} {
		if err := add(scheme); err != nil {
			t.Fatal(err)
		}
	}
	admin, err := client.New(cp.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	root, err := kubetest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/admission/sessionapproval-decider.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, doc := range bytes.Split(b, []byte("\n---\n")) {
		var u unstructured.Unstructured
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			t.Fatal(err)
		}
		if err := admin.Create(t.Context(), &u); err != nil {
			t.Fatalf("apply %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	// mallory may create SessionApprovals in default, and nothing else.
	rules := []rbacv1.PolicyRule{{APIGroups: []string{"airlock.dev"}, Resources: []string{"sessionapprovals"}, Verbs: []string{"create", "get", "update"}}}
	if err := admin.Create(t.Context(), &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "decider", Namespace: "default"}, Rules: rules}); err != nil {
		t.Fatal(err)
	}
	if err := admin.Create(t.Context(), &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "decider", Namespace: "default"},
		RoleRef:  rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "decider"},
		Subjects: []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: "mallory"}}}); err != nil {
		t.Fatal(err)
	}
	cfg := rest.CopyConfig(cp.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "mallory"}
	mallory, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	approval := func(name, by string) *v1alpha1.SessionApproval {
		return &v1alpha1.SessionApproval{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "default"},
			Spec: v1alpha1.SessionApprovalSpec{SessionName: "job", ApprovalID: "0123456789abcdef", Decision: v1alpha1.DecisionAllow, DecidedBy: by}}
	}
	// The policy takes effect once the API server has loaded it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := mallory.Create(t.Context(), approval("as-alice", "alice"))
		if err != nil && strings.Contains(err.Error(), "spec.decidedBy must be your user name, mallory") {
			break
		}
		if err == nil {
			_ = admin.Delete(t.Context(), approval("as-alice", "alice"))
		}
		if time.Now().After(deadline) {
			t.Fatalf("mallory creating a SessionApproval decided by alice: %v, want refused by the admission policy", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if err := mallory.Create(t.Context(), approval("unnamed", "")); err == nil || !apierrors.IsForbidden(err) && !apierrors.IsInvalid(err) {
		t.Errorf("mallory creating a SessionApproval naming no one: %v, want refused", err)
	}
	own := approval("own", "mallory")
	if err := mallory.Create(t.Context(), own); err != nil {
		t.Fatalf("mallory creating a SessionApproval in her own name: %v", err)
	}
	own.Spec.DecidedBy = "alice"
	if err := mallory.Update(t.Context(), own); !apierrors.IsInvalid(err) {
		t.Errorf("mallory changing her SessionApproval's decidedBy: %v, want refused as invalid", err)
	}
	var got v1alpha1.SessionApproval
	if err := admin.Get(t.Context(), client.ObjectKeyFromObject(own), &got); err != nil || got.Spec.DecidedBy != "mallory" {
		t.Errorf("mallory's SessionApproval: decidedBy %q (%v), want mallory", got.Spec.DecidedBy, err)
	}
}
