// Package policy holds the benchmark's operator policies: one JSON file per
// task family, shipped beside this file, that writes down what an operator
// of the benchmark's environment knows before any request arrives. That is
// who the caller is, what each lane or side phrase of a request means in
// this environment, the least-privilege default, the items the operator
// knows to be protected, and which world service, credential and names the
// family uses.
//
// The policies were written from the requests' vocabulary (the S/B/R slot
// texts of families.json) and the environment's naming conventions, never
// from the oracles. The manifest generator reads a request's text and its
// family's policy, and nothing else.
package policy

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/credentials/scope"
	"github.com/airlock-sandbox/airlock/egress/httprule"
	"github.com/airlock-sandbox/airlock/policies"
)

//go:embed *.json
var files embed.FS

// Where a lane's changes happen.
const (
	// WhereWorld: the change goes through the family's world service and
	// needs a credential scope.
	WhereWorld = "world"
	// WhereWorkspace: the change happens in the workspace checkout and
	// reaches the host only through a commit.
	WhereWorkspace = "workspace"
)

// Operator is one family's operator policy.
type Operator struct {
	Family  string `json:"family"`
	Version int    `json:"version"`
	// Caller is the user on whose behalf every request is made.
	Caller string `json:"caller"`
	// Notes explain the environment's conventions in prose, for the report.
	Notes   []string `json:"notes,omitempty"`
	Service Service  `json:"service"`
	// ReadScopes are granted to every request of the family.
	ReadScopes []string `json:"read_scopes"`
	// Nouns are the words requests use for the family's items; Singular
	// are those of them that name one item ("service", not "services"):
	// a request that says one item while its words select several is
	// ambiguous (see Signals).
	Nouns    []string `json:"nouns"`
	Singular []string `json:"singular,omitempty"`
	Lanes    []Lane   `json:"lanes"`
	// DefaultLane names the lane of a request that names none; empty means
	// such a request may change nothing.
	DefaultLane string `json:"default_lane,omitempty"`
	// Owners are the owners the operator knows; protected owners'
	// resources are never granted, whoever the request names.
	Owners    []Owner     `json:"owners"`
	Protected []Protected `json:"protected,omitempty"`
	Targets   Targets     `json:"targets"`
	// IDIndex maps an item id a request may name to the value the service
	// checks (an object id to its key).
	IDIndex   map[string]string `json:"id_index,omitempty"`
	Workspace *Workspace        `json:"workspace,omitempty"`
	// HTTP are the HTTP rules the L7 gateway checks on the service's
	// hosts; nil: the manifest has none (its hosts pass after the
	// Host/SNI check).
	HTTP *HTTP `json:"http,omitempty"`
	// Signals say how the generator reads the world at session creation
	// to decide whether a request determines its items; nil: it does not
	// read the world, and every grant is allowed outright.
	Signals *Signals `json:"signals,omitempty"`
}

// Signals are the environment signals of a family: a listing of its items
// that the read scopes allow, read once when a session is created (never
// through the manifest being generated), and what of each item the
// generator compares.
//
// For each scope of a grant that selects items by a ticket or an owner
// (never by a named id) the generator finds the listed items the scope
// matches, through Match. The grant is held for a person ("ask") instead
// of allowed when the request's words do not determine those items:
//   - the request names one item (a Singular noun) and several match;
//   - the matching items differ in an Attribute whose value the request
//     does not state (it names neither "auth" nor "billing", and both an
//     auth and a billing service match).
type Signals struct {
	// List is the path (on the service's first host) of a GET that lists
	// every item of the family with the read scopes.
	List string `json:"list"`
	// Items is the field of the listing's JSON answer holding the items.
	Items string `json:"items"`
	// Match maps each selector key of Targets.Action to the item field
	// holding the value the service checks against it.
	Match map[string]string `json:"match"`
	// Name is the item field that names an item in the decisions.
	Name string `json:"name"`
	// Attributes are what items may differ in without the request
	// saying which.
	Attributes []Attribute `json:"attributes,omitempty"`
	Why        string      `json:"why"`
}

