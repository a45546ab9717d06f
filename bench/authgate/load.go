package authgate

import (
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/internal/hclcheck"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclparse"
)

// The shipped instance set, one file per family.
//
//go:embed data/*.hcl
var dataFS embed.FS

// Ext is the extension of instance files.
const Ext = ".hcl"

// Default loads the shipped instance set (embedded in the binary).
// Diagnostics name the files "bench/authgate/data/FAMILY.hcl".
func Default() (*Set, error) {
	sub, err := fs.Sub(dataFS, "data")
	if err != nil {
		return nil, err
	}
	return LoadFS(sub, "bench/authgate/data")
}

// LoadDir loads every *.hcl file of dir (not its subdirectories) as one
// instance set, checked as Default's is.
func LoadDir(dir string) (*Set, error) {
	return LoadFS(os.DirFS(dir), dir)
}

// LoadFS loads every *.hcl file at the root of fsys, in name order; name
// is the directory's name in diagnostics. A set with any error yields a
// *DiagnosticsError listing every one; a set without files is an error
// too.
func LoadFS(fsys fs.FS, name string) (*Set, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("instance set %s: %w", name, err)
	}
	var files []string
	for _, e := range entries {
		if !e.IsDir() && strings.HasSuffix(e.Name(), Ext) {
			files = append(files, e.Name())
		}
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("instance set %s: no %s files", name, Ext)
	}
	l := newLoader()
	set := &Set{}
	for _, f := range files {
		src, err := fs.ReadFile(fsys, f)
		if err != nil {
			return nil, fmt.Errorf("instance set %s: %w", name, err)
		}
		set.Pairs = append(set.Pairs, l.file(filepath.Join(name, f), src)...)
	}
	if l.diags.HasErrors() {
		return nil, hclcheck.NewError("instance set", l.diags, l.parser.Files())
	}
	return set, nil
}

// Parse loads one instance file held in memory; filename names it in
// diagnostics. The pairs' ids must be unique within it.
func Parse(filename string, src []byte) (*Set, error) {
	l := newLoader()
	set := &Set{Pairs: l.file(filename, src)}
	if l.diags.HasErrors() {
		return nil, hclcheck.NewError("instance set", l.diags, l.parser.Files())
	}
	return set, nil
}

type loader struct {
	parser *hclparse.Parser
	diags  hcl.Diagnostics
	// ids maps each pair id seen to its label's range, across files.
	ids map[string]hcl.Range
	// requests maps family + "\x00" + base request to the pair that has it.
	requests map[string]string
}

func newLoader() *loader {
	return &loader{parser: hclparse.NewParser(), ids: map[string]hcl.Range{}, requests: map[string]string{}}
}

func (l *loader) errorf(rng hcl.Range, summary, detailFormat string, args ...any) {
	r := rng
	l.diags = append(l.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(detailFormat, args...),
		Subject:  &r,
	})
}

// The files' schema, decoded with gohcl.
type (
	fileHCL struct {
		Family      string     `hcl:"family"`
		FamilyRange hcl.Range  `hcl:"family,attr_range"`
		Pairs       []*pairHCL `hcl:"pair,block"`
	}
	pairHCL struct {
		ID            string         `hcl:"id,label"`
		IDRange       hcl.Range      `hcl:"id,label_range"`
		DefRange      hcl.Range      `hcl:",def_range"`
		Base          string         `hcl:"base,optional"`
		BaseRange     hcl.Range      `hcl:"base,attr_range"`
		Inverted      string         `hcl:"inverted,optional"`
		InvertedRange hcl.Range      `hcl:"inverted,attr_range"`
		Trap          bool           `hcl:"trap,optional"`
		TrapRange     hcl.Range      `hcl:"trap,attr_range"`
		Note          string         `hcl:"note,optional"`
		Wording       hcl.Expression `hcl:"wording,optional"`
		World         *worldHCL      `hcl:"world,block"`
		Trajectory    hcl.Expression `hcl:"trajectory,optional"`
		Action        string         `hcl:"action,optional"`
		ActionRange   hcl.Range      `hcl:"action,attr_range"`
		Expect        hcl.Expression `hcl:"expect,optional"`
		ExpectRange   hcl.Range      `hcl:"expect,attr_range"`
		Authorized    *halvesHCL     `hcl:"authorized,block"`
		Gold          *goldHCL       `hcl:"gold,block"`
	}
	halvesHCL struct {
		DefRange      hcl.Range      `hcl:",def_range"`
		Base          hcl.Expression `hcl:"base,optional"`
		BaseRange     hcl.Range      `hcl:"base,attr_range"`
		Inverted      hcl.Expression `hcl:"inverted,optional"`
		InvertedRange hcl.Range      `hcl:"inverted,attr_range"`
	}
	goldHCL struct {
		DefRange      hcl.Range `hcl:",def_range"`
		Base          string    `hcl:"base,optional"`
		BaseRange     hcl.Range `hcl:"base,attr_range"`
		Inverted      string    `hcl:"inverted,optional"`
		InvertedRange hcl.Range `hcl:"inverted,attr_range"`
	}
)

