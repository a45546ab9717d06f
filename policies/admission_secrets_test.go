package policies

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/containerd/errdefs"
)

// secretPolicy is a valid policy with one secret from from.
func secretPolicy(t *testing.T, from string) *Policy {
	t.Helper()
	p := &Policy{Label: "t", Image: "i", Command: []string{"true"},
		Egress:  &Egress{Allow: []string{"api.test:443"}, L7: L7Check},
		Secrets: []Secret{{Name: "K", From: from, Inject: []SecretInject{{Host: "api.test", Bearer: true}}}},
	}
	p.ApplyDefaults()
	if err := p.Validate(); err != nil {
		t.Fatalf("secretPolicy(%q): %v", from, err)
	}
	return p
}

// TestAdmitSecretSources: the daemon reads a secret as root and sends it
// to hosts the caller names, so a caller must not get it to read anything
// but the sources the operator admitted: not another variable of the
// daemon's environment, not a file outside the admitted directory reached
// through a symlink or a hard link placed inside it, nor a file in a
// directory beneath it.
func TestAdmitSecretSources(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(root, "secrets")
	outside := filepath.Join(root, "outside")
	for _, d := range []string{filepath.Join(dir, "sub"), filepath.Join(dir, "d"), outside} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{filepath.Join(dir, "ok"), filepath.Join(dir, "sub", "x"), filepath.Join(outside, "shadow"), filepath.Join(outside, "other")} {
		if err := os.WriteFile(f, []byte("value"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(outside, "shadow"), filepath.Join(dir, "escape")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("ok", filepath.Join(dir, "alias")); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(outside, "other"), filepath.Join(dir, "hard")); err != nil {
		t.Fatal(err)
	}

	a := DefaultAdmission()
	a.SecretSources = []SecretSource{{From: "file:" + dir + "/*", Hosts: []string{"api.test"}}, {From: "env:ANTHROPIC_*", Hosts: []string{"api.test"}}}
	tests := []struct {
		name, from string
		// wantFrom is the source after admission; refused names the
		// problem's text, missing an invalid-argument error.
		wantFrom, refused string
		missing           bool
	}{
		{name: "admitted file", from: "file:" + dir + "/ok", wantFrom: "file:" + dir + "/ok"},
		{name: "symlink inside the directory", from: "file:" + dir + "/alias", wantFrom: "file:" + dir + "/ok"},
		{name: "admitted variable", from: "env:ANTHROPIC_API_KEY", wantFrom: "env:ANTHROPIC_API_KEY"},
		{name: "another variable of the daemon", from: "env:AWS_SECRET_ACCESS_KEY",
			refused: `secret "K" refused: source "env:AWS_SECRET_ACCESS_KEY" is not among the admitted secret sources (file:` + dir + `/* to api.test; env:ANTHROPIC_* to api.test)`},
		{name: "file outside the directory", from: "file:" + outside + "/shadow", refused: "is not among the admitted secret sources"},
		{name: "file in a directory beneath", from: "file:" + dir + "/sub/x", refused: "is not among the admitted secret sources"},
		{name: "symlink out of the directory", from: "file:" + dir + "/escape",
			refused: `source "file:` + dir + `/escape" resolves to "` + outside + `/shadow", which is not among the admitted secret sources`},
		{name: "hard link to a file outside", from: "file:" + dir + "/hard", refused: "has 2 hard links"},
		{name: "directory", from: "file:" + dir + "/d", refused: "is not a regular file"},
		{name: "missing file", from: "file:" + dir + "/none", missing: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := secretPolicy(t, tt.from)
			_, err := a.Admit(p, NewProtected())
			switch {
			case tt.missing:
				if !errdefs.IsInvalidArgument(err) || errdefs.IsPermissionDenied(err) {
					t.Fatalf("error %v, want an invalid-argument error", err)
				}
			case tt.refused != "":
				var ae *AdmissionError
				if !errors.As(err, &ae) || !errdefs.IsPermissionDenied(err) || len(ae.Problems) != 1 || !strings.Contains(ae.Problems[0], tt.refused) {
					t.Fatalf("error %v, want one problem containing %q", err, tt.refused)
				}
			default:
				if err != nil {
					t.Fatal(err)
				}
				if got := p.Secrets[0].From; got != tt.wantFrom {
					t.Errorf("from after admission = %q, want %q", got, tt.wantFrom)
				}
			}
		})
	}
}

// TestDefaultAdmissionSecretSources: the built-in policy admits the files
// of /etc/airlock/secrets/HOST/, for HOST alone, and nothing of the
// daemon's environment.
func TestDefaultAdmissionSecretSources(t *testing.T) {
	a := DefaultAdmission()
	for from, want := range map[string]bool{
		"file:/etc/airlock/secrets/api.test/key":  true,
		"file:/etc/airlock/secrets/anthropic":     false,
		"file:/etc/airlock/secrets/a/b/anthropic": false,
		"file:/etc/airlock/secrets":               false,
		"file:/etc/shadow":                        false,
		"file:/root/.aws/credentials":             false,
		"env:ANTHROPIC_API_KEY":                   false,
		"env:HOME":                                false,
	} {
		if got := a.secretSourceAdmitted(from); got != want {
			t.Errorf("built-in policy admits %q: %v, want %v", from, got, want)
		}
	}
	_, err := a.Admit(secretPolicy(t, "env:AWS_SECRET_ACCESS_KEY"), NewProtected())
	if !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), `source "env:AWS_SECRET_ACCESS_KEY" is not among the admitted secret sources (file:/etc/airlock/secrets/*/* to {dir})`) {
		t.Errorf("built-in policy on an env source: %v", err)
	}
	// A caller naming the operator's key for its own host.
	_, err = a.Admit(secretPolicy(t, "file:/etc/airlock/secrets/api.anthropic.com/key"), NewProtected())
	if !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), `source "file:/etc/airlock/secrets/api.anthropic.com/key" may not be injected into api.test`) {
		t.Errorf("built-in policy on another host's key: %v", err)
	}
	a.SecretSources = []SecretSource{}
	_, err = a.Admit(secretPolicy(t, "file:/etc/airlock/secrets/x"), NewProtected())
	if !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), "admitted secret sources (none)") {
		t.Errorf("policy admitting no source: %v", err)
	}
}

