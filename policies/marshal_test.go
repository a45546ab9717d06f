package policies

import (
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/containerd/errdefs"
	"golang.org/x/text/unicode/norm"
)

// fullPolicy sets every field of a Policy.
func fullPolicy() *Policy {
	return &Policy{
		Label:        `odd "label" ${x} %{y} \ é`,
		Image:        "airlock/agent:bookworm",
		Command:      []string{"sh", "-c", "echo ${HOME} %{if} \"q\"\n\ttab"},
		Env:          map[string]string{"A": "1", "WEIRD KEY": "v", "EMPTY": "", "UNI": "\u00e9\u2028\U0001F600", "CTL": "\x01\x7f"},
		User:         "1000:1000",
		Workdir:      "/workspace",
		Timeout:      Duration(90 * time.Second),
		Capabilities: []string{"CAP_NET_BIND_SERVICE"},
		Resources:    Resources{CPUs: 0.1, Memory: 64<<20 + 1, Pids: 100, Disk: 2 << 20, LogSize: 8 << 30, AuditSize: 65 << 10},
		Workspaces: []Workspace{{
			HostPath: "/srv/src/app", Target: "/workspace", Mode: ModeOverlay,
			DenyRead: []string{"**/.env*"}, DefaultDenyRead: false, Protect: []string{"**"},
			PreserveUntracked: true, ProtectRefs: []string{"refs/heads/main"}, GitAllow: []string{".git/info/attributes"}, OnExit: OnExitCommit,
		}},
		Mounts: []Mount{
			{HostPath: "/etc/ssl/certs", Target: "/etc/ssl/certs", ReadOnly: true},
			{HostPath: "/tmp/x", Target: "/x", ReadOnly: false, DenyRead: []string{"tokens/"}, DefaultDenyRead: true},
		},
		Egress: &Egress{Allow: []string{"jobs.bench.test:443", "10.0.0.0/8:443", "*.git.test:443"}, Deny: []string{"evil.test"}, AllowPrivate: []string{"10.1.0.0/16"}, OnBlock: OnBlockDrop, IPv6: true, L7: L7Check,
			Inspect: InspectAll,
			HTTP: []HTTPHost{
				{Host: "*.git.test", Default: HTTPDeny, Rules: []HTTPRule{
					{Methods: []string{"POST"}, Path: "/**/git-receive-pack", Refs: []string{"refs/heads/agent/*", "refs/tags/**"}, Action: HTTPAllow},
					{Methods: []string{"GET", "HEAD"}, Path: "/*/info/refs", Action: HTTPAsk},
					{Path: "/api/*", Refs: []string{}, Action: HTTPDeny},
					{Methods: []string{"POST"}, Path: "/v1/buckets/*:delete", JSON: []HTTPJSONMatch{{Field: "keys", Values: []string{"dev/alex/**", "a*b"}}, {Field: "prefix", Values: []string{"dev/alex/"}}}, Action: HTTPAllow},
					{Methods: []string{"POST"}, Path: "/v1/buckets/*:delete", JSON: []HTTPJSONMatch{{Field: "keys", Values: []string{"dev/**"}}}, JSONMatch: JSONMatchEvery, Action: HTTPAsk},
				}},
				{Host: "jobs.bench.test"},
			}},
		Credentials: []Credential{
			{Name: "jobs", Issuer: "airlock", Audience: "jobs.bench.test", Scopes: []string{"jobs.list", "jobs.cancel owner=alex queue=dev"}, TTL: Duration(5 * time.Minute), Deliver: DeliverFile, Path: "/run/airlock/credentials/jobs"},
			{Name: "reg", Audience: "registry.test", Scopes: []string{"packages.publish name=app"}, Deliver: DeliverEnv, EnvVar: "REG_TOKEN"},
		},
		Secrets: []Secret{
			{Name: "JOBS_KEY", From: "file:/etc/airlock/secrets/jobs", Inject: []SecretInject{{Host: "jobs.bench.test", Header: "X-Api-Key"}, {Host: "a.git.test", Bearer: true}}},
			{Name: "GIT", From: "env:GIT_TOKEN", EnvVar: "GIT_TOKEN", Path: "/run/airlock/secrets/git", Inject: []SecretInject{{Host: "b.git.test", Header: "private-token"}}},
		},
		Approval: &Approval{Timeout: Duration(90 * time.Second), OnTimeout: OnTimeoutDeny},
		Pool:     &Pool{Size: 3},
	}
}

func TestMarshalRoundTrip(t *testing.T) {
	tests := []struct {
		name string
		p    *Policy
	}{
		{"every field", fullPolicy()},
		{"every field with defaults", fullPolicy().WithDefaults()},
		{"minimal", &Policy{Label: "m", Image: "i"}},
		{"empty env, command and lists", &Policy{Label: "m", Image: "i", Env: map[string]string{}, Command: []string{}, Capabilities: []string{},
			Egress: &Egress{Allow: []string{}}}},
		{"pool of none", &Policy{Label: "m", Image: "i", Pool: &Pool{}}},
		{"empty approval", &Policy{Label: "m", Image: "i", Approval: &Approval{}}},
		{"l7 ports", &Policy{Label: "m", Image: "i", Egress: &Egress{Allow: []string{"a.test"}, L7: L7Check, L7Ports: []uint16{80, 8443}}}},
		{"gateway blocks left at their defaults", &Policy{Label: "m", Image: "i",
			Egress:  &Egress{Allow: []string{"a.test:443"}, L7: L7Check, HTTP: []HTTPHost{{Host: "a.test", Rules: []HTTPRule{{Action: HTTPAsk}}}}},
			Secrets: []Secret{{Name: "K", From: "env:K", Inject: []SecretInject{{Host: "a.test", Bearer: true}}}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src, err := Marshal(tt.p)
			if err != nil {
				t.Fatal(err)
			}
			got, err := Load("m.hcl", src, nil)
			if err != nil {
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
				t.Errorf("round trip differs:\n got %+v\nwant %+v\n%s", got, want, src)
			}
		})
	}
}

func TestMarshalRefusesLabelsNotInNFC(t *testing.T) {
	for _, p := range []*Policy{
		{Label: "\uf924", Image: "i"},
		{Label: "l", Image: "i", Workspaces: []Workspace{{HostPath: "/srv/cafe\u0301", Target: "/w"}}},
	} {
		if _, err := Marshal(p); !errdefs.IsInvalidArgument(err) {
			t.Errorf("Marshal(%+v): err %v, want invalid argument", p, err)
		}
	}
	if _, err := Marshal(nil); !errdefs.IsInvalidArgument(err) {
		t.Errorf("Marshal(nil): err %v, want invalid argument", err)
	}
}

// FuzzMarshal checks that any string in a label, env value or command
// survives Marshal and Load, or that Marshal refuses a label it cannot
// write as it is.
func FuzzMarshal(f *testing.F) {
	for _, s := range []string{"", "${x}", "%{if true}", `\"`, "$${", "a\x7fb", "\u2028", "$", "%", "e\u0301", "\xff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			return
		}
		p := &Policy{Label: "l" + s, Image: "i", Env: map[string]string{"K": s}, Command: []string{s}}
		src, err := Marshal(p)
		if !norm.NFC.IsNormalString(p.Label) {
			if !errdefs.IsInvalidArgument(err) {
				t.Fatalf("Marshal with label %q: err %v, want invalid argument", p.Label, err)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		got, err := Load("fuzz.hcl", src, nil)
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
