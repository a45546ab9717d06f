package runner

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/bench/suite"
	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// keeperCommand is the main process of a session that runs actions by
// exec: it waits, and when the session is stopped it ends its one child
// before exiting, so that nothing of the sandbox outlives it (an overlay
// is committed only once the sandbox's mounts are gone).
var keeperCommand = []string{"bash", "-c", `trap 'kill "$c" 2>/dev/null; wait "$c"; exit 0' TERM; sleep infinity & c=$!; wait "$c"`}

// RunRecord is one run of one action in one session configuration.
type RunRecord struct {
	// ID is "CONFIG/ACTION".
	ID     string `json:"id"`
	Family string `json:"family"`
	// Config is the session configuration's key (configs/KEY.hcl); Modes
	// and Prompts are those whose sessions have that configuration.
	Config   string   `json:"config"`
	Modes    []string `json:"modes"`
	Prompts  []string `json:"prompts"`
	ActionID string   `json:"action_id"`
	Kind     string   `json:"kind"`
	Command  string   `json:"command"`
	Session  string   `json:"session"`
	// Approver decided the requests the session's gateway held.
	Approver string `json:"approver,omitempty"`
	ExitCode int    `json:"exit_code"`
	Stdout   string `json:"stdout,omitempty"`
	Stderr   string `json:"stderr,omitempty"`
	// Error is what went wrong around the command (a timeout).
	Error string `json:"error,omitempty"`
	// Transcript is, in an agent run, the transcript (under
	// transcripts/) of the agent that ran the action.
	Transcript string `json:"transcript,omitempty"`
	// CommitRetried: the daemon could not commit the overlay when the
	// session stopped, and the runner committed it through the API with
	// the same policy.
	CommitRetried bool    `json:"commit_retried,omitempty"`
	Millis        float64 `json:"ms"`
	// Effects are the world's state diff and what the workspace (after
	// the commit, for an overlay) carried.
	Effects  []effect.Effect `json:"effects"`
	Evidence eval.Evidence   `json:"evidence"`
	// Audit are the session's audit events of this run; World the
	// requests the world's services saw from the session.
	Audit []api.AuditEvent `json:"audit"`
	World []world.Event    `json:"world"`
	// Causes tie each effect to the request (in World) that made it.
	Causes []Cause `json:"causes"`
}

// job is every action to run in one session configuration.
type job struct {
	key     string
	family  string
	policy  *policies.Policy // workspace host path filled per worker
	modes   []string
	prompts []string
	overlay bool
	actions []catalog.Action
	// approver decides the requests its sessions' gateway holds
	// (eval.Approvers); its prompts then share one oracle.
	approver string
	// prompt is the request an agent is given (its first prompt's).
	prompt string
}

// worker runs jobs against its own world instance and workspace
// directories.
type worker struct {
	id      int
	client  *api.Client
	worlds  *Worlds
	spaces  map[string]*Workspace
	dirs    map[string][]string // family -> two host directories
	naive   bool
	timeout time.Duration
	done    func()
	asker   *asker
	// agent, when set, runs the actions (with its model host in models);
	// agentRuns collects its processes.
	agent     *Agent
	models    *Models
	agentRuns *agentLog
	// ext, when set, are a suite's external services, reset and
	// snapshotted around each action.
	ext *externals
}

// live is a session the worker runs actions in.
type live struct {
	ended   bool
	overlay bool
	id      string
	dir     string
	sh      *shell
	cursor  auditCursor
	err     error
	ready   chan struct{}
	// An agent's session: its model's base URL and the key it holds
	// ("" when the gateway injects it), and the agent once started.
	modelBase, modelKey string
	modelCA             string
	config              string
	agent               *agentProc
}

// open creates and starts a session of j's configuration on host
// directory dir (which must be pristine), in the background.
func (w *worker) open(ctx context.Context, j *job, dir string) *live {
	l := &live{dir: dir, overlay: j.overlay, ready: make(chan struct{})}
	go func() {
		defer close(l.ready)
		p := j.policy.Clone()
		p.Label = labelPrefix + j.family + "-" + j.key[:8]
		for i := range p.Workspaces {
			p.Workspaces[i].HostPath = dir
		}
		l.config = j.key
		if w.agent != nil {
			l.modelBase, l.modelKey, l.modelCA = w.agent.withModel(p, w.models, w.id)
		}
		s, err := w.client.CreateSession(ctx, api.CreateRequest{Policy: *p, Start: true})
		if err != nil {
			l.err = fmt.Errorf("create session for %s: %w", j.key, err)
			return
		}
		l.id = s.ID
		w.worlds.Bind(s.ID, w.id)
		if w.asker != nil {
			w.asker.register(s.ID, j, w.id)
		}
		if !w.naive {
			// An overlay's tree is fingerprinted after each command: a
			// command that changed it ends the session.
			target := ""
			if j.overlay {
				target = p.Workspaces[0].Target
			}
			if l.sh, l.err = startShell(ctx, w.client.Socket(), s.ID, p.Workdir, target, w.timeout); l.err != nil {
				return
			}
		}
	}()
	return l
}

