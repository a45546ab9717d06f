// Package httprule decides the HTTP requests the L7 gateway terminated
// against a session's per-host rules: the egress `http "HOST" { ... }`
// blocks of its manifest (policies.HTTPHost, policies.HTTPRule).
//
//	set, err := httprule.Compile(policy.Egress.HTTP) // at session start
//
//	h := set.For(host) // nil: no block covers host, Decide allows
//	p, err := httprule.NormalizePath(rawPath)
//	// err: refuse the request
//	req := httprule.Request{Method: method, Path: p}
//	if h.NeedsPush() && httprule.IsReceivePack(method, p) {
//		req.Push, consumed, err = httprule.ReadPush(body, contentEncoding, max)
//		// err: refuse; else send consumed upstream, then the rest of body
//		req.IsPush = true
//	}
//	if h.NeedsJSON(method, p) {
//		// read the body up to a bound and put it back; if read whole
//		// and not content-encoded:
//		req.JSON, req.JSONBody, err = h.ParseJSON(body)
//		// err (ErrAmbiguousJSON): refuse the request
//		// a body not empty that is not read so: req.JSONOpaque = true
//	}
//	d := h.Decide(req) // d.Action: allow, deny or ask; d.Rule for the audit
//
// Hosts. A block's host is a name ("git.test") or "*.suffix", which
// covers the names strictly below suffix on label boundaries. For a
// request's host the block of the same name decides; otherwise the
// wildcard block with the longest suffix; a host no block covers is not
// decided here (Set.Has is false: the gateway need not terminate its TLS
// for rules).
//
// Rules. A host's rules are tried in order and the first that matches
// decides; a request none matches is decided by the block's default
// (allow unless it says otherwise). A rule matches when all it names
// match:
//
//   - Methods, compared without regard to case (a server that upper-cases
//     "delete" must not get it past a rule on "DELETE"); none: any method.
//     A rule on GET also matches HEAD, which servers answer with their GET
//     handler.
//   - Path, a glob over the path NormalizePath returns (read its doc for
//     what is refused and how "%2F" is handled), case-sensitive; none:
//     any path. "*" matches within one segment, "**" as a whole segment zero
//     or more segments, every other character itself: "/admin/**" covers
//     "/admin", "/admin/" and everything below. A path ending in "/" also
//     matches as if it did not, so "/admin" covers "/admin/".
//   - Refs, globs of git ref names in the same grammar ("refs/heads/agent/*"
//     covers "refs/heads/agent/x", not "refs/heads/agent/x/y"). A rule with
//     refs matches only a git smart-HTTP push (Request.IsPush) that
//     updates at least one ref, and then: an allow rule only if every ref
//     the push updates (deletions included) matches one of its globs, so a
//     push that also touches a ref it does not name falls through to the
//     next rule; a deny or ask rule if any of them does, so adding an
//     allowed ref to a push does not carry a protected one past it.
//
// To let a session push to some refs only: an allow rule with those refs,
// then `rule { refs = ["refs/**"], action = "deny" }`, which refuses every
// other push, however its path is spelled. A push of no ref updates (git
// sends a lone flush-pkt, "0000", to probe the server before a request
// larger than its http.postBuffer; the server changes nothing for it)
// matches no rule with refs, so a later rule or the default decides it.
//
//   - JSON, conditions on top-level fields of a JSON body, for bulk calls
//     whose targets travel in the body (`{"names": ["svc-a", "svc-b"]}`):
//     each names a field and globs of its values in the path grammar
//     ("svc-dev-*-4812-a", "dev/alex/**"). An allow rule with json
//     conditions matches only a request whose body the gateway read whole
//     (Request.JSONBody: at most its bound, not content-encoded) and is a
//     JSON object in which every named field holds a string or a
//     non-empty array of strings, every string of every named field
//     matching one of that field's globs; a deny or ask rule matches one
//     in which any string of a named field does (the others may be
//     missing), so a denied target cannot ride along with allowed ones. A value with an empty, "." or ".." segment matches no allow
//     rule and every deny or ask rule. A body the gateway cannot read
//     (longer than its bound, content-encoded, not a JSON object: Request.
//     JSONOpaque) or a named field holding another type than strings (a
//     number, an object, a nested or mixed array) matches no allow rule
//     and every deny or ask rule, since services read targets out of
//     them (a Go service ignores Content-Encoding; JavaScript's
//     String(["x"]) is "x"). A field missing, null or an empty array
//     matches no rule with json conditions, and a later rule or the
//     default decides: end a block with json allow rules with a deny or
//     ask rule, or default, for the same path. Bodies that JSON parsers read differently (a named field
//     twice, or in another case) are refused before Decide: see ParseJSON.
//
//   - BodySHA256, digests of whole bodies: uploads of exactly these
//     contents (a workspace file's digest pins what may leave for a
//     destination). An allow rule with body_sha256 matches only a request
//     whose body the gateway read whole (Request.BodySHA256: within
//     policies.MaxHashedBody, not content-encoded) with one of the
//     digests; a deny or ask rule one whose digest is listed, or whose
//     body the gateway could not read so (Request.BodyOpaque). A
//     multipart form (curl -F file=@x) that FormDigests reads strictly
//     matches too by its parts (Request.FormSHA256): an allow rule when
//     every part's content is listed, a deny or ask rule when any is;
//     besides the contents such a form carries only its framing and each
//     part's name, filename and content type. Any other wrapping of a
//     file's content (a form with a preamble or other part headers, a
//     JSON string, base64) has another digest and matches no allow rule.
//
// What the rules do not see: the query, headers and bodies (method
// overrides such as X-HTTP-Method-Override included), except the ref
// updates of a push, the fields json conditions name and the digest
// body_sha256 compares; refs a server
// changes on its own (a symbolic ref on the server updated through the
// name it points from, hooks); what a server does with a value (a
// "prefix" names every object below it, a glob "dev/alex/*" matching
// the prefix "dev/alex/" does not say how much that deletes).
package httprule

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
	"github.com/airlock-sandbox/airlock/policies"
)

