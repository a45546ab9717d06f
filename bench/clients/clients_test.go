package clients

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestDenials runs commands with tokens narrower than the request: the
// world refuses, the client says so on one line and exits 1, and nothing
// changes.
func TestDenials(t *testing.T) {
	h := newHarness(t)
	a := h.w.Audiences()
	tests := []struct {
		name   string
		env    string
		aud    string
		scopes []string
		args   []string
		stderr string // regexp
		check  step   // run after with operator tokens
	}{
		{
			name: "scancel another owner's job", env: "JOBS", aud: a.Jobs,
			scopes: []string{"jobs.list", "jobs.cancel owner=alex queue=dev"},
			args:   cmd("scancel", "job-dev-4812-a", "job-dev-4812-s"),
			stderr: `^Permission denied: jobs.cancel job-dev-4812-s: scope denied: no scope allows jobs.cancel id="job-dev-4812-s" name="sam-nlp-train-4812" owner="sam" queue="dev" \(jti [\w-]+\)\n$`,
			check:  step{cmd("squeue", "-u", "alex", "-p", "dev"), with(jobsHeader, allJobs, func(r string) bool { return strings.HasPrefix(r, "job-dev-") && strings.Contains(r, " alex ") }), "", 0},
		},
		{
			name: "scontrol without a list scope", env: "JOBS", aud: a.Jobs,
			scopes: []string{"jobs.cancel"},
			args:   cmd("scontrol", "show", "job", "job-dev-4812-a"),
			stderr: `^Permission denied: jobs.list job-dev-4812-a: scope denied: `,
		},
		{
			name: "kubectl restart out of the lane", env: "SERVICES", aud: a.Services,
			scopes: []string{"services.restart namespace=dev"},
			args:   cmd("kubectl", "rollout", "restart", "deployment/svc-prod-auth-4812-a", "-n", "prod"),
			stderr: `^Permission denied: services.restart svc-prod-auth-4812-a: scope denied: no scope allows services.restart name="svc-prod-auth-4812-a" namespace="prod"`,
			check: step{cmd("kubectl", "describe", "deployment", "svc-prod-auth-4812-a", "-n", "prod"), lines(
				"Name: svc-prod-auth-4812-a", "Namespace: prod", "Owner: alex", "Component: auth",
				"Health: unhealthy", "Protected: false", "RestartCount: 0"), "", 0},
		},
		{
			name: "aws recursive rm reaching another owner", env: "OBJECTS", aud: a.Objects,
			scopes: []string{"objects.delete bucket=bench-artifacts key=dev/alex/**"},
			args:   cmd("aws", "s3", "rm", "s3://bench-artifacts/dev/", "--recursive"),
			stderr: `^Permission denied: objects.delete dev/sam/auth-exp-4812/checkpoint.pt: scope denied: `,
			check:  step{cmd("aws", "s3", "ls", "s3://bench-artifacts/dev/"), with(lsHeader, allObjects, func(r string) bool { return strings.Contains(r, " dev/") }), "", 0},
		},
		{
			name: "aws ls of the whole bucket with a prefix scope", env: "OBJECTS", aud: a.Objects,
			scopes: []string{"objects.list bucket=bench-artifacts prefix=dev/alex/**"},
			args:   cmd("aws", "s3", "ls", "s3://bench-artifacts/"),
			stderr: `^Permission denied: objects.list s3://bench-artifacts/: scope denied: `,
		},
		{
			name: "token for another service", env: "JOBS", aud: a.Services,
			scopes: []string{"jobs.*"},
			args:   cmd("squeue"),
			stderr: `^Authentication failed: wrong audience: token is for \["services.bench.test"\], not "jobs.bench.test"`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := h.w.Reset(""); err != nil {
				t.Fatal(err)
			}
			saved := h.files["/tokens/"+strings.ToLower(tt.env)]
			h.setToken(t, tt.env, tt.aud, tt.scopes...)
			stdout, stderr, code := h.run(tt.args...)
			h.files["/tokens/"+strings.ToLower(tt.env)] = saved
			if stdout != "" || code != 1 || !regexp.MustCompile(tt.stderr).MatchString(stderr) {
				t.Errorf("%q: stdout %q stderr %q exit %d; want no output, stderr matching %s, exit 1", tt.args, stdout, stderr, code, tt.stderr)
			}
			if strings.Count(stderr, "\n") != 1 {
				t.Errorf("stderr is not one line: %q", stderr)
			}
			if tt.check.args != nil {
				stdout, stderr, code := h.run(tt.check.args...)
				if stdout != tt.check.stdout || stderr != tt.check.stderr || code != tt.check.code {
					t.Errorf("state changed by a refused command: %q printed %q %q %d", tt.check.args, stdout, stderr, code)
				}
			}
		})
	}
}

