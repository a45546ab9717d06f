package policies

import (
	"cmp"
	"fmt"
	"net/textproto"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/airlock-sandbox/airlock/egress/allowlist"
)

// This file holds the rules of the blocks the L7 gateway enforces: an
// egress block's inspect and http rules, secrets and approval.

// MaxApprovalTimeout is the longest a held request may wait for a decision.
const MaxApprovalTimeout = Duration(24 * time.Hour)

// gatewayHeaders are request headers a secret may not be injected into,
// by canonical name: the gateway owns them. Host is what the gateway binds
// to the SNI and the DNS pins; Content-Length, Transfer-Encoding and
// Expect frame the request, and a value of the manifest's choosing there
// would let two servers read one request differently; Connection,
// Keep-Alive, Upgrade, TE, Trailer, HTTP2-Settings and Proxy-* are
// hop-by-hop, consumed or rewritten by the gateway (Proxy-Authorization
// would go to a proxy, not to the bound host). Cookie and Authorization
// are the manifest's to set: they are where services take credentials.
var gatewayHeaders = map[string]bool{
	"Host": true, "Content-Length": true, "Transfer-Encoding": true, "Expect": true,
	"Connection": true, "Keep-Alive": true, "Upgrade": true, "Te": true, "Trailer": true,
	"Http2-Settings": true,
}

// isGatewayHeader reports whether the canonical header name h is one the
// gateway owns.
func isGatewayHeader(h string) bool {
	return gatewayHeaders[h] || strings.HasPrefix(h, "Proxy-")
}

// isToken reports whether s is an HTTP token (RFC 9110, section 5.6.2),
// the syntax of methods and header names.
func isToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0:
		default:
			return false
		}
	}
	return true
}

// egressNames answers which names an egress block lets the session reach.
// A nil *egressNames knows nothing (the entries did not parse, and are
// reported), and answers every question with yes.
type egressNames struct {
	list *allowlist.List
	// names are the name entries of allow.
	names []EgressRule
	// ports are the ports the L7 gateway checks (GatewayPorts).
	ports []uint16
}

// gatewayPorts are the ports the L7 gateway checks.
func (n *egressNames) gatewayPorts() []uint16 {
	if n == nil || len(n.ports) == 0 {
		return DefaultL7Ports
	}
	return n.ports
}

func newEgressNames(e *Egress) *egressNames {
	if e == nil {
		return nil
	}
	l, err := allowlist.Compile(e.Allow, e.Deny)
	if err != nil {
		return nil
	}
	n := &egressNames{list: l, ports: e.L7Ports}
	if len(n.ports) == 0 {
		n.ports = DefaultL7Ports
	}
	for _, s := range e.Allow {
		if r, reason := parseEgressRule(s); reason == "" && r.IsName() {
			n.names = append(n.names, r)
		}
	}
	return n
}

// probeLabel stands for any name under a wildcard's suffix.
const probeLabel = "airlock-probe"

// reach reports whether the session may reach name on one of ports, or
// why not, and whether a deny entry is the reason. With wildcard, name is
// a suffix, and the question is whether some name strictly under it is
// reachable.
func (n *egressNames) reach(name string, wildcard bool, ports ...uint16) (ok bool, why string, denied bool) {
	if n == nil {
		return true, "", false
	}
	if !wildcard {
		return n.reachName(name, name, ports)
	}
	shown := "names under " + name
	if ok, why, denied = n.reachName(probeLabel+"."+name, shown, ports); ok {
		return true, "", false
	}
	for _, r := range n.names {
		if !strings.HasSuffix(r.Name, "."+name) && !(r.Wildcard && r.Name == name) {
			continue
		}
		cand := r.Name
		if r.Wildcard {
			cand = probeLabel + "." + r.Name
		}
		if ok, _, _ := n.reachName(cand, cand, ports); ok {
			return true, "", false
		}
	}
	return false, why, denied
}

// reachName is reach for one name, called shown in the reason.
func (n *egressNames) reachName(name, shown string, ports []uint16) (bool, string, bool) {
	fq, err := allowlist.ToFQDN(name)
	if err != nil {
		return false, err.Error(), false
	}
	dec := n.list.MatchName(fq)
	switch {
	case !dec.Allowed && dec.Rule != "":
		return false, fmt.Sprintf("the deny entry %q refuses %s", dec.Rule, shown), true
	case !dec.Allowed:
		return false, fmt.Sprintf("no allow entry matches %s", shown), false
	case dec.AllPorts() || len(ports) == 0:
		return true, "", false
	}
	for _, p := range ports {
		if slices.Contains(dec.Ports, p) {
			return true, "", false
		}
	}
	have := make([]string, len(dec.Ports))
	for i, p := range dec.Ports {
		have[i] = strconv.Itoa(int(p))
	}
	return false, fmt.Sprintf("%s is allowed only on port %s", shown, strings.Join(have, ", ")), false
}