// TestAdmitSecretHosts: a source is admitted only for the hosts its
// secret_source names. An API caller who may use the operator's Anthropic
// key must not have the gateway send it to a host of the caller's own, as
// written, through a wildcard, or through a symlink from a directory named
// after the caller's host.
func TestAdmitSecretHosts(t *testing.T) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"api.test", "evil.test", "corp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	for _, f := range []string{"api.test/key", "corp/token"} {
		if err := os.WriteFile(filepath.Join(root, f), []byte("value"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// evil.test/key is the api.test key under the caller's host's name.
	if err := os.Symlink(filepath.Join(root, "api.test", "key"), filepath.Join(root, "evil.test", "key")); err != nil {
		t.Fatal(err)
	}
	a := DefaultAdmission()
	a.SecretSources = []SecretSource{
		{From: "file:" + root + "/*/key", Hosts: []string{DirHost}},
		{From: "file:" + root + "/corp/*", Hosts: []string{"git.corp.test", "*.registry.corp.test"}},
		{From: "env:ANTHROPIC_API_KEY", Hosts: []string{"api.anthropic.com"}},
	}
	tests := []struct {
		name, from string
		hosts      []string
		refused    string
	}{
		{name: "file to its directory's host", from: "file:" + root + "/api.test/key", hosts: []string{"api.test"}},
		{name: "file to another host", from: "file:" + root + "/api.test/key", hosts: []string{"api.test", "evil.test"},
			refused: `may not be injected into evil.test`},
		{name: "symlink named after the caller's host", from: "file:" + root + "/evil.test/key", hosts: []string{"evil.test"},
			refused: `resolves to "` + root + `/api.test/key", which may not be injected into evil.test`},
		{name: "named host", from: "file:" + root + "/corp/token", hosts: []string{"git.corp.test"}},
		{name: "name under a wildcard", from: "file:" + root + "/corp/token", hosts: []string{"npm.registry.corp.test"}},
		{name: "the wildcard's own domain", from: "file:" + root + "/corp/token", hosts: []string{"registry.corp.test"},
			refused: "may not be injected into registry.corp.test"},
		{name: "a lookalike name", from: "file:" + root + "/corp/token", hosts: []string{"evilregistry.corp.test"},
			refused: "may not be injected into evilregistry.corp.test"},
		{name: "variable to its host", from: "env:ANTHROPIC_API_KEY", hosts: []string{"api.anthropic.com"}},
		{name: "variable elsewhere", from: "env:ANTHROPIC_API_KEY", hosts: []string{"api.test"}, refused: "may not be injected into api.test"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := &Policy{Label: "t", Image: "i", Command: []string{"true"}, Egress: &Egress{L7: L7Check},
				Secrets: []Secret{{Name: "K", From: tt.from}}}
			for _, h := range tt.hosts {
				p.Egress.Allow = append(p.Egress.Allow, h+":443")
				p.Secrets[0].Inject = append(p.Secrets[0].Inject, SecretInject{Host: h, Bearer: true})
			}
			p.ApplyDefaults()
			if err := p.Validate(); err != nil {
				t.Fatal(err)
			}
			_, err := a.Admit(p, NewProtected())
			if tt.refused == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ae *AdmissionError
			if !errors.As(err, &ae) || !errdefs.IsPermissionDenied(err) || len(ae.Problems) != 1 || !strings.Contains(ae.Problems[0], tt.refused) {
				t.Fatalf("error %v, want one problem containing %q", err, tt.refused)
			}
		})
	}
}