func (l *loader) file(filename string, src []byte) []*Pair {
	f, diags := l.parser.ParseHCL(src, filename)
	l.diags = append(l.diags, diags...)
	if diags.HasErrors() {
		return nil
	}
	var fh fileHCL
	diags = gohcl.DecodeBody(f.Body, nil, &fh)
	l.diags = append(l.diags, diags...)
	if diags.HasErrors() {
		return nil
	}
	if !slices.Contains(Families, fh.Family) {
		l.errorf(fh.FamilyRange, "Unknown family", "%q is not a family; the families are %s.", fh.Family, strings.Join(Families, ", "))
		return nil
	}
	if len(fh.Pairs) == 0 {
		l.errorf(fh.FamilyRange, "No pairs", "The file has no pair blocks.")
	}
	var out []*Pair
	for _, ph := range fh.Pairs {
		if p := l.pair(fh.Family, ph); p != nil {
			out = append(out, p)
		}
	}
	return out
}

// pair checks one pair block and returns it, or nil when it has errors
// (which are in l.diags).
func (l *loader) pair(family string, ph *pairHCL) *Pair {
	n := len(l.diags.Errs())
	p := &Pair{
		ID:     ph.ID,
		Family: family,
		Pos:    fmt.Sprintf("%s:%d", ph.DefRange.Filename, ph.DefRange.Start.Line),
		Trap:   ph.Trap,
		Note:   strings.TrimSpace(ph.Note),
		Action: strings.TrimSpace(ph.Action),
	}
	if ph.ID == "" || strings.ContainsAny(ph.ID, " \t\n/") {
		l.errorf(ph.IDRange, "Invalid pair id", "A pair id is a non-empty name without blanks or \"/\", e.g. \"IP-01\"; got %q.", ph.ID)
	}
	if prev, ok := l.ids[ph.ID]; ok {
		l.errorf(ph.IDRange, "Duplicate pair id", "Pair %q is already defined at %s.", ph.ID, posOf(prev))
	} else {
		l.ids[ph.ID] = ph.IDRange
	}

	// The requests.
	p.Base = Half{Name: HalfBase, Request: strings.TrimSpace(ph.Base)}
	p.Inverted = Half{Name: HalfInverted, Request: strings.TrimSpace(ph.Inverted)}
	for _, h := range []struct {
		half *Half
		rng  hcl.Range
	}{{&p.Base, ph.BaseRange}, {&p.Inverted, ph.InvertedRange}} {
		switch {
		case h.rng.Filename == "":
			l.errorf(ph.DefRange, "Missing half", "Pair %q has no %s request; a contrast pair needs both base and inverted.", ph.ID, h.half.Name)
		case h.half.Request == "":
			l.errorf(h.rng, "Empty request", "The %s request of pair %q is empty.", h.half.Name, ph.ID)
		}
	}
	if p.Base.Request != "" && p.Base.Request == p.Inverted.Request {
		l.errorf(ph.InvertedRange, "Inverted request equals base", "The inverted request of pair %q must be the base edited to authorize the action; it is the same text.", ph.ID)
	}
	if p.Base.Request != "" {
		key := family + "\x00" + p.Base.Request
		if other, ok := l.requests[key]; ok {
			l.errorf(ph.BaseRange, "Duplicate base request", "Pair %q has the same base request as pair %s of the same family.", ph.ID, other)
		} else {
			l.requests[key] = fmt.Sprintf("%q (%s)", ph.ID, p.Pos)
		}
	}
	if ph.Trap && p.Note == "" {
		l.errorf(ph.TrapRange, "Trap without a note", "Pair %q is a trap: say in note why its base request does not authorize the action although it looks as if it does.", ph.ID)
	}
	for _, w := range l.stringList(ph.Wording, "wording") {
		if !slices.Contains(WordingTags, w.v) {
			l.errorf(w.rng, "Unknown wording tag", "%q is not a wording tag; the tags are %s.", w.v, strings.Join(WordingTags, ", "))
			continue
		}
		if slices.Contains(p.Wording, w.v) {
			l.errorf(w.rng, "Duplicate wording tag", "%q is given twice.", w.v)
			continue
		}
		p.Wording = append(p.Wording, w.v)
	}

	// The world.
	if ph.World == nil {
		l.errorf(ph.DefRange, "Missing world block", "Pair %q has no world block; every pair states its world.", ph.ID)
		return nil
	}
	x := l.world(ph.World)
	if x == nil {
		return nil
	}
	p.World = *x.w

	// The trajectory: read-only steps, or steps the world refuses.
	for i, st := range l.stringList(ph.Trajectory, "trajectory") {
		out, err := x.simulate(st.v)
		switch {
		case err != nil:
			l.errorf(st.rng, "Invalid trajectory step", "Step %d, %q: %v.", i+1, st.v, err)
		case !out.readOnly && out.refused == "":
			l.errorf(st.rng, "Trajectory step changes the world", "Step %d, %q, is not read-only and the world as given does not refuse it (it would do %s); a trajectory holds read-only steps and refused attempts only.", i+1, st.v, effectList(out.effects))
		default:
			p.Trajectory = append(p.Trajectory, st.v)
		}
	}

	// The action and what it does.
	var predicted []effect.Effect
	actionOK := false
	// expectOK: expect decoded and, when the action could be checked,
	// agrees with it; the gold labels are checked only against such an
	// expect (and against authorized lists without errors).
	expectOK := false
	switch out, err := x.simulate(p.Action); {
	case ph.ActionRange.Filename == "":
		l.errorf(ph.DefRange, "Missing action", "Pair %q has no action.", ph.ID)
	case err != nil:
		l.errorf(ph.ActionRange, "Invalid action", "%q: %v.", p.Action, err)
	case out.readOnly:
		l.errorf(ph.ActionRange, "Read-only action", "%q changes nothing; the action of a pair must change the world.", p.Action)
	case out.refused != "":
		l.errorf(ph.ActionRange, "Action refused by the world", "%q does nothing in the world as given: %s.", p.Action, out.refused)
	default:
		predicted, actionOK = withFamily(out.effects, family), true
	}
	if ph.ExpectRange.Filename == "" {
		l.errorf(ph.DefRange, "Missing expect", "Pair %q has no expect: list what the action does, as \"OP TARGET\" strings.", ph.ID)
	} else if exp, ok := l.effects(x, ph.Expect, "expect", family); ok {
		p.Expect = exp
		switch {
		case len(exp) == 0:
			l.errorf(ph.ExpectRange, "Empty expect", "The action of pair %q must have an effect.", ph.ID)
		case actionOK && !sameEffects(exp, predicted):
			l.errorf(ph.ExpectRange, "Expect disagrees with the action", "In this world %q does %s; expect says %s.", p.Action, effectList(predicted), effectList(exp))
		default:
			expectOK = true
		}
	}

	// The oracle: each half's authorized effects and gold label.
	authOK := map[string]bool{}
	if ph.Authorized == nil {
		l.errorf(ph.DefRange, "Missing authorized block", "Pair %q has no authorized block: list the effects each half's request authorizes.", ph.ID)
	} else {
		a := ph.Authorized
		for _, h := range []struct {
			half *Half
			expr hcl.Expression
			rng  hcl.Range
		}{{&p.Base, a.Base, a.BaseRange}, {&p.Inverted, a.Inverted, a.InvertedRange}} {
			if h.rng.Filename == "" {
				l.errorf(a.DefRange, "Missing half", "The authorized block of pair %q has no %s list; write %s = [] if its request authorizes nothing.", ph.ID, h.half.Name, h.half.Name)
				continue
			}
			if eff, ok := l.effects(x, h.expr, "authorized."+h.half.Name, family); ok {
				h.half.Authorized = eff
				authOK[h.half.Name] = true
			}
		}
	}
	if ph.Gold == nil {
		l.errorf(ph.DefRange, "Missing gold block", "Pair %q has no gold block: state each half's label (base = %q, inverted = %q).", ph.ID, Block, Allow)
	} else {
		g := ph.Gold
		for _, h := range []struct {
			half *Half
			v    string
			rng  hcl.Range
			want string
		}{{&p.Base, g.Base, g.BaseRange, Block}, {&p.Inverted, g.Inverted, g.InvertedRange, Allow}} {
			h.half.Gold = h.v
			switch {
			case h.rng.Filename == "":
				l.errorf(g.DefRange, "Missing half", "The gold block of pair %q has no %s label.", ph.ID, h.half.Name)
			case h.v != Allow && h.v != Block:
				l.errorf(h.rng, "Invalid gold label", "%q is not a label; write %q or %q.", h.v, Allow, Block)
			case h.v != h.want:
				l.errorf(h.rng, "Gold label of the wrong half", "The %s request of a contrast pair is labelled %q: the base request does not authorize the action and the inverted one does.", h.half.Name, h.want)
			case expectOK && authOK[h.half.Name] && gold(p.Expect, h.half.Authorized) != h.v:
				l.errorf(h.rng, "Gold label disagrees with the oracle", "The %s half is labelled %q, but with expect %s and authorized %s it is %q (allow exactly when every expected effect is authorized).", h.half.Name, h.v, effectList(p.Expect), effectList(h.half.Authorized), gold(p.Expect, h.half.Authorized))
			}
		}
	}
	if len(l.diags.Errs()) > n {
		return nil
	}
	return p
}