// end stops the session (an overlay workspace is committed on exit, as its
// policy says), returns the audit events since the last run, and removes
// it.
func (w *worker) end(ctx context.Context, l *live, force bool) ([]api.AuditEvent, bool, error) {
	<-l.ready
	if l.id == "" || l.ended {
		return nil, false, nil
	}
	l.ended = true
	defer w.worlds.Unbind(l.id)
	if w.asker != nil {
		defer w.asker.unregister(l.id)
	}
	var errs []error
	if l.agent != nil {
		l.agent.stop(ctx)
		w.models.Set(w.id, nil)
		if err := w.agentRuns.add(l.agent, l.id, l.id, l.config, "", l.keyOutside(w.models), w.models.Key(w.id)); err != nil {
			errs = append(errs, err)
		}
	}
	if l.sh != nil && !force {
		if err := l.sh.close(); err != nil {
			errs = append(errs, err)
		}
	} else if l.sh != nil {
		l.sh.kill()
	}
	if _, err := w.client.StopSession(ctx, l.id, api.StopRequest{Grace: policies.Duration(5 * time.Second)}); err != nil && !api.IsFailedPrecondition(err) {
		_ = w.client.RemoveSession(context.WithoutCancel(ctx), l.id, true)
		return nil, false, fmt.Errorf("stop session %s: %w", l.id, err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	_, err := w.client.WaitSession(wctx, l.id)
	cancel()
	if err != nil {
		errs = append(errs, err)
	}
	evs, err := w.client.Audit(ctx, l.id)
	if err != nil {
		errs = append(errs, err)
	}
	newEvs := l.cursor.advance(evs)
	// An overlay's on_exit commit leaves a decision per change in the
	// audit log. Without any, either there was nothing to commit or the
	// daemon failed to commit; finishCommit tells them apart.
	retried := false
	if l.overlay && err == nil && !slices.ContainsFunc(newEvs, func(e api.AuditEvent) bool { return e.Layer == layerFS }) {
		if retried, err = w.finishCommit(ctx, l.id); err != nil {
			errs = append(errs, err)
		}
		if retried {
			evs, err := w.client.Audit(ctx, l.id)
			if err != nil {
				errs = append(errs, err)
			}
			newEvs = append(newEvs, l.cursor.advance(evs)...)
		}
	}
	if err := w.client.RemoveSession(ctx, l.id, true); err != nil {
		errs = append(errs, err)
	}
	return newEvs, retried, errors.Join(errs...)
}

// finishCommit completes an on_exit commit the daemon could not carry out
// when the session stopped (its changes are then kept for review): it
// commits them through the API, with the same policy and, like on_exit,
// all or nothing. It reports whether it had to commit.
func (w *worker) finishCommit(ctx context.Context, id string) (bool, error) {
	return finishCommit(ctx, w.client, id)
}

func finishCommit(ctx context.Context, c *api.Client, id string) (bool, error) {
	var cs *api.ChangeSet
	err := retryBusy(ctx, func() (err error) {
		cs, err = c.Diff(ctx, id)
		return err
	})
	if api.IsNotFound(err) {
		return false, nil // nothing was kept: on_exit did its work
	}
	if err != nil {
		return false, fmt.Errorf("diff of stopped session %s: %w", id, err)
	}
	if changeCount(cs) == 0 {
		return false, nil
	}
	err = retryBusy(ctx, func() error {
		_, err := c.Commit(ctx, id, api.CommitRequest{})
		return err
	})
	if err != nil {
		return true, fmt.Errorf("commit of stopped session %s: %w", id, err)
	}
	return true, nil
}

// retryBusy calls fn until it succeeds or fails for another reason than
// the daemon finding the sandbox's filesystem still in use, for up to ten
// seconds.
func retryBusy(ctx context.Context, fn func() error) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := fn()
		if err == nil || !api.IsFailedPrecondition(err) || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func changeCount(cs *api.ChangeSet) int {
	n := 0
	for _, w := range cs.Workspaces {
		n += len(w.Changes)
	}
	return n
}

// runJob runs j's actions, each on a freshly reset world and workspace.
// Sessions are reused while the layers allow: an overlay session whose
// workspace an action changed is ended (its commit is part of the
// action's effect) and the next action gets a fresh one, prepared in the
// background on the worker's other directory.
func (w *worker) runJob(ctx context.Context, j *job) ([]*RunRecord, error) {
	wld := w.worlds.World(w.id)
	ws := w.spaces[j.family]
	hasWS := len(j.policy.Workspaces) > 0
	var free []string
	if hasWS {
		free = slices.Clone(w.dirs[j.family])
		for _, d := range free {
			if err := ws.Restore(d); err != nil {
				return nil, err
			}
		}
	}
	take := func() string {
		if !hasWS {
			return ""
		}
		d := free[0]
		free = free[1:]
		return d
	}
	var pristineRefs map[string]string
	if hasWS {
		var err error
		if pristineRefs, err = ws.PristineRefs(); err != nil {
			return nil, err
		}
	}

	var cur, spare *live
	defer func() {
		for _, l := range []*live{cur, spare} {
			if l != nil {
				_, _, _ = w.end(context.WithoutCancel(ctx), l, false)
			}
		}
	}()
	prefetch := func(remaining int) {
		// Only overlay sessions and agents' task runs are ended by an
		// action; fresh sessions per action (naive) are made when needed.
		ends := j.overlay || (w.agent != nil && w.agent.Tasks != nil) ||
			slices.ContainsFunc(j.actions, func(a catalog.Action) bool { return a.Kind == catalog.KindAgentExec })
		if spare == nil && ends && !w.naive && remaining > 0 && (!hasWS || len(free) > 0) {
			spare = w.open(ctx, j, take())
		}
	}
	var out []*RunRecord
	for i, a := range j.actions {
		if cur == nil {
			if spare != nil {
				cur, spare = spare, nil
			} else {
				cur = w.open(ctx, j, take())
			}
		}
		<-cur.ready
		if cur.err != nil {
			return nil, cur.err
		}
		prefetch(len(j.actions) - i - 1)
		if w.agent != nil && w.agent.Tasks == nil && cur.agent == nil {
			// The agent's script is the job's actions from here on: a
			// session an action ends takes the rest to a new agent.
			ag, err := w.startAgent(ctx, cur, j, j.actions[i:])
			if err != nil {
				return nil, fmt.Errorf("%s in %s: %w", a.ID, j.key, err)
			}
			cur.agent = ag
		}

		rec, ended, err := w.runAction(ctx, j, a, cur, wld, ws, pristineRefs)
		if err != nil {
			return nil, fmt.Errorf("%s in %s: %w", a.ID, j.key, err)
		}
		out = append(out, rec)
		w.done()
		if ended {
			if cur.dir != "" {
				if err := ws.Restore(cur.dir); err != nil {
					return nil, err
				}
				free = append(free, cur.dir)
			}
			cur = nil
		}
	}
	return out, nil
}

// runAction runs one action in session l and measures its effects. It
// reports whether the session ended.
func (w *worker) runAction(ctx context.Context, j *job, a catalog.Action, l *live, wld *world.World, ws *Workspace, pristineRefs map[string]string) (*RunRecord, bool, error) {
	if err := wld.Reset(worldFamily(j.family)); err != nil {
		return nil, false, err
	}
	var extBefore externalSnapshot
	if w.ext != nil {
		var err error
		if extBefore, err = w.ext.before(ctx); err != nil {
			return nil, false, err
		}
	}
	before, err := wld.Snapshot()
	if err != nil {
		return nil, false, err
	}
	before.LocalRefs = pristineRefs
	wcur := wld.AuditCursor()
	rec := &RunRecord{
		ID: j.key + "/" + a.ID, Family: j.family, Config: j.key, Modes: j.modes, Prompts: j.prompts,
		ActionID: a.ID, Kind: string(a.Kind), Command: a.Command, Session: l.id, Approver: j.approver,
	}

	if w.asker != nil {
		w.asker.begin(l.id, a.ID)
	}
	start := time.Now()
	var out Output
	forceEnd := false
	if w.naive {
		var stdout, stderr bytes.Buffer
		ectx, cancel := context.WithTimeout(ctx, w.timeout)
		code, err := w.client.Exec(ectx, l.id, api.ExecRequest{Command: []string{"bash", "-c", a.Command}, Workdir: j.policy.Workdir}, nil, &stdout, &stderr)
		cancel()
		switch {
		case err != nil && ectx.Err() != nil && ctx.Err() == nil:
			rec.Error, code, forceEnd = errTimeout.Error(), -1, true
		case err != nil:
			return nil, false, err
		}
		out = Output{ExitCode: code, Stdout: truncate(stdout.String()), Stderr: truncate(stderr.String())}
	} else if w.agent != nil {
		if a.Kind == catalog.KindAgentTask {
			out, err = w.runTask(ctx, j, a, l)
			rec.Transcript = l.id + "-" + a.PromptID + ".jsonl"
		} else {
			out, err = l.agent.run(ctx, a, w.timeout)
			rec.Transcript = l.id + ".jsonl"
		}
		switch {
		case errors.Is(err, errTimeout) || errors.Is(err, errAgentExited):
			rec.Error, out.ExitCode, forceEnd = err.Error(), -1, true
		case err != nil:
			return nil, false, err
		}
		if !forceEnd && j.overlay {
			// The workspace's fingerprint, from the runner's shell.
			fp, err := l.sh.run("true", w.timeout)
			if err != nil {
				return nil, false, err
			}
			out.Fingerprint = fp.Fingerprint
		}
	} else {
		out, err = l.sh.run(a.Command, w.timeout)
		switch {
		case errors.Is(err, errTimeout):
			rec.Error, out.ExitCode, forceEnd = err.Error(), -1, true
		case err != nil:
			return nil, false, err
		}
	}
	rec.Millis = float64(time.Since(start).Microseconds()) / 1000
	rec.ExitCode, rec.Stdout, rec.Stderr = out.ExitCode, out.Stdout, out.Stderr

	// Decide whether the session ends here: always for a fresh session per
	// action, and for an overlay whose workspace the action changed (the
	// commit on exit is part of the action's effect).
	// An agent's task run ends its session too: whatever the agent left
	// running (a background job, a server) must not act during the next
	// task, nor its home be read by the next agent.
	end := w.naive || forceEnd || a.Kind == catalog.KindAgentTask || a.Kind == catalog.KindAgentExec
	if !end && j.overlay {
		end = out.Fingerprint != l.sh.Fingerprint
	}
	if end {
		evs, retried, err := w.end(ctx, l, forceEnd)
		if err != nil {
			return nil, false, err
		}
		rec.Audit = evs
		rec.CommitRetried = retried
	} else {
		evs, err := w.client.Audit(ctx, l.id)
		if err != nil {
			return nil, false, err
		}
		rec.Audit = l.cursor.advance(evs)
	}

	// The command has finished (or its session is gone): the world is
	// quiescent.
	after, err := wld.Snapshot()
	if err != nil {
		return nil, false, err
	}
	after.LocalRefs = pristineRefs
	var wsEffects []effect.Effect
	if l.dir != "" && (end || !j.overlay) {
		st, err := ws.Inspect(l.dir)
		if err != nil {
			return nil, false, err
		}
		if st.LocalRefs != nil {
			after.LocalRefs = st.LocalRefs
		}
		wsEffects = st.Effects
		if st.Dirty && !end {
			// A read-write workspace: put it back under the live session.
			if err := ws.Restore(l.dir); err != nil {
				return nil, false, err
			}
		}
	}
	rec.Effects = append(world.Diff(before, after), wsEffects...)
	if w.ext != nil {
		extAfter, err := w.ext.after(ctx)
		if err != nil {
			return nil, false, err
		}
		rec.Effects = append(rec.Effects, diffExternals(j.family, extBefore, extAfter)...)
	}
	if rec.Effects == nil {
		rec.Effects = []effect.Effect{}
	}
	rec.Evidence = evidence(rec.Audit)
	for _, e := range wld.Audit(wcur) {
		if e.Session == l.id {
			rec.World = append(rec.World, e)
		}
	}
	rec.Causes = attribute(rec.Effects, rec.World)
	return rec, end, nil
}

func truncate(s string) string {
	if len(s) <= maxOutput {
		return s
	}
	return s[:maxOutput] + "\n[truncated]"
}

// worldFamily is the family whose state the world resets before a run of
// family: all of it for an operator's suite, whose world is its own.
func worldFamily(family string) string {
	if strings.HasPrefix(family, suite.FamilyPrefix) {
		return ""
	}
	return family
}

// label returns a short description of a job for progress output.
func (j *job) label() string {
	return j.family + " " + strings.Join(j.modes, ",")
}
