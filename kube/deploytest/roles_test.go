package deploytest

import (
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/kube/agent"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
	"github.com/airlock-sandbox/airlock/policies"
)

// testUserRoles: airlock-session-editor, bound in a namespace, creates
// Sessions there and cannot write their status (a Session's status is its
// node's word); airlock-session-viewer reads them and writes nothing.
func testUserRoles(t *testing.T, cp *kubetest.ControlPlane, admin client.Client, cs kubernetes.Interface) {
	t.Helper()
	ctx := t.Context()
	for _, user := range []string{"alice", "bob"} {
		if err := admin.Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: user}}); err != nil {
			t.Fatal(err)
		}
	}
	for user, role := range map[string]string{"alice": "airlock-session-editor", "bob": "airlock-session-viewer"} {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: user},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Namespace: "default", Name: user}},
		}
		if err := admin.Create(ctx, rb); err != nil {
			t.Fatal(err)
		}
	}
	sch := admin.Scheme()
	alice, err := client.New(asToken(cp, token(t, cs, "default", "alice", nil)), client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	bob, err := client.New(asToken(cp, token(t, cs, "default", "bob", nil)), client.Options{Scheme: sch})
	if err != nil {
		t.Fatal(err)
	}
	s := &v1alpha1.Session{
		ObjectMeta: metav1.ObjectMeta{Name: "alices", Namespace: "default"},
		Spec: v1alpha1.SessionSpec{NodeSelector: map[string]string{"airlock.test/node": "nowhere"}, Policy: policies.Policy{
			Label: "alices", Image: daemontest.AgentImage, Command: []string{"true"}}},
	}
	// RBAC's cache of the new bindings may lag a moment.
	kubetest.Eventually(t, 10*time.Second, "alice creates a Session", func() (bool, string) {
		err := alice.Create(ctx, s.DeepCopy())
		return err == nil || apierrors.IsAlreadyExists(err), fmt.Sprint(err)
	})
	got, err := session(ctx, alice, "alices")
	if err != nil {
		t.Fatal(err)
	}
	got.Status.State, got.Status.ExitCode = v1alpha1.SessionExited, ptr.To[int32](0)
	if err := alice.Status().Update(ctx, got); !apierrors.IsForbidden(err) {
		t.Errorf("the Session editor writing a Session's status: %v, want RBAC's refusal", err)
	}
	kubetest.Eventually(t, 10*time.Second, "bob lists Sessions", func() (bool, string) {
		err := bob.List(ctx, &v1alpha1.SessionList{}, client.InNamespace("default"))
		return err == nil, fmt.Sprint(err)
	})
	if err := bob.Delete(ctx, got); !apierrors.IsForbidden(err) {
		t.Errorf("the Session viewer deleting a Session: %v, want RBAC's refusal", err)
	}
	if err := alice.List(ctx, &v1alpha1.SessionList{}, client.InNamespace(agent.LeaseNamespace)); !apierrors.IsForbidden(err) {
		t.Errorf("the Session editor of default listing Sessions in airlock-system: %v, want RBAC's refusal", err)
	}
}