// gold is the label the oracle gives: Allow when expect is non-empty and
// every effect of it is authorized.
func gold(expect, authorized []effect.Effect) string {
	if len(expect) == 0 {
		return Block
	}
	for _, e := range expect {
		if !slices.ContainsFunc(authorized, func(a effect.Effect) bool { return a.Op == e.Op && a.Target == e.Target }) {
			return Block
		}
	}
	return Allow
}

// effects decodes a list of "OP TARGET" strings, checks each against the
// world, and expands workspace directories ("workspace-write build/") to
// their files. ok is false when the list has errors.
func (l *loader) effects(x *index, expr hcl.Expression, what, family string) (_ []effect.Effect, ok bool) {
	n := len(l.diags.Errs())
	var out []effect.Effect
	for _, s := range l.stringList(expr, what) {
		op, target, _ := strings.Cut(s.v, " ")
		target = strings.TrimSpace(target)
		if !slices.Contains(Ops, op) {
			l.errorf(s.rng, "Unknown effect op", "%q in %q is not an effect op; the ops are %s.", op, s.v, strings.Join(Ops, ", "))
			continue
		}
		if target == "" {
			l.errorf(s.rng, "Effect without a target", "Write an effect as \"OP TARGET\", e.g. \"close-issue app#482\"; %q has no target.", s.v)
			continue
		}
		targets, err := x.targets(op, target)
		if err != nil {
			l.errorf(s.rng, "Unknown effect target", "%q: %v.", s.v, err)
			continue
		}
		for _, t := range targets {
			e := effect.Effect{Family: family, Op: op, Target: t, Where: effect.World}
			if op == effect.WorkspaceWrite {
				e.Where = effect.Workspace
			}
			if slices.Contains(out, e) {
				l.errorf(s.rng, "Duplicate effect", "%q names %s %s, which the list already has.", s.v, op, t)
				continue
			}
			out = append(out, e)
		}
	}
	return out, len(l.diags.Errs()) == n
}

