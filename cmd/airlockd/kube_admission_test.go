//go:build kubernetes

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubernetesNeedsAdmission: --kubernetes makes everyone who may
// create a Session (in any namespace) a caller of this daemon's create,
// as --socket-group does for its members, so it is refused without an
// explicit admission policy: the built-in one can be root-equivalent on
// this host (an attacker's review found the node agent started under it).
func TestKubernetesNeedsAdmission(t *testing.T) {
	dir := t.TempDir()
	kc := unreachableKubeconfig(t, dir)
	out, code := airlockd(t, "--kubernetes", "--kubeconfig", kc, "--node-name", "n1", "--root", filepath.Join(dir, "root"), "--check-config")
	if code != 2 || !strings.Contains(out, "--kubernetes runs the Sessions anyone") {
		t.Errorf("airlockd-kube --kubernetes without --admission: exit %d, want 2 and the refusal; admission lines:\n%s",
			code, strings.Join(grepLines(out, "admission"), "\n"))
	}
	adm := admissionFile(t, dir)
	if out, code := airlockd(t, "--kubernetes", "--kubeconfig", kc, "--node-name", "n1", "--root", filepath.Join(dir, "root"), "--admission", adm, "--check-config"); code != 0 {
		t.Errorf("with --admission: exit %d:\n%s", code, out)
	}
}

func grepLines(s, w string) []string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, w) {
			out = append(out, l)
		}
	}
	return out
}

// TestKubernetesAuditInterval: a negative --kubernetes-audit-interval is
// refused with the flag's name; 0 and a fleet's minute are taken.
func TestKubernetesAuditInterval(t *testing.T) {
	dir := t.TempDir()
	kc := unreachableKubeconfig(t, dir)
	adm := admissionFile(t, dir)
	run := func(interval string) (string, int) {
		return airlockd(t, "--kubernetes", "--kubeconfig", kc, "--node-name", "n1", "--root", filepath.Join(dir, "root"),
			"--admission", adm, "--kubernetes-audit-interval", interval, "--check-config")
	}
	if out, code := run("-1s"); code != 2 || !strings.Contains(out, "--kubernetes-audit-interval -1s: want 0 or more") {
		t.Errorf("--kubernetes-audit-interval -1s: exit %d, want 2 and the reason:\n%s", code, out)
	}
	for _, ok := range []string{"0", "1m"} {
		if out, code := run(ok); code != 0 {
			t.Errorf("--kubernetes-audit-interval %s: exit %d:\n%s", ok, code, out)
		}
	}
}

// unreachableKubeconfig writes a kubeconfig in dir for an API server that
// is not there: enough for --check-config, which does not dial it.
func unreachableKubeconfig(t *testing.T, dir string) string {
	t.Helper()
	kc := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(kc, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	return kc
}

// admissionFile writes an explicit admission policy in dir.
func admissionFile(t *testing.T, dir string) string {
	t.Helper()
	adm := filepath.Join(dir, "admission.hcl")
	if err := os.WriteFile(adm, []byte("admission {\n  host_paths = [\"/srv/agents\"]\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return adm
}