// Set is the compiled `http` blocks of one session. It is immutable and
// safe for concurrent use.
type Set struct {
	exact map[string]*Host
	wild  map[string]*Host // by suffix, without "*."
}

// Host is one compiled block.
type Host struct {
	name      string // as written: "git.test" or "*.git.test"
	rules     []rule
	def       string
	needsPush bool
	// jsonFields are the fields the rules' json conditions name, each
	// once.
	jsonFields []string
}

type rule struct {
	methods []string
	path    glob
	hasPath bool
	refs    []glob
	json    []jsonCond
	// every: the json conditions match only if every string does (allow
	// rules, and deny or ask rules with json_match = "every").
	every bool
	// bodies are the body_sha256 digests, lower-case hex.
	bodies []string
	action string
	desc   string
}

// Compile checks the blocks again (the daemon gets them from a manifest
// the policies package validated, or from the API) and compiles them. An
// error names the host and the rule, counted from 1 in the order written.
func Compile(hosts []policies.HTTPHost) (*Set, error) {
	s := &Set{exact: map[string]*Host{}, wild: map[string]*Host{}}
	for _, hb := range hosts {
		h, err := compileHost(hb)
		if err != nil {
			return nil, err
		}
		m, key := s.exact, hb.Host
		if suffix, ok := strings.CutPrefix(hb.Host, "*."); ok {
			m, key = s.wild, suffix
		}
		if _, dup := m[key]; dup {
			return nil, fmt.Errorf("http %q: a second block for the same host", hb.Host)
		}
		m[key] = h
	}
	return s, nil
}

