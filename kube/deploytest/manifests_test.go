package deploytest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"

	"github.com/airlock-sandbox/airlock/kube/kubetest"
)

// manifest is one object of a deployment and the file it is in ("" for
// one kustomize made, such as deploy/kubernetes-fleet's second
// DaemonSet).
type manifest struct {
	file string
	obj  *unstructured.Unstructured
}

func (m manifest) String() string {
	name := m.obj.GetName()
	if ns := m.obj.GetNamespace(); ns != "" {
		name = ns + "/" + name
	}
	if m.file == "" {
		return fmt.Sprintf("%s %s", m.obj.GetKind(), name)
	}
	return fmt.Sprintf("%s %s (%s)", m.obj.GetKind(), name, m.file)
}

// The deployments, as directories under deploy/: the one for a few nodes,
// and the one for a fleet (its overlay).
const (
	baseDeployment  = "kubernetes"
	fleetDeployment = "kubernetes-fleet"
)

// loadManifests builds the kustomization deploy/name with kustomize's own
// library, the one kubectl apply -k runs, and returns its objects in its
// order, each with the file under deploy/ it came from. Every YAML file
// under deploy/ must be in a kustomization's resources: one left out
// would not be deployed.
func loadManifests(t *testing.T, name string) []manifest {
	t.Helper()
	root, err := kubetest.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	deploy := filepath.Join(root, "deploy")
	origin := listed(t, deploy)
	opts := krusty.MakeDefaultOptions()
	// The kustomizations' sortOptions decide the order, as they do
	// for kubectl.
	opts.Reorder = krusty.ReorderOptionUnspecified
	rm, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), filepath.Join(deploy, name))
	if err != nil {
		t.Fatalf("kustomize build deploy/%s: %v", name, err)
	}
	var out []manifest
	for _, r := range rm.Resources() {
		// Through JSON, as kubectl sends it (kustomize's own maps
		// hold Go ints, which unstructured objects do not).
		j, err := r.MarshalJSON()
		u := &unstructured.Unstructured{}
		if err == nil {
			err = u.UnmarshalJSON(j)
		}
		if err != nil {
			t.Fatalf("deploy/%s: %s %s: %v", name, r.GetKind(), r.GetName(), err)
		}
		out = append(out, manifest{file: origin[objectKey(u)], obj: u})
	}
	if len(out) == 0 {
		t.Fatalf("deploy/%s: no object", name)
	}
	return out
}

func objectKey(u *unstructured.Unstructured) string {
	return u.GetKind() + " " + u.GetNamespace() + "/" + u.GetName()
}

