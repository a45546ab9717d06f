package manifest

import (
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

// full sets every field of a Policy.
func full() *policies.Policy {
	return &policies.Policy{
		Label:        `odd "label" ${x} %{y} \ é`,
		Image:        "airlock/agent:bookworm",
		Command:      []string{"sh", "-c", "echo ${HOME} %{if} \"q\"\n\ttab"},
		Env:          map[string]string{"A": "1", "WEIRD KEY": "v", "EMPTY": "", "UNI": "\u00e9\u2028\U0001F600"},
		User:         "1000:1000",
		Workdir:      "/workspace",
		Timeout:      policies.Duration(90 * time.Second),
		Capabilities: []string{"CAP_NET_BIND_SERVICE"},
		Resources:    policies.Resources{CPUs: 0.5, Memory: 64 << 20, Pids: 100, Disk: 2 << 20},
		Workspaces: []policies.Workspace{{
			HostPath: "/srv/src/app", Target: "/workspace", Mode: policies.ModeOverlay,
			DenyRead: []string{"**/.env*"}, DefaultDenyRead: false, Protect: []string{"**"},
			PreserveUntracked: true, ProtectRefs: []string{"refs/heads/main"}, OnExit: policies.OnExitCommit,
		}},
		Mounts: []policies.Mount{
			{HostPath: "/etc/ssl/certs", Target: "/etc/ssl/certs", ReadOnly: true},
			{HostPath: "/tmp/x", Target: "/x", ReadOnly: false, DenyRead: []string{"tokens/"}, DefaultDenyRead: true},
		},
		Egress: &policies.Egress{Allow: []string{"jobs.bench.test", "10.0.0.0/8:443"}, Deny: []string{"evil.test"}, OnBlock: policies.OnBlockDrop, IPv6: true},
		Credentials: []policies.Credential{
			{Name: "jobs", Issuer: "airlock", Audience: "jobs.bench.test", Scopes: []string{"jobs.list", "jobs.cancel owner=alex queue=dev"}, TTL: policies.Duration(5 * time.Minute), Deliver: policies.DeliverFile, Path: "/run/airlock/credentials/jobs"},
			{Name: "reg", Audience: "registry.test", Scopes: []string{"packages.publish name=app"}, Deliver: policies.DeliverEnv, EnvVar: "REG_TOKEN"},
		},
	}
}

func TestWriteRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		p    *policies.Policy
	}{
		{"every field", full()},
		{"minimal", &policies.Policy{Label: "m", Image: "i"}},
		{"empty env and command", &policies.Policy{Label: "m", Image: "i", Env: map[string]string{}, Command: []string{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path, err := Write(dir, "CJ-S0-B0-R0", tt.p)
			if err != nil {
				t.Fatal(err)
			}
			if filepath.Base(path) != "CJ-S0-B0-R0.hcl" {
				t.Errorf("path = %s", path)
			}
			got, err := policies.LoadFile(path, nil)
			if err != nil {
				src, _ := os.ReadFile(path)
				t.Fatalf("load: %v\n%s", err, src)
			}
			want := tt.p.WithDefaults()
			if len(want.Env) == 0 {
				want.Env = got.Env // an empty map and no map read back alike
			}
			if len(want.Command) == 0 {
				want.Command = got.Command
			}
			if !reflect.DeepEqual(got, want) {
				src, _ := os.ReadFile(path)
				t.Errorf("round trip differs:\n got %+v\nwant %+v\n%s", got, want, src)
			}
		})
	}
}

func TestWriteRejectsBadID(t *testing.T) {
	for _, id := range []string{"", "a/b", "..", `a\b`} {
		if _, err := Write(t.TempDir(), id, full()); err == nil {
			t.Errorf("Write(%q) succeeded", id)
		}
	}
}