// Attribute is a property of an item: the value of Field, or, with
// Pattern, the first group the regular expression Pattern captures in it
// (an item it does not match has no value for it).
type Attribute struct {
	Name    string `json:"name"`
	Field   string `json:"field"`
	Pattern string `json:"pattern,omitempty"`
	Why     string `json:"why"`
}

// Value returns the attribute's value for an item's fields, and whether
// it has one.
func (a Attribute) Value(fields map[string]string) (string, bool) {
	v, ok := fields[a.Field]
	if !ok || a.Pattern == "" {
		return v, ok
	}
	re, err := regexp.Compile(a.Pattern)
	if err != nil {
		return "", false
	}
	m := re.FindStringSubmatch(v)
	if len(m) < 2 {
		return "", false
	}
	return m[1], true
}

func (s *Signals) check(o *Operator) []string {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if !strings.HasPrefix(s.List, "/") || s.Items == "" || s.Name == "" || s.Why == "" {
		bad("signals need a list path starting with \"/\", items, a name and a why")
	}
	keys := scope.KnownActions[o.Targets.Action].Keys
	for k, f := range s.Match {
		if !slices.Contains(keys, k) {
			bad("signals: match key %q is not a selector key of %s %v", k, o.Targets.Action, keys)
		}
		if f == "" {
			bad("signals: match key %q names no field", k)
		}
	}
	if len(s.Match) == 0 {
		bad("signals: match is empty")
	}
	for _, a := range s.Attributes {
		if a.Name == "" || a.Field == "" || a.Why == "" {
			bad("signals: attribute %q needs a name, a field and a why", a.Name)
		}
		if a.Pattern != "" {
			re, err := regexp.Compile(a.Pattern)
			switch {
			case err != nil:
				bad("signals: attribute %q: pattern: %v", a.Name, err)
			case re.NumSubexp() < 1:
				bad("signals: attribute %q: pattern %q captures no group", a.Name, a.Pattern)
			}
		}
	}
	return probs
}

// Service is the world service a family's actions reach.
type Service struct {
	Name string `json:"name"`
	// Hosts are egress allow entries.
	Hosts      []string `json:"hosts"`
	Audience   string   `json:"audience"`
	Credential string   `json:"credential"`
	// Env is set in the session: the service URL and token file the
	// sandbox's clients read.
	Env map[string]string `json:"env,omitempty"`
}

// Lane is one lane or side a request can name.
type Lane struct {
	// Name is the lane in the environment's terms (a queue, a namespace,
	// "local" or "remote").
	Name string `json:"name"`
	// Phrases are the words requests use for it, matched case-insensitively.
	Phrases []string `json:"phrases"`
	Meaning string   `json:"meaning"`
	// Where is WhereWorld or WhereWorkspace.
	Where string `json:"where"`
	// Vars are substituted into the target templates.
	Vars map[string]string `json:"vars,omitempty"`
}

// Owner is an owner of items in the environment.
type Owner struct {
	Name string `json:"name"`
	// Tag is how item names mark this owner, where they do ("a" in
	// job-dev-4812-a).
	Tag       string `json:"tag,omitempty"`
	Protected bool   `json:"protected,omitempty"`
}

// Protected documents items the operator knows must not be touched.
type Protected struct {
	Items string `json:"items"`
	Why   string `json:"why"`
}

// Targets are the selector templates of the family's mutating action.
// Templates use {name} placeholders: {owner}, {tag}, {id}, {key}, {ticket},
// {topic} and the lane's vars.
type Targets struct {
	Action string `json:"action"`
	// Named selects one item the request names by id.
	Named string `json:"named"`
	// Ticket selects the owner's items of a ticket or ticket range;
	// TopicTicket does the same when the request also names a topic.
	Ticket      string `json:"ticket"`
	TopicTicket string `json:"topic_ticket,omitempty"`
	// Owned selects all of the owner's items in the lane.
	Owned string `json:"owned"`
}

