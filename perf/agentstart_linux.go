package perf

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/airlock-sandbox/airlock/internal/modelsrv"
	"github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// agentFinal is the model's one answer: the script has no tool calls, so
// the agent's first main request is also its last.
const agentFinal = "perf: the first turn is done."

// agentHostAddr is the first world address of the section's hosts (two
// per agent: the model API and the git server).
var agentHostAddr = netip.MustParseAddr("10.214.0.50")

// MeasureAgentStart imports each agent's image, serves the scripted model
// server (internal/modelsrv) on a world host over HTTPS with a
// certificate of the world's CA, and times, in interleaved rounds,
// `airlock run --rm` of the shipped example (examples/RECIPE.hcl, only
// its variables set: the API host, the git host, the secrets directory)
// and the same agent binary started bare on the host, in the world's
// network namespace, with the manifest's command and environment, both to
// the model server's receipt of the agent's first main-loop request.
func MeasureAgentStart(ctx context.Context, e *Env, cfg AgentStartConfig) (*AgentStart, error) {
	start := time.Now()
	if cfg.Runs <= 0 || cfg.Timeout <= 0 || len(cfg.Agents) == 0 {
		return nil, fmt.Errorf("agentstart: want runs > 0, a timeout and an agent: %+v", cfg)
	}
	for _, a := range cfg.Agents {
		if !slices.Contains(AgentRecipes, a) {
			return nil, fmt.Errorf("agentstart: unknown agent %q (want one of %v)", a, AgentRecipes)
		}
	}
	bins, err := fetchAgents(ctx, e.cfg.Repo)
	if err != nil {
		return nil, err
	}
	res := &AgentStart{Runs: cfg.Runs}
	res.Setup = "both sides talk to the same scripted model server (internal/modelsrv, in the harness's process) on a world host, over HTTPS with a certificate of the world's CA; its script answers the first main request with a final message and no tool call. " +
		"airlock: `airlock run --rm` of the shipped example, unchanged but for its variables (the model API and git hosts are world hosts, the secrets directory holds the key), against the harness's airlockd (`--upstream-ca` the world's CA, `--admission` the built-in policy with that secrets directory): the session's egress is terminated by the L7 gateway, which injects the key; the workspace is a 12-file git repository. " +
		"Bare: the same binary (hack/fetch-agents.sh: the platform package the image installs, same version and integrity) with the manifest's command, environment (HOME a fresh directory per run) and user (uid and gid 1000), the key in the secret's variable, SSL_CERT_FILE and NODE_EXTRA_CA_CERTS the world's CA, run in the world's network namespace with the world's DNS server as its resolver, in a clone of the repository. " +
		"Times run from the fork of the command to the model server's receipt of the first main-loop request (the request offering the agent's tools); the runs' stdin is /dev/null."
	var errs []error
	for i, agent := range cfg.Agents {
		if ctx.Err() != nil {
			break
		}
		row, err := measureAgent(ctx, e, cfg, agent, bins, i)
		if row != nil {
			row.compare()
			res.Agents = append(res.Agents, *row)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", agent, err))
		}
	}
	res.Seconds = time.Since(start).Seconds()
	return res, errors.Join(errs...)
}

// swapHandler serves with the handler set last: each run gets a fresh
// model server, so its calls are that run's alone.
// Its hook, if any, runs (in a goroutine of its own) on the first request
// after set.
type swapHandler struct {
	mu   sync.Mutex
	h    http.Handler
	hook func()
}

func (s *swapHandler) set(h http.Handler, hook func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.h, s.hook = h, hook
}

