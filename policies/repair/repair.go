// Package repair computes the smallest revision of a session's policy
// that would allow an action the session was refused or held for, the
// "minimal repair" its decision names (policies.Repair):
//
//   - a name the DNS proxy refused: the allow entry to add (name:443,
//     since a lookup does not say its port), or the deny entry to remove
//     if one refused it; for addresses of its answer that were dropped,
//     the deny entry covering them, or the allow_private range to add;
//   - an address:port the gateway dropped: the CIDR entry with its port;
//   - an HTTP request an http rule denied or held: an allow rule for its
//     method and path (and the refs of a push), inserted before the rule
//     that decided (or after the last, when the block's default did);
//   - a write a commit rejected: the protect pattern to remove, the
//     git_allow path to add, or preserve_untracked to turn off;
//   - a read of a deny_read mask: its pattern to remove (a built-in one:
//     default_deny_read off, the other built-in patterns written out).
//
// Where no policy change allows the action (an address no session may
// reach, a write of a hook), the repair says so. Each repair is computed
// against the policy the session has now, and checked: the revised policy
// must validate and must allow the action (for HTTP, decided by the same
// compiled rules as the L7 gateway's). Whether a running session can take
// it as a revision is policies.Diff's answer (Repair.Revisable).
//
//	a, ok := repair.FromEvent(ev) // an audit event of a refusal or hold
//	r, revised := repair.For(policy, a)
//	// r.Changes, r.HCL; revised is nil unless r.Changes applies
package repair

import (
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
	"github.com/airlock-sandbox/airlock/egress/httprule"
	"github.com/airlock-sandbox/airlock/fsscope"
	"github.com/airlock-sandbox/airlock/fsscope/glob"
	"github.com/airlock-sandbox/airlock/policies"
)

// Kinds of Action.
const (
	// KindName: the DNS proxy refused a lookup of Name.
	KindName = "name"
	// KindAddress: the gateway dropped a connection to Addr:Port.
	KindAddress = "address"
	// KindHTTP: an http rule denied or held a request (Host, Method,
	// Path, Refs).
	KindHTTP = "http"
	// KindWrite: a commit rejected a write of Path (a sandbox path) by
	// Rule.
	KindWrite = "write"
	// KindRead: deny_read masked Path (a sandbox path) by Rule.
	KindRead = "read"
)

// DefaultPort is the port a name's allow entry gets: a lookup does not say
// which port the session wanted, and agents reach services over HTTPS.
const DefaultPort = 443

// Action is what a session was refused or held for.
type Action struct {
	Kind string
	// Name is the name looked up (KindName) or the request's host
	// (KindHTTP).
	Name string
	// Dropped are addresses of a KindName answer that were refused.
	Dropped []netip.Addr
	// Addr and Port are a KindAddress destination.
	Addr netip.Addr
	Port uint16
	// Method, Path and Refs are a KindHTTP request's (its path
	// normalized; the refs a push updates). Path is also the sandbox
	// path a KindWrite or KindRead is of.
	Method string
	Path   string
	Refs   []string
	// Rule is what refused a KindWrite (fsscope.Rule*) or a KindRead
	// (the deny_read pattern).
	Rule string
}

// For returns the smallest revision of p that allows a, and p with it
// applied (nil when there is nothing to apply: a is allowed already, or no
// change allows it). p is the session's policy as recorded (validated,
// defaults applied); it is not modified.
func For(p *policies.Policy, a Action) (policies.Repair, *policies.Policy) {
	revised := p.Clone()
	var (
		r   policies.Repair
		err error
	)
	switch a.Kind {
	case KindName:
		r, err = forName(revised, a)
	case KindAddress:
		r, err = forAddress(revised, a)
	case KindHTTP:
		r, err = forHTTP(revised, a)
	case KindWrite:
		r, err = forWrite(revised, a)
	case KindRead:
		r, err = forRead(revised, a)
	default:
		return policies.Repair{Reason: fmt.Sprintf("no repair is known for a %q decision", a.Kind)}, nil
	}
	if err != nil {
		return policies.Repair{Reason: err.Error()}, nil
	}
	if r.Allowed || len(r.Changes) == 0 {
		return r, nil
	}
	r.HCL = policies.RepairHCL(r.Changes)
	if err := revised.Validate(); err != nil {
		r.Reason = "the revised policy would not validate: " + err.Error()
		return r, nil
	}
	rev := policies.Diff(p, revised)
	if len(rev.Refused) > 0 {
		parts := make([]string, len(rev.Refused))
		for i, f := range rev.Refused {
			parts[i] = f.Field + ": " + f.Reason
		}
		r.Reason = "a running session cannot take it: " + strings.Join(parts, "; ")
		return r, revised
	}
	r.Revisable = true
	return r, revised
}

