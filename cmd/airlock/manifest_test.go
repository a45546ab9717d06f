package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// These tests need no daemon: the socket points nowhere.
func offline(t *testing.T) *harness {
	return &harness{t: t, d: &fakeDaemon{}, socket: filepath.Join(t.TempDir(), "none.sock")}
}

func TestValidate(t *testing.T) {
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.hcl", helloHCL)
	root := write("root.hcl", strings.Replace(helloHCL, `timeout = "1m"`, `user = "0"`, 1))
	bad := write("bad.hcl", `session "bad" {
  image = "airlock/agent:bookworm"
  resources {
    memory = "lots"
  }
}
`)
	vars := write("vars.hcl", `variable "who" {}
session "v" {
  image   = "airlock/agent:bookworm"
  command = ["echo", var.who]
}
`)
	h := offline(t)

	h.run("", "validate", good).check(t, 0, good+": ok\n", "")

	r := h.run("", "validate", root)
	if r.code != 0 || r.stdout != root+": ok\n" || !strings.Contains(r.stderr, "Warning: Session runs as root") {
		t.Errorf("warning-only manifest: %+v", r)
	}

	r = h.run("", "validate", good, bad)
	if r.code != exitUsage || r.stdout != good+": ok\n" {
		t.Errorf("exit %d stdout %q, want 2 and only the good file", r.code, r.stdout)
	}
	for _, want := range []string{"Error: ", "on " + bad + " line 4", `memory = "lots"`} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q does not contain %q", r.stderr, want)
		}
	}

	r = h.run("", "validate", vars)
	if r.code != exitUsage || !strings.Contains(r.stderr, "who") {
		t.Errorf("unset variable: %+v", r)
	}
	h.run("", "validate", "--var", "who=me", vars).check(t, 0, vars+": ok\n", "")
	h.run("", "validate", "-var=who=me", vars).check(t, 0, vars+": ok\n", "")

	missing := filepath.Join(dir, "missing.hcl")
	h.run("", "validate", missing).check(t, exitUsage, "",
		"airlock: reading manifest: open "+missing+": no such file or directory\n")
	h.run("", "validate").check(t, exitUsage, "", "airlock: airlock validate takes at least one FILE (see 'airlock validate --help')\n")
}

func TestValidateExamples(t *testing.T) {
	paths, err := filepath.Glob("../../examples/*.hcl")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no examples: %v", err)
	}
	r := offline(t).run("", append([]string{"validate"}, paths...)...)
	if r.code != 0 {
		t.Errorf("validate examples: exit %d\n%s", r.code, r.stderr)
	}
}

func TestFmt(t *testing.T) {
	const messy = "session \"x\" {\nimage=\"a\"\n  command   = [\"true\"]\n}\n"
	const tidy = "session \"x\" {\n  image   = \"a\"\n  command = [\"true\"]\n}\n"
	h := offline(t)
	dir := t.TempDir()
	write := func(name, src string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	read := func(p string) string {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}

	m := write("messy.hcl", messy)
	ok := write("tidy.hcl", tidy)

	h.run("", "fmt", m).check(t, 0, tidy, "")
	if read(m) != messy {
		t.Error("fmt without -w changed the file")
	}
	h.run("", "fmt", "--check", ok).check(t, 0, "", "")
	h.run("", "fmt", "--check", m, ok).check(t, exitChanged, m+"\n", "")
	h.run("", "fmt", "--check", dir).check(t, exitChanged, m+"\n", "")
	h.run(messy, "fmt", "-").check(t, 0, tidy, "")

	h.run("", "fmt", "-w", m).check(t, 0, "", "")
	if got := read(m); got != tidy {
		t.Errorf("after fmt -w: %q, want %q", got, tidy)
	}
	if fi, err := os.Stat(m); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode after fmt -w = %v, %v; want 0600", fi.Mode(), err)
	}
	h.run("", "fmt", "--check", dir).check(t, 0, "", "")

	broken := write("broken.hcl", "session \"x\" {\n  image = \n")
	r := h.run("", "fmt", "--check", broken, m)
	if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "Error: ") || !strings.Contains(r.stderr, broken) {
		t.Errorf("fmt of a broken file: %+v", r)
	}
	if read(broken) != "session \"x\" {\n  image = \n" {
		t.Error("broken file was changed")
	}

	h.run("", "fmt", "-w", "--check", m).check(t, exitUsage, "", "airlock: -w and --check cannot be used together\n")
	h.run("", "fmt", "-w", "-").check(t, exitUsage, "", "airlock: -w cannot rewrite standard input (\"-\")\n")
	empty := t.TempDir()
	h.run("", "fmt", empty).check(t, exitUsage, "", "airlock: "+empty+": no *.hcl files\n")
}

// TestValidateWarnsTrackedSecrets: a workspace whose repository tracks a
// file deny_read masks draws a warning that deny_read does not cover git
// history, naming the file; one without tracked secrets draws none.
func TestValidateWarnsTrackedSecrets(t *testing.T) {
	repo := t.TempDir()
	for name, content := range map[string]string{".env": "SECRET=1", "README.md": "hi", "home/.npmrc": "//r/:_authToken=x", ".env.local": "untracked"} {
		p := filepath.Join(repo, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gitRun := func(args ...string) {
		cmd := exec.Command("git", append([]string{"-C", repo, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	gitRun("init", "-q")
	gitRun("add", ".env", "README.md", "home/.npmrc")
	gitRun("commit", "-q", "-m", "init")

	dir := t.TempDir()
	manifest := filepath.Join(dir, "m.hcl")
	src := `session "s" {
  image = "airlock/agent:bookworm"
  workspace "` + repo + `" {
    target = "/workspace"
  }
}
`
	if err := os.WriteFile(manifest, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	r := offline(t).run("", "validate", manifest)
	if r.code != 0 || r.stdout != manifest+": ok\n" {
		t.Fatalf("validate: %+v", r)
	}
	for _, want := range []string{"deny_read does not cover git history", "git tracks masked files: .env, home/.npmrc.", ".git/objects"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr %q does not contain %q", r.stderr, want)
		}
	}
	if strings.Contains(r.stderr, ".env.local") {
		t.Errorf("an untracked file is reported as tracked: %s", r.stderr)
	}

	// Untracked, but still in the history.
	gitRun("rm", "-q", "--cached", ".env", "home/.npmrc")
	gitRun("commit", "-q", "-m", "untrack")
	r = offline(t).run("", "validate", manifest)
	if r.code != 0 || !strings.Contains(r.stderr, "the repository's history holds masked files: .env, home/.npmrc.") || strings.Contains(r.stderr, "git tracks") {
		t.Errorf("secrets in the history: %+v", r)
	}

	// A repository that never held one draws no warning.
	if err := os.RemoveAll(filepath.Join(repo, ".git")); err != nil {
		t.Fatal(err)
	}
	gitRun("init", "-q")
	gitRun("add", "README.md")
	gitRun("commit", "-q", "-m", "clean")
	if r := offline(t).run("", "validate", manifest); r.code != 0 || r.stderr != "" {
		t.Errorf("no secret in git, yet: %+v", r)
	}
}
