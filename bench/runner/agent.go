package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/internal/modelsrv"
	"github.com/airlock-sandbox/airlock/policies"
)

// Agents `airlock bench --agent` runs.
const (
	AgentClaudeCode = "claude-code"
	AgentCodex      = "codex"
)

// Agent is a coding agent that carries out the runs' actions: its real
// binary, from its image (images/claude-code, images/codex), runs in every
// session, and each action is a tool call its model makes. The model is a
// scripted server (internal/modelsrv) on the world's model host of the
// worker (Models), playing the catalog: one shell tool call per action, in
// the job's order. Between two tool calls the agent waits for its model,
// and the runner measures what the last call did and resets the world, as
// it does between two commands of its own shell; so an action's effect is
// the same whoever runs it, and what differs is that the agent's own
// machinery (its tool, its shell, its permission mode, its traffic to the
// model API through the perimeter) is in the loop.
//
// In the modes without the L7 gateway the agent holds its API key in its
// environment and reaches the model host over HTTP; with the gateway the
// key stays outside the sandbox, injected by the gateway on TLS to the
// model host, and the agent holds a placeholder.
type Agent struct {
	// Name is AgentClaudeCode or AgentCodex.
	Name string
	// Model is the model the agent asks its API for.
	Model string
	// Tasks, when set, make the agent work on the prompts' requests
	// itself instead of replaying the catalog.
	Tasks *Tasks
	// Mode is Claude Code's permission mode (SetMode; default
	// ModeBypass).
	Mode string
}

// Tasks make an agent work on each prompt's request itself: the request is
// its task, and its whole run, whatever it does, is the one action judged
// under the prompt (catalog.KindAgentTask), by its effects on the world and
// the workspace as any action is. Its gate-only run is the reference: the
// run is unsafe when that changed something outside the oracle's
// authorized set; each other mode's run of the same task is judged by its
// own effects. The agent is not paced: it decides when it is done.
type Tasks struct {
	// Scripts are the scripted model's answers by prompt id: the prompts
	// without one do not run. With a real model API (ModelUpstream) every
	// prompt runs and Scripts are not used.
	Scripts map[string]*modelsrv.Script
	// BudgetUSD bounds what one run may spend on a real model API
	// (Claude Code's --max-budget-usd; Codex has no such bound, only the
	// run's timeout). 0: no bound but the timeout.
	BudgetUSD float64
}

// LoadTaskScripts reads a task scripts file: JSON lines of {"prompt_id",
// "script"}, a script as modelsrv.DecodeScript reads it; blank lines and
// lines starting with # are skipped. Errors name the line.
func LoadTaskScripts(path string) (map[string]*modelsrv.Script, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]*modelsrv.Script{}
	for i, line := range strings.Split(string(b), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		at := fmt.Sprintf("%s:%d", path, i+1)
		var rec struct {
			PromptID string          `json:"prompt_id"`
			Script   json.RawMessage `json:"script"`
		}
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&rec); err != nil {
			return nil, fmt.Errorf("%s: %w: %w", at, err, errdefs.ErrInvalidArgument)
		}
		if rec.PromptID == "" || len(rec.Script) == 0 {
			return nil, fmt.Errorf("%s: prompt_id and script are required: %w", at, errdefs.ErrInvalidArgument)
		}
		if _, dup := out[rec.PromptID]; dup {
			return nil, fmt.Errorf("%s: a second script for %s: %w", at, rec.PromptID, errdefs.ErrInvalidArgument)
		}
		sc, err := modelsrv.DecodeScript(rec.Script)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", at, err)
		}
		out[rec.PromptID] = sc
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no task script: %w", path, errdefs.ErrInvalidArgument)
	}
	return out, nil
}

// taskAction is the action of an agent's run on prompt p's request.
func taskAction(family string, p data.Prompt) catalog.Action {
	return catalog.Action{ID: "task-" + p.ID, Family: family, Kind: catalog.KindAgentTask, Command: p.Text,
		Target: "whatever the agent does", Source: "agent", PromptID: p.ID}
}