// noChange is the error of an action no policy change allows.
type noChange string

func (e noChange) Error() string { return string(e) }

// forName repairs a refused lookup of a.Name (and, with a.Dropped, the
// addresses its answer had refused).
func forName(p *policies.Policy, a Action) (policies.Repair, error) {
	var r policies.Repair
	name, err := allowlist.ToFQDN(a.Name)
	if err != nil {
		return r, noChange(fmt.Sprintf("%q is not a name an egress entry can allow: %v", a.Name, err))
	}
	if p.Egress == nil {
		return r, noChange("the session has no egress block, so no network: a policy with one makes a new session")
	}
	list, err := allowlist.Compile(p.Egress.Allow, p.Egress.Deny)
	if err != nil {
		return r, err
	}
	d := list.MatchName(name)
	if !d.Allowed && d.Rule != "" {
		r.Changes = append(r.Changes, removeEntry(&p.Egress.Deny, policies.RepairEgressDeny, d.Rule))
		r.Note = fmt.Sprintf("removing deny entry %q allows every name it denied", d.Rule)
		if list, err = allowlist.Compile(p.Egress.Allow, p.Egress.Deny); err != nil {
			return r, err
		}
		d = list.MatchName(name)
	}
	if !d.Allowed {
		e := policies.EgressRule{Name: name.WithoutTrailingDot(), Port: DefaultPort}
		r.Changes = append(r.Changes, addEntry(&p.Egress.Allow, policies.RepairEgressAllow, e.String()))
		r.Note = joinNote(r.Note, fmt.Sprintf("a lookup does not say its port: port %d is assumed (write another, or none for every port)", DefaultPort))
	}
	for _, addr := range a.Dropped {
		c, err := allowAddress(p, list, addr)
		if err != nil {
			return r, err
		}
		if c != nil && !slices.ContainsFunc(r.Changes, func(x policies.RepairChange) bool { return x == *c }) {
			r.Changes = append(r.Changes, *c)
		}
	}
	if len(r.Changes) == 0 {
		if len(a.Dropped) == 0 {
			r.Allowed = true
		} else {
			return r, noChange("the name is allowed, and its answer's addresses are refused by the daemon, not the session's policy")
		}
	}
	return r, nil
}

// allowAddress is the change that lets an answer of an allowed name pin
// addr, nil if none is needed, or an error when no change can.
func allowAddress(p *policies.Policy, list *allowlist.List, addr netip.Addr) (*policies.RepairChange, error) {
	if rg, ok := allowlist.Never(addr); ok {
		return nil, noChange(fmt.Sprintf("%v is %s (%v): no session may reach it, whatever its policy", addr, rg.Reason, rg.Prefix))
	}
	if rule, denied := list.AddrDenied(addr); denied {
		c := removeEntry(&p.Egress.Deny, policies.RepairEgressDeny, rule)
		return &c, nil
	}
	if _, ok := allowlist.Private(addr); ok {
		for _, s := range p.Egress.AllowPrivate {
			if pfx, reason := policies.ParsePrivateRange(s); reason == "" && pfx.Contains(addr) {
				return nil, nil
			}
		}
		c := addEntry(&p.Egress.AllowPrivate, policies.RepairEgressAllowPrivate, netip.PrefixFrom(addr, addr.BitLen()).String())
		return &c, nil
	}
	return nil, nil
}

