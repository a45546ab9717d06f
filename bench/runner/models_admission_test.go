package runner

import (
	"net/netip"
	"path/filepath"
	"reflect"
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/internal/testutil"
	testworld "github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestDaemonAdmission: the bench daemon's admission policy is the
// built-in one but for more secret sources: the stack's secrets directory
// and each worker's registry tokens' directory, each file for its own
// directory's host.
func TestDaemonAdmission(t *testing.T) {
	testutil.RequiresRoot(t)
	root := t.TempDir()
	w, err := testworld.Start(t.Context(), testworld.Config{Prefix: "bwadm", Zone: Zone, Net: netip.MustParsePrefix("10.231.0.0/24")})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	s := &Stack{Root: root, Network: w, cfg: StackConfig{Workers: 2}}
	args, err := s.admissionArgs()
	if err != nil {
		t.Fatal(err)
	}
	a, err := policies.LoadAdmissionFile(args[1])
	if err != nil {
		t.Fatal(err)
	}
	def := policies.DefaultAdmission()
	want := slices.Clone(def.SecretSources)
	for _, d := range []string{filepath.Join(root, "secrets"), s.SecretsDir(0), s.SecretsDir(1)} {
		want = append(want, policies.SecretSource{From: "file:" + d + "/*/*", Hosts: []string{policies.DirHost}})
	}
	if !reflect.DeepEqual(a.SecretSources, want) {
		t.Errorf("secret sources %+v, want %+v", a.SecretSources, want)
	}
	a.SecretSources, def.SecretSources, a.Source, def.Source = nil, nil, "", ""
	if !reflect.DeepEqual(a, def) {
		t.Errorf("admission\n got %+v\nwant %+v", a, def)
	}
}

// TestSecretsDirUnderRoot: with a daemon of the operator's own, the
// workers' secret directories are SecretsRoot/N, which its admission
// policy can name beforehand; otherwise they live in the stack's root.
func TestSecretsDirUnderRoot(t *testing.T) {
	s := &Stack{Root: "/tmp/alb-1", cfg: StackConfig{Workers: 2, SecretsRoot: "/srv/bench-secrets"}}
	if got := s.SecretsDir(1); got != "/srv/bench-secrets/1" {
		t.Errorf("SecretsDir(1) = %s", got)
	}
	s.cfg.SecretsRoot = ""
	if got := s.SecretsDir(1); got != "/tmp/alb-1/registry-secrets/1" {
		t.Errorf("SecretsDir(1) = %s", got)
	}
}