// ParseAgent reads an --agent value.
func ParseAgent(s string) (*Agent, error) {
	switch s {
	case AgentClaudeCode:
		return &Agent{Name: s, Model: "claude-sonnet-4-6"}, nil
	case AgentCodex:
		// Codex's default model takes its tools in a layout the scripted
		// server does not speak; gpt-5.5 gets exec_command.
		return &Agent{Name: s, Model: "gpt-5.5"}, nil
	}
	return nil, fmt.Errorf("agent %q: want %s or %s: %w", s, AgentClaudeCode, AgentCodex, errdefs.ErrInvalidArgument)
}

// Claude Code's permission modes the bench runs it in.
const (
	// ModeBypass: every tool call the model makes runs, as the shipped
	// examples run it; airlock's layers are the boundary.
	ModeBypass = "bypassPermissions"
	// ModeAuto: Claude Code's auto mode, its own gate: a classifier,
	// asked through the model API, decides each action its rules do not
	// allow (the scripted model answers with the script's gate verdicts,
	// a real one for itself).
	ModeAuto = "auto"
)

// SetMode sets Claude Code's permission mode (ModeBypass or ModeAuto).
// Codex runs with approval_policy=never alone: its approvals need its own
// sandbox, which cannot run in airlock's (see internal/modelsrv).
func (a *Agent) SetMode(mode string) error {
	switch {
	case a.Name == AgentClaudeCode && (mode == ModeBypass || mode == ModeAuto):
		a.Mode = mode
		return nil
	case a.Name == AgentCodex:
		return fmt.Errorf("agent codex runs with approval_policy=never only (its approvals need its own sandbox, off inside airlock): %w", errdefs.ErrInvalidArgument)
	}
	return fmt.Errorf("permission mode %q: want %s or %s: %w", mode, ModeBypass, ModeAuto, errdefs.ErrInvalidArgument)
}

// PermissionMode is the agent's own permission mode in every run.
func (a *Agent) PermissionMode() string {
	if a.Name == AgentCodex {
		return "approval_policy=never, --sandbox danger-full-access"
	}
	if a.Mode != "" {
		return a.Mode
	}
	return ModeBypass
}

// GateName names the cases' gate: the agent's permission mode.
func (a *Agent) GateName() string { return a.Name + ":" + strings.Fields(a.PermissionMode())[0] }

// keyVar is the environment variable the agent reads its API key from.
func (a *Agent) keyVar() string {
	if a.Name == AgentCodex {
		return "OPENAI_API_KEY"
	}
	return "ANTHROPIC_API_KEY"
}

// launch is how the agent's command line is started: in a home
// directory of its own on the session's /tmp, so that nothing of an
// earlier agent process of the session (its state, its history) reaches it.
var launch = []string{"bash", "-c", `HOME=$(mktemp -d /tmp/agent-home.XXXXXX) && exec "$@"`, "agent"}

// command is the agent's command line for prompt, its model API at base.
func (a *Agent) command(prompt, base string) []string {
	if a.Name == AgentCodex {
		return []string{"codex", "exec", "--json", "--skip-git-repo-check", "--model", a.Model,
			"--sandbox", "danger-full-access", "-c", "approval_policy=never",
			"-c", "model_provider=airlock",
			"-c", "model_providers.airlock.name=OpenAI",
			"-c", "model_providers.airlock.base_url=" + base + "/v1",
			"-c", "model_providers.airlock.wire_api=responses",
			"-c", "model_providers.airlock.env_key=OPENAI_API_KEY",
			"-c", "analytics.enabled=false",
			prompt}
	}
	cmd := []string{"claude", "-p", prompt, "--permission-mode", a.PermissionMode(),
		"--output-format", "stream-json", "--verbose", "--model", a.Model}
	if a.Tasks != nil && a.Tasks.BudgetUSD > 0 {
		cmd = append(cmd, "--max-budget-usd", strconv.FormatFloat(a.Tasks.BudgetUSD, 'f', -1, 64))
	}
	return cmd
}

// env is the agent's environment: key is its API key, or "" when the
// gateway injects it (the session's environment then holds the
// placeholder).
func (a *Agent) env(base, key, ca string) map[string]string {
	e := map[string]string{"HOME": "/tmp", "DISABLE_AUTOUPDATER": "1"}
	if ca != "" {
		// A bundle of the system roots and a stand-in API's.
		e["SSL_CERT_FILE"], e["NODE_EXTRA_CA_CERTS"] = ca, ca
	}
	if a.Name == AgentClaudeCode {
		e["ANTHROPIC_BASE_URL"] = base
	}
	if key != "" {
		e[a.keyVar()] = key
	}
	return e
}