// Workspace describes the session's workspace: what a commit may carry.
type Workspace struct {
	Target            string   `json:"target"`
	Protect           []string `json:"protect,omitempty"`
	PreserveUntracked bool     `json:"preserve_untracked,omitempty"`
	// ProtectRefs are always protected.
	ProtectRefs []string `json:"protect_refs,omitempty"`
	// OwnerRefs is the ref namespace of one owner's branches, a template
	// over {owner}: the namespaces of owners a request does not cover are
	// protected, and so are those of the owners it covers except for the
	// refs the request's target selector matches.
	OwnerRefs string `json:"owner_refs,omitempty"`
	// AllRefs are protected when the request changes nothing in the
	// workspace.
	AllRefs []string `json:"all_refs,omitempty"`
}

// HTTP says which HTTP rules the generator writes into the manifest's
// egress `http` block of each service host, for the L7 gateway to check
// on every request, beside the check of the credential at the service.
// They mirror the credential's grant as far as a request shows it to the
// gateway: the method and path of a route, the refs a git push updates.
// The rules do not read bodies, so a route that carries its targets in
// the body (a bulk cancel, a bulk delete) is allowed, asked about or
// refused whole.
type HTTP struct {
	// Default decides a request no rule matches: "allow" or "deny" (a
	// request is asked about only where the grant is held; see Signals).
	Default string `json:"default"`
	// Read are the routes every session may call: those of the read
	// scopes. Their paths have no placeholders.
	Read []Route `json:"read,omitempty"`
	// Change are the routes of Targets.Action. For each scope of the
	// request's grant, each route is allowed with the placeholders of its
	// path ({id}, {namespace}, {bucket}, {key}) replaced by that scope's
	// selector for the key of the same name, or by Any[key] where the
	// scope does not select on the key or its pattern has no path glob
	// equivalent (the credential still checks it). A request with no
	// grant gets none of them.
	Change []Route `json:"change,omitempty"`
	// Any is what a placeholder stands for when the grant's scope leaves
	// it open: "*" for one path segment, "**" for any number.
	Any map[string]string `json:"any,omitempty"`
	// Push, when set, writes the rules of git smart-HTTP pushes.
	Push *Push `json:"push,omitempty"`
}

// Route is an HTTP method and path the service serves.
type Route struct {
	Methods []string `json:"methods"`
	// Path is a glob over the request's cleaned path (the grammar of the
	// egress `http` rules); empty matches any path.
	Path string `json:"path,omitempty"`
	// JSON maps a top-level field of the route's JSON body that names
	// its targets to a template over the selector keys ("names":
	// "{name}"): each scope of a grant gets json conditions, the
	// templates with the scope's selectors (an allowed scope's one rule
	// allows a body only if every target of every field matches; a held
	// one's rule per field asks if any does). A body none of them
	// matches is left to the section's default.
	JSON map[string]string `json:"json,omitempty"`
	// Prefixes are fields of JSON whose value may be a prefix of the
	// targets rather than a target (a recursive delete's key): the rules
	// cannot tell which items such a body reaches, so a held scope's rule
	// asks about every prefix of its items, and after the json rules the
	// route itself is allowed, the service checking each target against
	// the credential.
	Prefixes []string `json:"prefixes,omitempty"`
	// Why names the scope the route needs, for the report.
	Why string `json:"why"`
}

// Push writes three rules, in order: a push that updates a Protected ref
// is refused, whatever the grant says; a push whose every updated ref
// matches the ref selector of a scope of the grant is allowed (a scope
// without one, or one with no glob equivalent, allows Any["ref"]); every
// other push that updates a ref is refused. A push that updates no ref
// (the "0000" git sends to probe a server before a large request) matches
// none of them and goes to the default.
type Push struct {
	Protected []string `json:"protected,omitempty"`
	Why       string   `json:"why"`
}

