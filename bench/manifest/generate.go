// Package manifest writes the perimeter-mode session manifest of a benchmark
// request. Its input is the request's text and its family's operator policy
// (bench/policy); it never sees the oracle, the action list or the prompt's
// S/B/R labels, and it reads no files.
//
// The rules, in order:
//
//  1. Extract what the text states: whether it asks for a change, the items
//     it names, the ticket or ticket range, the topic, whose items ("my",
//     "the", "sam's") and the lane phrase.
//  2. Every session may read the family's service (the policy's read scopes).
//  3. A change is granted only on the lanes the request names (or the
//     policy's default lane), only for the owners it covers (the caller
//     unless the request names someone else; never a protected owner), and
//     only for the items it selects: the named items if any, else the
//     ticket's items, else all of the owner's items in the lane.
//  4. On a lane in the world the grant is a credential scope; on a lane in
//     the workspace it is the set of refs a commit may move: every owner
//     namespace the request does not cover, and the operator's protected
//     refs, are protected.
//  5. Egress reaches the family's world hosts only; the workspace is an
//     overlay committed on exit through the policy's protect rules.
package manifest

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/bench/policy"
	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/policies"
)

// Options are the parts of a session the runner decides.
type Options struct {
	// Label names the session; default "bench-FAMILY".
	Label string
	// Image is the sandbox image (required).
	Image   string
	Command []string
	// WorkspaceDir is the host directory of the workspace; empty means the
	// session has none.
	WorkspaceDir string
	User         string
	Timeout      policies.Duration
}

// Manifest is a generated manifest and what it was generated from.
type Manifest struct {
	Family  string
	Request Request
	Policy  *policies.Policy
}

// Generate derives the perimeter manifest of the request text of family
// from the family's operator policy.
func Generate(family, text string, op *policy.Operator, opts Options) (*Manifest, error) {
	if op == nil || op.Family != family {
		return nil, fmt.Errorf("generate manifest for family %q: no operator policy for it: %w", family, errdefs.ErrInvalidArgument)
	}
	if opts.Image == "" {
		return nil, fmt.Errorf("generate manifest: no image: %w", errdefs.ErrInvalidArgument)
	}
	req := Extract(text, op)
	if len(req.Lanes) == 0 && op.DefaultLane != "" {
		req.Lanes = []string{op.DefaultLane}
		req.Notes = append(req.Notes, "no lane named; the policy's default lane "+op.DefaultLane)
	}
	if req.Mutate && len(req.Lanes) == 0 {
		req.Notes = append(req.Notes, "no lane named and no default lane: nothing may change")
	}

	grants, notes, err := grantScopes(req, op)
	if err != nil {
		return nil, err
	}
	req.Notes = append(req.Notes, notes...)

	label := opts.Label
	if label == "" {
		label = "bench-" + family
	}
	p := &policies.Policy{
		Label:   label,
		Image:   opts.Image,
		Command: slices.Clone(opts.Command),
		User:    opts.User,
		Timeout: opts.Timeout,
		Env:     maps.Clone(op.Service.Env),
		Egress:  &policies.Egress{Allow: slices.Clone(op.Service.Hosts)},
		Credentials: []policies.Credential{{
			Name:     op.Service.Credential,
			Audience: op.Service.Audience,
			Scopes:   append(canonical(op.ReadScopes), grants...),
		}},
	}
	if ws := op.Workspace; ws != nil && opts.WorkspaceDir != "" {
		p.Workdir = ws.Target
		p.Workspaces = []policies.Workspace{{
			HostPath:          opts.WorkspaceDir,
			Target:            ws.Target,
			Mode:              policies.ModeOverlay,
			DefaultDenyRead:   true,
			Protect:           slices.Clone(ws.Protect),
			PreserveUntracked: ws.PreserveUntracked,
			ProtectRefs:       protectRefs(req, op),
			OnExit:            policies.OnExitCommit,
		}}
	}
	p.ApplyDefaults()
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("generate manifest for family %q: %w", family, err)
	}
	return &Manifest{Family: family, Request: req, Policy: p}, nil
}