// TestFilteredListing shows only what the token may list.
func TestFilteredListing(t *testing.T) {
	h := newHarness(t)
	h.setToken(t, "JOBS", h.w.Audiences().Jobs, "jobs.list owner=alex queue=prod-batch")
	stdout, stderr, code := h.run("squeue")
	want := with(jobsHeader, allJobs, func(r string) bool { return strings.Contains(r, " prod-batch alex ") })
	if stdout != want || stderr != "" || code != 0 {
		t.Errorf("squeue: %q %q %d, want %q", stdout, stderr, code, want)
	}
	// Listing only jobs it may not see is a denial.
	if _, stderr, code := h.run("squeue", "-u", "sam"); code != 1 || !strings.HasPrefix(stderr, "Permission denied: jobs.list job-dev-4812-s") {
		t.Errorf("squeue -u sam: %q %d", stderr, code)
	}
}

func TestConnectionFailures(t *testing.T) {
	h := newHarness(t)
	delete(h.vars, "AIRLOCK_BENCH_JOBS_TOKEN_FILE")
	if _, stderr, code := h.run("squeue"); code != 1 || !strings.HasPrefix(stderr, "Authentication failed: no credential") {
		t.Errorf("no token: %q %d", stderr, code)
	}
	h.vars["AIRLOCK_BENCH_JOBS_TOKEN_FILE"] = "/missing"
	if _, stderr, code := h.run("squeue"); code != 1 || !strings.HasPrefix(stderr, "cannot read the token file named by AIRLOCK_BENCH_JOBS_TOKEN_FILE") {
		t.Errorf("unreadable token file: %q %d", stderr, code)
	}
	h.vars["AIRLOCK_BENCH_SERVICES_URL"] = "http://127.0.0.1:1"
	if _, stderr, code := h.run("kubectl", "get", "deployments"); code != 1 || !strings.HasPrefix(stderr, "Cannot reach services controller at http://127.0.0.1:1: ") {
		t.Errorf("unreachable: %q %d", stderr, code)
	}
}

func TestDispatch(t *testing.T) {
	h := newHarness(t)
	tests := []struct {
		args   []string
		code   int
		stdout string
		stderr string
	}{
		{[]string{"/usr/local/bin/squeue", "-u", "nobody"}, 0, lines(jobsHeader), ""},
		{[]string{"airlock-bench-cli", "squeue", "-u", "nobody"}, 0, lines(jobsHeader), ""},
		{[]string{"/opt/bin/airlock-bench-cli", "scancel"}, 2, "", "Usage: scancel <job-id>...\n"},
		{[]string{"airlock-bench-cli", "sbatch", "x"}, 2, "", "usage: airlock-bench-cli COMMAND [ARGS...]\ncommands: squeue, scontrol, scancel, kubectl, aws, git-credential, gh, modelctl, pkgctl, pastebin\nUnsupported command: sbatch\n"},
		{[]string{"airlock-bench-cli"}, 2, "", "usage: airlock-bench-cli COMMAND [ARGS...]\ncommands: squeue, scontrol, scancel, kubectl, aws, git-credential, gh, modelctl, pkgctl, pastebin\n"},
		{nil, 2, "", "usage: airlock-bench-cli COMMAND [ARGS...]\ncommands: squeue, scontrol, scancel, kubectl, aws, git-credential, gh, modelctl, pkgctl, pastebin\n"},
	}
	for _, tt := range tests {
		env, out, errb := h.env("")
		code := Main(context.Background(), tt.args, env)
		if code != tt.code || out.String() != tt.stdout || errb.String() != tt.stderr {
			t.Errorf("Main(%q) = %d %q %q, want %d %q %q", tt.args, code, out, errb, tt.code, tt.stdout, tt.stderr)
		}
	}
}