// forAddress repairs a dropped connection to a.Addr:a.Port.
func forAddress(p *policies.Policy, a Action) (policies.Repair, error) {
	var r policies.Repair
	if !a.Addr.IsValid() {
		return r, noChange("the decision names no address")
	}
	if p.Egress == nil {
		return r, noChange("the session has no egress block, so no network: a policy with one makes a new session")
	}
	if rg, ok := allowlist.Never(a.Addr); ok {
		return r, noChange(fmt.Sprintf("%v is %s (%v): no session may reach it, whatever its policy", a.Addr, rg.Reason, rg.Prefix))
	}
	list, err := allowlist.Compile(p.Egress.Allow, p.Egress.Deny)
	if err != nil {
		return r, err
	}
	covers := func(c allowlist.AddrRule) bool {
		return (c.Prefix.Contains(a.Addr) || c.Prefix.Contains(a.Addr.Unmap())) && (c.Port == 0 || c.Port == a.Port)
	}
	allowed := false
	for _, c := range list.CIDRs() {
		switch {
		case !covers(c):
		case c.Deny:
			rule := policies.EgressRule{Prefix: c.Prefix, Port: c.Port}.String()
			r.Changes = append(r.Changes, removeEntry(&p.Egress.Deny, policies.RepairEgressDeny, rule))
			r.Note = joinNote(r.Note, fmt.Sprintf("removing deny entry %q allows every address it denied", rule))
		default:
			allowed = true
		}
	}
	if allowed {
		if len(r.Changes) == 0 {
			r.Allowed = true
		}
		return r, nil
	}
	e := policies.EgressRule{Prefix: netip.PrefixFrom(a.Addr.Unmap(), a.Addr.Unmap().BitLen()), Port: a.Port}
	r.Changes = append(r.Changes, addEntry(&p.Egress.Allow, policies.RepairEgressAllow, e.String()))
	if _, ok := allowlist.Private(a.Addr); ok {
		r.Note = joinNote(r.Note, "the address is private: a name resolving to it also needs allow_private")
	}
	return r, nil
}

// forHTTP repairs a request an http rule denied or held: an allow rule for
// its method and path (and refs), before the rule that decided.
func forHTTP(p *policies.Policy, a Action) (policies.Repair, error) {
	var r policies.Repair
	if p.Egress == nil || len(p.Egress.HTTP) == 0 {
		return r, noChange("no http rule decides requests to " + a.Name + ": the request was refused by the gateway itself, not a rule")
	}
	set, err := httprule.Compile(p.Egress.HTTP)
	if err != nil {
		return r, err
	}
	h := set.For(a.Name)
	if h == nil {
		return r, noChange("no http block covers " + a.Name + ": the request was refused by the gateway itself, not a rule")
	}
	req := probe(a)
	d := h.Decide(req)
	if d.Action == policies.HTTPAllow {
		// Its rules allow the request whatever its body: a revision since
		// the decision did.
		r.Allowed = true
		return r, nil
	}
	if d.Index < 0 && !strings.HasSuffix(d.Rule, " default") {
		return r, noChange(d.Rule + ": no rule allows it")
	}
	// The rule must allow this request and no other: a path rules read
	// as a glob, or a push without the refs it updates, would allow more.
	if strings.Contains(a.Path, "*") {
		return r, noChange("the request's path holds '*', which an http rule reads as a glob: no rule allows this path alone (approve the request once instead)")
	}
	if httprule.IsReceivePack(a.Method, a.Path) && len(a.Refs) == 0 {
		return r, noChange("a push that updates no ref: a rule allowing it would allow every push (approve the request once instead)")
	}
	rule := policies.HTTPRule{Methods: []string{strings.ToUpper(a.Method)}, Path: a.Path, Action: policies.HTTPAllow}
	if len(a.Refs) > 0 {
		rule.Refs = slices.Clone(a.Refs)
	}
	bi := slices.IndexFunc(p.Egress.HTTP, func(b policies.HTTPHost) bool { return b.Host == h.Name() })
	block := &p.Egress.HTTP[bi]
	c := policies.RepairChange{Field: policies.RepairEgressHTTP, Block: block.Host, Op: policies.RepairInsert, Rule: &rule}
	at := len(block.Rules)
	if d.Index >= 0 {
		at, c.Before = d.Index, d.Index+1
	}
	// The allow rule reads no body: placed before a rule that does and
	// matches the request's method and path, it would decide every body
	// that rule (or one after it) decided otherwise.
	for i := at; i < len(block.Rules); i++ {
		if br := block.Rules[i]; (len(br.JSON) > 0 || len(br.BodySHA256) > 0) && matchesIgnoringBody(block.Host, br, req) {
			return r, noChange(fmt.Sprintf("rule %d of http %q decides requests to %s %s by their body: an allow rule for the method and path would decide every body (approve the request once instead)", i+1, block.Host, a.Method, a.Path))
		}
	}
	block.Rules = slices.Insert(slices.Clone(block.Rules), at, rule)
	r.Changes = append(r.Changes, c)
	// The revised rules must allow the request, as the gateway decides.
	set, err = httprule.Compile(p.Egress.HTTP)
	if err != nil {
		return r, fmt.Errorf("no allow rule can be written for the request: %w", err)
	}
	if d := set.For(a.Name).Decide(req); d.Action != policies.HTTPAllow {
		return r, noChange("no allow rule for its method and path allows the request: " + d.Rule + " still decides it")
	}
	return r, nil
}

