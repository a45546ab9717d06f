package v1alpha1_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// subPathSchema is the Session CRD's schema of
// spec.workspaceSources[].volume.subPath.
func subPathSchema(t testing.TB) (*regexp.Regexp, int64) {
	root, err := kubetest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(root, "deploy/kubernetes/crds/airlock.dev_sessions.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var crd apiextensionsv1.CustomResourceDefinition
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	s := crd.Spec.Versions[0].Schema.OpenAPIV3Schema.Properties["spec"].Properties["workspaceSources"].Items.Schema.Properties["volume"].Properties["subPath"]
	if s.Pattern == "" || s.MaxLength == nil {
		t.Fatalf("subPath's schema %+v: no pattern or maxLength", s)
	}
	return regexp.MustCompile(s.Pattern), *s.MaxLength
}

var subPaths = []string{
	"a", "a/b", "repos/app", ".a", "..a", "...", "a.", "a..", ".a/..b/c..", "a b/c", "a\\b",
	"", ".", "..", "./a", "a/.", "a/..", "../a", "a/../b", "/a", "/", "a/", "a//b", "//", "a\x00b", "\x00",
}

// TestSubPathPattern: the CRD's pattern of a subPath takes exactly what
// the node's check (v1alpha1.CheckSubPath) takes.
func TestSubPathPattern(t *testing.T) {
	re, maxLen := subPathSchema(t)
	if maxLen != v1alpha1.MaxSubPath {
		t.Errorf("the CRD's maxLength of a subPath %d, want %d", maxLen, v1alpha1.MaxSubPath)
	}
	for _, sub := range subPaths {
		if node, crd := v1alpha1.CheckSubPath(sub) == "", re.MatchString(sub); node != crd {
			t.Errorf("subPath %q: the node takes it: %v (%s), the CRD's pattern: %v", sub, node, v1alpha1.CheckSubPath(sub), crd)
		}
	}
	if long := strings.Repeat("a/", v1alpha1.MaxSubPath/2) + "a"; v1alpha1.CheckSubPath(long) == "" {
		t.Errorf("a subPath of %d bytes taken", len(long))
	}
}

func FuzzSubPathPattern(f *testing.F) {
	re, _ := subPathSchema(f)
	for _, sub := range subPaths {
		f.Add(sub)
	}
	f.Fuzz(func(t *testing.T, sub string) {
		if len(sub) > v1alpha1.MaxSubPath {
			return
		}
		if node, crd := v1alpha1.CheckSubPath(sub) == "", re.MatchString(sub); node != crd {
			t.Errorf("subPath %q: the node takes it: %v (%s), the CRD's pattern: %v", sub, node, v1alpha1.CheckSubPath(sub), crd)
		}
	})
}