func compileHost(hb policies.HTTPHost) (*Host, error) {
	if err := checkHost(hb.Host); err != nil {
		return nil, fmt.Errorf("http %q: %w", hb.Host, err)
	}
	h := &Host{name: hb.Host, def: hb.Default}
	switch hb.Default {
	case "":
		h.def = policies.HTTPAllow
	case policies.HTTPAllow, policies.HTTPDeny, policies.HTTPAsk:
	default:
		return nil, fmt.Errorf("http %q: default %q is not %q, %q or %q", hb.Host, hb.Default, policies.HTTPAllow, policies.HTTPDeny, policies.HTTPAsk)
	}
	for i, r := range hb.Rules {
		cr, err := compileRule(r)
		if err != nil {
			return nil, fmt.Errorf("http %q rule %d: %w", hb.Host, i+1, err)
		}
		cr.desc = fmt.Sprintf("http %q rule %d (%s)", hb.Host, i+1, r.String())
		h.rules = append(h.rules, cr)
		h.needsPush = h.needsPush || len(cr.refs) > 0
		for _, c := range cr.json {
			known := false
			for _, f := range h.jsonFields {
				if f == c.field {
					known = true
				} else if strings.EqualFold(f, c.field) {
					return nil, fmt.Errorf("http %q rule %d: json field %q differs from field %q of an earlier rule only in case; servers read them as one key", hb.Host, i+1, c.field, f)
				}
			}
			if !known {
				h.jsonFields = append(h.jsonFields, c.field)
			}
		}
	}
	return h, nil
}

// checkHost checks a block's host: a lower-case name without a trailing
// dot, or "*." and one.
func checkHost(host string) error {
	name, _ := strings.CutPrefix(host, "*.")
	f, err := allowlist.ToFQDN(name)
	switch {
	case err != nil:
		return fmt.Errorf("not a host name or \"*.suffix\": %w", err)
	case f.IsRoot() || f.WithoutTrailingDot() != name:
		return fmt.Errorf("write the host in lower case, without a trailing dot")
	}
	return nil
}

func compileRule(r policies.HTTPRule) (rule, error) {
	cr := rule{action: r.Action}
	switch r.Action {
	case policies.HTTPAllow, policies.HTTPDeny, policies.HTTPAsk:
	case "":
		return rule{}, fmt.Errorf("no action: write %q, %q or %q", policies.HTTPAllow, policies.HTTPDeny, policies.HTTPAsk)
	default:
		return rule{}, fmt.Errorf("action %q is not %q, %q or %q", r.Action, policies.HTTPAllow, policies.HTTPDeny, policies.HTTPAsk)
	}
	for _, m := range r.Methods {
		if !isToken(m) || strings.ToUpper(m) != m {
			return rule{}, fmt.Errorf("method %q is not an upper-case HTTP method", m)
		}
		cr.methods = append(cr.methods, m)
	}
	if slices.Contains(cr.methods, http.MethodGet) && !slices.Contains(cr.methods, http.MethodHead) {
		// Servers answer HEAD with their GET handler, side effects
		// included: a rule on GET covers HEAD.
		cr.methods = append(cr.methods, http.MethodHead)
	}
	if r.Path != "" {
		g, err := compilePathGlob(r.Path)
		if err != nil {
			return rule{}, err
		}
		cr.path, cr.hasPath = g, true
	}
	for _, ref := range r.Refs {
		g, err := compileRefGlob(ref)
		if err != nil {
			return rule{}, err
		}
		cr.refs = append(cr.refs, g)
	}
	js, err := compileJSON(r.JSON)
	if err != nil {
		return rule{}, err
	}
	cr.json = js
	switch r.JSONMatch {
	case "", policies.JSONMatchAny:
		if r.JSONMatch == policies.JSONMatchAny && r.Action == policies.HTTPAllow {
			return rule{}, fmt.Errorf("json_match %q on an allow rule: an allow rule matches only if every target does", r.JSONMatch)
		}
	case policies.JSONMatchEvery:
		if r.Action == policies.HTTPDeny {
			return rule{}, fmt.Errorf("json_match %q on a deny rule: naming one more target would dodge it", r.JSONMatch)
		}
	default:
		return rule{}, fmt.Errorf("json_match %q is not %q or %q", r.JSONMatch, policies.JSONMatchAny, policies.JSONMatchEvery)
	}
	if r.JSONMatch != "" && len(cr.json) == 0 {
		return rule{}, fmt.Errorf("json_match without json conditions")
	}
	cr.every = r.Action == policies.HTTPAllow || r.JSONMatch == policies.JSONMatchEvery
	if len(cr.json) > 0 && len(cr.refs) > 0 {
		return rule{}, fmt.Errorf("a rule has refs (for git pushes) or json conditions, not both")
	}
	for _, d := range r.BodySHA256 {
		if !policies.IsSHA256Hex(d) {
			return rule{}, fmt.Errorf("body_sha256 %q is not 64 lower-case hex digits", d)
		}
	}
	if r.BodySHA256 != nil && len(r.BodySHA256) == 0 {
		return rule{}, fmt.Errorf("body_sha256 names no digest")
	}
	cr.bodies = slices.Clone(r.BodySHA256)
	if len(cr.bodies) > 0 && (len(cr.json) > 0 || len(cr.refs) > 0) {
		return rule{}, fmt.Errorf("a rule has refs, json conditions or body_sha256, at most one of them")
	}
	if len(cr.refs) > 0 && len(cr.methods) > 0 && !slices.Contains(cr.methods, "POST") {
		return rule{}, fmt.Errorf("a rule with refs matches only pushes, which are POST requests, and its methods leave POST out")
	}
	return cr, nil
}