// agentGate is the cases' gate in an agent run: the agent's permission
// mode, which lets every action run.
type agentGate struct{ a *Agent }

func (g agentGate) Name() string { return g.a.GateName() }

func (g agentGate) Decide(context.Context, GateRequest) (string, error) { return eval.Allow, nil }

// withModel adds worker i's model host to a session policy of the agent:
// reached over HTTPS with the key injected where the session has the L7
// gateway, over HTTP otherwise. It returns the agent's base URL and the
// key the agent must hold ("" when injected).
func (a *Agent) withModel(p *policies.Policy, m *Models, i int) (base, key, ca string) {
	host := m.Host(i)
	if p.Egress == nil {
		p.Egress = &policies.Egress{}
	}
	if m.Upstream() != nil {
		// The real API's name, served by the bench's proxy, which puts
		// the key in: the agent holds a placeholder in every mode. It
		// verifies the proxy's certificate of the world's CA itself where
		// the session has no gateway, and the gateway does otherwise.
		p.Egress.Allow = append(p.Egress.Allow, host+":443")
		if !p.Egress.L7Enabled() {
			p.Mounts = append(p.Mounts, policies.Mount{HostPath: m.caDir, Target: caMount, ReadOnly: true})
			ca = caMount + "/bundle.pem"
		} else {
			// The gateway terminates the agent's TLS to the API (the
			// session trusts the session's CA, not the world's), allows
			// and audits every request, and verifies the proxy.
			p.Egress.HTTP = append(p.Egress.HTTP, policies.HTTPHost{Host: host, Default: policies.HTTPAllow})
		}
		return "https://" + host, Placeholder, ca
	}
	if !p.Egress.L7Enabled() {
		p.Egress.Allow = append(p.Egress.Allow, host+":80")
		return "http://" + host, m.Key(i), ""
	}
	p.Egress.Allow = append(p.Egress.Allow, host+":443")
	inj := policies.SecretInject{Host: host, Header: "x-api-key"}
	if a.Name == AgentCodex {
		inj = policies.SecretInject{Host: host, Bearer: true}
	}
	p.Secrets = append(p.Secrets, policies.Secret{Name: a.keyVar(), From: m.KeySource(i), Inject: []policies.SecretInject{inj}})
	return "https://" + host, "", ""
}

// arrival is the agent back at its model: the step the script would
// answer, and the results its conversation carries.
type arrival struct {
	step    int
	results map[string]modelsrv.ToolResult
	// reply takes the runner's answer (one, never blocking): whether to
	// go on with the step.
	reply chan bool
}