// grantScopes returns the scopes of the change the request asks for on its
// world lanes, canonical and without duplicates.
func grantScopes(req Request, op *policy.Operator) ([]string, []string, error) {
	if !req.Mutate {
		return nil, []string{"the request asks for no change: read scopes only"}, nil
	}
	var out, notes []string
	for _, name := range req.Lanes {
		lane, _ := op.Lane(name)
		if lane.Where != policy.WhereWorld {
			continue
		}
		tmpl, what := selectorTemplate(req, op)
		for _, owner := range req.Owners {
			vars := map[string]string{"owner": owner, "topic": req.Topic, "ticket": req.TicketPattern}
			maps.Copy(vars, lane.Vars)
			if w, ok := op.Owner(owner); ok && w.Tag != "" {
				vars["tag"] = w.Tag
			}
			ids := req.IDs
			if what != "named" {
				ids = []string{""}
			}
			for _, id := range ids {
				// Named items are names, not patterns.
				vars["id"] = literal(id)
				vars["key"] = literal(id)
				if k, ok := op.IDIndex[id]; ok {
					vars["key"] = literal(k)
				}
				sel, err := policy.Expand(tmpl, vars)
				if err != nil {
					notes = append(notes, fmt.Sprintf("cannot express %s items of owner %s on lane %s: %v", what, owner, name, err))
					continue
				}
				sc, err := scope.Parse(op.Targets.Action + " " + sel)
				if err != nil {
					return nil, nil, fmt.Errorf("operator policy %q: scope for %s items: %w", op.Family, what, err)
				}
				if s := sc.String(); !slices.Contains(out, s) {
					out = append(out, s)
				}
			}
		}
	}
	return out, notes, nil
}

// selectorTemplate picks the target template: named items, else a ticket
// (with the topic when the policy distinguishes topics), else all of the
// owner's items.
func selectorTemplate(req Request, op *policy.Operator) (tmpl, what string) {
	t := op.Targets
	switch {
	case len(req.IDs) > 0:
		return t.Named, "named"
	case req.TicketPattern != "" && req.Topic != "" && t.TopicTicket != "" && isName(req.Topic):
		return t.TopicTicket, "ticket"
	case req.TicketPattern != "":
		return t.Ticket, "ticket"
	default:
		return t.Owned, "owned"
	}
}

// isName reports whether s can stand in a name pattern verbatim.
func isName(s string) bool {
	return s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.')
	})
}

// protectRefs returns the refs a commit may not move. When the request
// changes refs in the workspace, those are the operator's protected refs
// and the namespaces of every owner the request does not cover (and of
// every protected owner); otherwise no local branch may move.
func protectRefs(req Request, op *policy.Operator) []string {
	ws := op.Workspace
	if ws.OwnerRefs == "" {
		return slices.Clone(ws.ProtectRefs)
	}
	local := false
	for _, name := range req.Lanes {
		if l, _ := op.Lane(name); l.Where == policy.WhereWorkspace {
			local = true
		}
	}
	out := slices.Clone(ws.ProtectRefs)
	add := func(r string) {
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	if !req.Mutate || !local {
		for _, r := range ws.AllRefs {
			add(r)
		}
		return out
	}
	for _, w := range op.Owners {
		if !w.Protected && slices.Contains(req.Owners, w.Name) {
			continue
		}
		r, err := policy.Expand(ws.OwnerRefs, map[string]string{"owner": w.Name})
		if err == nil {
			add(r)
		}
	}
	return out
}

// literal escapes the scope pattern characters of a name.
func literal(s string) string {
	return strings.NewReplacer(`\`, `\\`, `*`, `\*`).Replace(s)
}

func canonical(scopes []string) []string {
	out := make([]string, 0, len(scopes))
	for _, s := range scopes {
		if sc, err := scope.Parse(s); err == nil {
			s = sc.String()
		}
		out = append(out, s)
	}
	return out
}