// For returns the block that decides requests to host, or nil if none
// does. host is a name as the request gave it, without a port; For
// lower-cases it and drops one trailing dot. The block of the same name
// wins over wildcards, and of wildcards the longest suffix.
func (s *Set) For(host string) *Host {
	if s == nil {
		return nil
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	if h := s.exact[host]; h != nil {
		return h
	}
	for rest := host; ; {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			return nil
		}
		rest = rest[i+1:]
		if h := s.wild[rest]; h != nil {
			return h
		}
	}
}

// Has reports whether a block decides requests to host: the gateway must
// terminate TLS to see them.
func (s *Set) Has(host string) bool { return s.For(host) != nil }

// Name returns the block's host as written ("git.test", "*.git.test").
func (h *Host) Name() string { return h.name }

// NeedsPush reports whether the block has a rule with refs, so that the
// gateway must read the ref updates of a push (ReadPush) before Decide.
func (h *Host) NeedsPush() bool { return h != nil && h.needsPush }

// Request is what Decide sees of a request.
type Request struct {
	// Method as the request gave it.
	Method string
	// Path is the request's path as NormalizePath returned it; never the
	// raw path.
	Path string
	// IsPush says the request is a git push (IsReceivePack) whose ref
	// updates ReadPush read into Push.
	IsPush bool
	Push   []RefUpdate
	// JSONBody says the gateway read the request's body whole (within
	// its bound, not content-encoded) and it is a JSON object that
	// ParseJSON read; JSON holds what ParseJSON returned: the fields the
	// block's json conditions name that hold a string or an array of
	// strings, decoded (nil for a field of another type). Without
	// JSONBody no allow rule with json conditions matches.
	JSONBody bool
	JSON     map[string][]string
	// JSONOpaque says the request has a body json conditions cannot
	// read: longer than the gateway's bound, content-encoded, or not a
	// JSON object. Every deny or ask rule with json conditions whose
	// method and path match matches it: a service may act on targets in
	// it (a Go service ignores a Content-Encoding header and reads the
	// JSON; others read form bodies).
	JSONOpaque bool
	// BodySHA256 is the digest (lower-case hex) of the request's body,
	// when the gateway read it whole (within MaxHashedBody, not
	// content-encoded; an empty body has the empty input's digest).
	// BodyOpaque says it could not: no allow rule with body_sha256
	// matches such a request, and every deny or ask rule with
	// body_sha256 whose method and path match does.
	BodySHA256 string
	BodyOpaque bool
	// FormSHA256 are the digests of the parts' contents when the body,
	// read whole, is a multipart/form-data form FormDigests read
	// strictly (curl -F file=@x), in order; nil otherwise. An allow rule
	// with body_sha256 matches a form whose every part's digest it
	// lists, a deny or ask rule one with any part's digest listed.
	FormSHA256 []string
}