// beyond reports the ports outside the gateway's on which the session may
// reach name (or, with wildcard, some name under the suffix name), and the
// allow entry that opens them: a connection there is not seen by the
// gateway, so it would pass by http rules and secret scanning. ports is ""
// when there are none.
func (n *egressNames) beyond(name string, wildcard bool) (ports, rule, shown string) {
	if n == nil {
		return "", "", ""
	}
	cands := []string{name}
	if wildcard {
		cands = []string{probeLabel + "." + name}
		for _, r := range n.names {
			switch {
			case r.Wildcard && (r.Name == name || strings.HasSuffix(r.Name, "."+name)):
				cands = append(cands, probeLabel+"."+r.Name)
			case strings.HasSuffix(r.Name, "."+name):
				cands = append(cands, r.Name)
			}
		}
	}
	gw := n.gatewayPorts()
	for _, c := range cands {
		fq, err := allowlist.ToFQDN(c)
		if err != nil {
			continue
		}
		dec := n.list.MatchName(fq)
		if !dec.Allowed {
			continue
		}
		shown := strings.Replace(c, probeLabel+".", "names under ", 1)
		if dec.AllPorts() {
			return "every port", dec.Rule, shown
		}
		var out []string
		for _, p := range dec.Ports {
			if !slices.Contains(gw, p) {
				out = append(out, strconv.Itoa(int(p)))
			}
		}
		if len(out) > 0 {
			return "port " + strings.Join(out, ", "), dec.Rule, shown
		}
	}
	return "", "", ""
}

// parseHostName checks a host as an http block or an inject names it:
// "name", or "*.suffix" when wildcards are allowed. It returns the name
// (the suffix for a wildcard) in canonical form, whether it is a wildcard,
// and a reason when it is not a host name.
func parseHostName(s string, wildcards bool) (name string, wildcard bool, reason string) {
	if strings.ContainsFunc(s, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
		return "", false, "it contains whitespace or control characters"
	}
	rest, wildcard := strings.CutPrefix(s, "*.")
	if wildcard && !wildcards {
		return "", false, "a wildcard is not allowed here"
	}
	if strings.ContainsAny(rest, ":/[]") {
		return "", false, "it is not a bare name: write the name without scheme, port or path"
	}
	name, reason = checkDNSName(rest)
	return name, wildcard, reason
}

func (c *checker) gateway(at fieldPath, e *Egress, names *egressNames) {
	switch e.Inspect {
	case "", InspectRules:
	case InspectAll:
		if !e.L7Enabled() {
			c.add(at.field("inspect"), "inspect needs the L7 gateway", `Set l7 = "check" in this egress block, or remove inspect`,
				`inspect = "all" terminates TLS in the L7 gateway, which is off: this egress block has l7 = %q`, cmp.Or(e.L7, L7Off))
		}
	default:
		c.add(at.field("inspect"), "Invalid inspect", `Use "rules" (terminate TLS only to hosts with http rules or secrets, the default) or "all" (terminate TLS to every host)`,
			"%q is not one of rules, all", e.Inspect)
	}
	hosts := map[string]fieldPath{}
	for i, h := range e.HTTP {
		at := at.field("http").index(i)
		if i == 0 && !e.L7Enabled() {
			c.add(at, "http rules need the L7 gateway", `Add l7 = "check" to this egress block, as in egress { allow = ["git.corp.test"], l7 = "check", http "git.corp.test" { ... } }`,
				"http rules are enforced by the L7 gateway, which is off: this egress block has l7 = %q", cmp.Or(e.L7, L7Off))
		}
		c.httpHost(at, h, names, hosts)
	}
}

