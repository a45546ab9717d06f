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
	a.SecretSources = []string{"file:" + dir + "/*", "env:ANTHROPIC_*"}
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
			refused: `secret "K" refused: source "env:AWS_SECRET_ACCESS_KEY" is not among the admitted secret sources (file:` + dir + `/*, env:ANTHROPIC_*)`},
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
// of /etc/airlock/secrets and nothing of the daemon's environment.
func TestDefaultAdmissionSecretSources(t *testing.T) {
	a := DefaultAdmission()
	for from, want := range map[string]bool{
		"file:/etc/airlock/secrets/anthropic":     true,
		"file:/etc/airlock/secrets/sub/anthropic": false,
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
	if !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), `source "env:AWS_SECRET_ACCESS_KEY" is not among the admitted secret sources (file:/etc/airlock/secrets/*)`) {
		t.Errorf("built-in policy on an env source: %v", err)
	}
	a.SecretSources = []string{}
	_, err = a.Admit(secretPolicy(t, "file:/etc/airlock/secrets/x"), NewProtected())
	if !errdefs.IsPermissionDenied(err) || !strings.Contains(err.Error(), "admitted secret sources (none)") {
		t.Errorf("policy admitting no source: %v", err)
	}
}
