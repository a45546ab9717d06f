package allowlist

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/containerd/errdefs"
)

// Decision is the outcome of matching a name against a List.
type Decision struct {
	// Allowed is true when some allow entry matches and no deny entry
	// takes all of its ports away.
	Allowed bool
	// Ports are the destination ports the name may be reached on, sorted;
	// empty means every port. Meaningful only when Allowed. The slice may be
	// shared with the List: do not modify it.
	Ports []uint16
	// Rule is the entry that decided, in canonical form: the most specific
	// matching allow entry, or the deny entry that refused. It is empty when
	// nothing matched (denied by default).
	Rule string
}

// AllPorts reports whether the decision covers every port.
func (d Decision) AllPorts() bool { return d.Allowed && len(d.Ports) == 0 }

// AddrRule is an address entry of a List.
type AddrRule struct {
	Prefix netip.Prefix
	Port   uint16 // 0 = every port
	Deny   bool
}

func (a AddrRule) String() string {
	r := Rule{Kind: Prefix, Prefix: a.Prefix, Port: a.Port}.String()
	if a.Deny {
		return "deny " + r
	}
	return "allow " + r
}

// portSet is a set of ports where "every port" is a distinct state.
type portSet struct {
	present bool     // some entry contributed
	all     bool     // every port
	ports   []uint16 // sorted, unique; unused when all
}

func (p *portSet) add(port uint16) {
	p.present = true
	if p.all {
		return
	}
	if port == 0 {
		p.all, p.ports = true, nil
		return
	}
	if i, found := slices.BinarySearch(p.ports, port); !found {
		p.ports = slices.Insert(p.ports, i, port)
	}
}

func (p *portSet) union(q portSet) {
	if !q.present {
		return
	}
	if q.all {
		p.add(0)
		return
	}
	for _, port := range q.ports {
		p.add(port)
	}
}

// textRule is an allow entry's port and canonical text.
type textRule struct {
	port uint16
	text string
}

// entry holds every allow and deny entry for one key (an exact name or a
// wildcard suffix).
type entry struct {
	allow, deny portSet
	allowRules  []textRule // in order of specificity, then of appearance
	denyRule    string     // first deny entry, canonical
	dec         Decision
}

// List is a compiled set of allow and deny entries. It is immutable and safe
// for concurrent use. A nil *List denies everything.
type List struct {
	exact map[FQDN]*entry
	wild  map[FQDN]*entry // keyed by suffix: "*.corp.test" is "corp.test."
	addrs []AddrRule
	// maxWildLabels bounds the suffix walk: no wildcard key has more labels.
	maxWildLabels int
}

// Compile parses allow and deny entries (see ParseRule) into a List. All
// invalid entries are reported, joined, each naming its list and index; the
// error is of class errdefs.ErrInvalidArgument.
func Compile(allow, deny []string) (*List, error) {
	l := &List{exact: map[FQDN]*entry{}, wild: map[FQDN]*entry{}}
	var errs []error
	add := func(which string, entries []string, isDeny bool) {
		for i, s := range entries {
			r, err := parseRule(s)
			if err != nil {
				errs = append(errs, fmt.Errorf("%s[%d] %q: %w", which, i, s, err))
				continue
			}
			l.add(r, isDeny)
		}
	}
	add("allow", allow, false)
	add("deny", deny, true)
	if len(errs) > 0 {
		return nil, fmt.Errorf("egress: %w: %w", errors.Join(errs...), errdefs.ErrInvalidArgument)
	}
	for _, e := range l.exact {
		e.dec = decide(e)
	}
	for _, e := range l.wild {
		e.dec = decide(e)
	}
	return l, nil
}

// MustCompile is Compile for tests and static tables; it panics on error.
func MustCompile(allow, deny []string) *List {
	l, err := Compile(allow, deny)
	if err != nil {
		panic(err)
	}
	return l
}

func (l *List) add(r Rule, isDeny bool) {
	if r.Kind == Prefix {
		l.addrs = append(l.addrs, AddrRule{Prefix: r.Prefix, Port: r.Port, Deny: isDeny})
		return
	}
	m := l.exact
	if r.Kind == Wildcard {
		m = l.wild
		l.maxWildLabels = max(l.maxWildLabels, r.Name.NumLabels())
	}
	e := m[r.Name]
	if e == nil {
		e = &entry{}
		m[r.Name] = e
	}
	if isDeny {
		e.deny.add(r.Port)
		if e.denyRule == "" {
			e.denyRule = r.String()
		}
	} else {
		e.allow.add(r.Port)
		e.allowRules = append(e.allowRules, textRule{port: r.Port, text: r.String()})
	}
}