// Decision is the verdict on one request.
type Decision struct {
	// Action is policies.HTTPAllow, HTTPDeny or HTTPAsk.
	Action string
	// Rule says what decided, for the audit and the refusal: `http
	// "git.test" rule 2 (POST /**/git-receive-pack refs
	// [refs/heads/agent/*] -> allow)`, `http "git.test" default`, or ""
	// when no block covers the host.
	Rule string
	// Index is the deciding rule's index in the block's Rules (from 0;
	// the Rule text counts from 1), or -1 for the default or no block.
	Index int
}

// Decide returns the decision of the block's first rule that matches r,
// or its default. A nil Host (no block) allows, with Rule "". A push to a
// block with refs rules must come with IsPush and its updates: without,
// the request is denied, since a rule that names refs could not be
// checked.
func (h *Host) Decide(r Request) Decision {
	if h == nil {
		return Decision{Action: policies.HTTPAllow, Index: -1}
	}
	if h.needsPush && !r.IsPush && IsReceivePack(r.Method, r.Path) {
		return Decision{Action: policies.HTTPDeny, Rule: fmt.Sprintf("http %q: a push whose ref updates were not read", h.name), Index: -1}
	}
	method := strings.ToUpper(r.Method)
	for i, cr := range h.rules {
		if cr.matches(method, r) {
			return Decision{Action: cr.action, Rule: cr.desc, Index: i}
		}
	}
	return Decision{Action: h.def, Rule: fmt.Sprintf("http %q default", h.name), Index: -1}
}

// matchesRequestLine reports whether the rule's methods and path match.
func (cr *rule) matchesRequestLine(method, path string) bool {
	if len(cr.methods) > 0 && !slices.Contains(cr.methods, method) {
		return false
	}
	return !cr.hasPath || matchPath(cr.path, path)
}

func (cr *rule) matches(method string, r Request) bool {
	if !cr.matchesRequestLine(method, r.Path) {
		return false
	}
	if len(cr.json) > 0 {
		return cr.matchJSON(r)
	}
	if len(cr.bodies) > 0 {
		if r.BodyOpaque || r.BodySHA256 == "" {
			return cr.action != policies.HTTPAllow
		}
		if slices.Contains(cr.bodies, r.BodySHA256) {
			return true
		}
		if len(r.FormSHA256) == 0 {
			return false
		}
		// A form: an allow rule lists every part's content, a deny or
		// ask rule any of them.
		every := cr.action == policies.HTTPAllow
		for _, d := range r.FormSHA256 {
			if slices.Contains(cr.bodies, d) != every {
				return !every
			}
		}
		return every
	}
	if len(cr.refs) == 0 {
		return true
	}
	if !r.IsPush || len(r.Push) == 0 {
		return false
	}
	every := cr.action == policies.HTTPAllow
	for _, u := range r.Push {
		if cr.matchRef(u.Ref) != every {
			return !every
		}
	}
	return every
}

func (cr *rule) matchRef(ref string) bool {
	for _, g := range cr.refs {
		if g.match(ref) {
			return true
		}
	}
	return false
}

// matchPath matches a normalized path, and one ending in "/" also
// without it.
func matchPath(g glob, p string) bool {
	name, ok := strings.CutPrefix(p, "/")
	if !ok {
		return false
	}
	if g.match(name) {
		return true
	}
	trimmed, ok := strings.CutSuffix(name, "/")
	return ok && g.match(trimmed)
}

// NeedsBody reports whether a rule with body_sha256 may decide a request
// with this method and path, so that the gateway must read and digest its
// body (Request.BodySHA256, BodyOpaque) before Decide.
func (h *Host) NeedsBody(method, path string) bool {
	if h == nil {
		return false
	}
	method = strings.ToUpper(method)
	for i := range h.rules {
		cr := &h.rules[i]
		if len(cr.bodies) > 0 && cr.matchesRequestLine(method, path) {
			return true
		}
	}
	return false
}

// isToken reports whether s is an HTTP token (RFC 9110 section 5.6.2).
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c <= ' ' || c >= 0x7f || strings.IndexByte("\"(),/:;<=>?@[\\]{}", c) >= 0 {
			return false
		}
	}
	return true
}