// matchesIgnoringBody reports whether rule, without its body
// conditions, matches req (its method, path and refs).
func matchesIgnoringBody(host string, rule policies.HTTPRule, req httprule.Request) bool {
	rule.JSON, rule.JSONMatch, rule.BodySHA256, rule.Action = nil, "", nil, policies.HTTPAllow
	set, err := httprule.Compile([]policies.HTTPHost{{Host: host, Rules: []policies.HTTPRule{rule}, Default: policies.HTTPDeny}})
	if err != nil {
		return true // cannot tell: as if it matched
	}
	return set.For(host).Decide(req).Action == policies.HTTPAllow
}

// probe is a's request as the gateway's rules see it, with a body no
// allow rule's json or body_sha256 conditions match and every deny or ask
// rule's do: a repair must allow the request whatever its body.
func probe(a Action) httprule.Request {
	req := httprule.Request{Method: a.Method, Path: a.Path, JSONOpaque: true, BodyOpaque: true}
	if httprule.IsReceivePack(a.Method, a.Path) {
		req.IsPush = true
		for _, ref := range a.Refs {
			req.Push = append(req.Push, httprule.RefUpdate{Ref: ref})
		}
	}
	return req
}

// forWrite repairs a write a commit rejected.
func forWrite(p *policies.Policy, a Action) (policies.Repair, error) {
	var r policies.Repair
	var w *policies.Workspace
	for i := range p.Workspaces {
		if within(a.Path, p.Workspaces[i].Target) && (w == nil || len(p.Workspaces[i].Target) > len(w.Target)) {
			w = &p.Workspaces[i]
		}
	}
	if w == nil {
		return r, noChange(fmt.Sprintf("no workspace of the session holds %s", a.Path))
	}
	rel := strings.TrimPrefix(strings.TrimPrefix(a.Path, w.Target), "/")
	switch a.Rule {
	case fsscope.RuleProtect:
		set, err := glob.NewSet(w.Protect, true)
		if err != nil {
			return r, err
		}
		pat, ok := set.Covers(rel, false)
		if !ok {
			pat, ok = set.Covers(rel, true)
		}
		if !ok {
			r.Allowed = true
			return r, nil
		}
		r.Changes = append(r.Changes, removeBlockEntry(&w.Protect, policies.RepairProtect, w.HostPath, pat))
		r.Note = fmt.Sprintf("removing protect pattern %q lets a commit carry every path it covers", pat)
	case fsscope.RuleGitMeta:
		if slices.Contains(w.GitAllow, rel) {
			r.Allowed = true
			return r, nil
		}
		r.Changes = append(r.Changes, addBlockEntry(&w.GitAllow, policies.RepairGitAllow, w.HostPath, rel))
	case fsscope.RulePreserveUntracked:
		if !w.PreserveUntracked {
			r.Allowed = true
			return r, nil
		}
		w.PreserveUntracked = false
		r.Changes = append(r.Changes, policies.RepairChange{Field: policies.RepairPreserveUntracked, Block: w.HostPath, Op: policies.RepairSet, Value: "false"})
		r.Note = "turning preserve_untracked off lets a commit remove or overwrite every untracked file"
	case fsscope.RuleGitExec, fsscope.RuleDenyRead, fsscope.RuleSymlinkEscape, fsscope.RuleSpecialFile:
		return r, noChange(fmt.Sprintf("rule %s cannot be turned off: no policy lets a commit carry this change", a.Rule))
	case fsscope.RuleDependency:
		return r, noChange("the change needs another that was rejected: repair that one")
	default:
		return r, noChange(fmt.Sprintf("no repair is known for commit rule %q", a.Rule))
	}
	return r, nil
}