// agentProc is an agent running in a session, driven one tool call at a
// time: its model's answers wait for the runner (modelsrv.Pacer).
type agentProc struct {
	actions []catalog.Action
	srv     *modelsrv.Server
	arrive  chan arrival
	quit    chan struct{} // closed when the runner lets go of the agent
	done    chan struct{} // closed when the agent's exec has returned
	cancel  context.CancelFunc
	// pending is the arrival not answered yet; next the step the next
	// action's tool call is.
	pending *arrival
	next    int
	code    int
	err     error
	stdout  lockedBuffer
	stderr  lockedBuffer
	command []string
	// key is the API key the agent holds ("" when the gateway injects
	// it): no output the runner keeps carries it.
	key     string
	started time.Time
	first   time.Duration // start to the first model call
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startAgent starts the agent in session l, its script actions, and waits
// until it asks its model for the first step.
func (w *worker) startAgent(ctx context.Context, l *live, j *job, actions []catalog.Action) (*agentProc, error) {
	steps := make([]modelsrv.Step, len(actions))
	for i, a := range actions {
		steps[i] = modelsrv.Step{Calls: []modelsrv.Action{modelsrv.RunShell(a.Command)}}
	}
	p := &agentProc{actions: actions, arrive: make(chan arrival),
		quit: make(chan struct{}), done: make(chan struct{})}
	srv, err := modelsrv.WithPacer(modelsrv.Script{Steps: steps, Final: "Done."}, p.pace)
	if err != nil {
		return nil, err
	}
	p.srv = srv
	w.models.Set(w.id, srv)
	w.execAgent(ctx, p, l, j, j.prompt)
	a, err := p.await(ctx, 3*time.Minute)
	if err != nil {
		p.stop(ctx)
		return nil, fmt.Errorf("%s did not ask its model for a first step: %w%s", w.agent.Name, err, p.tail())
	}
	p.first = time.Since(p.started)
	if a.step != 0 {
		p.stop(ctx)
		return nil, fmt.Errorf("%s's first call to its model answered step %d, want 0", w.agent.Name, a.step)
	}
	p.pending = &a
	return p, nil
}

// execAgent starts the agent on prompt in session l, in the background.
func (w *worker) execAgent(ctx context.Context, p *agentProc, l *live, j *job, prompt string) {
	p.command = w.agent.command(prompt, l.modelBase)
	if l.modelKey != Placeholder {
		p.key = l.modelKey
	}
	actx, cancel := context.WithCancel(ctx)
	p.cancel = cancel
	p.started = time.Now()
	c := api.NewClient(w.client.Socket())
	go func() {
		defer close(p.done)
		defer c.Close()
		p.code, p.err = c.Exec(actx, l.id, api.ExecRequest{Command: append(slices.Clone(launch), p.command...), Env: w.agent.env(l.modelBase, l.modelKey, l.modelCA), Workdir: j.policy.Workdir},
			nil, &p.stdout, &p.stderr)
	}()
}

// runTask runs the agent on the request of a task action until it exits,
// for at most timeout, its model playing the prompt's script.
func (w *worker) runTask(ctx context.Context, j *job, a catalog.Action, l *live) (Output, error) {
	p := &agentProc{quit: make(chan struct{}), done: make(chan struct{})}
	if w.models.Upstream() == nil {
		script := w.agent.Tasks.Scripts[a.PromptID]
		if script == nil {
			return Output{}, fmt.Errorf("no task script for %s", a.PromptID)
		}
		srv, err := modelsrv.New(*script)
		if err != nil {
			return Output{}, err
		}
		p.srv = srv
		w.models.Set(w.id, srv)
		defer w.models.Set(w.id, nil)
	}
	w.execAgent(ctx, p, l, j, a.Command)
	t := time.NewTimer(w.timeout)
	defer t.Stop()
	var runErr error
	select {
	case <-p.done:
	case <-t.C:
		runErr = errTimeout
	case <-ctx.Done():
		runErr = ctx.Err()
	}
	close(p.quit)
	p.cancel()
	<-p.done
	if p.srv != nil {
		for _, c := range p.srv.Calls() {
			if c.Kind == modelsrv.KindMain {
				p.first = c.Time.Sub(p.started)
				break
			}
		}
		p.next = len(p.srv.ToolResults())
	}
	if err := w.agentRuns.add(p, l.id+"-"+a.PromptID, l.id, l.config, a.PromptID, l.keyOutside(w.models), w.models.Key(w.id)); err != nil {
		return Output{}, err
	}
	if runErr != nil {
		return Output{}, runErr
	}
	code := p.code
	if p.err != nil {
		code = -1
	}
	return Output{ExitCode: code, Stdout: truncate(redactKey(p.stdout.String(), p.key)), Stderr: truncate(redactKey(p.stderr.String(), p.key))}, nil
}

// pace is the model server's Pacer: it hands the arrival to the runner and
// waits for its answer.
func (p *agentProc) pace(ctx context.Context, step int, results map[string]modelsrv.ToolResult) bool {
	a := arrival{step: step, results: results, reply: make(chan bool, 1)}
	select {
	case p.arrive <- a:
	case <-ctx.Done():
		return false
	case <-p.quit:
		return false
	}
	select {
	case ok := <-a.reply:
		return ok
	case <-ctx.Done():
		return false
	case <-p.quit:
		return false
	}
}

// errAgentExited is returned when the agent ended while the runner waited
// for it to come back to its model.
var errAgentExited = errors.New("the agent exited")

// await waits for the agent's next call to its model.
func (p *agentProc) await(ctx context.Context, timeout time.Duration) (arrival, error) {
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case a := <-p.arrive:
		return a, nil
	case <-p.done:
		return arrival{}, fmt.Errorf("%w with status %d (%v)", errAgentExited, p.code, p.err)
	case <-t.C:
		return arrival{}, errTimeout
	case <-ctx.Done():
		return arrival{}, ctx.Err()
	}
}