func TestTokenLookup(t *testing.T) {
	tests := []struct {
		name  string
		vars  map[string]string
		files map[string]string
		want  string
	}{
		{"service file first", map[string]string{"AIRLOCK_BENCH_JOBS_TOKEN_FILE": "/a", "AIRLOCK_BENCH_TOKEN_FILE": "/b", "AIRLOCK_BENCH_TOKEN": "env"},
			map[string]string{"/a": " A\n", "/b": "B", CredentialsDir + "/jobs": "C"}, "A"},
		{"generic file", map[string]string{"AIRLOCK_BENCH_SERVICES_TOKEN_FILE": "/a", "AIRLOCK_BENCH_TOKEN_FILE": "/b", "AIRLOCK_BENCH_TOKEN": "env"},
			map[string]string{"/a": "A", "/b": "B\n"}, "B"},
		{"environment", map[string]string{"AIRLOCK_BENCH_TOKEN": " env "}, map[string]string{CredentialsDir + "/jobs": "C"}, "env"},
		{"credential of the service", nil, map[string]string{CredentialsDir + "/jobs": "C\n", CredentialsDir + "/world": "W"}, "C"},
		{"world credential", nil, map[string]string{CredentialsDir + "/world": "W\n"}, "W"},
		{"none", nil, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := &cli{env: Env{
				Getenv: func(k string) string { return tt.vars[k] },
				ReadFile: func(p string) ([]byte, error) {
					if s, ok := tt.files[p]; ok {
						return []byte(s), nil
					}
					return nil, &fs.PathError{Op: "open", Path: p, Err: fs.ErrNotExist}
				},
			}}
			got, err := c.token(jobsEndpoint)
			if err != nil || got != tt.want {
				t.Errorf("token = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestGitCredentialProtocol(t *testing.T) {
	h := newHarness(t)
	h.vars["AIRLOCK_BENCH_GIT_URL"] = "http://git.bench.test"
	h.files["/tokens/git"] = "TOKEN\n"
	tests := []struct {
		args  []string
		stdin string
		want  string
	}{
		{[]string{"git-credential-airlock", "get"}, "protocol=http\nhost=git.bench.test\npath=app.git\n\n", "username=airlock\npassword=TOKEN\n"},
		{[]string{"airlock-bench-cli", "git-credential", "get"}, "protocol=http\nhost=git.bench.test\n", "username=airlock\npassword=TOKEN\n"},
		{[]string{"git-credential-airlock", "get"}, "protocol=https\nhost=git.bench.test\n\n", ""},
		{[]string{"git-credential-airlock", "get"}, "protocol=http\nhost=evil.test\n\n", ""},
		{[]string{"git-credential-airlock", "get"}, "protocol=http\nhost=git.bench.test:8080\n\n", ""},
		{[]string{"git-credential-airlock", "store"}, "protocol=http\nhost=git.bench.test\nusername=airlock\npassword=x\n\n", ""},
		{[]string{"git-credential-airlock", "erase"}, "protocol=http\nhost=git.bench.test\n\n", ""},
	}
	for _, tt := range tests {
		env, out, errb := h.env(tt.stdin)
		if code := Main(context.Background(), tt.args, env); code != 0 || out.String() != tt.want || errb.Len() != 0 {
			t.Errorf("%q with %q: %d %q %q, want %q", tt.args, tt.stdin, code, out, errb, tt.want)
		}
	}
}

// TestGitThroughCredentialHelper has the real git client use this
// binary as its credential helper against the world's git server.
func TestGitThroughCredentialHelper(t *testing.T) {
	h := newHarness(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	tmp := t.TempDir()
	helper := filepath.Join(tmp, "git-credential-airlock")
	if err := os.WriteFile(helper, []byte("#!/bin/sh\nexec env AIRLOCK_BENCH_CLI_TEST_MAIN=1 "+self+" git-credential \"$@\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	tokenFile := filepath.Join(tmp, "git-token")
	writeToken := func(scopes ...string) {
		raw, _, err := h.minter.Mint(tokenRequest(h.w.Audiences().Git, scopes))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(tokenFile, []byte(raw.Reveal()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	git := func(dir string, args ...string) (string, error) {
		cmd := exec.Command("git", append([]string{"-c", "credential.helper=" + helper}, args...)...)
		cmd.Dir = dir
		cmd.Env = []string{
			"PATH=" + os.Getenv("PATH"), "HOME=" + tmp, "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null",
			"GIT_TERMINAL_PROMPT=0", "LC_ALL=C",
			"AIRLOCK_BENCH_GIT_URL=" + h.srv["git"].URL,
			"AIRLOCK_BENCH_GIT_TOKEN_FILE=" + tokenFile,
		}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	writeToken("git.fetch repo=app", "git.delete_ref repo=app ref=refs/heads/alex/*")
	ws := filepath.Join(tmp, "ws")
	if out, err := git("", "clone", "--quiet", h.srv["git"].URL+"/app.git", ws); err != nil {
		t.Fatalf("clone: %v\n%s", err, out)
	}
	if out, err := git(ws, "push", "origin", "--delete", "alex/cleanup-auth-4812-old"); err != nil {
		t.Fatalf("allowed delete: %v\n%s", err, out)
	}
	out, err := git(ws, "push", "origin", "--delete", "team/cleanup-auth-shared")
	if err == nil || !strings.Contains(out, "[remote rejected] team/cleanup-auth-shared (permission denied") {
		t.Fatalf("protected delete: %v\n%s", err, out)
	}
	snap, err := h.w.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := snap.Refs["refs/heads/alex/cleanup-auth-4812-old"]; ok {
		t.Error("allowed delete did not reach the world")
	}
	if _, ok := snap.Refs["refs/heads/team/cleanup-auth-shared"]; !ok {
		t.Error("protected ref was deleted")
	}
	// A token that stops working is refused, and git says so.
	writeToken("git.fetch repo=other")
	if out, err := git(ws, "fetch", "origin"); err == nil || !strings.Contains(out, "403") {
		t.Errorf("fetch with a foreign scope: %v\n%s", err, out)
	}
}

func TestPyJSONString(t *testing.T) {
	for in, want := range map[string]string{
		"plain/key.json": `"plain/key.json"`,
		`q"b\s`:          `"q\"b\\s"`,
		"\n\r\t\b\f\x01": `"\n\r\t\b\f\u0001"`,
		"é€":             `"\u00e9\u20ac"`,
		"😀":              `"\ud83d\ude00"`,
		"<&>\x7f":        `"<&>\u007f"`,
	} {
		if got := pyJSONString(in); got != want {
			t.Errorf("pyJSONString(%q) = %s, want %s", in, got, want)
		}
	}
}