// forRead repairs a read of a deny_read mask.
func forRead(p *policies.Policy, a Action) (policies.Repair, error) {
	var r policies.Repair
	type target struct {
		field, deflt string
		host, at     string
		denyRead     *[]string
		def          *bool
	}
	var best *target
	consider := func(t target) {
		if within(a.Path, t.at) && (best == nil || len(t.at) > len(best.at)) {
			best = &t
		}
	}
	for i := range p.Workspaces {
		w := &p.Workspaces[i]
		consider(target{policies.RepairWorkspaceDenyRead, policies.RepairWorkspaceDefault, w.HostPath, w.Target, &w.DenyRead, &w.DefaultDenyRead})
	}
	for i := range p.Mounts {
		m := &p.Mounts[i]
		consider(target{policies.RepairMountDenyRead, policies.RepairMountDefault, m.HostPath, m.Target, &m.DenyRead, &m.DefaultDenyRead})
	}
	if best == nil {
		return r, noChange(fmt.Sprintf("no workspace or mount of the session holds %s", a.Path))
	}
	switch {
	case slices.Contains(*best.denyRead, a.Rule):
		r.Changes = append(r.Changes, removeBlockEntry(best.denyRead, best.field, best.host, a.Rule))
		r.Note = fmt.Sprintf("removing deny_read pattern %q unmasks every path it matches", a.Rule)
	case *best.def && slices.Contains(fsscope.DefaultDenyRead(), a.Rule):
		*best.def = false
		r.Changes = append(r.Changes, policies.RepairChange{Field: best.deflt, Block: best.host, Op: policies.RepairSet, Value: "false"})
		for _, pat := range fsscope.DefaultDenyRead() {
			if pat != a.Rule && !slices.Contains(*best.denyRead, pat) {
				r.Changes = append(r.Changes, addBlockEntry(best.denyRead, best.field, best.host, pat))
			}
		}
		r.Note = fmt.Sprintf("%q is a built-in pattern: default_deny_read off, and the other built-in patterns written out, unmask only what it matches", a.Rule)
	default:
		return r, noChange(fmt.Sprintf("the mask of %s comes from %q, not a pattern of the policy", path.Clean(a.Path), a.Rule))
	}
	return r, nil
}

// within reports whether the sandbox path p is dir or below it.
func within(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, strings.TrimSuffix(dir, "/")+"/")
}

func addEntry(list *[]string, field, v string) policies.RepairChange {
	*list = append(slices.Clone(*list), v)
	return policies.RepairChange{Field: field, Op: policies.RepairAdd, Value: v}
}

func removeEntry(list *[]string, field, v string) policies.RepairChange {
	*list = slices.DeleteFunc(slices.Clone(*list), func(s string) bool { return s == v || canonical(s) == canonical(v) })
	return policies.RepairChange{Field: field, Op: policies.RepairRemove, Value: v}
}

func addBlockEntry(list *[]string, field, block, v string) policies.RepairChange {
	c := addEntry(list, field, v)
	c.Block = block
	return c
}

func removeBlockEntry(list *[]string, field, block, v string) policies.RepairChange {
	*list = slices.DeleteFunc(slices.Clone(*list), func(s string) bool { return s == v })
	return policies.RepairChange{Field: field, Block: block, Op: policies.RepairRemove, Value: v}
}

// canonical is an egress entry in its canonical form, or as written if it
// does not parse.
func canonical(s string) string {
	if r, err := policies.ParseEgressRule(s); err == nil {
		return r.String()
	}
	return s
}

func joinNote(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}