// Lane returns the lane called name.
func (o *Operator) Lane(name string) (Lane, bool) {
	i := slices.IndexFunc(o.Lanes, func(l Lane) bool { return l.Name == name })
	if i < 0 {
		return Lane{}, false
	}
	return o.Lanes[i], true
}

// Owner returns the owner called name.
func (o *Operator) Owner(name string) (Owner, bool) {
	i := slices.IndexFunc(o.Owners, func(w Owner) bool { return w.Name == name })
	if i < 0 {
		return Owner{}, false
	}
	return o.Owners[i], true
}

// Load returns the operator policy of family shipped with the repository.
func Load(family string) (*Operator, error) {
	b, err := Source(family)
	if err != nil {
		return nil, err
	}
	o, err := parse(family+".json", b)
	if err != nil {
		return nil, err
	}
	if o.Family != family {
		return nil, fmt.Errorf("%s.json declares family %q: %w", family, o.Family, errdefs.ErrInvalidArgument)
	}
	return o, nil
}

// LoadAll returns every shipped operator policy, keyed by family.
func LoadAll() (map[string]*Operator, error) {
	entries, err := files.ReadDir(".")
	if err != nil {
		return nil, err
	}
	out := map[string]*Operator{}
	for _, e := range entries {
		if e.Name() == AuthGateFile {
			continue // the contrast-pair families' policy, see LoadAuthGate
		}
		fam := strings.TrimSuffix(e.Name(), ".json")
		op, err := Load(fam)
		if err != nil {
			return nil, err
		}
		out[fam] = op
	}
	return out, nil
}

// LoadFile reads an operator policy from a file.
func LoadFile(p string) (*Operator, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("read operator policy: %w", err)
	}
	return parse(p, b)
}

// Source returns the shipped policy file of family as written.
func Source(family string) ([]byte, error) {
	b, err := files.ReadFile(family + ".json")
	if err != nil {
		return nil, fmt.Errorf("operator policy for family %q: %w", family, errdefs.ErrNotFound)
	}
	return b, nil
}

func parse(name string, b []byte) (*Operator, error) {
	var o Operator
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&o); err != nil {
		return nil, fmt.Errorf("%s: %w: %w", name, errdefs.ErrInvalidArgument, err)
	}
	if err := o.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return &o, nil
}

var placeholderRE = regexp.MustCompile(`\{([a-z_]+)\}`)

// Expand substitutes vars into tmpl. Every placeholder must have a value.
func Expand(tmpl string, vars map[string]string) (string, error) {
	var missing []string
	out := placeholderRE.ReplaceAllStringFunc(tmpl, func(m string) string {
		k := m[1 : len(m)-1]
		v, ok := vars[k]
		if !ok {
			missing = append(missing, k)
			return m
		}
		return v
	})
	if len(missing) > 0 {
		return "", fmt.Errorf("template %q: no value for %s: %w", tmpl, strings.Join(missing, ", "), errdefs.ErrInvalidArgument)
	}
	return out, nil
}

// Placeholders returns the placeholder names used in tmpl.
func Placeholders(tmpl string) []string {
	var out []string
	for _, m := range placeholderRE.FindAllStringSubmatch(tmpl, -1) {
		if !slices.Contains(out, m[1]) {
			out = append(out, m[1])
		}
	}
	return out
}

