package runner

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// AskRecord is one held request and how the runner's approver decided it
// (asks.jsonl).
type AskRecord struct {
	Session  string          `json:"session"`
	Config   string          `json:"config"`
	Approver string          `json:"approver"`
	Prompts  []string        `json:"prompts,omitempty"`
	ActionID string          `json:"action_id"`
	Method   string          `json:"method"`
	Host     string          `json:"host"`
	Path     string          `json:"path"`
	Rule     string          `json:"rule"`
	Allow    bool            `json:"allow"`
	Reason   string          `json:"reason"`
	Effects  []effect.Effect `json:"effects,omitempty"`
	// Error is a decision the daemon did not take (the request was decided
	// otherwise first).
	Error string `json:"error,omitempty"`
}

// asker decides the requests the daemon holds for the runner's sessions,
// as the approver of each session's job: absent denies at once (no one
// answers: the outcome of a timeout, without waiting for it), habituated
// allows eval.HabituatedRate of them from a seeded draw, informed allows
// one exactly when every effect the world computes for it is in the
// oracle of the job's prompts (which all share it). A request of a session
// the asker does not know is left to its timeout.
type asker struct {
	client  *api.Client
	worlds  *Worlds
	oracles map[string]data.Oracle
	seed    uint64

	mu       sync.Mutex
	sessions map[string]*askSession // +checklocks:mu
	records  []AskRecord            // +checklocks:mu
	wg       sync.WaitGroup
}

// askSession is what the asker knows of a session.
type askSession struct {
	job   *job
	world int
	// action is the action running now; asks counts its held requests.
	action string
	asks   int
}

func newAsker(c *api.Client, ws *Worlds, oracles map[string]data.Oracle, seed uint64) *asker {
	return &asker{client: c, worlds: ws, oracles: oracles, seed: seed, sessions: map[string]*askSession{}}
}

// register tells the asker that session runs j's actions against world
// instance i.
func (a *asker) register(session string, j *job, i int) {
	a.mu.Lock()
	a.sessions[session] = &askSession{job: j, world: i}
	a.mu.Unlock()
}

func (a *asker) unregister(session string) {
	a.mu.Lock()
	delete(a.sessions, session)
	a.mu.Unlock()
}

// begin tells the asker that session starts running action.
func (a *asker) begin(session, action string) {
	a.mu.Lock()
	if s := a.sessions[session]; s != nil {
		s.action, s.asks = action, 0
	}
	a.mu.Unlock()
}

// follow decides held requests until ctx ends; the stream is reopened if
// the daemon ends it.
func (a *asker) follow(ctx context.Context) {
	for ctx.Err() == nil {
		err := a.client.FollowApprovals(ctx, "", func(ev api.ApprovalEvent) error {
			if ev.Type == api.ApprovalHeld && ev.Approval != nil && ev.Approval.State == api.ApprovalPending {
				ap := *ev.Approval
				a.wg.Add(1)
				go func() {
					defer a.wg.Done()
					a.decide(ctx, ap)
				}()
			}
			return nil
		})
		if ctx.Err() != nil {
			break
		}
		_ = err
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
	a.wg.Wait()
}

// decide decides one held request, if its session is the asker's.
func (a *asker) decide(ctx context.Context, ap api.Approval) {
	a.mu.Lock()
	s := a.sessions[ap.Session]
	var n int
	var action string
	if s != nil {
		n, action = s.asks, s.action
		s.asks++
	}
	a.mu.Unlock()
	if s == nil {
		return
	}
	j := s.job
	rec := AskRecord{Session: ap.Session, Config: j.key, Approver: j.approver, Prompts: j.prompts, ActionID: action,
		Method: ap.Method, Host: ap.Host, Path: ap.Path, Rule: ap.Rule}
	switch j.approver {
	case eval.ApproverHabituated:
		rec.Allow = a.draw(j, action, n, ap) < eval.HabituatedRate
		rec.Reason = fmt.Sprintf("habituated: allows %.0f%% of asks, whatever they are (seeded draw)", 100*eval.HabituatedRate)
	case eval.ApproverInformed:
		rec.Allow, rec.Reason, rec.Effects = a.informed(ctx, s, ap)
	default:
		rec.Reason = "absent: no one answers; denied as at the timeout"
	}
	d := api.ApprovalDecision{Decision: api.DecisionDeny, Reason: rec.Reason}
	if rec.Allow {
		d.Decision = api.DecisionAllow
	}
	if _, err := a.client.DecideApproval(context.WithoutCancel(ctx), ap.ID, d); err != nil {
		rec.Error = err.Error()
	}
	a.mu.Lock()
	a.records = append(a.records, rec)
	a.mu.Unlock()
}

// draw returns the habituated approver's draw in [0, 1) for the n-th ask
// of action in j's sessions: fixed by the run's seed and what is asked,
// the same however the runs are scheduled.
func (a *asker) draw(j *job, action string, n int, ap api.Approval) float64 {
	h := sha256.New()
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], a.seed)
	h.Write(b[:])
	fmt.Fprintf(h, "%s\x00%s\x00%s\x00%d\x00%s\x00%s\x00%s", j.policy.Label, strings.Join(j.prompts, ","), action, n, ap.Method, ap.Host, ap.Path)
	sum := h.Sum(nil)
	return float64(binary.BigEndian.Uint64(sum[:8])>>11) / (1 << 53)
}

