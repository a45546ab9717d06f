package kubetest_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// TestControlPlaneServesNamespaces starts etcd and kube-apiserver and
// creates, lists and deletes a namespace through client-go as the token's
// admin user.
func TestControlPlaneServesNamespaces(t *testing.T) {
	cp := kubetest.Start(t)
	cs, err := kubernetes.NewForConfig(cp.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()

	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("kube-apiserver %s at %s", v.GitVersion, cp.APIServerURL)

	name := "kubetest-ns"
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create namespace: %v", err)
	}
	list, err := cs.CoreV1().Namespaces().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("list namespaces: %v", err)
	}
	var found bool
	for _, ns := range list.Items {
		found = found || ns.Name == name
	}
	if !found {
		t.Fatalf("namespace %q not in the list of %d", name, len(list.Items))
	}

	if err := cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete namespace: %v", err)
	}
	// No namespace controller runs: the namespace stays Terminating until
	// its "kubernetes" finalizer is removed, as the controller would once
	// the namespace is empty.
	ns, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get deleted namespace: %v", err)
	}
	if ns.DeletionTimestamp == nil || ns.Status.Phase != corev1.NamespaceTerminating {
		t.Fatalf("deleted namespace: deletionTimestamp %v, phase %q, want set and %q", ns.DeletionTimestamp, ns.Status.Phase, corev1.NamespaceTerminating)
	}
	ns.Spec.Finalizers = nil
	if _, err := cs.CoreV1().Namespaces().Finalize(ctx, ns, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("finalize namespace: %v", err)
	}
	if _, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("get namespace after finalize: %v, want NotFound", err)
	}
}

// TestAnonymousIsRefused checks that the apiserver authenticates: a client
// without the token may not list namespaces.
func TestAnonymousIsRefused(t *testing.T) {
	cp := kubetest.Start(t)
	anon := *cp.Config
	anon.BearerToken = ""
	cs, err := kubernetes.NewForConfig(&anon)
	if err != nil {
		t.Fatal(err)
	}
	_, err = cs.CoreV1().Namespaces().List(t.Context(), metav1.ListOptions{})
	if !apierrors.IsForbidden(err) {
		t.Fatalf("anonymous list namespaces: %v, want Forbidden", err)
	}
}

// TestAuditEvents checks that the audit log names each request's client:
// a namespace created with one user agent and listed with another shows
// as two events, each with its verb, resource, user agent and code, and a
// refused anonymous request as its own.
func TestAuditEvents(t *testing.T) {
	cp := kubetest.Start(t)
	ctx := t.Context()
	as := func(ua, token string) *kubernetes.Clientset {
		cfg := *cp.Config
		cfg.UserAgent = ua
		cfg.BearerToken = token
		cs, err := kubernetes.NewForConfig(&cfg)
		if err != nil {
			t.Fatal(err)
		}
		return cs
	}
	if _, err := as("writer/1", cp.Config.BearerToken).CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "audited"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := as("reader/1", cp.Config.BearerToken).CoreV1().Namespaces().Get(ctx, "audited", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := as("stranger/1", "").CoreV1().Namespaces().Get(ctx, "audited", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Fatalf("anonymous get: %v, want Forbidden", err)
	}
	events, err := cp.AuditEvents()
	if err != nil {
		t.Fatal(err)
	}
	type seen struct {
		verb, resource, user string
		code                 int
		write                bool
	}
	got := map[string][]seen{}
	for _, e := range events {
		if e.ObjectRef == nil || e.ObjectRef.Name != "audited" && e.Verb != "create" || e.Resource() != "namespaces" {
			continue
		}
		got[e.UserAgent] = append(got[e.UserAgent], seen{e.Verb, e.Resource(), e.User.Username, e.ResponseStatus.Code, e.IsWrite()})
	}
	want := map[string][]seen{
		"writer/1":   {{"create", "namespaces", kubetest.AdminUser, 201, true}},
		"reader/1":   {{"get", "namespaces", kubetest.AdminUser, 200, false}},
		"stranger/1": {{"get", "namespaces", "system:anonymous", 403, false}},
	}
	for ua, w := range want {
		if g := got[ua]; len(g) != 1 || g[0] != w[0] {
			t.Errorf("audit events from %s: %+v, want %+v", ua, g, w)
		}
	}
}
