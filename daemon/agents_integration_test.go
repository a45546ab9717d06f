package daemon_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/modelsrv"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/testutil/daemontest"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
	"github.com/airlock-sandbox/airlock/runtime"
)

// TestAgentsRunShippedExamples runs the real Claude Code and the real
// Codex, from their agent images, in sessions made from the shipped
// examples (examples/claude-code.hcl, examples/codex.hcl) with only their
// variables changed: the model API host is a world host serving the
// scripted model server over HTTPS with a certificate of the world's CA,
// the git host a world service, and the API key a file the admission
// policy binds to the API host. The model's script has the agent run two
// shell commands (curl to the allowed git host; curl to a world host
// outside the allowlist) and edit a tracked file. Then: the edit and the
// fetched file are in the session's workspace diff, the git host saw the
// request, the other host saw nothing and the refusal is audited, and,
// while the agent runs, no file or process environment the agent can read
// holds the API key (its environment holds the placeholder), while the
// model server received the key. A commit then writes the changes to the
// checkout.
func TestAgentsRunShippedExamples(t *testing.T) {
	testutil.RequiresRoot(t)
	for i, a := range []agentExample{
		{recipe: "claude-code", comm: "claude", keyVar: "ANTHROPIC_API_KEY", api: modelsrv.Anthropic},
		{recipe: "codex", comm: "codex", keyVar: "OPENAI_API_KEY", api: modelsrv.OpenAI},
	} {
		t.Run(a.recipe, func(t *testing.T) { a.run(t, byte(60+3*i)) })
	}
}

type agentExample struct {
	recipe string // images/RECIPE and examples/RECIPE.hcl
	comm   string // the agent's process name in the sandbox
	keyVar string // the variable holding the API key's placeholder
	api    string // modelsrv.Anthropic or modelsrv.OpenAI
}

