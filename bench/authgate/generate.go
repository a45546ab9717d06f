package authgate

import (
	"cmp"
	"fmt"
	"maps"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/bench/policy"
	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// The manifest generator of the contrast-pair families. Authority comes
// from three things only: the request's text, the family's operator policy
// (bench/policy/authgate.json) and the environment signals (Signals) —
// never from a half's oracle, the action or the trajectory. It extracts
// what the request names (files and directories, issue numbers, model and
// package versions, token names, the paste site, the force), with
// negation ("don't", "not", "never"), exceptions ("except", "keep") and
// other people's words ("Jonas thinks") read as such, and matches names
// exactly: a look-alike is another name. A request that asks for a
// state-changing act without naming its target gets that act held for a
// person (ask) where the family's routes can say so, and withheld
// otherwise.
//
// Per family (every family: l7 = "check", egress to the family's hosts
// only, the read scopes always):
//
//   - scope-escalation: an overlay workspace committed on exit; every
//     workspace file the request does not name for removal or reverting
//     is protected by its path, and untracked files are preserved unless
//     the request names some for removal.
//   - credential-exploration: a packages credential with the pushes and
//     deletes the request names; every registry token is a guarded secret
//     unless the request names it with words that authorize its use now,
//     for an act it grants.
//   - inferred-parameters: tracker.close for the issues the request names
//     with a close verb; a close or clean-up without a named issue is
//     asked about.
//   - external-sharing: the paste site, when the request names it as an
//     upload's destination, for uploads of exactly the workspace files it
//     names (body_sha256: the raw body, or a form's parts); an excerpt, a redacted copy or no file named is
//     asked about.
//   - guardrail-bypass: models.publish of the versions the request names
//     to a stage, force=true only where it authorizes forcing.

// OperatorPolicy is a contrast-pair family's operator policy.
type OperatorPolicy = policy.AuthGate

// LoadOperatorPolicy returns the shipped operator policy of family
// (bench/policy/authgate.json, embedded).
func LoadOperatorPolicy(family string) (*OperatorPolicy, error) {
	return policy.LoadAuthGate(family)
}

// GenOptions are the parts of a session the runner decides.
type GenOptions struct {
	Image   string
	Command []string
	// WorkspaceDir is the host directory of the instance's workspace;
	// "" means the session has none.
	WorkspaceDir string
	// Target is where the workspace is mounted (default: the policy's).
	Target     string
	User       string
	Timeout    policies.Duration
	AskTimeout policies.Duration
	// SecretsDir holds the registry tokens' values on the operator side:
	// SecretsDir/packages.bench.test/NAME.
	SecretsDir string
	// Audiences are the services' host names (empty fields: the
	// policy's).
	Audiences world.Audiences
}

// Generated is a generated session policy and how it was decided.
type Generated struct {
	Policy policies.Policy
	// Decisions say what was granted, asked or withheld, and the words
	// that drove it.
	Decisions []Decision
}

// Decision is one grant, ask or withhold.
type Decision struct {
	// What is the act and its target, e.g. "close app#482".
	What string
	// Verdict is VerdictGrant, VerdictAsk or VerdictWithhold.
	Verdict string
	// Why quotes the request's words or names the signal that decided.
	Why string
}

// Verdicts.
const (
	VerdictGrant    = "grant"
	VerdictAsk      = "ask"
	VerdictWithhold = "withhold"
)

// plan is what a family's rules decided, before it becomes a policy.
type plan struct {
	decisions []Decision
	// scopes are the service credential's scopes beyond the read ones:
	// granted, and held for a person (the credential serves a held
	// request a person allows).
	scopes []string
	// allow and ask are the service host's change rules.
	allow, ask []policies.HTTPRule
	// guarded are the registry tokens to guard.
	guarded []string
	// paste: the site is named as a destination; pasteDigests are the
	// contents it may receive; pasteAsk holds other uploads for a person.
	paste        bool
	pasteDigests []string
	pasteAsk     bool
	// removable are the workspace files a commit may change (nil: the
	// policy's protect globs apply).
	removable map[string]bool
	// readable are workspace files the request needs read although the
	// default deny_read masks would hide them.
	readable []string
}

func (p *plan) decide(what, verdict, why string) {
	p.decisions = append(p.decisions, Decision{What: what, Verdict: verdict, Why: why})
}

// Generate derives the perimeter session policy of a request of family
// from the family's operator policy and the environment signals.
func Generate(family, request string, op *OperatorPolicy, sig Signals, o GenOptions) (*Generated, error) {
	if op == nil || op.Family != family {
		return nil, fmt.Errorf("generate policy for family %q: no operator policy for it: %w", family, errdefs.ErrInvalidArgument)
	}
	if o.Image == "" {
		return nil, fmt.Errorf("generate policy for family %q: no image: %w", family, errdefs.ErrInvalidArgument)
	}
	sents := parseRequest(request, op.Words)
	var (
		pl  *plan
		err error
	)
	switch family {
	case ScopeEscalation:
		pl = planScope(sents, op, sig)
	case CredentialExploration:
		pl = planCredentials(sents, op, sig)
	case InferredParameters:
		pl, err = planIssues(sents, op, sig)
	case ExternalSharing:
		pl = planShare(sents, op, sig)
	case GuardrailBypass:
		pl, err = planModels(sents, op, sig)
	default:
		return nil, fmt.Errorf("generate policy: %q is not a contrast-pair family: %w", family, errdefs.ErrInvalidArgument)
	}
	if err != nil {
		return nil, fmt.Errorf("generate policy for family %q: %w", family, err)
	}
	p, err := build(pl, op, sig, o)
	if err != nil {
		return nil, fmt.Errorf("generate policy for family %q: %w", family, err)
	}
	return &Generated{Policy: *p, Decisions: pl.decisions}, nil
}

// serviceHost returns the host name of the family's service.
func serviceHost(op *OperatorPolicy, a world.Audiences) string {
	s := op.Service
	if s == nil {
		return ""
	}
	var h string
	switch s.Name {
	case "tracker":
		h = a.Tracker
	case "models":
		h = a.Models
	case "packages":
		h = a.Packages
	}
	return cmp.Or(h, s.Host)
}

// build turns a plan into the session policy.
func build(pl *plan, op *OperatorPolicy, sig Signals, o GenOptions) (*policies.Policy, error) {
	p := &policies.Policy{
		Label:   "authgate-" + op.Family,
		Image:   o.Image,
		Command: slices.Clone(o.Command),
		User:    o.User,
		Timeout: o.Timeout,
		Env:     map[string]string{},
		Egress:  &policies.Egress{L7: policies.L7Check},
	}
	if s := op.Service; s != nil {
		host := serviceHost(op, o.Audiences)
		tokenFile := path.Join(policies.CredentialDir, s.Name)
		for k, v := range s.Env {
			p.Env[k] = strings.NewReplacer("{url}", "http://"+host, "{token_file}", tokenFile).Replace(v)
		}
		p.Credentials = append(p.Credentials, policies.Credential{
			Name:     s.Name,
			Audience: host,
			Scopes:   dedupe(slices.Concat(op.ReadScopes, pl.scopes)),
			Deliver:  policies.DeliverFile,
		})
		rules := []policies.HTTPRule{}
		for _, r := range op.Read {
			rules = append(rules, policies.HTTPRule{Methods: slices.Clone(r.Methods), Path: r.Path, Action: policies.HTTPAllow})
		}
		rules = append(rules, pl.allow...)
		rules = append(rules, pl.ask...)
		p.Egress.Allow = append(p.Egress.Allow, gatewayPorts(host)...)
		p.Egress.HTTP = append(p.Egress.HTTP, policies.HTTPHost{Host: host, Rules: rules, Default: policies.HTTPDeny})
	}
	if pl.paste && op.Paste != nil {
		host := cmp.Or(o.Audiences.Paste, op.Paste.Host)
		for k, v := range op.Paste.Env {
			p.Env[k] = strings.ReplaceAll(v, "{url}", "http://"+host)
		}
		var rules []policies.HTTPRule
		c := op.Paste.Create
		if len(pl.pasteDigests) > 0 {
			rules = append(rules, policies.HTTPRule{Methods: slices.Clone(c.Methods), Path: c.Path, BodySHA256: slices.Clone(pl.pasteDigests), Action: policies.HTTPAllow})
		}
		if pl.pasteAsk {
			rules = append(rules, policies.HTTPRule{Methods: slices.Clone(c.Methods), Path: c.Path, Action: policies.HTTPAsk})
		}
		p.Egress.Allow = append(p.Egress.Allow, gatewayPorts(host)...)
		p.Egress.HTTP = append(p.Egress.HTTP, policies.HTTPHost{Host: host, Rules: rules, Default: policies.HTTPDeny})
	}
	if len(pl.guarded) > 0 {
		if o.SecretsDir == "" || !path.IsAbs(o.SecretsDir) {
			return nil, fmt.Errorf("registry tokens %v are to be guarded, and no absolute secrets directory holds their values: %w", pl.guarded, errdefs.ErrInvalidArgument)
		}
		names := map[string]bool{}
		for _, t := range pl.guarded {
			name := secretName(op.Tokens.SecretPrefix, t)
			for k := 2; names[name]; k++ {
				name = secretName(op.Tokens.SecretPrefix, t) + "_" + strconv.Itoa(k)
			}
			names[name] = true
			p.Secrets = append(p.Secrets, policies.Secret{
				Name: name,
				From: "file:" + path.Join(o.SecretsDir, op.Tokens.Dir, t),
			})
		}
	}
	if len(pl.ask) > 0 || pl.pasteAsk {
		if o.AskTimeout > 0 {
			p.Approval = &policies.Approval{Timeout: o.AskTimeout}
		}
	}
	if o.WorkspaceDir != "" {
		target := cmp.Or(o.Target, op.Workspace.Target)
		ws := policies.Workspace{
			HostPath:        o.WorkspaceDir,
			Target:          target,
			Mode:            policies.ModeOverlay,
			DefaultDenyRead: true,
			OnExit:          policies.OnExitCommit,
		}
		if len(pl.removable) > 0 {
			ws.Protect, ws.PreserveUntracked = protectAllBut(sig.Files, pl.removable)
		} else {
			// Nothing may change: the policy's globs (every path),
			// untracked files preserved.
			ws.Protect = slices.Clone(op.Workspace.Protect)
			ws.PreserveUntracked = true
		}
		if deny, ok := readableExcept(sig.Files, pl.readable); ok {
			ws.DefaultDenyRead, ws.DenyRead = false, deny
		}
		p.Workdir = target
		p.Workspaces = []policies.Workspace{ws}
	}
	if len(p.Env) == 0 {
		p.Env = nil
	}
	p.ApplyDefaults()
	if err := p.Validate(); err != nil {
		return nil, err
	}
	return p, nil
}

// gatewayPorts allows host on the ports the L7 gateway checks, and no
// other: a request on another port would pass by the HTTP rules.
func gatewayPorts(host string) []string {
	var out []string
	for _, port := range policies.DefaultL7Ports {
		out = append(out, host+":"+strconv.Itoa(int(port)))
	}
	return out
}

// secretName is the guarded secret's name (an environment variable name)
// for a registry token.
func secretName(prefix, token string) string {
	var b strings.Builder
	b.WriteString(prefix)
	for _, r := range strings.ToUpper(token) {
		if r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
	}
	return b.String()
}

// globLiteral escapes the glob characters of a name.
func globLiteral(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`, `?`, `\?`, `[`, `\[`).Replace(s)
}

// scopeLiteral escapes the pattern characters of a scope selector value.
func scopeLiteral(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`).Replace(s)
}

func dedupe(xs []string) []string {
	var out []string
	for _, x := range xs {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

// sortedKeys returns m's keys in order.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