func (c *checker) httpHost(at fieldPath, h HTTPHost, names *egressNames, hosts map[string]fieldPath) {
	const hostHint = `Name one host, as in http "git.corp.test" { ... }, or the names under a domain, as in http "*.corp.test" { ... } (which does not match corp.test itself)`
	name, wildcard, reason := parseHostName(h.Host, true)
	canon := name
	if wildcard {
		canon = "*." + name
	}
	switch {
	case reason != "":
		c.add(at.field("host"), "Invalid http host", hostHint, "%q is not a host name: %s", h.Host, reason)
	case canon != h.Host:
		c.add(at.field("host"), "Host not in canonical form", fmt.Sprintf("Write %q", canon), "%q is not written in canonical form (lower case, no trailing dot)", h.Host)
	default:
		if prev, ok := hosts[canon]; ok {
			c.addDup(at.field("host"), prev.field("host"), "Duplicate http host", "Merge the two blocks: a host's rules are one ordered list", "http %q is already declared at %s", h.Host, prev)
			break
		}
		hosts[canon] = at
		if ok, why, denied := names.reach(name, wildcard, names.gatewayPorts()...); !ok {
			hint := fmt.Sprintf("Allow %q on a port of l7_ports (by default 80 or 443), or every port, in this egress block, or remove this http block", canon)
			if denied {
				hint = "Remove the deny entry, or this http block"
			}
			c.add(at.field("host"), "http host not allowed", hint,
				"the session cannot reach %s on a port the gateway checks %v (%s), so these rules would never apply", h.Host, names.gatewayPorts(), why)
		} else if ports, rule, shown := names.beyond(name, wildcard); ports != "" {
			c.add(at.field("host"), "http host reachable past the gateway", bypassHint(canon, rule, names.gatewayPorts()),
				"the allow entry %q lets the session reach %s on %s, which the gateway does not check: a request sent there would pass by these rules", rule, shown, ports)
		}
	}
	switch h.Default {
	case "", HTTPAllow, HTTPDeny, HTTPAsk:
	default:
		c.add(at.field("default"), "Invalid default", `Use "allow" (the default), "deny" or "ask"`, "%q is not one of allow, deny, ask", h.Default)
	}
	fields := map[string]string{} // json fields of the host's rules, by their lower case
	for j, r := range h.Rules {
		c.httpRule(at.field("rules").index(j), r)
		for k, m := range r.JSON {
			low := strings.ToLower(m.Field)
			if prev, ok := fields[low]; ok && prev != m.Field {
				c.add(at.field("rules").index(j).field("json").index(k).field("field"), "json field differs only in case",
					fmt.Sprintf("Write %q, as the host's other rules do", prev),
					"json field %q differs from %q, named by another rule of this host, only in case: servers such as Go's encoding/json read them as one key", m.Field, prev)
			} else if !ok {
				fields[low] = m.Field
			}
		}
		if j < len(h.Rules)-1 && len(r.Methods) == 0 && r.Path == "" && len(r.Refs) == 0 && len(r.JSON) == 0 && len(r.BodySHA256) == 0 {
			c.warn(at.field("rules").index(j), "Rule matches every request", `Move it last, or set the host's default instead`,
				"this rule has no method, path or refs, so it decides every request and the %d rules after it never apply", len(h.Rules)-1-j)
		}
	}
}

const (
	pathHint = `Use an absolute path glob such as "/api/**" or "/*/info/refs": "*" matches within one segment, "**" (a whole segment) across segments; leave path out to match any path`
	refsHint = `Use full ref names or globs such as "refs/heads/agent/*": "*" matches within one segment, "**" (a whole segment) across segments`
)

func (c *checker) httpRule(at fieldPath, r HTTPRule) {
	seen := map[string]int{}
	for k, m := range r.Methods {
		at := at.field("methods").index(k)
		switch {
		case !isToken(m):
			c.add(at, "Invalid method", `Use HTTP method names such as "GET" or "POST"`, "%q is not an HTTP method", m)
			continue
		case strings.ToUpper(m) != m:
			c.add(at, "Method not in canonical form", fmt.Sprintf("Write %q", strings.ToUpper(m)), "%q is not in upper case", m)
			continue
		}
		if prev, ok := seen[m]; ok {
			c.add(at, "Duplicate method", "List each method once", "%s is already listed at methods[%d]", m, prev)
			continue
		}
		seen[m] = k
	}
	if r.Path != "" {
		if reason := checkPathGlob(r.Path); reason != "" {
			c.add(at.field("path"), "Invalid path pattern", pathHint, "%s", reason)
		}
	}
	for k, ref := range r.Refs {
		if reason := checkRefGlob(ref); reason != "" {
			c.add(at.field("refs").index(k), "Invalid refs pattern", refsHint, "%s", reason)
		}
	}
	if len(r.Refs) > 0 {
		const pushHint = `A rule with refs matches only git pushes, which are POST requests to a path ending in /git-receive-pack: give it path = "/**/git-receive-pack" (or leave path out) and method "POST" (or leave method out)`
		if r.Path != "" && !canMatchReceivePack(r.Path) {
			c.warn(at.field("path"), "refs rule never matches a push", pushHint, "path %q cannot match a path ending in /git-receive-pack, so this rule never applies", r.Path)
		}
		if len(r.Methods) > 0 && !slices.Contains(r.Methods, "POST") {
			c.warn(at.field("methods"), "refs rule never matches a push", pushHint, "method does not include POST, so this rule never applies")
		}
	}
	c.httpJSON(at, r)
	c.httpBody(at, r)
	switch r.Action {
	case HTTPAllow, HTTPDeny, HTTPAsk:
	case "":
		c.add(at.field("action"), "Missing action", `Set action = "allow", "deny" or "ask"`, "a rule needs an action")
	default:
		c.add(at.field("action"), "Invalid action", `Use "allow", "deny" or "ask" (hold the request for a person's decision)`, "%q is not one of allow, deny, ask", r.Action)
	}
}

// MaxHashedBody is the longest request body the L7 gateway reads to
// compare its digest with a rule's body_sha256.
const MaxHashedBody = 1 << 20