// run makes the agent's model answer with the next action's tool call and
// waits until the agent brings its result back.
func (p *agentProc) run(ctx context.Context, a catalog.Action, timeout time.Duration) (Output, error) {
	if p.pending == nil || p.next >= len(p.actions) || p.actions[p.next].ID != a.ID {
		return Output{}, fmt.Errorf("the agent's script is not at action %s", a.ID)
	}
	step := p.next
	p.pending.reply <- true // buffered: the call may be gone already
	p.pending = nil
	deadline := time.Now().Add(timeout)
	for {
		next, err := p.await(ctx, time.Until(deadline))
		if err != nil {
			return Output{}, err
		}
		switch {
		case next.step == step:
			// The agent asked again for the step it was given (a retry
			// of a call it dropped).
			next.reply <- true
			continue
		case next.step < step:
			next.reply <- false
			return Output{}, fmt.Errorf("the agent went back to step %d after step %d (%s)", next.step, step, a.ID)
		}
		p.pending, p.next = &next, step+1
		for _, r := range next.results {
			if r.Step == step && r.Index == 0 {
				return Output{ExitCode: exitCode(r), Stdout: truncate(redactKey(toolOutput(r.Output), p.key))}, nil
			}
		}
		return Output{}, fmt.Errorf("the agent came back without the result of %s", a.ID)
	}
}

// exitCodeRE finds the exit status in a failed shell tool call's result
// (Claude Code: "Exit code 3"; Codex: "Process exited with code 3").
var exitCodeRE = regexp.MustCompile(`(?i)exit(?:ed with)? code:? (\d+)`)

// reminderRE matches the notes an agent adds to a tool's output for its
// model (Claude Code: <system-reminder>...</system-reminder>).
var reminderRE = regexp.MustCompile(`(?s)\s*<system-reminder>.*?</system-reminder>\s*`)

// toolOutput is what the command printed, from the tool result the agent
// made of it: without the agent's own notes, its exit status line or its
// word for no output.
func toolOutput(s string) string {
	s = reminderRE.ReplaceAllString(s, "\n")
	s = strings.TrimSpace(s)
	if m := exitCodeRE.FindStringIndex(s); m != nil && m[0] == 0 {
		s = strings.TrimSpace(s[m[1]:])
	}
	// Codex heads the output with lines of its own, the status among
	// them, down to "Output:".
	if head, out, ok := strings.Cut(s, "\nOutput:\n"); ok && strings.HasPrefix(head, "Chunk ID:") && exitCodeRE.MatchString(head) {
		s = out
	}
	switch s {
	case "(Bash completed with no output)", "(no output)":
		return ""
	}
	return s
}

func exitCode(r modelsrv.ToolResult) int {
	if m := exitCodeRE.FindStringSubmatch(r.Output); m != nil {
		if n, err := strconv.Atoi(m[1]); err == nil {
			return n
		}
	}
	if r.IsError {
		return 1
	}
	return 0
}

// stop ends the agent: its model's pending answer is the final message, and
// an agent that does not exit within ten seconds is killed.
func (p *agentProc) stop(ctx context.Context) {
	if p.pending != nil {
		p.pending.reply <- false
		p.pending = nil
	}
	close(p.quit)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
	case <-ctx.Done():
	}
	p.cancel()
	<-p.done
}

func (p *agentProc) tail() string {
	s := strings.TrimSpace(p.stderr.String())
	if s == "" {
		return ""
	}
	if len(s) > 2000 {
		s = s[len(s)-2000:]
	}
	return ": " + s
}

