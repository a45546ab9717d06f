package kubetest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apiextensions "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/yaml"
)

// CRDDir returns deploy/kubernetes/crds in airlock's tree, where `make
// generate` writes the CRDs of kube/apis.
func CRDDir() (string, error) {
	root, err := ModuleRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "deploy", "kubernetes", "crds"), nil
}

// StartWithCRDs starts a control plane for the test (Start) and installs
// airlock's CRDs, deploy/kubernetes/crds, in it (InstallCRDs): the
// cluster every test of kube/apis and kube/agent begins with. It returns
// the control plane and the CRDs as the apiserver has them, and fails the
// test on error.
func StartWithCRDs(tb testing.TB) (*ControlPlane, []*apiextensionsv1.CustomResourceDefinition) {
	tb.Helper()
	dir, err := CRDDir()
	if err != nil {
		tb.Fatal(err)
	}
	return StartWithCRDsFrom(tb, dir)
}

// StartWithCRDsFrom is StartWithCRDs with the CRDs of dir: a test that
// needs a cluster with fewer of them (as installed by an older release)
// copies the ones it keeps there.
func StartWithCRDsFrom(tb testing.TB, dir string) (*ControlPlane, []*apiextensionsv1.CustomResourceDefinition) {
	tb.Helper()
	cp := Start(tb)
	began := time.Now()
	crds, err := InstallCRDs(tb.Context(), cp.Config, dir)
	if err != nil {
		tb.Fatal(err)
	}
	tb.Logf("%d CRDs established in %s", len(crds), time.Since(began).Round(time.Millisecond))
	return cp, crds
}

// InstallCRDs creates the CustomResourceDefinitions in the *.yaml files of
// dir (one CRD a file, as controller-gen writes them) and waits until each
// is Established, so that its resources can be served. It returns them as
// the apiserver has them.
func InstallCRDs(ctx context.Context, cfg *rest.Config, dir string) ([]*apiextensionsv1.CustomResourceDefinition, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		return nil, err
	}
	if len(files) == 0 {
		return nil, fmt.Errorf("no CRD files in %s (run `make generate`)", dir)
	}
	cs, err := apiextensions.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	crds := cs.ApiextensionsV1().CustomResourceDefinitions()
	var names []string
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var crd apiextensionsv1.CustomResourceDefinition
		if err := yaml.UnmarshalStrict(b, &crd); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		if crd.Kind != "CustomResourceDefinition" {
			return nil, fmt.Errorf("%s: kind %q, want CustomResourceDefinition", f, crd.Kind)
		}
		if _, err := crds.Create(ctx, &crd, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("create CRD %s from %s: %w", crd.Name, f, err)
		}
		names = append(names, crd.Name)
	}

	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	var out []*apiextensionsv1.CustomResourceDefinition
	for _, name := range names {
		for {
			crd, err := crds.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return nil, fmt.Errorf("CRD %s: %w", name, err)
			}
			if established(crd) {
				out = append(out, crd)
				break
			}
			select {
			case <-ctx.Done():
				return nil, fmt.Errorf("CRD %s not established: %w (conditions %+v)", name, ctx.Err(), crd.Status.Conditions)
			case <-tick.C:
			}
		}
	}
	return out, nil
}

// established reports whether crd's names were accepted and it is served.
func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	var est, names bool
	for _, c := range crd.Status.Conditions {
		switch c.Type {
		case apiextensionsv1.Established:
			est = c.Status == apiextensionsv1.ConditionTrue
		case apiextensionsv1.NamesAccepted:
			names = c.Status == apiextensionsv1.ConditionTrue
		}
	}
	return est && names
}