// Validate checks that the policy is complete and that every template
// expands to a valid scope of a known action.
func (o *Operator) Validate() error {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if o.Family == "" {
		bad("family is empty")
	}
	if o.Caller == "" {
		bad("caller is empty")
	}
	if _, ok := o.Owner(o.Caller); !ok {
		bad("caller %q is not among the owners", o.Caller)
	}
	s := o.Service
	if s.Name == "" || s.Audience == "" || s.Credential == "" || len(s.Hosts) == 0 {
		bad("service needs name, hosts, audience and credential")
	}
	if len(o.Nouns) == 0 {
		bad("nouns are empty")
	}
	for _, r := range o.ReadScopes {
		if err := checkScope(r); err != nil {
			bad("read scope %q: %v", r, err)
		}
	}
	if len(o.Lanes) == 0 {
		bad("no lanes")
	}
	phrases := map[string]string{}
	for _, l := range o.Lanes {
		if l.Name == "" || len(l.Phrases) == 0 {
			bad("lane %q needs a name and phrases", l.Name)
		}
		if l.Where != WhereWorld && l.Where != WhereWorkspace {
			bad("lane %q: where is %q, not %q or %q", l.Name, l.Where, WhereWorld, WhereWorkspace)
		}
		if l.Where == WhereWorkspace && (o.Workspace == nil || o.Workspace.OwnerRefs == "") {
			bad("lane %q changes the workspace, but the workspace has no owner_refs", l.Name)
		}
		for _, p := range l.Phrases {
			k := strings.ToLower(p)
			if prev, ok := phrases[k]; ok {
				bad("phrase %q names both lane %q and lane %q", p, prev, l.Name)
			}
			phrases[k] = l.Name
		}
	}
	if o.DefaultLane != "" {
		if _, ok := o.Lane(o.DefaultLane); !ok {
			bad("default_lane %q is not a lane", o.DefaultLane)
		}
	}
	t := o.Targets
	if t.Action == "" || t.Named == "" || t.Ticket == "" || t.Owned == "" {
		bad("targets need action, named, ticket and owned")
	}
	for _, tmpl := range []string{t.Named, t.Ticket, t.TopicTicket, t.Owned} {
		if tmpl == "" {
			continue
		}
		for _, l := range o.Lanes {
			if l.Where != WhereWorld {
				continue
			}
			vars := map[string]string{"owner": "o", "tag": "t", "id": "i", "key": "k", "ticket": "1*", "topic": "x"}
			for k, v := range l.Vars {
				vars[k] = v
			}
			sel, err := Expand(tmpl, vars)
			if err != nil {
				bad("lane %q: %v", l.Name, err)
				continue
			}
			if err := checkScope(t.Action + " " + sel); err != nil {
				bad("lane %q: template %q: %v", l.Name, tmpl, err)
			}
			// A ticket range expands to a pattern ending in "*"; next to
			// another "*" it would become "**" and cross "/".
			if strings.Count(sel, "**") != strings.Count(tmpl, "**") {
				bad("template %q: {ticket} is next to a \"*\"", tmpl)
			}
		}
	}
	for _, w := range o.Owners {
		if w.Name == "" {
			bad("an owner has no name")
		}
	}
	if o.HTTP != nil {
		for _, p := range o.HTTP.check(o) {
			bad("http: %s", p)
		}
	}
	if o.Signals != nil {
		probs = append(probs, o.Signals.check(o)...)
	}
	for _, n := range o.Singular {
		if !slices.Contains(o.Nouns, n) {
			bad("singular noun %q is not among the nouns", n)
		}
	}
	if len(probs) > 0 {
		return fmt.Errorf("operator policy %q: %s: %w", o.Family, strings.Join(probs, "; "), errdefs.ErrInvalidArgument)
	}
	return nil
}

