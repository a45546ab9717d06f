package daemon

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/containerd/containerd/v2/core/containers"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/errdefs"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/egress/sessionca"
	"github.com/airlock-sandbox/airlock/internal/audit"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/secrets"
)

// TestSecretsNeedL7: a manifest with secrets and no L7 gateway is refused
// before anything is made.
func TestSecretsNeedL7(t *testing.T) {
	rt := newFakeRuntime()
	root := t.TempDir()
	d := openFake(t, root, rt)
	t.Setenv("AIRLOCK_TEST_SECRET", "v")
	p := fakePolicy("true")
	p.Secrets = []policies.Secret{{Name: "K", From: "env:AIRLOCK_TEST_SECRET", Inject: []policies.SecretInject{{Host: "a.test", Header: "x-k"}}}}
	if _, err := d.Create(context.Background(), api.CreateRequest{Policy: p}); !errdefs.IsInvalidArgument(err) {
		t.Fatalf("create with secrets and no egress: %v, want invalid argument", err)
	}
	if ids := rt.ids(); len(ids) != 0 {
		t.Errorf("runtime objects after a refused create: %v", ids)
	}
	if entries, _ := os.ReadDir(filepath.Join(root, "sessions")); len(entries) != 0 {
		t.Errorf("session directories after a refused create: %d", len(entries))
	}
}

// TestL7PrepareReopen: a session with l7 = "check" and secrets gets its CA
// and placeholders in its state directory, delivered by spec options; a
// restarted daemon reads back the same CA and placeholders, and the
// values again from their sources.
func TestL7PrepareReopen(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(src, []byte("the-value\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := policies.Policy{
		Egress:  &policies.Egress{Allow: []string{"api.example.test:443"}, L7: policies.L7Check},
		Secrets: []policies.Secret{{Name: "API_KEY", From: "file:" + src, Inject: []policies.SecretInject{{Host: "api.example.test", Header: "x-api-key"}}}},
	}
	ca, set, err := prepareL7(dir, "sess1", &p)
	if err != nil {
		t.Fatal(err)
	}
	if ca == nil || set == nil {
		t.Fatalf("prepareL7 = %v, %v", ca, set)
	}
	for _, f := range []string{sessionca.CertFile, sessionca.KeyFile, secrets.StateFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			t.Errorf("state directory: %v", err)
		}
	}
	spec := &oci.Spec{Process: &specs.Process{Env: []string{"PATH=/bin"}}}
	for _, opt := range l7SpecOpts(dir, ca, set) {
		if err := opt(context.Background(), nil, &containers.Container{ID: "sess1"}, spec); err != nil {
			t.Fatal(err)
		}
	}
	b := set.Bound()[0]
	for _, e := range append(sessionca.TrustEnv(), "API_KEY="+b.Placeholder) {
		if !slices.Contains(spec.Process.Env, e) {
			t.Errorf("spec env %q lacks %q", spec.Process.Env, e)
		}
	}
	if !slices.ContainsFunc(spec.Mounts, func(m specs.Mount) bool { return m.Destination == sessionca.SandboxCAPath }) {
		t.Errorf("no mount of the CA: %v", spec.Mounts)
	}

	// What the perimeter is given: the CA and the secrets for the gateway.
	var d *Daemon
	sc := d.egressConfig(&session{audit: audit.New(dir, 0), ca: ca, secrets: set}, p, dir)
	if sc.CA != ca || sc.Secrets == nil || len(sc.Secrets()) != 1 {
		t.Fatalf("egress config: CA %v, secrets func set: %v", sc.CA, sc.Secrets != nil)
	}
	gs := sc.Secrets()[0]
	if gs.Name != "API_KEY" || gs.Placeholder != b.Placeholder || string(gs.Value) != "the-value" ||
		len(gs.Inject) != 1 || gs.Inject[0].Host != "api.example.test" || gs.Inject[0].Header != "x-api-key" {
		t.Errorf("the gateway's secret: %+v", gs)
	}
	if sc := d.egressConfig(&session{audit: audit.New(dir, 0)}, p, dir); sc.CA != nil || sc.Secrets != nil {
		t.Errorf("egress config of a session without CA or secrets: CA %#v, secrets func set", sc.CA)
	}

	ca2, set2 := reopenL7(context.Background(), dir, &p)
	if ca2 == nil || !bytes.Equal(ca2.CertPEM(), ca.CertPEM()) {
		t.Error("the reopened session has another CA")
	}
	b2 := set2.Bound()[0]
	if b2.Placeholder != b.Placeholder || string(b2.Value) != "the-value" {
		t.Errorf("reopened secret %v (value %q), want placeholder %s", b2, b2.Value, b.Placeholder)
	}
	// The source gone: the secret is there, unavailable.
	if err := os.Remove(src); err != nil {
		t.Fatal(err)
	}
	_, set3 := reopenL7(context.Background(), dir, &p)
	if b3 := set3.Bound()[0]; b3.Available() || b3.Placeholder != b.Placeholder {
		t.Errorf("reopened with the source gone: %v", b3)
	}

	// Without l7, no CA; without secrets, no Set.
	ca, set, err = prepareL7(t.TempDir(), "sess2", &policies.Policy{Egress: &policies.Egress{Allow: []string{"a.test"}}})
	if ca != nil || set != nil || err != nil {
		t.Errorf("prepareL7 without l7 = %v, %v, %v", ca, set, err)
	}
}

func TestRawPackets(t *testing.T) {
	for _, tc := range []struct {
		caps []string
		want bool
	}{
		{nil, false},
		{[]string{"CAP_NET_BIND_SERVICE", "CAP_CHOWN"}, false},
		{[]string{"CAP_NET_RAW"}, true},
		{[]string{"cap_net_admin"}, true},
		{[]string{"NET_RAW"}, true},
	} {
		if got := rawPackets(tc.caps); got != tc.want {
			t.Errorf("rawPackets(%v) = %v, want %v", tc.caps, got, tc.want)
		}
	}
}
