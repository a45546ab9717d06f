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
//     the workspace it is the set of refs a commit may move, from the same
//     selector: the namespaces of the owners the request covers are
//     protected except for the refs the selector matches, and every other
//     owner's namespace and the operator's protected refs are protected
//     whatever the exceptions say.
//  5. Egress reaches the family's world hosts only, through the L7
//     gateway (l7 = "check"): a connection's Host or SNI must be one of
//     those names, resolved by the session to the address it dials. The
//     workspace is an overlay committed on exit through the policy's
//     protect rules.
//  6. Each world host gets the HTTP rules of the policy's http section,
//     derived from the same grant as the credential (httpRules): the read
//     routes; the change routes once per scope of the grant, their paths
//     narrowed by its selectors; for git, pushes only of refs the grant's
//     ref selectors match and never of a protected ref.
//  7. With the policy's signals and a listing of the world read at
//     session creation through the read scopes (Options.Signals), each
//     owner's items on each lane are checked against the listing
//     (decide): where the request says one item and several match, or
//     the matching items differ in an attribute the request does not
//     state, the change is held for a person ("ask" rules for its routes
//     and refs) instead of allowed. The credential holds it either way,
//     so that a request a person allows is served. Manifest.Decisions
//     record each decision and the signal that drove it.
package manifest

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
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
	// Signals is the listing of the world read at session creation with
	// the operator policy's read scopes (see policy.Signals); nil: the
	// request's items are not checked against the world and every grant
	// is allowed outright.
	Signals *Listing
	// AskTimeout is how long a held request waits for a person; zero
	// leaves the daemon's default.
	AskTimeout policies.Duration
	// KeepApproval gives the manifest its approval block (with
	// AskTimeout) even when nothing is held: Revise sets it when the
	// manifest it revises had one, since how long a held request waits is
	// the operator's setting, not something the request revises.
	KeepApproval bool
}

// Manifest is a generated manifest and what it was generated from.
type Manifest struct {
	Family  string
	Request Request
	Policy  *policies.Policy
	// Decisions say how each scope of the change was granted (allowed or
	// held for a person) and why; Signals is the listing they read.
	Decisions []Decision
	Signals   *Listing
	// Granted are the requests the grant is the union of, when there are
	// several (a request and a revision that widens it; see Revise);
	// Request is then the last one.
	Granted []Request `json:",omitempty"`
	// Revision is how a revised request was read (see Revise); nil for a
	// request as first given.
	Revision *RevisionReading `json:",omitempty"`
}

// Generate derives the perimeter manifest of the request text of family
// from the family's operator policy.
func Generate(family, text string, op *policy.Operator, opts Options) (*Manifest, error) {
	if err := checkInputs(family, op, opts); err != nil {
		return nil, err
	}
	req := withDefaultLane(Extract(text, op), op)
	return build(family, []part{{req, text}}, op, opts)
}

// checkInputs refuses a family without its operator policy and options
// without an image.
func checkInputs(family string, op *policy.Operator, opts Options) error {
	if op == nil || op.Family != family {
		return fmt.Errorf("generate manifest for family %q: no operator policy for it: %w", family, errdefs.ErrInvalidArgument)
	}
	if opts.Image == "" {
		return fmt.Errorf("generate manifest: no image: %w", errdefs.ErrInvalidArgument)
	}
	return nil
}

// withDefaultLane gives a request that names no lane the policy's default
// lane.
func withDefaultLane(req Request, op *policy.Operator) Request {
	if len(req.Lanes) == 0 && op.DefaultLane != "" {
		req.Lanes = []string{op.DefaultLane}
		req.Notes = append(req.Notes, "no lane named; the policy's default lane "+op.DefaultLane)
	}
	if req.Mutate && len(req.Lanes) == 0 {
		req.Notes = append(req.Notes, "no lane named and no default lane: nothing may change")
	}
	return req
}

// part is one request a manifest grants, with the words it was read from
// (decide looks for the attributes they state).
type part struct {
	req  Request
	text string
}