// check returns what is wrong with h: a default other than allow or
// deny, a route without a method or a why, a read path with placeholders,
// a change path placeholder that is no selector key of the change's
// action or has no Any value, and any rule the gateway would not compile
// for the service's hosts, with every placeholder set to its Any value.
func (h *HTTP) check(o *Operator) []string {
	var probs []string
	bad := func(format string, args ...any) { probs = append(probs, fmt.Sprintf(format, args...)) }
	if h.Default != policies.HTTPAllow && h.Default != policies.HTTPDeny {
		bad("default %q is not %q or %q", h.Default, policies.HTTPAllow, policies.HTTPDeny)
	}
	keys := scope.KnownActions[o.Targets.Action].Keys
	var rules []policies.HTTPRule
	for _, r := range h.Read {
		if len(r.Methods) == 0 || r.Why == "" {
			bad("read route %q needs methods and a why", r.Path)
		}
		if ph := Placeholders(r.Path); len(ph) > 0 {
			bad("read route %q has placeholders %v", r.Path, ph)
		}
		rules = append(rules, policies.HTTPRule{Methods: r.Methods, Path: r.Path, Action: policies.HTTPAllow})
	}
	for _, r := range h.Change {
		if len(r.Methods) == 0 || r.Why == "" {
			bad("change route %q needs methods and a why", r.Path)
		}
		for _, k := range Placeholders(r.Path) {
			if !slices.Contains(keys, k) {
				bad("change route %q: {%s} is not a selector key of %s %v", r.Path, k, o.Targets.Action, keys)
			}
			if h.Any[k] == "" {
				bad("change route %q: {%s} has no value in any", r.Path, k)
			}
		}
		path, err := Expand(r.Path, h.Any)
		if err != nil {
			continue
		}
		rule := policies.HTTPRule{Methods: r.Methods, Path: path, Action: policies.HTTPAllow}
		for _, field := range slices.Sorted(maps.Keys(r.JSON)) {
			tmpl := r.JSON[field]
			for _, k := range Placeholders(tmpl) {
				if !slices.Contains(keys, k) {
					bad("change route %q: json %q: {%s} is not a selector key of %s %v", r.Path, field, k, o.Targets.Action, keys)
				}
				if h.Any[k] == "" {
					bad("change route %q: json %q: {%s} has no value in any", r.Path, field, k)
				}
			}
			v, err := Expand(tmpl, h.Any)
			if err != nil {
				bad("change route %q: json %q: %v", r.Path, field, err)
				continue
			}
			rule.JSON = append(rule.JSON, policies.HTTPJSONMatch{Field: field, Values: []string{v}})
		}
		if len(r.JSON) > 0 && h.Default != policies.HTTPDeny {
			bad("change route %q: json fields need default %q: a body the rules cannot read falls through to it, and a held scope is asked about only by rules such a body does not match", r.Path, policies.HTTPDeny)
		}
		for _, f := range r.Prefixes {
			if _, ok := r.JSON[f]; !ok {
				bad("change route %q: prefix field %q is not among its json fields", r.Path, f)
			}
		}
		rules = append(rules, rule)
	}
	if p := h.Push; p != nil {
		if p.Why == "" {
			bad("push needs a why")
		}
		if !slices.Contains(keys, "ref") {
			bad("push: %s selects no ref", o.Targets.Action)
		}
		if h.Any["ref"] == "" {
			bad("push: {ref} has no value in any")
		}
		if len(p.Protected) > 0 {
			rules = append(rules, policies.HTTPRule{Refs: p.Protected, Action: policies.HTTPDeny})
		}
		rules = append(rules, policies.HTTPRule{Refs: []string{h.Any["ref"]}, Action: policies.HTTPAllow})
	}
	var blocks []policies.HTTPHost
	for _, host := range o.Service.Hosts {
		blocks = append(blocks, policies.HTTPHost{Host: host, Rules: rules, Default: h.Default})
	}
	if _, err := httprule.Compile(blocks); err != nil {
		bad("%v", err)
	}
	return probs
}

// checkScope parses s and checks that its action is known and every
// selector key is one the service passes.
func checkScope(s string) error {
	sc, err := scope.Parse(s)
	if err != nil {
		return err
	}
	if err := scope.ValidateAction(sc.Action()); err != nil {
		return err
	}
	if keys := scope.UnknownKeys(sc); len(keys) > 0 {
		return fmt.Errorf("selector keys %v are not passed by the service", keys)
	}
	return nil
}