// AgentRun is one agent process of a run, as transcripts/INDEX.json lists
// it.
type AgentRun struct {
	Session string `json:"session"`
	// Task is the prompt whose request the agent worked on (with
	// Agent.Tasks); otherwise the agent replayed Actions.
	Task     string   `json:"task,omitempty"`
	Config   string   `json:"config"`
	Command  []string `json:"command"`
	Actions  []string `json:"actions,omitempty"` // the script's, in order
	Done     int      `json:"done"`              // how many tool calls it carried out
	ExitCode int      `json:"exit_code"`
	Error    string   `json:"error,omitempty"`
	// FirstCallMS is the time from the agent's start to its first call
	// to its model.
	FirstCallMS float64 `json:"first_call_ms"`
	// KeyInjected: the agent held a placeholder, and the gateway (or,
	// with a real model API, the bench's proxy) put the key into its
	// calls; otherwise the key was in its environment.
	KeyInjected bool `json:"key_injected"`
	// KeyCalls and MainCalls count the model calls that carried the real
	// key, and the main-loop calls.
	KeyCalls  int `json:"key_calls"`
	MainCalls int `json:"main_calls"`
	// Gate is what the agent's own gate decided, as its transcript says.
	Gate GateLog `json:"gate"`
	// Transcript is the agent's own output (stream-json, JSON lines),
	// Calls the model server's record of its calls, both under
	// transcripts/.
	Transcript string `json:"transcript"`
	Calls      string `json:"calls"`
}

// agentLog collects a run's agent processes, their transcripts written
// into dir.
type agentLog struct {
	dir  string
	mu   sync.Mutex
	runs []AgentRun // +checklocks:mu
}

func (g *agentLog) add(p *agentProc, name, session, config, task string, injected bool, key string) error {
	r, err := p.record(g.dir, name, session, config, key)
	r.Task = task
	r.KeyInjected = injected
	g.mu.Lock()
	g.runs = append(g.runs, r)
	g.mu.Unlock()
	return err
}

// take returns the runs collected, by session.
func (g *agentLog) take() []AgentRun {
	g.mu.Lock()
	defer g.mu.Unlock()
	out := slices.Clone(g.runs)
	slices.SortFunc(out, func(a, b AgentRun) int { return strings.Compare(a.Session, b.Session) })
	return out
}

// record writes the agent's transcript and its model calls into dir and
// describes the run. key is the model host's real API key: each call
// recorded says whether it carried it.
func (p *agentProc) record(dir, name, session, config, key string) (AgentRun, error) {
	r := AgentRun{Session: session, Config: config, Command: p.command, Done: p.next, ExitCode: p.code,
		FirstCallMS: float64(p.first.Microseconds()) / 1000}
	for _, a := range p.actions {
		r.Actions = append(r.Actions, a.ID)
	}
	if p.err != nil {
		r.Error = p.err.Error()
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return r, err
	}
	r.Transcript, r.Calls = name+".jsonl", name+".calls.jsonl"
	out := p.stdout.String()
	if s := p.stderr.String(); s != "" {
		out += s
	}
	// An agent holding its key (a mode without the gateway) may print it
	// (a model asking for `env`): the transcript never keeps it.
	out = redactKey(out, key)
	r.Gate = readGateLog(out)
	if err := os.WriteFile(filepath.Join(dir, r.Transcript), []byte(out), 0o600); err != nil {
		return r, err
	}
	if p.srv == nil {
		// A real model API: the agent's own transcript is the record.
		r.Calls = ""
		return r, nil
	}
	var calls bytes.Buffer
	for _, c := range p.srv.Calls() {
		// Keys are not kept: the call says whether it carried the real
		// one.
		real := key != "" && c.APIKey() == key
		if real {
			r.KeyCalls++
		}
		if c.Kind == modelsrv.KindMain {
			r.MainCalls++
		}
		fmt.Fprintf(&calls, "{\"time\":%q,\"method\":%q,\"path\":%q,\"kind\":%q,\"step\":%d,\"status\":%d,\"key\":%t,\"bytes\":%d}\n",
			c.Time.UTC().Format(time.RFC3339Nano), c.Method, c.Path, c.Kind, c.Step, c.Status, real, len(c.Body))
	}
	return r, os.WriteFile(filepath.Join(dir, r.Calls), calls.Bytes(), 0o644)
}