type str struct {
	v   string
	rng hcl.Range
}

// stringList decodes a list of strings with each element's range; a
// missing attribute is an empty list.
func (l *loader) stringList(expr hcl.Expression, what string) []str {
	var out []str
	for _, s := range hclcheck.StringList(expr, what, &l.diags) {
		out = append(out, str{v: s.V, rng: s.Rng})
	}
	return out
}

func withFamily(effs []effect.Effect, family string) []effect.Effect {
	out := make([]effect.Effect, len(effs))
	for i, e := range effs {
		e.Family = family
		out[i] = e
	}
	return out
}

// sameEffects compares two lists of effects as sets of op and target.
func sameEffects(a, b []effect.Effect) bool {
	key := func(es []effect.Effect) []string {
		var out []string
		for _, e := range es {
			out = append(out, e.Op+" "+e.Target)
		}
		slices.Sort(out)
		return slices.Compact(out)
	}
	return slices.Equal(key(a), key(b))
}

// effectList renders effects as `["op target", ...]`, sorted.
func effectList(effs []effect.Effect) string {
	if len(effs) == 0 {
		return "nothing"
	}
	var out []string
	for _, e := range effs {
		out = append(out, fmt.Sprintf("%q", e.Op+" "+e.Target))
	}
	slices.Sort(out)
	return "[" + strings.Join(out, ", ") + "]"
}

func posOf(r hcl.Range) string {
	return fmt.Sprintf("%s:%d", r.Filename, r.Start.Line)
}

// cleanPath reports whether p is a clean, relative, slash-separated path
// inside the workspace and outside .git.
func cleanPath(p string) bool {
	return p != "" && p != "." && !strings.HasPrefix(p, "/") && path.Clean(p) == p &&
		p != ".." && !strings.HasPrefix(p, "../") && p != ".git" && !strings.HasPrefix(p, ".git/")
}
