package manifest

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/text/unicode/norm"

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

func TestQuote(t *testing.T) {
	tests := []struct{ in, want string }{
		{"plain", `"plain"`},
		{`a"b\c`, `"a\"b\\c"`},
		{"${x}", `"$${x}"`},
		{"%{x}", `"%%{x}"`},
		{"$x %y $", `"$x %y $"`},
		{"a\nb\tc\r", `"a\nb\tc\r"`},
		{"\x01", `"\u0001"`},
		{"\u2028", `"\u2028"`},
		{"é😀", `"é😀"`},
	}
	for _, tt := range tests {
		if got := quote(tt.in); got != tt.want {
			t.Errorf("quote(%q) = %s, want %s", tt.in, got, tt.want)
		}
	}
}

// FuzzMarshal checks that any string in a label, env value or command
// survives Marshal and policies.Load.
func FuzzMarshal(f *testing.F) {
	for _, s := range []string{"", "${x}", "%{if true}", `\"`, "$${", "a\x7fb", "\u2028", "$", "%"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			return
		}
		p := &policies.Policy{Label: "l" + s, Image: "i", Env: map[string]string{"K": s}, Command: []string{s}}
		src, err := Marshal(p)
		if err != nil {
			t.Fatal(err)
		}
		got, err := policies.Load("fuzz.hcl", src, nil)
		if err != nil {
			if strings.ContainsFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) }) {
				return // control characters in the label are rejected by validation
			}
			t.Fatalf("Load(Marshal(%q)): %v\n%s", s, err, src)
		}
		// HCL reads quoted expressions in Unicode NFC; block labels as written.
		nfc := norm.NFC.String(s)
		if got.Env["K"] != nfc || got.Command[0] != nfc || got.Label != "l"+s {
			t.Fatalf("round trip of %q: env %q, command %q, label %q\n%s", s, got.Env["K"], got.Command[0], got.Label, src)
		}
	})
}