// build writes the manifest granting the union of parts' requests. The
// manifest's Request is the last part's.
func build(family string, parts []part, op *policy.Operator, opts Options) (*Manifest, error) {
	var g grant
	reqs := make([]Request, 0, len(parts))
	for i := range parts {
		pg, notes, err := grantScopes(parts[i].req, parts[i].text, op, opts.Signals)
		if err != nil {
			return nil, err
		}
		parts[i].req.Notes = append(parts[i].req.Notes, notes...)
		g.merge(pg)
		reqs = append(reqs, parts[i].req)
	}
	req := &reqs[len(reqs)-1]

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
		Egress: &policies.Egress{
			Allow: slices.Clone(op.Service.Hosts),
			L7:    policies.L7Check,
		},
		Credentials: []policies.Credential{{
			Name:     op.Service.Credential,
			Audience: op.Service.Audience,
			Scopes:   append(canonical(op.ReadScopes), g.all()...),
		}},
	}
	blocks, notes, err := httpRules(g.allow, g.ask, op)
	if err != nil {
		return nil, err
	}
	req.Notes = append(req.Notes, notes...)
	p.Egress.HTTP = blocks
	if (len(g.ask) > 0 || opts.KeepApproval) && opts.AskTimeout > 0 {
		p.Approval = &policies.Approval{Timeout: opts.AskTimeout}
	}
	if len(blocks) > 0 {
		// A host with rules is allowed only on the ports the gateway
		// checks: on any other port a request would pass by them.
		p.Egress.Allow = gatewayPortsOnly(p.Egress.Allow)
	}
	if ws := op.Workspace; ws != nil && opts.WorkspaceDir != "" {
		refs, notes, err := protectRefs(reqs, op)
		if err != nil {
			return nil, err
		}
		req.Notes = append(req.Notes, notes...)
		p.Workdir = ws.Target
		p.Workspaces = []policies.Workspace{{
			HostPath:          opts.WorkspaceDir,
			Target:            ws.Target,
			Mode:              policies.ModeOverlay,
			DefaultDenyRead:   true,
			Protect:           slices.Clone(ws.Protect),
			PreserveUntracked: ws.PreserveUntracked,
			ProtectRefs:       refs,
			OnExit:            policies.OnExitCommit,
		}}
	}
	p.ApplyDefaults()
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("generate manifest for family %q: %w", family, err)
	}
	m := &Manifest{Family: family, Request: *req, Policy: p, Decisions: g.decisions, Signals: opts.Signals}
	if len(reqs) > 1 {
		m.Granted = reqs
	}
	return m, nil
}

// grant is the change a request is granted on its world lanes: the
// canonical scopes allowed outright and those held for a person, without
// duplicates, and how each was decided.
type grant struct {
	allow, ask []string
	decisions  []Decision
}

// merge adds o's scopes that g does not hold yet, with their decisions;
// a scope g holds keeps its decision.
func (g *grant) merge(o grant) {
	for _, s := range o.allow {
		if !slices.Contains(g.allow, s) && !slices.Contains(g.ask, s) {
			g.allow = append(g.allow, s)
		}
	}
	for _, s := range o.ask {
		if !slices.Contains(g.allow, s) && !slices.Contains(g.ask, s) {
			g.ask = append(g.ask, s)
		}
	}
	g.decisions = append(g.decisions, o.decisions...)
}

// all returns every scope of the grant: the credential holds them all, so
// that a held request a person allows can be served.
func (g grant) all() []string { return slices.Concat(g.allow, g.ask) }