// TranscriptsDir is where an agent run keeps its agents' transcripts, and
// INDEX.json lists them (AgentRun).
const TranscriptsDir = "transcripts"

// checkAgentRun refuses an agent run the stack or the options cannot
// carry.
func checkAgentRun(st *Stack, opts Options) error {
	switch {
	case st.Models == nil:
		return fmt.Errorf("agent %s: the stack serves no model hosts (StackConfig.ModelHosts): %w", opts.Agent.Name, errdefs.ErrInvalidArgument)
	case st.Models.Len() < opts.Workers || (opts.Workers <= 0 && st.Models.Len() < st.Worlds.Len()):
		return fmt.Errorf("agent %s: %d model hosts for more workers: %w", opts.Agent.Name, st.Models.Len(), errdefs.ErrInvalidArgument)
	case len(opts.Gates) > 0:
		return fmt.Errorf("agent %s: its own permission mode is the gate; --gate goes with the catalog runs only: %w", opts.Agent.Name, errdefs.ErrInvalidArgument)
	case opts.Naive:
		return fmt.Errorf("agent %s: --naive runs the catalog's commands without an agent: %w", opts.Agent.Name, errdefs.ErrInvalidArgument)
	case opts.Agent.Tasks != nil && (len(opts.Extra) > 0 || len(opts.Actions) > 0):
		return fmt.Errorf("agent %s: working on the requests, the agent chooses its own actions: --actions and a choice of catalog actions go with the replay: %w", opts.Agent.Name, errdefs.ErrInvalidArgument)
	case opts.Agent.Tasks != nil && len(opts.Agent.Tasks.Scripts) == 0 && st.Models.Upstream() == nil:
		return fmt.Errorf("agent %s: tasks without scripts need a real model API (StackConfig.ModelUpstream): %w", opts.Agent.Name, errdefs.ErrInvalidArgument)
	case opts.Agent.Tasks == nil && opts.Agent.PermissionMode() == ModeAuto:
		return fmt.Errorf("agent %s: the replay runs the catalog's actions under the bench's gate; auto mode, the agent's own gate, goes with the tasks: %w", opts.Agent.Name, errdefs.ErrInvalidArgument)
	case st.Models.Upstream() != nil && opts.Agent.Tasks == nil:
		return fmt.Errorf("agent %s: a real model API chooses its own actions: it runs the tasks (--agent-tasks), not the catalog's replay: %w", opts.Agent.Name, errdefs.ErrInvalidArgument)
	}
	return nil
}

// agentNotes are the report's lines on an agent run: the agent, its
// version and permission mode, the model, and what its processes did.
func agentNotes(a *Agent, st *Stack, res *Result) []string {
	version := "(version unknown)"
	if imgs, err := st.Client.ListImages(context.Background()); err == nil {
		for _, im := range imgs {
			if v := im.Labels[api.LabelAgentVersion]; v != "" && strings.Contains(st.Image, strings.TrimPrefix(im.Name, "docker.io/")) {
				version = v
			}
		}
	}
	var firsts []float64
	injected, keyCalls, done, failed := 0, 0, 0, 0
	gateCalls, gateDenied := 0, 0
	for _, r := range res.Agents {
		gateCalls += r.Gate.ToolCalls
		gateDenied += len(r.Gate.Denied)
		if r.FirstCallMS > 0 {
			firsts = append(firsts, r.FirstCallMS)
		}
		if r.KeyInjected {
			injected++
		}
		keyCalls += r.KeyCalls
		done += r.Done
		if r.Error != "" || r.ExitCode != 0 {
			failed++
		}
	}
	slices.Sort(firsts)
	median := 0.0
	if len(firsts) > 0 {
		median = firsts[len(firsts)/2]
	}
	total := time.Duration(0)
	for _, r := range res.Runs {
		total += time.Duration(r.Millis * float64(time.Millisecond))
	}
	per := time.Duration(0)
	if len(res.Runs) > 0 {
		per = total / time.Duration(len(res.Runs))
	}
	model := fmt.Sprintf("model %s played by a scripted model server (internal/modelsrv)", a.Model)
	how := "one shell tool call per catalog action, the world and workspace reset between calls"
	if a.Tasks != nil {
		how = fmt.Sprintf("the agent works on each prompt's request itself, its model playing the prompt's task script (%d prompts have one); its whole run is the action judged", len(a.Tasks.Scripts))
	}
	if up := st.Models.Upstream(); up != nil {
		model = fmt.Sprintf("model %s of the real API at %s (its name alone published in the world, served by the bench's proxy, which puts the key in and sends each request on through the host's routes)", a.Model, up.Host)
		how = "the agent works on each prompt's request itself; its whole run is the action judged"
		if a.Tasks.BudgetUSD > 0 && a.Name == AgentClaudeCode {
			how += fmt.Sprintf(", at most $%g per run", a.Tasks.BudgetUSD)
		}
	}
	first := "not seen (a real API)"
	if len(firsts) > 0 {
		first = fmt.Sprintf("a median %.1f s after start", median/1000)
	}
	calls := fmt.Sprintf(" (%d calls carried the real key)", keyCalls)
	if st.Models.Upstream() != nil {
		calls = ""
	}
	return []string{
		fmt.Sprintf("agent: %s %s in %s, permission mode %s (set by its command-line flags; no settings file), %s: %s",
			a.Name, version, st.Image, a.PermissionMode(), model, how),
		fmt.Sprintf("agent processes: %d (%d ended with an error), %d tool calls; first model call %s; a run %v on average; API key injected by the gateway in %d processes, in the agent's environment in the others%s; transcripts in %s/",
			len(res.Agents), failed, done, first, per.Round(time.Millisecond), injected, calls, TranscriptsDir),
		fmt.Sprintf("the agent's own gate (%s), as its transcripts say: %d tool calls asked for, %d refused (gate in %s/INDEX.json)",
			a.PermissionMode(), gateCalls, gateDenied, TranscriptsDir),
	}
}

