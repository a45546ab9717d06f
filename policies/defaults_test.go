package policies

import "testing"

func TestCredentialSandboxPath(t *testing.T) {
	tests := []struct {
		name string
		in   Credential
		want string
	}{
		{"default", Credential{Name: "git"}, "/run/airlock/credentials/git"},
		{"explicit", Credential{Name: "kube", Path: "/home/agent/.kube/token"}, "/home/agent/.kube/token"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.in.SandboxPath(); got != tt.want {
				t.Errorf("SandboxPath() = %q, want %q", got, tt.want)
			}
		})
	}
	p := Policy{Credentials: []Credential{{Name: "git"}, {Name: "reg", Deliver: DeliverEnv, EnvVar: "REG"}}}
	p.ApplyDefaults()
	if got := p.Credentials[0].Path; got != "/run/airlock/credentials/git" {
		t.Errorf("ApplyDefaults: file credential path %q", got)
	}
	if got := p.Credentials[1].Path; got != "" {
		t.Errorf("ApplyDefaults: env credential got a path %q", got)
	}
}