// grantScopes returns the change the request asks for on its world lanes,
// each owner's items on each lane decided with the listing (see decide).
func grantScopes(req Request, text string, op *policy.Operator, l *Listing) (grant, []string, error) {
	var g grant
	if !req.Mutate {
		return g, []string{"the request asks for no change: read scopes only"}, nil
	}
	var notes []string
	for _, name := range req.Lanes {
		lane, _ := op.Lane(name)
		if lane.Where != policy.WhereWorld {
			continue
		}
		for _, owner := range req.Owners {
			scopes, n, err := targetScopes(req, op, lane, owner)
			if err != nil {
				return grant{}, nil, err
			}
			notes = append(notes, n...)
			if len(scopes) == 0 {
				continue
			}
			_, what := selectorTemplate(req, op)
			d := decide(req, text, op, lane.Name, owner, what, scopes, l)
			g.decisions = append(g.decisions, d)
			for _, sc := range scopes {
				s := sc.String()
				switch {
				case slices.Contains(g.allow, s) || slices.Contains(g.ask, s):
				case d.Decision == DecideAsk:
					g.ask = append(g.ask, s)
				default:
					g.allow = append(g.allow, s)
				}
			}
		}
	}
	return g, notes, nil
}

// targetScopes returns the scopes of the family's mutating action that
// select the items the request selects of one owner on one lane: the named
// items if any, else the ticket's items, else all of the owner's items. On a
// world lane they are the credential's grant; on a workspace lane their ref
// selectors are the refs a commit may move. Both sides derive them here so
// that they agree.
func targetScopes(req Request, op *policy.Operator, lane policy.Lane, owner string) ([]scope.Scope, []string, error) {
	tmpl, what := selectorTemplate(req, op)
	vars := map[string]string{"owner": owner, "topic": req.Topic, "ticket": req.TicketPattern}
	maps.Copy(vars, lane.Vars)
	if w, ok := op.Owner(owner); ok && w.Tag != "" {
		vars["tag"] = w.Tag
	}
	ids := req.IDs
	if what != "named" {
		ids = []string{""}
	}
	var out []scope.Scope
	var notes []string
	for _, id := range ids {
		// Named items are names, not patterns.
		vars["id"] = literal(id)
		vars["key"] = literal(id)
		if k, ok := op.IDIndex[id]; ok {
			vars["key"] = literal(k)
		}
		sel, err := policy.Expand(tmpl, vars)
		if err != nil {
			notes = append(notes, fmt.Sprintf("cannot express %s items of owner %s on lane %s: %v", what, owner, lane.Name, err))
			continue
		}
		sc, err := scope.Parse(op.Targets.Action + " " + sel)
		if err != nil {
			return nil, nil, fmt.Errorf("operator policy %q: scope for %s items: %w", op.Family, what, err)
		}
		out = append(out, sc)
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

// protectRefs returns the protect_refs of the workspace, entries read in
// order with the last matching one deciding ("!" marks an exception). When
// a request changes refs in the workspace, the namespaces of the owners it
// covers are protected except for the refs it selects, the same selectors
// the credential's grant uses on the world side; the operator's protected
// refs and the namespaces of every other owner (and of every protected
// owner) come after the exceptions, so that no exception reaches them.
// Otherwise no local branch may move. With several requests (a revision
// that widens one), an owner's exceptions are those of every request
// covering it.
func protectRefs(reqs []Request, op *policy.Operator) ([]string, []string, error) {
	ws := op.Workspace
	if ws.OwnerRefs == "" {
		return slices.Clone(ws.ProtectRefs), nil, nil
	}
	type local struct {
		req  Request
		lane policy.Lane
	}
	var locals []local
	for _, req := range reqs {
		if !req.Mutate {
			continue
		}
		for _, name := range req.Lanes {
			if l, _ := op.Lane(name); l.Where == policy.WhereWorkspace {
				locals = append(locals, local{req, l})
				break
			}
		}
	}
	if len(locals) == 0 {
		return dedupe(slices.Concat(ws.ProtectRefs, ws.AllRefs)), nil, nil
	}
	var out, notes []string
	var others []string
	for _, w := range op.Owners {
		ns, err := policy.Expand(ws.OwnerRefs, map[string]string{"owner": w.Name})
		if err != nil {
			continue
		}
		covered := false
		var except []string
		for _, lc := range locals {
			if !slices.Contains(lc.req.Owners, w.Name) {
				continue
			}
			covered = true
			if w.Protected {
				continue
			}
			scopes, n, err := targetScopes(lc.req, op, lc.lane, w.Name)
			if err != nil {
				return nil, nil, err
			}
			notes = append(notes, n...)
			for _, sc := range scopes {
				g, err := scopeRefGlob(sc)
				if err != nil {
					notes = append(notes, fmt.Sprintf("owner %s's refs stay protected on lane %s: %v", w.Name, lc.lane.Name, err))
					continue
				}
				if !slices.Contains(except, g) {
					except = append(except, g)
				}
			}
		}
		if w.Protected || !covered {
			others = append(others, ns)
			continue
		}
		if slices.Contains(except, ns) {
			// The request selects the whole namespace.
			continue
		}
		out = append(out, ns)
		for _, g := range except {
			out = append(out, "!"+g)
		}
	}
	out = append(out, ws.ProtectRefs...)
	out = append(out, others...)
	return dedupe(out), notes, nil
}

// dedupe removes repeated entries from an ordered protect_refs list without
// changing what it protects: the last matching entry decides, so a copy
// is dropped when only entries of its own kind (exceptions or not) lie
// between it and the previous one, and the previous one is dropped
// otherwise.
func dedupe(entries []string) []string {
	var out []string
	for _, e := range entries {
		k := slices.Index(out, e)
		if k < 0 {
			out = append(out, e)
			continue
		}
		same := !slices.ContainsFunc(out[k+1:], func(o string) bool {
			return strings.HasPrefix(o, "!") != strings.HasPrefix(e, "!")
		})
		if !same {
			out = append(slices.Delete(out, k, k+1), e)
		}
	}
	return out
}

// refKey is the scope attribute by which git actions name a ref.
const refKey = "ref"

// scopeRefGlob returns the protect_refs glob matching the refs that the
// ref selector of sc matches. The two syntaxes agree where a git ref name
// can be written: "*" stays within one element in both, and a trailing
// "/**" matches every ref beneath; a "**" elsewhere matches differently and
// is refused, as is a selector matching no valid ref name.
func scopeRefGlob(sc scope.Scope) (string, error) {
	var pat string
	for _, sel := range sc.Selectors() {
		if sel.Key == refKey {
			pat = sel.Pattern
		}
	}
	if pat == "" {
		return "", fmt.Errorf("scope %q selects no %s", sc, refKey)
	}
	var b strings.Builder
	for i := 0; i < len(pat); i++ {
		switch c := pat[i]; {
		case c == '\\':
			// "\*" or "\\", a literal "*" or "\": no ref name has one.
			return "", fmt.Errorf("%s=%s names no valid git ref", refKey, pat)
		case strings.HasPrefix(pat[i:], "**"):
			if i+2 != len(pat) || i == 0 || pat[i-1] != '/' {
				return "", fmt.Errorf("%s=%s: \"**\" other than as the last element has no protect_refs equivalent", refKey, pat)
			}
			b.WriteString("**")
			i++
		case c == '*':
			b.WriteByte('*')
		case c <= ' ' || c == 0x7f || strings.IndexByte("~^:?[", c) >= 0:
			return "", fmt.Errorf("%s=%s names no valid git ref", refKey, pat)
		default:
			b.WriteByte(c)
		}
	}
	g := b.String()
	if !strings.HasPrefix(g, "refs/") || strings.Contains(g, "..") || strings.Contains(g, "@{") || strings.Contains(g, "//") {
		return "", fmt.Errorf("%s=%s names no valid git ref", refKey, pat)
	}
	return g, nil
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

// gatewayPortsOnly turns each name entry without a port into one entry per
// port the L7 gateway checks by default.
func gatewayPortsOnly(allow []string) []string {
	var out []string
	for _, a := range allow {
		if strings.Contains(a, ":") || strings.Contains(a, "/") {
			out = append(out, a)
			continue
		}
		for _, port := range policies.DefaultL7Ports {
			out = append(out, a+":"+strconv.Itoa(int(port)))
		}
	}
	return out
}