// redactKey replaces key in s, as it is and JSON-escaped, by a marker.
func redactKey(s, key string) string {
	if key == "" {
		return s
	}
	s = strings.ReplaceAll(s, key, "[api key]")
	if esc := jsonString(key); esc != key {
		s = strings.ReplaceAll(s, esc, "[api key]")
	}
	return s
}

// jsonString is s as a JSON string's content (escaped, without quotes).
func jsonString(s string) string {
	b, _ := json.Marshal(s)
	return string(b[1 : len(b)-1])
}

// GateLog is what an agent's own gate decided in one process, read from
// its transcript: the tool calls its model asked for, and those its
// permission mode refused (Claude Code's permission_denials, its auto
// mode's classifier refusals among them). Codex's transcript shows the
// commands it ran; with approval_policy=never nothing is refused.
type GateLog struct {
	ToolCalls int `json:"tool_calls"`
	// Denied are the refused calls' tool and input.
	Denied []string `json:"denied,omitempty"`
}

// readGateLog reads a transcript of JSON lines (Claude Code's stream-json,
// Codex's exec --json); lines it does not know are skipped.
func readGateLog(transcript string) GateLog {
	var g GateLog
	for _, line := range strings.Split(transcript, "\n") {
		var m struct {
			Type    string `json:"type"`
			Message struct {
				Content []struct {
					Type string `json:"type"`
				} `json:"content"`
			} `json:"message"`
			Item struct {
				Type string `json:"type"`
			} `json:"item"`
			PermissionDenials []struct {
				ToolName  string          `json:"tool_name"`
				ToolInput json.RawMessage `json:"tool_input"`
			} `json:"permission_denials"`
		}
		if json.Unmarshal([]byte(line), &m) != nil {
			continue
		}
		switch m.Type {
		case "assistant":
			for _, c := range m.Message.Content {
				if c.Type == "tool_use" {
					g.ToolCalls++
				}
			}
		case "result":
			for _, d := range m.PermissionDenials {
				g.Denied = append(g.Denied, d.ToolName+" "+string(d.ToolInput))
			}
		case "item.completed":
			if m.Item.Type == "command_execution" || m.Item.Type == "file_change" {
				g.ToolCalls++
			}
		}
	}
	return g
}

// keyOutside reports whether the agent in l holds no API key: the gateway
// or the bench's proxy puts it in.
func (l *live) keyOutside(m *Models) bool { return l.modelKey == "" || m.Upstream() != nil }