func (s *swapHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h, hook := s.h, s.hook
	s.hook = nil
	s.mu.Unlock()
	if hook != nil {
		go hook()
	}
	if h == nil {
		http.Error(w, "no model server", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

// agentSetup is one agent's two commands.
type agentSetup struct {
	key      string
	api      *swapHandler
	airlock  []string
	bare     []string
	bareEnv  []string
	bareDir  string
	homeRoot string
	uid, gid int
	// label is the example's session label.
	label string
}

func measureAgent(ctx context.Context, e *Env, cfg AgentStartConfig, agent string, bins map[string]string, idx int) (*AgentRow, error) {
	example := filepath.Join("examples", agent+".hcl")
	row := &AgentRow{Agent: agent, Example: example}
	fail := func(err error) (*AgentRow, error) {
		row.Error = err.Error()
		return row, err
	}
	archive := cfg.Images[agent]
	if archive == "" {
		return fail(fmt.Errorf("no image archive (run `make images`)"))
	}
	e.cfg.Logf("agentstart: importing %s", archive)
	t0 := time.Now()
	if out, err := e.CLI("image", "import", archive).CombinedOutput(); err != nil {
		return fail(fmt.Errorf("image import: %v: %s", err, lastLine(string(out))))
	}
	row.ImportSeconds = time.Since(t0).Seconds()

	s, p, err := setupAgent(e, agent, example, bins, idx)
	if err != nil {
		return fail(err)
	}
	row.Image = p.Image
	row.Binary = s.bare[len(s.bare)-len(p.Command)]
	if out, err := exec.CommandContext(ctx, row.Binary, "--version").Output(); err == nil {
		row.Version = strings.TrimSpace(strings.SplitN(string(out), "\n", 2)[0])
	}
	row.Airlock.Command = e.display(s.airlock)
	row.Bare.Command = e.display(append(redactEnv(s.bareEnv, s.key, s.uid, s.gid), s.bare...))

	var aRuns, bRuns []agentRun
	var aErrs, bErrs []string
	aWarm, bWarm := -1.0, -1.0
	for round := range cfg.Runs + 1 {
		if ctx.Err() != nil {
			return row, ctx.Err()
		}
		e.cfg.Logf("agentstart: %s, round %d of %d (the first is a warm-up)", agent, round+1, cfg.Runs+1)
		r, err := s.runAirlock(ctx, e, cfg.Timeout)
		if round > 0 {
			if err != nil {
				aErrs = append(aErrs, err.Error())
			} else {
				aRuns = append(aRuns, r)
			}
		} else if err != nil {
			e.cfg.Logf("agentstart: %s warm-up in airlock: %v", agent, err)
		} else {
			aWarm = ms(r.first)
		}
		r, err = s.runBare(ctx, cfg.Timeout)
		if round > 0 {
			if err != nil {
				bErrs = append(bErrs, err.Error())
			} else {
				bRuns = append(bRuns, r)
			}
		} else if err != nil {
			e.cfg.Logf("agentstart: %s warm-up bare: %v", agent, err)
		} else {
			bWarm = ms(r.first)
		}
	}
	row.Airlock = side(row.Airlock.Command, aRuns, aErrs)
	row.Bare = side(row.Bare.Command, bRuns, bErrs)
	row.Airlock.WarmupMS, row.Bare.WarmupMS = aWarm, bWarm
	if len(aRuns) == 0 || len(bRuns) == 0 {
		return fail(fmt.Errorf("no successful run on a side (airlock %d, bare %d of %d)", len(aRuns), len(bRuns), cfg.Runs))
	}
	return row, nil
}

// setupAgent publishes the agent's hosts, writes its key, its workspace
// repository with the example in it, and a clone for the bare side, and
// builds both commands.
func setupAgent(e *Env, agent, example string, bins map[string]string, idx int) (*agentSetup, *policies.Policy, error) {
	apiHost, gitHost := "api."+agent+".perf.test", "git."+agent+".perf.test"
	s := &agentSetup{api: &swapHandler{}}
	base := agentHostAddr.As4()
	base[3] += byte(2 * idx)
	apiAddr := netip.AddrFrom4(base)
	if err := e.World.AddHost(apiHost, apiAddr, world.WithHandler(s.api), world.WithTLS()); err != nil {
		return nil, nil, err
	}
	git := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	if err := e.World.AddHost(gitHost, apiAddr.Next(), world.WithHandler(git), world.WithTLS()); err != nil {
		return nil, nil, err
	}

	var rnd [16]byte
	_, _ = rand.Read(rnd[:])
	s.key = "sk-perf-" + hex.EncodeToString(rnd[:])
	keyFile := filepath.Join(e.SecretsDir, apiHost, "key")
	if err := os.MkdirAll(filepath.Dir(keyFile), 0o700); err != nil {
		return nil, nil, err
	}
	if err := os.WriteFile(keyFile, []byte(s.key+"\n"), 0o600); err != nil {
		return nil, nil, err
	}

	repo := filepath.Join(e.WorkDir, "agent-"+agent)
	if err := makeWorkspace(repo); err != nil {
		return nil, nil, err
	}
	src, err := os.ReadFile(filepath.Join(e.cfg.Repo, example))
	if err != nil {
		return nil, nil, err
	}
	manifest := filepath.Join(repo, agent+".hcl")
	if err := os.WriteFile(manifest, src, 0o644); err != nil {
		return nil, nil, err
	}
	if err := gitRun(repo, "init", "-q"); err != nil {
		return nil, nil, err
	}
	if err := gitRun(repo, "add", "."); err != nil {
		return nil, nil, err
	}
	if err := gitRun(repo, "-c", "user.name=perf", "-c", "user.email=perf@perf.test", "commit", "-q", "-m", "init"); err != nil {
		return nil, nil, err
	}
	vars := map[string]string{"prompt": "say you are done", "api_host": apiHost, "git_host": gitHost, "secrets_dir": e.SecretsDir}
	if agent == "codex" {
		// As in the daemon's agent test: Codex's default model takes its
		// tools in a layout the scripted server does not speak.
		vars["model"] = "gpt-5.5"
	}
	p, err := policies.Load(manifest, src, vars)
	if err != nil {
		return nil, nil, err
	}
	s.label = p.Label
	names := make([]string, 0, len(vars))
	for k := range vars {
		names = append(names, k)
	}
	slices.Sort(names)
	s.airlock = e.CLIArgs("run", "--rm", "-f", manifest)
	for _, k := range names {
		s.airlock = append(s.airlock, "--var", k+"="+vars[k])
	}

	// The bare side.
	if len(p.Command) == 0 || bins[p.Command[0]] == "" {
		return nil, nil, fmt.Errorf("no bare binary for the manifest's command %q (fetch-agents.sh gave %v)", p.Command, bins)
	}
	s.uid, s.gid, err = parseUser(p.User)
	if err != nil {
		return nil, nil, err
	}
	s.bareDir = repo + "-bare"
	if out, err := exec.Command("git", "clone", "-q", repo, s.bareDir).CombinedOutput(); err != nil {
		return nil, nil, fmt.Errorf("git clone: %v: %s", err, out)
	}
	if err := chownTree(s.bareDir, s.uid, s.gid); err != nil {
		return nil, nil, err
	}
	s.homeRoot = filepath.Join(e.WorkDir, "agent-homes")
	if err := os.MkdirAll(s.homeRoot, 0o755); err != nil {
		return nil, nil, err
	}
	resolv := filepath.Join(e.WorkDir, "world-resolv.conf")
	if err := os.WriteFile(resolv, []byte("nameserver "+e.World.DNSAddr().String()+"\n"), 0o644); err != nil {
		return nil, nil, err
	}
	s.bareEnv = bareEnv(p, s.key, e.WorldCAFile)
	for i, kv := range s.bareEnv {
		if strings.HasPrefix(kv, "HOME=") {
			// Shown so in the report; each run gets a fresh one.
			s.bareEnv[i] = "HOME=" + filepath.Join(s.homeRoot, "home-RUN")
		}
	}
	s.bare = append([]string{"nsenter", "--net=" + e.World.NetnsPath(), "unshare", "--mount", "--propagation", "private",
		"sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec setpriv --reuid="$AGENT_UID" --regid="$AGENT_GID" --clear-groups -- "$@"`, resolv,
		bins[p.Command[0]]}, p.Command[1:]...)
	return s, p, nil
}

// bareEnv is the bare side's environment: the manifest's env, each
// secret's variable holding the key (in the sandbox it holds a
// placeholder the gateway replaces), a PATH, and the world's CA.
func bareEnv(p *policies.Policy, key, caFile string) []string {
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LANG=C.UTF-8"}
	names := make([]string, 0, len(p.Env))
	for k := range p.Env {
		names = append(names, k)
	}
	slices.Sort(names)
	for _, k := range names {
		env = append(env, k+"="+p.Env[k])
	}
	for _, sec := range p.Secrets {
		env = append(env, cmpOr(sec.EnvVar, sec.Name)+"="+key)
	}
	return append(env, "SSL_CERT_FILE="+caFile, "NODE_EXTRA_CA_CERTS="+caFile)
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// redactEnv renders env and the user for the report, the key replaced by
// $KEY, as env(1)'s arguments.
func redactEnv(env []string, key string, uid, gid int) []string {
	out := []string{"env", "-i"}
	for _, kv := range env {
		out = append(out, strings.ReplaceAll(kv, key, "$KEY"))
	}
	return append(out, "AGENT_UID="+strconv.Itoa(uid), "AGENT_GID="+strconv.Itoa(gid))
}

// runAirlock times one `airlock run --rm` of the example.
func (s *agentSetup) runAirlock(ctx context.Context, e *Env, timeout time.Duration) (agentRun, error) {
	cmd := exec.Command(s.airlock[0], s.airlock[1:]...)
	cmd.Dir = e.cfg.Repo
	// When the agent's first request arrives, its session runs: read the
	// time the daemon recorded for its start.
	started := func() (time.Time, bool) {
		lctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		list, err := e.Client.ListSessions(lctx)
		if err != nil {
			return time.Time{}, false
		}
		for _, ss := range list {
			if ss.Label == s.label && ss.Started != nil {
				return *ss.Started, true
			}
		}
		return time.Time{}, false
	}
	r, err := s.timed(ctx, cmd, timeout, started)
	if err != nil {
		// A session the CLI left (killed at the timeout) must not run
		// beside the next run.
		if rerr := e.RemoveAll(context.WithoutCancel(ctx)); rerr != nil {
			err = errors.Join(err, rerr)
		}
	}
	return r, err
}

// runBare times one bare run, with a fresh HOME.
func (s *agentSetup) runBare(ctx context.Context, timeout time.Duration) (agentRun, error) {
	home, err := os.MkdirTemp(s.homeRoot, "home-")
	if err != nil {
		return agentRun{}, err
	}
	defer os.RemoveAll(home)
	if err := os.Chown(home, s.uid, s.gid); err != nil {
		return agentRun{}, err
	}
	env := slices.Clone(s.bareEnv)
	for i, kv := range env {
		if strings.HasPrefix(kv, "HOME=") {
			env[i] = "HOME=" + home
		}
	}
	if !slices.ContainsFunc(env, func(kv string) bool { return strings.HasPrefix(kv, "HOME=") }) {
		env = append(env, "HOME="+home)
	}
	env = append(env, "AGENT_UID="+strconv.Itoa(s.uid), "AGENT_GID="+strconv.Itoa(s.gid))
	cmd := exec.Command(s.bare[0], s.bare[1:]...)
	cmd.Dir, cmd.Env = s.bareDir, env
	return s.timed(ctx, cmd, timeout, nil)
}

// timed runs cmd against a fresh model server and returns the time from
// its start to the first main request and to its exit; started, if set,
// is asked on the first request for the time the session started.
func (s *agentSetup) timed(ctx context.Context, cmd *exec.Cmd, timeout time.Duration, started func() (time.Time, bool)) (agentRun, error) {
	srv, err := modelsrv.New(modelsrv.Script{Final: agentFinal})
	if err != nil {
		return agentRun{}, err
	}
	launched := make(chan time.Time, 1)
	var hook func()
	if started != nil {
		hook = func() {
			t, _ := started()
			launched <- t
		}
	}
	s.api.set(srv, hook)
	defer s.api.set(nil, nil)
	var stdout, stderr limitedBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return agentRun{}, err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-ctx.Done():
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		return agentRun{}, ctx.Err()
	case <-time.After(timeout):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		err = fmt.Errorf("no exit within %v", timeout)
	}
	exit := time.Since(start)
	// What the agent left running in its process group goes with it.
	_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	if err != nil {
		return agentRun{}, fmt.Errorf("%v: %s", err, lastLine(stderr.String()))
	}
	first, before, err := firstModelRequest(srv.Calls(), start, s.key)
	if err != nil {
		return agentRun{}, err
	}
	if !strings.Contains(stdout.String(), agentFinal) {
		return agentRun{}, fmt.Errorf("the transcript lacks the model's final message: %s", lastLine(stdout.String()))
	}
	r := agentRun{first: first, exit: exit, before: before}
	if started != nil {
		select {
		case t := <-launched:
			if t.After(start) && t.Sub(start) < first {
				r.launched = t.Sub(start)
			}
		case <-time.After(10 * time.Second):
		}
	}
	return r, nil
}

// fetchAgents runs hack/fetch-agents.sh and returns the binaries by
// command name (claude, codex).
func fetchAgents(ctx context.Context, repo string) (map[string]string, error) {
	var stderr limitedBuffer
	cmd := exec.CommandContext(ctx, filepath.Join(repo, "hack", "fetch-agents.sh"))
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("hack/fetch-agents.sh: %v: %s", err, lastLine(stderr.String()))
	}
	bins := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			bins[k] = v
		}
	}
	return bins, nil
}

// parseUser reads a manifest's "uid:gid" (or "uid", gid = uid).
func parseUser(u string) (int, int, error) {
	if u == "" {
		u = policies.DefaultUser
	}
	us, gs, ok := strings.Cut(u, ":")
	if !ok {
		gs = us
	}
	uid, err1 := strconv.Atoi(us)
	gid, err2 := strconv.Atoi(gs)
	if err1 != nil || err2 != nil {
		return 0, 0, fmt.Errorf("user %q: want uid[:gid]", u)
	}
	return uid, gid, nil
}

func chownTree(dir string, uid, gid int) error {
	return filepath.Walk(dir, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Lchown(p, uid, gid)
	})
}

func gitRun(dir string, args ...string) error {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("git %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return nil
}