// listed checks that every YAML file under deploy is a kustomization or
// in the resources of the kustomization of its directory, and returns
// the file (relative to deploy/kubernetes, or to deploy/ outside it) of
// each object, by kind, namespace and name.
func listed(t *testing.T, deploy string) map[string]string {
	t.Helper()
	resources := map[string]bool{}
	var files []string
	err := filepath.WalkDir(deploy, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		if d.Name() != "kustomization.yaml" {
			files = append(files, p)
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		var k struct {
			Resources []string `json:"resources"`
		}
		if err := yaml.Unmarshal(b, &k); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		for _, r := range k.Resources {
			resources[filepath.Join(filepath.Dir(p), r)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	origin := map[string]string{}
	for _, f := range files {
		rel, _ := filepath.Rel(filepath.Join(deploy, baseDeployment), f)
		if strings.HasPrefix(rel, "..") {
			rel, _ = filepath.Rel(deploy, f)
		}
		if !resources[f] {
			t.Errorf("deploy/%s is in no kustomization's resources: it would not be deployed", strings.TrimPrefix(f, deploy+"/"))
			continue
		}
		objs, err := readObjects(f)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if len(objs) == 0 {
			t.Errorf("%s: no object", f)
		}
		for _, o := range objs {
			origin[objectKey(o)] = rel
		}
	}
	return origin
}

// readObjects parses the YAML documents of path, each one object.
func readObjects(path string) ([]*unstructured.Unstructured, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	r := utilyaml.NewYAMLReader(bufio.NewReader(f))
	var out []*unstructured.Unstructured
	for i := 1; ; i++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
			continue // comments only
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(j); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if u.GetName() == "" {
			return nil, fmt.Errorf("document %d: %s without a name", i, u.GetKind())
		}
		out = append(out, u)
	}
}

// find returns the one manifest of kind and name.
func find(t *testing.T, ms []manifest, kind, name string) manifest {
	t.Helper()
	for _, m := range ms {
		if m.obj.GetKind() == kind && m.obj.GetName() == name {
			return m
		}
	}
	t.Fatalf("the deployment has no %s %s", kind, name)
	return manifest{}
}

// daemonSet is the node agents' DaemonSet, decoded strictly (an unknown
// field is an error), and checked for what the node restriction and the
// agent rely on: the airlock-node service account, the node name from
// spec.nodeName, and the admission policy from its ConfigMap at the path
// --admission names. It returns the DaemonSet and airlockd's container.
func daemonSet(t *testing.T, ms []manifest) (*appsv1.DaemonSet, *corev1.Container) {
	t.Helper()
	return daemonSetNamed(t, ms, "airlock-node")
}

// daemonSetNamed is daemonSet for the DaemonSet name.
func daemonSetNamed(t *testing.T, ms []manifest, name string) (*appsv1.DaemonSet, *corev1.Container) {
	t.Helper()
	m := find(t, ms, "DaemonSet", name)
	var ds appsv1.DaemonSet
	if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(m.obj.Object, &ds, true); err != nil {
		t.Fatalf("%s: not a valid DaemonSet: %v", m, err)
	}
	spec := &ds.Spec.Template.Spec
	if spec.ServiceAccountName != "airlock-node" {
		t.Errorf("%s: serviceAccountName %q, want airlock-node (the node restriction's user)", m, spec.ServiceAccountName)
	}
	if len(spec.Containers) != 1 {
		t.Fatalf("%s: %d containers, want airlockd alone", m, len(spec.Containers))
	}
	c := &spec.Containers[0]
	if !slices.Equal(c.Command, []string{"/usr/local/bin/airlockd-kube"}) {
		t.Errorf("%s: command %q, want airlockd-kube", m, c.Command)
	}
	i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "NODE_NAME" })
	if i < 0 || c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Errorf("%s: NODE_NAME is not spec.nodeName from the downward API", m)
	}
	if arg(c.Args, "--node-name") != "$(NODE_NAME)" {
		t.Errorf("%s: --node-name %q, want $(NODE_NAME): the AirlockNode must be named after the node its token is bound to", m, arg(c.Args, "--node-name"))
	}
	adm := arg(c.Args, "--admission")
	mi := slices.IndexFunc(c.VolumeMounts, func(v corev1.VolumeMount) bool { return v.MountPath == adm })
	if adm == "" || mi < 0 {
		t.Fatalf("%s: --admission %q is not a mounted file", m, adm)
	}
	vi := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == c.VolumeMounts[mi].Name })
	if vi < 0 || spec.Volumes[vi].ConfigMap == nil || spec.Volumes[vi].ConfigMap.Name != "airlock-admission" || c.VolumeMounts[mi].SubPath != "admission.hcl" {
		t.Errorf("%s: --admission %s is not admission.hcl of the ConfigMap airlock-admission", m, adm)
	}
	return &ds, c
}

// arg returns the value following flag in args, "" if flag is absent.
func arg(args []string, flag string) string {
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		return ""
	}
	return args[i+1]
}

// setArg returns args with flag's value replaced by value.
func setArg(t *testing.T, args []string, flag, value string) []string {
	t.Helper()
	i := slices.Index(args, flag)
	if i < 0 || i+1 >= len(args) {
		t.Fatalf("the DaemonSet's args have no %s", flag)
	}
	out := slices.Clone(args)
	out[i+1] = value
	return out
}

// admissionPolicy returns the ConfigMap's admission.hcl.
func admissionPolicy(t *testing.T, ms []manifest) string {
	t.Helper()
	m := find(t, ms, "ConfigMap", "airlock-admission")
	s, ok, err := unstructured.NestedString(m.obj.Object, "data", "admission.hcl")
	if err != nil || !ok || s == "" {
		t.Fatalf("%s: no data admission.hcl (%v)", m, err)
	}
	return s
}
