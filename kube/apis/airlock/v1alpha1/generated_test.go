package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// TestGeneratedFilesAreCurrent runs controller-gen as `make generate` does
// (keep the two alike), writing to stdout and a temporary directory, and
// checks that the DeepCopy methods and the CRDs in the tree are what it
// writes: a type changed without `make generate` fails here.
func TestGeneratedFilesAreCurrent(t *testing.T) {
	root, err := kubetest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	controllerGen := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command("go", append([]string{"tool", "controller-gen"}, args...)...)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("controller-gen %v: %v\n%s", args, err, stderr.Bytes())
		}
		return out
	}
	stale := "is not what controller-gen writes: run `make generate`"

	for _, pkg := range []string{"policies", "kube/apis/airlock/v1alpha1"} {
		want := controllerGen("object", "paths=./"+pkg, "output:object:stdout")
		have, err := os.ReadFile(filepath.Join(root, pkg, "zz_generated.deepcopy.go"))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(have, want) {
			t.Errorf("%s/zz_generated.deepcopy.go %s", pkg, stale)
		}
	}

	tmp := t.TempDir()
	controllerGen("crd:allowDangerousTypes=true", "paths=./kube/apis/...", "output:crd:dir="+tmp)
	crdDir, err := kubetest.CRDDir()
	if err != nil {
		t.Fatal(err)
	}
	generated, _ := filepath.Glob(filepath.Join(tmp, "*.yaml"))
	inTree, _ := filepath.Glob(filepath.Join(crdDir, "*.yaml"))
	if len(generated) == 0 || len(generated) != len(inTree) {
		t.Errorf("controller-gen writes %d CRDs, %s holds %d: run `make generate`", len(generated), crdDir, len(inTree))
	}
	for _, g := range generated {
		want, _ := os.ReadFile(g)
		have, err := os.ReadFile(filepath.Join(crdDir, filepath.Base(g)))
		switch {
		case err != nil:
			t.Errorf("%v: run `make generate`", err)
		case !bytes.Equal(have, want):
			t.Errorf("%s %s", filepath.Join(crdDir, filepath.Base(g)), stale)
		}
	}
}