// httpBody checks a rule's body_sha256.
func (c *checker) httpBody(at fieldPath, r HTTPRule) {
	if r.BodySHA256 == nil {
		return
	}
	if len(r.BodySHA256) == 0 {
		c.add(at.field("body_sha256"), "Empty body_sha256", "List the SHA-256 digests of the bodies the rule is about (sha256sum FILE), or remove body_sha256",
			"body_sha256 names no digest, so the rule could never match")
	}
	if len(r.Refs) > 0 || len(r.JSON) > 0 {
		c.add(at.field("body_sha256"), "body_sha256 with refs or json", "Write separate rules: refs match git pushes, json the fields of a JSON body, body_sha256 a whole body",
			"a rule has refs, json conditions or body_sha256, at most one of them")
	}
	for k, d := range r.BodySHA256 {
		if !IsSHA256Hex(d) {
			c.add(at.field("body_sha256").index(k), "Invalid body digest", "Write a SHA-256 digest as 64 lower-case hex digits, as sha256sum prints it",
				"%q is not 64 lower-case hex digits", d)
		}
	}
}

// IsSHA256Hex reports whether s is a SHA-256 digest in lower-case hex, as
// body_sha256 takes them.
func IsSHA256Hex(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

const jsonHint = `Name a top-level field of the body and globs of its values, as in json "names" { values = ["svc-dev-*-4812-a"] }: "*" matches within one "/"-separated segment, "**" (a whole segment) across segments`

// httpJSON checks a rule's json conditions.
func (c *checker) httpJSON(at fieldPath, r HTTPRule) {
	switch {
	case r.JSONMatch == "":
	case r.JSONMatch != JSONMatchAny && r.JSONMatch != JSONMatchEvery:
		c.add(at.field("json_match"), "Invalid json_match", `Use "any" (a deny or ask rule matches if any target matches) or "every" (only if every target does)`,
			"%q is not one of any, every", r.JSONMatch)
	case len(r.JSON) == 0:
		c.add(at.field("json_match"), "json_match without json", `Add json "FIELD" { values = [...] } conditions, or remove json_match`,
			"json_match says how json conditions match, and the rule has none")
	case r.Action == HTTPDeny && r.JSONMatch == JSONMatchEvery:
		c.add(at.field("json_match"), "json_match every on a deny rule", `Remove json_match: a deny rule must match a body by any of its targets`,
			"a deny rule matching only when every target matches is dodged by naming one more")
	case r.Action == HTTPAllow && r.JSONMatch == JSONMatchAny:
		c.add(at.field("json_match"), "json_match any on an allow rule", `Remove json_match: an allow rule matches only if every target matches`,
			"an allow rule cannot match a body by one of its targets")
	}
	if len(r.JSON) > 0 && len(r.Refs) > 0 {
		c.add(at.field("refs"), "refs and json in one rule", "Write two rules: refs match git pushes, json the fields of a JSON body",
			"a rule has refs or json conditions, not both")
	}
	for k, m := range r.JSON {
		jat := at.field("json")
		at := jat.index(k)
		if !IsPlainJSONKey(m.Field) {
			c.add(at.field("field"), "Invalid json field", jsonHint,
				"%q is not a plain JSON key: a letter or '_', then at most 63 letters, digits, '_' or '-' (ASCII)", m.Field)
		}
		for p := range k {
			if strings.EqualFold(r.JSON[p].Field, m.Field) {
				c.addDup(at.field("field"), jat.index(p).field("field"), "Duplicate json field", "Name each field once in a rule, with all its values",
					"json field %q is already named in this rule (fields are compared without regard to case)", m.Field)
				break
			}
		}
		if len(m.Values) == 0 {
			c.add(at.field("values"), "Empty json values", jsonHint, "json field %q has no values, so the rule could never match", m.Field)
		}
		for i, v := range m.Values {
			if reason := checkJSONGlob(v); reason != "" {
				c.add(at.field("values").index(i), "Invalid json value pattern", jsonHint, "%s", reason)
			}
		}
	}
}

// IsPlainJSONKey reports whether s can name a json condition's field: a
// letter or '_', then at most 63 letters, digits, '_' or '-' (ASCII).
func IsPlainJSONKey(s string) bool {
	if s == "" || len(s) > 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', c == '_':
		case i > 0 && ('0' <= c && c <= '9' || c == '-'):
		default:
			return false
		}
	}
	return true
}

// checkJSONGlob checks a json condition's value pattern: the path
// grammar without the leading '/' (a trailing '/' is allowed, as in a
// prefix "dev/alex/").
func checkJSONGlob(v string) string {
	switch {
	case v == "":
		return "an empty pattern"
	case !utf8.ValidString(v):
		return fmt.Sprintf("%q is not valid UTF-8", v)
	case strings.ContainsFunc(v, func(c rune) bool { return c < ' ' || c == 0x7f }):
		return fmt.Sprintf("%q contains control characters", v)
	}
	segs := strings.Split(v, "/")
	if segs[len(segs)-1] == "" && len(segs) > 1 {
		segs = segs[:len(segs)-1]
	}
	return checkSegments(v, segs, "values with such segments match no allow rule")
}