func (a agentExample) run(t *testing.T, ipBase byte) {
	ctx := t.Context()
	archive, err := daemontest.AgentImageArchive(a.recipe)
	if err != nil {
		t.Fatal(err)
	}
	ictx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if _, _, err := h.Daemon.Runtime().ImportImageFile(ictx, archive); err != nil {
		t.Fatalf("import %s: %v", archive, err)
	}

	apiHost, gitHost, otherHost := "api."+a.recipe+".test", "git."+a.recipe+".test", "other."+a.recipe+".test"
	gitSaw, otherSaw := &requestLog{}, &requestLog{}

	// The workspace: a git repository with one tracked file, README.md.
	repo := t.TempDir()
	writeTree(t, repo, map[string]string{"README.md": "hello\nworld\n"})
	git := exec.Command("sh", "-c", "git init -q && git add README.md && git -c user.name=t -c user.email=t@t commit -q -m init")
	git.Dir = repo
	if out, err := git.CombinedOutput(); err != nil {
		t.Fatalf("git: %v\n%s", err, out)
	}

	script := modelsrv.Script{
		Steps: []modelsrv.Step{
			{Text: "Checking the git server.", Calls: []modelsrv.Action{
				modelsrv.RunShell("curl -sS --max-time 20 -o /workspace/fetched.txt -w 'status %{http_code}\\n' https://" + gitHost + "/agents/" + a.recipe),
			}},
			{Calls: []modelsrv.Action{
				modelsrv.RunShell("curl -sS --max-time 10 https://" + otherHost + "/collect; echo \"curl exit $?\""),
			}},
			{Calls: []modelsrv.Action{modelsrv.EditFile("/workspace/README.md", "world", "airlock")}},
		},
		Final: "All done.",
	}
	if a.api == modelsrv.Anthropic {
		// Claude Code edits a file only after reading it in the session.
		script.Steps[1].Calls = append(script.Steps[1].Calls, modelsrv.ReadFile("/workspace/README.md"))
	}
	srv, err := modelsrv.New(script)
	if err != nil {
		t.Fatal(err)
	}
	held := newHoldSecond(srv)
	t.Cleanup(held.free)
	for j, hc := range []struct {
		name string
		h    http.Handler
	}{{apiHost, held}, {gitHost, gitSaw}, {otherHost, otherSaw}} {
		ip := netip.AddrFrom4([4]byte{10, 214, 0, ipBase + byte(j)})
		if err := h.World.AddHost(hc.name, ip, world.WithHandler(hc.h), world.WithTLS()); err != nil {
			t.Fatal(err)
		}
	}

	// The operator's key, in a file admitted for the API host alone.
	var rnd [16]byte
	rand.Read(rnd[:])
	key := "sk-" + a.recipe + "-" + hex.EncodeToString(rnd[:])
	secrets := t.TempDir()
	keyFile := filepath.Join(secrets, apiHost, "key")
	if err := os.MkdirAll(filepath.Dir(keyFile), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte(key+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	adm := policies.DefaultAdmission()
	adm.SecretSources = []policies.SecretSource{{From: "file:" + keyFile, Hosts: []string{apiHost}}}
	old := h.Daemon.SwapAdmission(adm)
	t.Cleanup(func() { h.Daemon.SwapAdmission(old) })

	// The shipped example, as it is, anchored in the repository (its
	// workspace is the manifest's directory).
	src, err := os.ReadFile(filepath.Join("..", "examples", a.recipe+".hcl"))
	if err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"prompt": "do the work", "api_host": apiHost, "git_host": gitHost, "secrets_dir": secrets}
	if a.api == modelsrv.OpenAI {
		// Codex's default model takes its tools in a layout (a code-mode
		// "exec" tool) the scripted server does not speak; gpt-5.5 gets
		// exec_command and apply_patch.
		vars["model"] = "gpt-5.5"
	}
	p, err := policies.Load(filepath.Join(repo, a.recipe+".hcl"), src, vars)
	if err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	s, err := h.Daemon.Create(ctx, api.CreateRequest{Policy: *p, Start: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("session created and started in %v", time.Since(start).Round(time.Millisecond))
	t.Cleanup(func() { _ = h.Daemon.Remove(context.Background(), s.ID, true); assertGone(t, s.ID) })
	logs := func() string {
		var out, errb bytes.Buffer
		_ = h.Daemon.Logs(context.Background(), s.ID, runtime.LogsOptions{Stdout: &out, Stderr: &errb})
		return "stdout:\n" + out.String() + "\nstderr:\n" + errb.String()
	}

	// The agent has run the first command and waits for the model's next
	// answer: look for the key where the agent could read it.
	select {
	case <-held.waiting:
	case <-time.After(3 * time.Minute):
		logCalls(t, srv, start)
		t.Fatalf("the agent did not come back to the model after its first command\n%s", logs())
	}
	a.checkKeyAbsent(t, s.ID, key)
	held.free()

	wctx, wcancel := context.WithTimeout(ctx, 3*time.Minute)
	defer wcancel()
	w, err := h.Daemon.Wait(wctx, s.ID)
	if err != nil {
		t.Fatalf("wait: %v\n%s", err, logs())
	}
	transcript := logs()
	if w.ExitCode != 0 || !strings.Contains(transcript, "All done.") {
		t.Fatalf("the agent exited %d (%s), want 0 and the final message\n%s", w.ExitCode, w.Reason, transcript)
	}

	logCalls(t, srv, start)
	if got, want := srv.MainSteps(), []int{0, 1, 2, 3}; !slices.Equal(got, want) {
		t.Errorf("main calls answered steps %v, want %v", got, want)
	}
	if got := srv.APIKeys(); !slices.Equal(got, []string{key}) {
		t.Errorf("the model server received the keys %q, want the operator's key alone", got)
	}

	// The first command reached the git host through the gateway; the
	// second failed at the perimeter.
	results := srv.ToolResults()
	for _, r := range results {
		switch {
		case r.Step == 0 && !strings.Contains(r.Output, "status 200"):
			t.Errorf("curl to the git host: %q, want status 200", r.Output)
		case r.Step == 1 && r.Index == 0 && (!strings.Contains(r.Output, "curl exit ") || strings.Contains(r.Output, "curl exit 0")):
			t.Errorf("curl to a host outside the allowlist: %q, want it to fail", r.Output)
		}
	}
	if got := gitSaw.get(); !slices.Equal(got, []string{"GET /agents/" + a.recipe}) {
		t.Errorf("the git host saw %q, want the agent's one request", got)
	}
	if got := otherSaw.get(); len(got) != 0 {
		t.Errorf("the host outside the allowlist saw %q", got)
	}
	evs, err := h.Daemon.Audit(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	var refused, toGit bool
	var refusedNames []string
	for _, ev := range evs {
		if ev.Layer == "dns" && ev.Fields["rcode"] == "REFUSED" && !slices.Contains(refusedNames, ev.Subject) {
			refusedNames = append(refusedNames, ev.Subject)
		}
		if strings.Contains(fmt.Sprint(ev), key) {
			t.Errorf("the audit holds the key: %+v", ev)
		}
		refused = refused || (ev.Layer == "dns" && ev.Action == "refused" && ev.Fields["rcode"] == "REFUSED" && ev.Subject == otherHost)
		toGit = toGit || (ev.Layer == "l7" && ev.Fields["host"] == gitHost)
	}
	t.Logf("names outside the allowlist the agent looked up: %v", refusedNames)
	if !refused {
		t.Errorf("no dns refused event for %s in the audit: %+v", otherHost, evs)
	}
	if !toGit {
		t.Errorf("no l7 event for the request to %s in the audit", gitHost)
	}

	// The workspace diff has the edit and the fetched file; the checkout
	// has neither until a commit.
	cs, err := h.Daemon.Diff(ctx, s.ID)
	if err != nil {
		t.Fatal(err)
	}
	changed := map[string]string{}
	for _, ws := range cs.Workspaces {
		for _, c := range ws.Changes {
			changed[c.Path] = string(c.Kind)
		}
	}
	if changed["README.md"] != "modified" || changed["fetched.txt"] != "added" {
		t.Errorf("workspace changes %v, want README.md modified and fetched.txt added", changed)
	}
	unified, err := h.Daemon.UnifiedDiff(s.ID)
	if err != nil {
		t.Fatal(err)
	}
	var diff bytes.Buffer
	if err := unified(ctx, &diff); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(diff.String(), "-world\n+airlock\n") {
		t.Errorf("the diff does not hold the edit:\n%s", diff.String())
	}
	if b, _ := os.ReadFile(filepath.Join(repo, "README.md")); string(b) != "hello\nworld\n" {
		t.Errorf("the checkout changed before a commit: %q", b)
	}
	// The review's last step: the commit writes both to the checkout.
	res, err := h.Daemon.Commit(ctx, s.ID, api.CommitRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Committed || len(res.Rejected) != 0 {
		t.Errorf("commit: %+v, want everything applied", res)
	}
	for name, want := range map[string]string{"README.md": "hello\nairlock\n", "fetched.txt": "ok\n"} {
		if b, err := os.ReadFile(filepath.Join(repo, name)); err != nil || string(b) != want {
			t.Errorf("%s in the checkout after the commit: %q %v, want %q", name, b, err, want)
		}
	}
}

// logCalls logs the model server's calls, the tools each offered, and the
// time from start to the first call of the agent's main loop.
func logCalls(t *testing.T, srv *modelsrv.Server, start time.Time) {
	t.Helper()
	calls := srv.Calls()
	for _, c := range calls {
		if c.Kind == modelsrv.KindMain {
			t.Logf("first model request %v after the session was created", c.Time.Sub(start).Round(time.Millisecond))
			break
		}
	}
	for i, c := range calls {
		var body struct {
			Tools []struct {
				Name string `json:"name"`
			} `json:"tools"`
		}
		_ = json.Unmarshal(c.Body, &body)
		var tools []string
		for _, tl := range body.Tools {
			tools = append(tools, tl.Name)
		}
		t.Logf("call %d: %s %s %s kind=%s model=%s step=%d status=%d tools=%v", i, c.Method, c.Path, c.Proto, c.Kind, c.Model, c.Step, c.Status, tools)
	}
}

// checkKeyAbsent looks, as the agent's user, for the API key in the
// environment and command line of every process of the sandbox and in the
// files under /tmp, /home, /workspace and /run. The same search for the
// placeholder, which the agent's environment holds, must find it there:
// the search sees what the agent sees.
func (a agentExample) checkKeyAbsent(t *testing.T, id, key string) {
	t.Helper()
	sh := func(stdin, script string) string {
		out, errs, code := execIn(t, id, strings.NewReader(stdin), "sh", "-c", script)
		if code != 0 || errs != "" {
			t.Fatalf("exec %q: exit %d\nstdout:\n%s\nstderr:\n%s", script, code, out, errs)
		}
		return out
	}
	out := sh("", `agent=
for d in /proc/[0-9]*; do
  [ "$(cat "$d/comm" 2>/dev/null)" = "`+a.comm+`" ] && agent=$d
done
[ -n "$agent" ] || { echo "no `+a.comm+` process"; exit 3; }
echo "$agent"
tr '\0' '\n' < "$agent/environ" | sed -n 's/^`+a.keyVar+`=//p'`)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2 || !strings.HasPrefix(lines[1], "airlock-secret-") {
		t.Fatalf("the agent's %s: %q, want a placeholder", a.keyVar, out)
	}
	agentEnv, placeholder := lines[0]+"/environ", lines[1]
	const search = `grep -rlsF -f - /tmp /home /workspace /run /proc/[0-9]*/environ /proc/[0-9]*/cmdline; echo "grep exit $?"`
	if out := sh(placeholder+"\n", search); !slices.Contains(strings.Split(out, "\n"), agentEnv) {
		t.Fatalf("the search for the placeholder did not find it in %s: %q", agentEnv, out)
	}
	out = sh(key+"\n", search)
	if got := strings.TrimSpace(out); got != "grep exit 1" && got != "grep exit 2" {
		t.Errorf("the API key is in the sandbox: %q", out)
	}
	t.Logf("key search in the sandbox: %q (placeholder found in %s)", strings.TrimSpace(out), agentEnv)
}

// holdSecond serves the model server, but holds its second model call (the
// agent's first tool result) until release is closed, signalling waiting:
// the agent is then running, between two turns.
type holdSecond struct {
	srv              http.Handler
	mu               sync.Mutex
	n                int
	waiting, release chan struct{}
	once             sync.Once
}

// free lets the held call, and every later one, through.
func (hs *holdSecond) free() { hs.once.Do(func() { close(hs.release) }) }

func newHoldSecond(srv http.Handler) *holdSecond {
	return &holdSecond{srv: srv, waiting: make(chan struct{}), release: make(chan struct{})}
}

func (hs *holdSecond) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost && (r.URL.Path == "/v1/messages" || r.URL.Path == "/v1/responses") {
		hs.mu.Lock()
		hs.n++
		second := hs.n == 2
		hs.mu.Unlock()
		if second {
			close(hs.waiting)
			select {
			case <-hs.release:
			case <-r.Context().Done():
				return
			}
		}
	}
	hs.srv.ServeHTTP(w, r)
}

// requestLog answers 200 and records each request's method and path.
type requestLog struct {
	mu  sync.Mutex
	saw []string
}

func (l *requestLog) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	l.mu.Lock()
	l.saw = append(l.saw, r.Method+" "+r.URL.Path)
	l.mu.Unlock()
	fmt.Fprintln(w, "ok")
}

func (l *requestLog) get() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.saw)
}