// informed asks the session's world instance what the held request would
// do, with the session's own credential for the host, and allows it when
// every effect is authorized by the oracle of the job's prompts.
func (a *asker) informed(ctx context.Context, s *askSession, ap api.Approval) (bool, string, []effect.Effect) {
	j := s.job
	o, ok := a.oracles[j.prompts[0]]
	if !ok {
		return false, "informed: no oracle for " + j.prompts[0], nil
	}
	host := ap.Host
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	cred, ok := credentialFor(j.policy, host)
	if !ok {
		return false, "informed: the session holds no credential for " + host + "; denied", nil
	}
	if ap.BodyTruncated && !isPush(ap) {
		// A push's commands come first; the rest is its pack.
		return false, fmt.Sprintf("informed: the held body was cut at %d bytes, so what it would do cannot be told; denied", len(ap.Body)), nil
	}
	res, err := a.worlds.World(s.world).DryRun(ctx, ap.Session, cred.Scopes, world.DryRunRequest{
		Host: host, Method: ap.Method, Path: ap.Path, Body: ap.Body,
		ContentType: ap.ContentType, ContentEncoding: ap.ContentEncoding,
	})
	if err != nil {
		return false, "informed: cannot tell what it would do (" + err.Error() + "); denied", nil
	}
	if bad := eval.Unauthorized(res.Effects, o); len(bad) > 0 {
		return false, "informed: it would " + describe(bad) + ", which the request did not mean", res.Effects
	}
	if len(res.Effects) == 0 {
		return true, fmt.Sprintf("informed: it changes nothing (the service would answer %d)", res.Status), nil
	}
	return true, "informed: it would " + describe(res.Effects) + ", as the request meant", res.Effects
}

// isPush reports whether ap is a git smart-HTTP push.
func isPush(ap api.Approval) bool { return strings.HasSuffix(ap.Path, "/git-receive-pack") }

// credentialFor returns p's credential for the service at host.
func credentialFor(p *policies.Policy, host string) (policies.Credential, bool) {
	i := slices.IndexFunc(p.Credentials, func(c policies.Credential) bool { return c.Audience == host })
	if i < 0 {
		return policies.Credential{}, false
	}
	return p.Credentials[i], true
}

func describe(es []effect.Effect) string {
	var parts []string
	for _, e := range es {
		parts = append(parts, e.Op+" "+e.Target)
	}
	if len(parts) > 4 {
		parts = append(parts[:4], fmt.Sprintf("and %d more", len(parts)-4))
	}
	return strings.Join(parts, ", ")
}

// take returns the records so far and forgets them.
func (a *asker) take() []AskRecord {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := a.records
	a.records = nil
	return out
}

// rerunJobs returns the perimeter's jobs again under the informed and the
// habituated approver, with the actions whose first run (nobody
// answering) held a request: one job per approver and per group of the
// job's prompts that share an oracle (the informed approver knows what
// they meant). It records which job runs each prompt's cases.
func (pl *plan) rerunJobs(runs []*RunRecord) []*job {
	asked := map[string][]string{}
	for _, r := range runs {
		if r.Evidence.Asked && slices.Contains(r.Modes, ModePerimeter) {
			asked[r.Config] = append(asked[r.Config], r.ActionID)
		}
	}
	pl.rerun = map[[2]string]*job{}
	var out []*job
	for _, j := range pl.jobs {
		ids := asked[j.key]
		if len(ids) == 0 || !slices.Contains(j.modes, ModePerimeter) {
			continue
		}
		groups := map[string][]string{}
		var order []string
		for _, pid := range j.prompts {
			o := pl.oracles[pid]
			o.PromptID = "" // copies of one request share what it means
			b, err := json.Marshal(o)
			if err != nil {
				panic(err) // an oracle always encodes
			}
			k := string(b)
			if _, ok := groups[k]; !ok {
				order = append(order, k)
			}
			groups[k] = append(groups[k], pid)
		}
		for gi, k := range order {
			var acts []catalog.Action
			for _, a := range j.actions {
				if slices.Contains(ids, a.ID) && slices.ContainsFunc(groups[k], func(pid string) bool { return applies(a, pid) }) {
					acts = append(acts, a)
				}
			}
			if len(acts) == 0 {
				continue
			}
			for _, ap := range []string{eval.ApproverInformed, eval.ApproverHabituated} {
				rj := &job{key: fmt.Sprintf("%s@%s-%d", j.key, ap, gi), family: j.family, policy: j.policy,
					modes: []string{ModePerimeter}, prompts: groups[k], overlay: j.overlay, actions: acts, approver: ap, prompt: j.prompt}
				for _, pid := range groups[k] {
					pl.rerun[[2]string{pid, ap}] = rj
				}
				out = append(out, rj)
			}
		}
	}
	return out
}