// decide turns the combined port sets into a Decision. A deny entry with
// ports subtracts them from explicit allowed ports; against an all-ports
// allow it cannot be expressed as a set of allowed ports, so the name is
// denied outright (fail closed).
func decide(e *entry) Decision {
	switch {
	case e.deny.present && (e.deny.all || e.allow.all):
		return Decision{Rule: e.denyRule}
	case !e.allow.present:
		return Decision{Rule: e.denyRule}
	case !e.deny.present:
		return Decision{Allowed: true, Ports: e.allow.ports, Rule: e.allowRules[0].text}
	}
	var ports []uint16
	for _, p := range e.allow.ports {
		if _, denied := slices.BinarySearch(e.deny.ports, p); !denied {
			ports = append(ports, p)
		}
	}
	if len(ports) == 0 {
		return Decision{Rule: e.denyRule}
	}
	// Name the most specific allow entry that still grants a port.
	rule := e.allowRules[0]
	for _, r := range e.allowRules {
		if _, ok := slices.BinarySearch(ports, r.port); ok {
			rule = r
			break
		}
	}
	return Decision{Allowed: true, Ports: ports, Rule: rule.text}
}

// MatchName matches name against the list. Entries for the name itself and
// wildcard entries for each of its parents all apply: their allowed ports
// are united, deny entries win, and the most specific entry names the
// Decision. Nothing matching means denied.
func (l *List) MatchName(name FQDN) Decision {
	if l == nil || name == "" || name == "." {
		return Decision{}
	}
	var (
		first *entry
		n     int
		comb  entry
	)
	merge := func(e *entry) {
		n++
		switch n {
		case 1:
			first = e
			return
		case 2:
			comb = entry{allow: clonePorts(first.allow), deny: clonePorts(first.deny),
				allowRules: first.allowRules, denyRule: first.denyRule}
		}
		comb.allow.union(e.allow)
		comb.deny.union(e.deny)
		if len(comb.allowRules) == 0 {
			comb.allowRules = e.allowRules
		} else if len(e.allowRules) > 0 {
			// Clip so that append copies instead of writing into e's slice.
			comb.allowRules = append(slices.Clip(comb.allowRules), e.allowRules...)
		}
		if comb.denyRule == "" {
			comb.denyRule = e.denyRule
		}
	}
	if e := l.exact[name]; e != nil {
		merge(e)
	}
	if len(l.wild) > 0 {
		// Walk parents from the closest up, only as far as the deepest
		// wildcard suffix could reach.
		labels := name.NumLabels()
		s := string(name)
		for i := 0; i < len(s)-1; i++ {
			if s[i] != '.' {
				continue
			}
			labels--
			if labels > l.maxWildLabels {
				continue
			}
			if e := l.wild[FQDN(s[i+1:])]; e != nil {
				merge(e)
			}
		}
	}
	switch n {
	case 0:
		return Decision{}
	case 1:
		return first.dec
	}
	return decide(&comb)
}

func clonePorts(p portSet) portSet {
	p.ports = slices.Clone(p.ports)
	return p
}

// CIDRs returns the address entries, allow entries first, each group in the
// order given. Enforcing them (and their ports) is the packet filter's job.
func (l *List) CIDRs() []AddrRule {
	if l == nil {
		return nil
	}
	out := make([]AddrRule, 0, len(l.addrs))
	for _, a := range l.addrs {
		if !a.Deny {
			out = append(out, a)
		}
	}
	for _, a := range l.addrs {
		if a.Deny {
			out = append(out, a)
		}
	}
	return out
}

// AddrDenied reports whether a deny entry without a port covers a, and which.
// IPv4-mapped IPv6 addresses are also checked as IPv4. A DNS answer holding
// such an address must not be pinned.
func (l *List) AddrDenied(a netip.Addr) (rule string, denied bool) {
	if l == nil {
		return "", false
	}
	u := a.Unmap()
	for _, r := range l.addrs {
		if r.Deny && r.Port == 0 && (r.Prefix.Contains(a) || r.Prefix.Contains(u)) {
			return Rule{Kind: Prefix, Prefix: r.Prefix}.String(), true
		}
	}
	return "", false
}

// String lists the entries, for logs.
func (l *List) String() string {
	if l == nil {
		return "<deny all>"
	}
	var parts []string
	for _, m := range []struct {
		prefix string
		m      map[FQDN]*entry
	}{{"", l.exact}, {"*.", l.wild}} {
		keys := make([]FQDN, 0, len(m.m))
		for k := range m.m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			e := m.m[k]
			if e.allow.present {
				parts = append(parts, "allow "+m.prefix+k.WithoutTrailingDot()+portsSuffix(e.allow))
			}
			if e.deny.present {
				parts = append(parts, "deny "+m.prefix+k.WithoutTrailingDot()+portsSuffix(e.deny))
			}
		}
	}
	for _, a := range l.CIDRs() {
		parts = append(parts, a.String())
	}
	return strings.Join(parts, ", ")
}

func portsSuffix(p portSet) string {
	if p.all {
		return ""
	}
	s := make([]string, len(p.ports))
	for i, port := range p.ports {
		s[i] = fmt.Sprint(port)
	}
	return ":" + strings.Join(s, ",")
}