// checkPathGlob checks an HTTP rule's path pattern. Requests are matched
// by their decoded, cleaned path, so a pattern is absolute and clean, with
// no query, and "*" and "**" are its only wildcards.
func checkPathGlob(p string) string {
	switch {
	case !strings.HasPrefix(p, "/"):
		return fmt.Sprintf("%q does not start with '/'", p)
	case strings.ContainsFunc(p, func(c rune) bool { return c <= ' ' || c == 0x7f }):
		return fmt.Sprintf("%q contains whitespace or control characters", p)
	case strings.ContainsAny(p, "?#"):
		return fmt.Sprintf("%q contains '?' or '#': rules match the path, never the query", p)
	case strings.ContainsAny(p, `[]\`):
		return fmt.Sprintf(`%q contains '[', ']' or '\': the only wildcards are '*' and '**'`, p)
	case hasPercentEscape(p):
		return fmt.Sprintf("%q contains a %%-escape: paths are matched decoded, so write the character itself", p)
	}
	if p == "/" {
		return ""
	}
	return checkSegments(p, strings.Split(p[1:], "/"), "paths are matched cleaned")
}

// checkSegments checks the segments of a path or ref pattern: none empty,
// "." or "..", and "**" only as a whole segment.
func checkSegments(p string, segs []string, why string) string {
	for _, s := range segs {
		switch {
		case s == "":
			return fmt.Sprintf("%q has an empty segment (\"//\" or a trailing '/'): %s", p, why)
		case s == "." || s == "..":
			return fmt.Sprintf("%q has a %q segment: %s", p, s, why)
		case strings.Contains(s, "**") && s != "**":
			return fmt.Sprintf("%q has '**' inside segment %q: '**' must be a whole segment, as in \"/a/**/b\"", p, s)
		}
	}
	return ""
}

func hasPercentEscape(s string) bool {
	for i := 0; i+2 < len(s); i++ {
		if s[i] == '%' && isHex(s[i+1]) && isHex(s[i+2]) {
			return true
		}
	}
	return false
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// checkRefGlob checks a rule's refs pattern: a full ref name or a glob with
// the path grammar.
func checkRefGlob(r string) string {
	if reason := checkRefPattern(r); reason != "" {
		return reason
	}
	if strings.ContainsAny(r, "?[]") {
		return fmt.Sprintf("%q contains '?', '[' or ']': git refuses them in ref names, and the only wildcards are '*' and '**'", r)
	}
	segs := strings.Split(r, "/")
	if reason := checkSegments(r, segs, "git refuses it in ref names"); reason != "" {
		return reason
	}
	for _, s := range segs {
		if strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".lock") {
			return fmt.Sprintf("%q has segment %q: git refuses ref name components that start with '.' or end with \".lock\"", r, s)
		}
	}
	return ""
}

// canMatchReceivePack reports whether the path pattern p (valid) can match
// a path whose last segment is git-receive-pack, where git smart HTTP
// pushes go.
func canMatchReceivePack(p string) bool {
	last := p[strings.LastIndexByte(p, '/')+1:]
	if last == "**" {
		return true
	}
	ok, err := path.Match(last, "git-receive-pack")
	return err == nil && ok
}

// secretHint shows a secret block.
const secretHint = `as in secret "ANTHROPIC_API_KEY" { from = "file:/etc/airlock/secrets/api.anthropic.com/key", inject { host = "api.anthropic.com", header = "x-api-key" } }`

// secretSourceHint says what a secret's from may be.
const secretSourceHint = `Write "file:/ABSOLUTE/PATH" (a file on the daemon's host, such as "file:/etc/airlock/secrets/api.anthropic.com/key"), "env:VAR" (a variable of the daemon's environment; the daemon's admission policy says which files and variables it admits), or "credential:NAME" (a credential of this manifest with deliver = "gateway")`

// ParseSecretSource splits a secret's from into its kind ("env", "credential" or
// "file") and the variable name or path, or returns a reason why s is not
// a secret source.
func ParseSecretSource(s string) (kind, ref, reason string) {
	kind, ref, ok := strings.Cut(s, ":")
	switch {
	case s == "":
		return "", "", "from is empty"
	case !ok || kind != "env" && kind != "file" && kind != "credential":
		return "", "", fmt.Sprintf("%q is neither env:VAR, file:/PATH nor credential:NAME", s)
	case kind == "credential" && !credentialNameRE.MatchString(ref):
		return "", "", fmt.Sprintf("%q does not name a credential of the manifest", s)
	case ref == "" && kind == "env":
		return "", "", fmt.Sprintf("%q names no variable", s)
	case ref == "" || ref == "/":
		return "", "", fmt.Sprintf("%q names no file", s)
	case kind == "env" && !envVarNameRE.MatchString(ref):
		return "", "", fmt.Sprintf("%q does not name an environment variable: use letters, digits and '_', not starting with a digit", ref)
	case kind == "file" && (strings.ContainsRune(ref, 0) || !filepath.IsAbs(ref)):
		return "", "", fmt.Sprintf("%q is not an absolute path", ref)
	case kind == "file" && filepath.Clean(ref) != ref:
		return "", "", fmt.Sprintf("%q is not a clean path to a file (write %q)", ref, filepath.Clean(ref))
	}
	return kind, ref, ""
}

// SandboxEnvVar is the environment variable that holds the secret's
// placeholder in the sandbox: EnvVar, or Name when neither EnvVar nor
// Path is set; "" when the placeholder is only in a file.
func (s Secret) SandboxEnvVar() string {
	if s.EnvVar == "" && s.Path == "" {
		return s.Name
	}
	return s.EnvVar
}

// InjectHeader is the header an inject sets: Authorization for bearer,
// else Header, in canonical form.
func (in SecretInject) InjectHeader() string {
	if in.Bearer {
		return "Authorization"
	}
	return textproto.CanonicalMIMEHeaderKey(in.Header)
}

func (c *checker) secrets(at fieldPath, p *Policy, targets map[string]fieldPath) {
	if len(p.Secrets) == 0 {
		return
	}
	var names *egressNames
	switch {
	case p.Egress == nil:
		c.add(at.index(0), "Secrets need the L7 gateway", `Add an egress block that allows the hosts secrets go to and turns the gateway on, as in egress { allow = ["api.anthropic.com"], l7 = "check" }`,
			"the L7 gateway puts a secret into requests, and this session has no egress block")
	case !p.Egress.L7Enabled():
		c.add(at.index(0), "Secrets need the L7 gateway", `Add l7 = "check" to the egress block`,
			"the L7 gateway puts a secret into requests, and it is off: the egress block has l7 = %q", cmp.Or(p.Egress.L7, L7Off))
		names = newEgressNames(p.Egress)
	default:
		names = newEgressNames(p.Egress)
	}

	// Where other deliveries put things in the sandbox.
	vars := map[string]fieldPath{}
	for _, k := range sortedKeys(p.Env) {
		vars[k] = fieldPath{"env"}.key(k)
	}
	var credFiles []placedFile
	for i, cr := range p.Credentials {
		at := fieldPath{"credentials"}.index(i)
		if cr.Deliver == DeliverEnv {
			if _, ok := vars[cr.EnvVar]; !ok && cr.EnvVar != "" {
				vars[cr.EnvVar] = at.field("env_var")
			}
		} else if cr.Deliver != DeliverGateway && credentialNameRE.MatchString(cr.Name) {
			credFiles = append(credFiles, placedFile{path.Clean(cr.SandboxPath()), at.field("path")})
		}
	}
	var secretFiles []placedFile
	names0 := map[string]fieldPath{}
	injected := map[string]fieldPath{}
	for i, s := range p.Secrets {
		at := at.index(i)
		if !envVarNameRE.MatchString(s.Name) {
			c.add(at.field("name"), "Invalid secret name", "Use letters, digits and '_', not starting with a digit, "+secretHint, "%q is not a valid secret name", s.Name)
		} else if prev, ok := names0[s.Name]; ok {
			c.addDup(at.field("name"), prev.field("name"), "Duplicate secret", "Give each secret block its own name", "secret %q is already declared at %s", s.Name, prev)
		} else {
			names0[s.Name] = at
		}
		if s.From == "" {
			c.add(at.field("from"), "Missing from", secretSourceHint, "a secret needs from: where the daemon reads its value")
		} else if kind, ref, reason := ParseSecretSource(s.From); reason != "" {
			c.add(at.field("from"), "Invalid from", secretSourceHint, "%s", reason)
		} else if kind == "credential" {
			i := slices.IndexFunc(p.Credentials, func(cr Credential) bool { return cr.Name == ref })
			switch {
			case i < 0:
				c.add(at.field("from"), "Invalid from", fmt.Sprintf(`Add credential %q { deliver = "gateway" ... }, or name one the manifest declares`, ref), "the manifest declares no credential %q", ref)
			case p.Credentials[i].Deliver != DeliverGateway:
				c.addDup(at.field("from"), fieldPath{"credentials"}.index(i).field("deliver"), "Credential also in the sandbox",
					fmt.Sprintf(`Set deliver = "gateway" in credential %q: the secret keeps its token out of the sandbox only if nothing else delivers it there`, ref),
					"credential %q is delivered into the sandbox (deliver = %q)", ref, cmp.Or(p.Credentials[i].Deliver, DeliverFile))
			}
		}

		// The placeholder's environment variable: one named after the
		// secret (set by ApplyDefaults, or by hand) is reported at the
		// name.
		ev := s.SandboxEnvVar()
		evAt := at.field("env_var")
		if ev == s.Name {
			evAt = at.field("name")
		}
		switch {
		case ev == "":
		case !envVarNameRE.MatchString(ev):
			if ev != s.Name {
				c.add(evAt, "Invalid env_var", "Use letters, digits and '_', not starting with a digit, such as ANTHROPIC_API_KEY", "%q is not a valid environment variable name", ev)
			}
		default:
			if prev, ok := vars[ev]; ok {
				c.addDup(evAt, prev, "Conflicting secret delivery", "Give the placeholder its own variable with env_var, or remove the other", "the placeholder's variable %s is already set by %s", ev, prev)
			} else {
				vars[ev] = evAt
			}
		}

		// The placeholder's file.
		if s.Path != "" {
			at := at.field("path")
			const hint = `Use an absolute file path inside the sandbox in a directory of its own, such as "/run/airlock/secrets/NAME"`
			sp := path.Clean(s.Path)
			reason := checkSandboxPath(s.Path)
			switch {
			case reason != "":
			case sp != s.Path || sp == "/":
				reason = fmt.Sprintf("%q does not name a file", s.Path)
			default:
				for _, r := range reservedTargets {
					if sp == r || strings.HasPrefix(sp, r+"/") {
						reason = fmt.Sprintf("%q is under %s, which the runtime manages", s.Path, r)
					}
				}
			}
			if reason != "" {
				c.add(at, "Invalid secret path", hint, "%s", reason)
			} else if prev, why := pathConflict(sp, targets, credFiles, secretFiles); prev != nil {
				c.addDup(at, prev, "Conflicting secret delivery", hint, "path %q %s %s", s.Path, why, prev)
			} else {
				secretFiles = append(secretFiles, placedFile{sp, at})
			}
		}

		if len(s.Inject) == 0 {
			c.warn(at, "Secret guarded only", "Add an inject block naming the host and header if the value should reach a host, "+secretHint,
				"secret %q has no inject block: its value goes nowhere, and the gateway refuses every request it sees that carries it or its placeholder; to see them, it terminates the TLS of every allowed host on its ports (as inspect = \"all\"), and TLS without a server name is refused", s.Name)
		}
		for j, in := range s.Inject {
			c.inject(at.field("inject").index(j), in, names, injected)
		}
	}
}

// placedFile is a file a delivery puts in the sandbox, and the field that
// asks for it.
type placedFile struct {
	path string
	at   fieldPath
}

// pathConflict finds a delivery that the placeholder file at sp (clean)
// collides with, and says how.
func pathConflict(sp string, targets map[string]fieldPath, creds, secrets []placedFile) (fieldPath, string) {
	for _, t := range sortedKeys(targets) {
		if sp == t || within(t, sp) {
			return targets[t], "is inside the target of"
		}
	}
	for _, f := range secrets {
		switch {
		case sp == f.path:
			return f.at, "is already used by"
		case within(sp, f.path) || within(f.path, sp):
			return f.at, "would be both a file and a directory, with"
		}
	}
	for _, f := range creds {
		switch {
		case sp == f.path:
			return f.at, "is already used by"
		case within(sp, f.path) || within(f.path, sp):
			return f.at, "would be both a file and a directory, with"
		case path.Dir(sp) == path.Dir(f.path):
			return f.at, "is in the directory airlock fills with the credential files of"
		}
	}
	return nil, ""
}

func (c *checker) inject(at fieldPath, in SecretInject, names *egressNames, injected map[string]fieldPath) {
	const hint = `Name the one host the value may go to, as in inject { host = "api.anthropic.com", header = "x-api-key" }`
	hostOK := false
	switch name, _, reason := parseHostName(in.Host, false); {
	case in.Host == "":
		c.add(at.field("host"), "Missing inject host", hint, "an inject block needs host: the value goes only to that host")
	case strings.HasPrefix(in.Host, "*."):
		c.add(at.field("host"), "Wildcard inject host", hint+"; add an inject block for each host",
			"%q is a wildcard: the value would go to any name under %s, including ones that are not the service", in.Host, in.Host[2:])
	case reason != "":
		c.add(at.field("host"), "Invalid inject host", hint, "%q is not a host name: %s", in.Host, reason)
	case name != in.Host:
		c.add(at.field("host"), "Host not in canonical form", fmt.Sprintf("Write %q", name), "%q is not written in canonical form (lower case, no trailing dot)", in.Host)
	default:
		hostOK = true
		if ok, why, denied := names.reach(name, false, names.gatewayPorts()...); !ok {
			hint := fmt.Sprintf("Allow %q on a port of l7_ports (by default 443), or every port, in the egress block", in.Host)
			if denied {
				hint = "Remove the deny entry, or this inject block"
			}
			c.add(at.field("host"), "Inject host not allowed", hint,
				"the session cannot reach %s on a port the gateway checks %v (%s), and secrets are injected only through the gateway", in.Host, names.gatewayPorts(), why)
		} else if ports, rule, _ := names.beyond(name, false); ports != "" {
			c.add(at.field("host"), "Inject host reachable past the gateway", bypassHint(in.Host, rule, names.gatewayPorts()),
				"the allow entry %q lets the session reach %s on %s, which the gateway does not check: the placeholder sent there would not be seen, and the host's answers not scrubbed", rule, in.Host, ports)
		}
	}
	const headerHint = `Set header = "NAME" (the value goes in that header, as x-api-key for Anthropic) or bearer = true (Authorization: Bearer VALUE, as for OpenAI)`
	switch {
	case in.Header != "" && in.Bearer:
		c.add(at.field("header"), "Both header and bearer", headerHint+", not both", "bearer = true sets Authorization, and header sets %s", in.Header)
		return
	case in.Header == "" && !in.Bearer:
		c.add(at, "Missing header", headerHint, "an inject block needs header or bearer: where the value goes in the request")
		return
	case in.Header != "" && !isToken(in.Header):
		c.add(at.field("header"), "Invalid header", headerHint, "%q is not an HTTP header name", in.Header)
		return
	case in.Header != "" && isGatewayHeader(textproto.CanonicalMIMEHeaderKey(in.Header)):
		c.add(at.field("header"), "Header owned by the gateway", headerHint,
			"%s frames, routes or is consumed on the way to the host (Host, Content-Length, Transfer-Encoding, Expect, Connection, Keep-Alive, Upgrade, TE, Trailer, HTTP2-Settings, Proxy-*), so the gateway sets it, never a secret", textproto.CanonicalMIMEHeaderKey(in.Header))
		return
	}
	if !hostOK {
		return
	}
	key := in.Host + " " + in.InjectHeader()
	fp := at.field("header")
	if in.Bearer {
		fp = at.field("bearer")
	}
	if prev, ok := injected[key]; ok {
		c.addDup(fp, prev, "Duplicate injection", "Inject one value per host and header", "%s to %s is already set by %s", in.InjectHeader(), in.Host, prev[:len(prev)-1])
		return
	}
	injected[key] = fp
}

// bypassHint says how to keep a host with http rules or a secret behind
// the gateway: allow it only on the ports the gateway checks.
func bypassHint(host, rule string, gw []uint16) string {
	ports := make([]string, len(gw))
	for i, p := range gw {
		ports[i] = strconv.Itoa(int(p))
	}
	return fmt.Sprintf("Allow %q only on ports the gateway checks, as in %q (l7_ports is %s), in place of %q", host, host+":"+ports[len(ports)-1], strings.Join(ports, ", "), rule)
}

func (c *checker) approval(at fieldPath, a *Approval, asks bool) {
	switch {
	case a.Timeout < 0:
		c.add(at.field("timeout"), "Invalid approval timeout", fmt.Sprintf(`Use a positive duration up to %s, such as "5m"`, MaxApprovalTimeout), "timeout %s is negative", a.Timeout)
	case a.Timeout > MaxApprovalTimeout:
		c.add(at.field("timeout"), "Invalid approval timeout", fmt.Sprintf(`Use a positive duration up to %s, such as "5m"`, MaxApprovalTimeout), "timeout %s is longer than the maximum %s", a.Timeout, MaxApprovalTimeout)
	}
	switch a.OnTimeout {
	case "", OnTimeoutDeny:
	default:
		c.add(at.field("on_timeout"), "Invalid on_timeout", `Use "deny": a request no one decided in time is refused`, "%q is not deny, the only choice", a.OnTimeout)
	}
	if !asks {
		c.warn(at, "Approval without ask", `Remove the approval block, or give an http rule action = "ask" (or a host default = "ask")`,
			"no http rule or default asks, so no request is ever held for approval")
	}
}

// asks reports whether some HTTP rule or default of e holds requests for
// approval.
func (e *Egress) asks() bool {
	if e == nil {
		return false
	}
	for _, h := range e.HTTP {
		if h.Default == HTTPAsk {
			return true
		}
		for _, r := range h.Rules {
			if r.Action == HTTPAsk {
				return true
			}
		}
	}
	return false
}

// addressBesideChecked warns of each address entry of allow in an egress
// block with the L7 gateway and hosts it checks (http blocks, the hosts
// secrets are injected into): an address is not a name, so whether the
// entry covers such a host's address is known only at run time. If it
// does, it reaches the host on ports the gateway does not check, past its
// rules; on the gateway's ports, a connection there that does not name
// the host is refused only once the session has resolved the host.
func (c *checker) addressBesideChecked(at fieldPath, p *Policy) {
	e := p.Egress
	if e == nil || !e.L7Enabled() {
		return
	}
	var hosts []string
	for _, h := range e.HTTP {
		hosts = append(hosts, h.Host)
	}
	for _, s := range p.Secrets {
		for _, in := range s.Inject {
			if !slices.Contains(hosts, in.Host) {
				hosts = append(hosts, in.Host)
			}
		}
	}
	if len(hosts) == 0 {
		return
	}
	shown := strings.Join(hosts, ", ")
	if len(hosts) > 3 {
		shown = strings.Join(hosts[:3], ", ") + fmt.Sprintf(" and %d more", len(hosts)-3)
	}
	for i, s := range e.Allow {
		if r, reason := parseEgressRule(s); reason != "" || r.IsName() {
			continue
		}
		c.warn(at.field("allow").index(i), "Address entry beside checked hosts",
			"Keep address entries off the addresses of hosts with http rules or secrets, and allow those hosts by name",
			"%q opens addresses whatever name a connection asks for: if it covers the address of %s, the session reaches that host on ports the gateway does not check, past its rules and secrets, and on the gateway's ports a connection there without the host's name is refused only once the session has resolved the host", s, shown)
	}
}
