package policies

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/convert"
	"github.com/zclconf/go-cty/cty/function"
)

var (
	topSchema = &hcl.BodySchema{
		Blocks: []hcl.BlockHeaderSchema{
			{Type: "variable", LabelNames: []string{"name"}},
			{Type: "session", LabelNames: []string{"label"}},
		},
	}
	variableSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "default"}, {Name: "description"}, {Name: "type"}},
	}
	sessionSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "image"}, {Name: "command"}, {Name: "env"}, {Name: "user"},
			{Name: "workdir"}, {Name: "timeout"}, {Name: "capabilities"},
		},
		Blocks: []hcl.BlockHeaderSchema{
			{Type: "resources"},
			{Type: "workspace", LabelNames: []string{"host_path"}},
			{Type: "mount", LabelNames: []string{"host_path"}},
			{Type: "egress"},
			{Type: "credential", LabelNames: []string{"name"}},
			{Type: "secret", LabelNames: []string{"name"}},
			{Type: "approval"},
			{Type: "pool"},
		},
	}
	resourcesSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "cpus"}, {Name: "memory"}, {Name: "pids"}, {Name: "disk"}, {Name: "log_size"}, {Name: "audit_size"}},
	}
	workspaceSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "target"}, {Name: "mode"}, {Name: "deny_read"}, {Name: "default_deny_read"},
			{Name: "protect"}, {Name: "preserve_untracked"}, {Name: "protect_refs"}, {Name: "git_allow"}, {Name: "on_exit"},
		},
	}
	mountSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "target"}, {Name: "read_only"}, {Name: "deny_read"}, {Name: "default_deny_read"}},
	}
	egressSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "allow"}, {Name: "deny"}, {Name: "allow_private"}, {Name: "on_block"}, {Name: "ipv6"}, {Name: "l7"}, {Name: "l7_ports"}, {Name: "inspect"}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "http", LabelNames: []string{"host"}}},
	}
	httpSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "default"}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "rule"}},
	}
	ruleSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "method"}, {Name: "path"}, {Name: "refs"}, {Name: "json_match"}, {Name: "body_sha256"}, {Name: "action"}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "json", LabelNames: []string{"field"}}},
	}
	ruleJSONSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "values"}},
	}
	secretSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "from"}, {Name: "env_var"}, {Name: "path"}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "inject"}},
	}
	injectSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "host"}, {Name: "header"}, {Name: "bearer"}},
	}
	approvalSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "timeout"}, {Name: "on_timeout"}},
	}
	poolSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "size"}},
	}
	credentialSchema = &hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{
			{Name: "issuer"}, {Name: "audience"}, {Name: "scopes"}, {Name: "ttl"},
			{Name: "deliver"}, {Name: "path"}, {Name: "env_var"},
		},
	}
)

// LoadFile reads and decodes the manifest at path. Relative host paths in
// it resolve against the manifest's directory; vars are -var values. A bad
// manifest yields a *DiagnosticsError; a file that cannot be read yields
// the os error.
func LoadFile(path string, vars map[string]string) (*Policy, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	return Load(path, src, vars)
}

// Load decodes a manifest held in memory. filename names it in diagnostics
// and anchors relative host paths. The policy has defaults applied and has
// passed Validate. A bad manifest yields a *DiagnosticsError.
func Load(filename string, src []byte, vars map[string]string) (*Policy, error) {
	p, diags := Decode(filename, src, vars)
	if diags.HasErrors() {
		return nil, diags
	}
	return p, nil
}

// Decode is Load that also reports warnings. It returns the policy, or nil
// when there are errors, and every diagnostic, or nil when there are none.
func Decode(filename string, src []byte, vars map[string]string) (*Policy, *DiagnosticsError) {
	parser := hclparse.NewParser()
	p, diags := decode(parser, filename, src, vars)
	return withDiagnostics(parser, p, diags)
}

// withDiagnostics returns v, or nil when diags has errors, and diags
// with the parser's sources, or nil when there are none.
func withDiagnostics[T any](parser *hclparse.Parser, v *T, diags hcl.Diagnostics) (*T, *DiagnosticsError) {
	if len(diags) == 0 {
		return v, nil
	}
	derr := &DiagnosticsError{diags: diags, files: parser.Files()}
	if diags.HasErrors() {
		return nil, derr
	}
	return v, derr
}

// decoder holds the state of one decode: the evaluation context, the
// accumulated diagnostics, and the source range of every decoded field so
// that rules checked after decoding can point at the manifest.
type decoder struct {
	dir   string // absolute directory of the manifest
	ctx   *hcl.EvalContext
	diags hcl.Diagnostics
	// declared names the variables; unset are those without a value,
	// already reported.
	declared map[string]bool
	unset    map[string]bool
	// ranges maps a field path (fieldPath.String) to its source range;
	// failed marks fields whose value could not be decoded.
	ranges map[string]hcl.Range
	failed map[string]bool
	// literal is set for files that may not refer to variables (an
	// admission policy).
	literal bool
}

func decode(parser *hclparse.Parser, filename string, src []byte, vars map[string]string) (*Policy, hcl.Diagnostics) {
	file, diags := parser.ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, diags
	}
	dir, err := filepath.Abs(filepath.Dir(filename))
	if err != nil {
		dir = filepath.Dir(filename)
	}
	d := &decoder{
		dir:      dir,
		diags:    diags,
		declared: map[string]bool{},
		unset:    map[string]bool{},
		ranges:   map[string]hcl.Range{},
		failed:   map[string]bool{},
	}
	content, cdiags := file.Body.Content(topSchema)
	d.diags = append(d.diags, cdiags...)

	var sessions []*hcl.Block
	var variables []*hcl.Block
	for _, b := range content.Blocks {
		switch b.Type {
		case "session":
			sessions = append(sessions, b)
		case "variable":
			variables = append(variables, b)
		}
	}
	fileStart := hcl.Range{Filename: filename, Start: hcl.InitialPos, End: hcl.InitialPos}
	d.variables(variables, vars, fileStart)

	if len(sessions) == 0 {
		if cdiags.HasErrors() {
			// A malformed session block is already reported.
			return nil, d.diags
		}
		d.diags = append(d.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Missing session block",
			Detail:   `A manifest declares exactly one session, as in session "fix-flaky-test" { image = "airlock/agent:bookworm" }.`,
			Subject:  file.Body.MissingItemRange().Ptr(),
		})
		return nil, d.diags
	}
	for _, b := range sessions[1:] {
		d.diags = append(d.diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Duplicate session block",
			Detail:   fmt.Sprintf("A manifest declares exactly one session; the first is at %s. Move this one to its own file.", sessions[0].DefRange),
			Subject:  b.DefRange.Ptr(),
		})
	}
	p := d.session(sessions[0])
	p.ApplyDefaults()
	for _, pr := range p.check() {
		if d.suppressed(pr.path) {
			continue
		}
		sev := hcl.DiagError
		if pr.warning {
			sev = hcl.DiagWarning
		}
		detail := pr.detail()
		if pr.related != nil {
			detail += fmt.Sprintf(" The other is at %s.", d.rangeOf(pr.related))
		}
		d.diags = append(d.diags, &hcl.Diagnostic{
			Severity: sev,
			Summary:  pr.summary,
			Detail:   detail,
			Subject:  d.rangeOf(pr.path).Ptr(),
		})
	}
	sortDiags(d.diags)
	if d.diags.HasErrors() {
		return nil, d.diags
	}
	return p, d.diags
}

// sortDiags orders diagnostics by source position.
func sortDiags(diags hcl.Diagnostics) {
	slices.SortStableFunc(diags, func(a, b *hcl.Diagnostic) int {
		if a.Subject == nil || b.Subject == nil {
			return cmp.Compare(boolInt(a.Subject != nil), boolInt(b.Subject != nil))
		}
		return cmp.Or(
			cmp.Compare(a.Subject.Filename, b.Subject.Filename),
			cmp.Compare(a.Subject.Start.Byte, b.Subject.Start.Byte))
	})
}

// rangeOf returns the source range of the field at fp, or of its nearest
// decoded parent.
func (d *decoder) rangeOf(fp fieldPath) hcl.Range {
	for i := len(fp); i >= 0; i-- {
		if r, ok := d.ranges[fp[:i].String()]; ok {
			return r
		}
	}
	return hcl.Range{}
}

// suppressed reports whether fp is at or beneath a field that failed to
// decode; its problems would only repeat the decode error.
func (d *decoder) suppressed(fp fieldPath) bool {
	for i := len(fp); i > 0; i-- {
		if d.failed[fp[:i].String()] {
			return true
		}
	}
	return false
}

func (d *decoder) errorf(rng hcl.Range, summary, format string, args ...any) {
	d.diags = append(d.diags, &hcl.Diagnostic{
		Severity: hcl.DiagError,
		Summary:  summary,
		Detail:   fmt.Sprintf(format, args...),
		Subject:  rng.Ptr(),
	})
}

type variableType struct {
	ty   cty.Type
	name string
}

var variableTypes = map[string]variableType{
	"string": {cty.String, "a string"},
	"number": {cty.Number, "a number"},
	"bool":   {cty.Bool, "a bool"},
	"any":    {cty.DynamicPseudoType, "any value"},
}

// variables decodes the variable blocks, merges vars into them and builds
// the evaluation context: var.NAME and nothing else, no functions.
func (d *decoder) variables(blocks []*hcl.Block, vars map[string]string, fileStart hcl.Range) {
	values := map[string]cty.Value{}
	declRange := map[string]hcl.Range{}
	types := map[string]variableType{}
	// broken variables had a reported error in their block; they get no
	// value and no further diagnostic.
	broken := map[string]bool{}
	for _, b := range blocks {
		name := b.Labels[0]
		if !hclsyntax.ValidIdentifier(name) {
			d.errorf(b.LabelRanges[0], "Invalid variable name", "%q is not a valid name: use letters, digits, '_' and '-', starting with a letter.", name)
			continue
		}
		if prev, ok := declRange[name]; ok {
			d.errorf(b.DefRange, "Duplicate variable", "Variable %q is already declared at %s. Remove one of the declarations.", name, prev)
			continue
		}
		declRange[name] = b.DefRange
		d.declared[name] = true
		content, diags := b.Body.Content(variableSchema)
		d.diags = append(d.diags, diags...)
		broken[name] = diags.HasErrors()

		vt := variableTypes["any"]
		if attr, ok := content.Attributes["type"]; ok {
			kw := hcl.ExprAsKeyword(attr.Expr)
			t, ok := variableTypes[kw]
			if !ok {
				d.errorf(attr.Expr.Range(), "Invalid variable type", "Use type = string, number, bool or any.")
				broken[name] = true
			} else {
				vt = t
			}
		}
		if attr, ok := content.Attributes["description"]; ok {
			if v, ok := d.constant(attr); ok && !v.IsNull() {
				if _, err := convert.Convert(v, cty.String); err != nil {
					d.errorf(attr.Expr.Range(), "Invalid description", "The description must be a string.")
				}
			}
		}
		if attr, ok := content.Attributes["default"]; ok {
			v, ok := d.constant(attr)
			if !ok {
				broken[name] = true
			}
			if ok && !v.IsNull() {
				if vt.ty == cty.DynamicPseudoType && v.Type().IsPrimitiveType() {
					vt = variableType{v.Type(), variableTypeName(v.Type())}
				}
				cv, err := convert.Convert(v, vt.ty)
				if err != nil {
					d.errorf(attr.Expr.Range(), "Invalid default value", "The default of variable %q must be %s: %s.", name, vt.name, err)
					broken[name] = true
				} else {
					values[name] = cv
				}
			}
		}
		types[name] = vt
	}

	for _, name := range sortedKeys(vars) {
		if !d.declared[name] {
			d.errorf(fileStart, "Undeclared variable", "-var %s=... sets a variable the manifest does not declare. Declare it with variable %q { } or remove the -var.", name, name)
			continue
		}
		vt := types[name]
		v, err := convert.Convert(cty.StringVal(vars[name]), vt.ty)
		if err != nil {
			d.errorf(declRange[name], "Invalid value for variable", "-var %s=%q: variable %q must be %s.", name, vars[name], name, vt.name)
			d.unset[name] = true
			delete(values, name)
			continue
		}
		if v.Type() == cty.Number && !numberInRange(v.AsBigFloat()) {
			d.errorf(declRange[name], "Invalid value for variable", "-var %s=%q: numbers are zero or between 1e-9 and 9223372036854775807 in magnitude.", name, vars[name])
			d.unset[name] = true
			delete(values, name)
			continue
		}
		values[name] = v
	}

	for _, b := range blocks {
		name := b.Labels[0]
		if !d.declared[name] || d.unset[name] {
			continue
		}
		if _, ok := values[name]; !ok {
			d.unset[name] = true
			if declRange[name] == b.DefRange && !broken[name] {
				d.errorf(b.DefRange, "Missing value for variable", "Variable %q has no default and no value. Pass one with -var %s=VALUE, or add default = ... to the block.", name, name)
			}
		}
	}
	d.ctx = &hcl.EvalContext{
		Variables: map[string]cty.Value{"var": cty.ObjectVal(values)},
		Functions: map[string]function.Function{},
	}
}

func variableTypeName(t cty.Type) string {
	for _, vt := range variableTypes {
		if vt.ty == t {
			return vt.name
		}
	}
	return t.FriendlyName()
}

// constant evaluates an expression that may use neither variables nor
// functions (a variable's default or description).
func (d *decoder) constant(attr *hcl.Attribute) (cty.Value, bool) {
	diags := checkExpr(attr.Expr)
	if vs := attr.Expr.Variables(); len(vs) > 0 {
		diags = append(diags, &hcl.Diagnostic{
			Severity: hcl.DiagError,
			Summary:  "Variables not allowed",
			Detail:   "A variable's default and description must be constant values; write the value itself.",
			Subject:  vs[0].SourceRange().Ptr(),
		})
	}
	d.diags = append(d.diags, diags...)
	if diags.HasErrors() {
		return cty.NilVal, false
	}
	v, vdiags := attr.Expr.Value(nil)
	d.diags = append(d.diags, vdiags...)
	return v, !vdiags.HasErrors()
}

// Bounds on number literals and values. Formatting a number as a string
// costs time in proportion to its exponent, so a tiny literal such as
// 1e-100000000 in a template would stall the decoder.
var (
	maxNumber = new(big.Float).SetInt64(math.MaxInt64)
	minNumber = big.NewFloat(1e-9)
)

// numberInRange reports whether f is zero or between minNumber and
// maxNumber in magnitude.
func numberInRange(f *big.Float) bool {
	a := new(big.Float).Abs(f)
	return a.Sign() == 0 || a.Cmp(minNumber) >= 0 && a.Cmp(maxNumber) <= 0
}

// checkExpr rejects what a manifest expression may not contain. Manifests
// are data evaluated by the daemon, so evaluation must not reach outside
// (functions such as file or env) and must take time in proportion to the
// size of the source: no for expressions, no arithmetic, and no number
// literals whose formatting would be slow.
func checkExpr(expr hcl.Expression) hcl.Diagnostics {
	se, ok := expr.(hclsyntax.Expression)
	if !ok {
		return nil
	}
	return hclsyntax.VisitAll(se, func(n hclsyntax.Node) hcl.Diagnostics {
		var summary, detail string
		var subject hcl.Range
		switch n := n.(type) {
		case *hclsyntax.FunctionCallExpr:
			summary = "Functions are not allowed"
			detail = fmt.Sprintf("Manifests are evaluated by the daemon and may not call functions such as %s(). Write the value in the manifest, or declare a variable and pass it with -var.", n.Name)
			subject = n.NameRange
		case *hclsyntax.ForExpr:
			summary = "For expressions are not allowed"
			detail = "Manifests are data: write the list or map out in full."
			subject = n.OpenRange
		case *hclsyntax.BinaryOpExpr:
			switch n.Op {
			case hclsyntax.OpAdd, hclsyntax.OpSubtract, hclsyntax.OpMultiply, hclsyntax.OpDivide, hclsyntax.OpModulo:
				summary = "Arithmetic is not allowed"
				detail = `Manifests are data: write the result as a literal value. Sizes take units, as in memory = "4GiB".`
				subject = n.Range()
			}
		case *hclsyntax.LiteralValueExpr:
			if n.Val.Type() == cty.Number && !n.Val.IsNull() && !numberInRange(n.Val.AsBigFloat()) {
				summary = "Number out of range"
				detail = "Numbers in manifests are zero or between 1e-9 and 9223372036854775807 in magnitude."
				subject = n.Range()
			}
		}
		if summary == "" {
			return nil
		}
		return hcl.Diagnostics{{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: subject.Ptr()}}
	})
}

// references checks that expr refers only to declared variables. ok is
// false when expr uses a variable that has no value (already reported).
func (d *decoder) references(expr hcl.Expression) (diags hcl.Diagnostics, ok bool) {
	ok = true
	for _, tr := range expr.Variables() {
		if d.literal || tr.RootName() != "var" {
			summary, detail := "Unknown reference", fmt.Sprintf("%q is not defined. Manifests may refer only to variables, as var.NAME, declared with variable \"NAME\" { }.", tr.RootName())
			if d.literal {
				summary, detail = "References are not allowed", fmt.Sprintf("%q is a reference; this file holds literal values only. Write the value itself.", tr.RootName())
			}
			diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: tr.SourceRange().Ptr()})
			continue
		}
		if len(tr) < 2 {
			continue
		}
		var name string
		switch step := tr[1].(type) {
		case hcl.TraverseAttr:
			name = step.Name
		case hcl.TraverseIndex:
			if step.Key.Type() == cty.String && step.Key.IsKnown() && !step.Key.IsNull() {
				name = step.Key.AsString()
			}
		}
		switch {
		case name == "":
		case !d.declared[name]:
			diags = append(diags, &hcl.Diagnostic{
				Severity: hcl.DiagError,
				Summary:  "Undeclared variable",
				Detail:   fmt.Sprintf("There is no variable %q. Declare it with variable %q { default = ... } and pass a value with -var %s=VALUE.", name, name, name),
				Subject:  tr.SourceRange().Ptr(),
			})
		case d.unset[name]:
			ok = false
		}
	}
	return diags, ok
}

// value evaluates attr, records its range under at and converts the
// result to want. ok is false when the attribute is null (absent) or
// failed (reported, and at is marked failed).
func (d *decoder) value(attr *hcl.Attribute, at fieldPath, want cty.Type, wantName string) (cty.Value, bool) {
	key := at.String()
	d.ranges[key] = attr.Expr.Range()
	fail := func() (cty.Value, bool) {
		d.failed[key] = true
		return cty.NilVal, false
	}
	diags := checkExpr(attr.Expr)
	rdiags, refsOK := d.references(attr.Expr)
	diags = append(diags, rdiags...)
	d.diags = append(d.diags, diags...)
	if diags.HasErrors() || !refsOK {
		return fail()
	}
	v, vdiags := attr.Expr.Value(d.ctx)
	d.diags = append(d.diags, vdiags...)
	if vdiags.HasErrors() {
		return fail()
	}
	if v.IsNull() {
		return cty.NilVal, false
	}
	if !v.IsWhollyKnown() {
		d.errorf(attr.Expr.Range(), "Unknown value", "The value of %s cannot be known when the manifest is decoded.", attr.Name)
		return fail()
	}
	v, _ = v.Unmark()
	cv, err := convert.Convert(v, want)
	if err != nil {
		d.errorf(attr.Expr.Range(), "Incorrect attribute value type", "%s must be %s: %s.", attr.Name, wantName, err)
		return fail()
	}
	if !cv.IsWhollyKnown() {
		return fail()
	}
	return cv, true
}

func (d *decoder) str(attrs hcl.Attributes, name string, at fieldPath, dst *string) {
	attr, ok := attrs[name]
	if !ok {
		return
	}
	if v, ok := d.value(attr, at.field(name), cty.String, "a string"); ok {
		*dst = v.AsString()
	}
}

func (d *decoder) boolean(attrs hcl.Attributes, name string, at fieldPath, dst *bool) {
	attr, ok := attrs[name]
	if !ok {
		return
	}
	if v, ok := d.value(attr, at.field(name), cty.Bool, "true or false"); ok {
		*dst = v.True()
	}
}

func (d *decoder) strList(attrs hcl.Attributes, name string, at fieldPath, dst *[]string) {
	attr, ok := attrs[name]
	if !ok {
		return
	}
	at = at.field(name)
	v, ok := d.value(attr, at, cty.List(cty.String), "a list of strings")
	if !ok {
		return
	}
	if out, ok := d.listElems(attr, at, v); ok {
		*dst = out
	}
}

// listElems returns the strings of the list v, the value of attr, and
// records the range of each element under at.
func (d *decoder) listElems(attr *hcl.Attribute, at fieldPath, v cty.Value) ([]string, bool) {
	var elems []hclsyntax.Expression
	if tup, ok := attr.Expr.(*hclsyntax.TupleConsExpr); ok && len(tup.Exprs) == v.LengthInt() {
		elems = tup.Exprs
	}
	out := make([]string, 0, v.LengthInt())
	for i, ev := range v.AsValueSlice() {
		rng := attr.Expr.Range()
		if elems != nil {
			rng = elems[i].Range()
			d.ranges[at.index(i).String()] = rng
		}
		if ev.IsNull() {
			d.errorf(rng, "Null list element", "Element %d of %s is null; remove it or give it a value.", i, attr.Name)
			d.failed[at.String()] = true
			return nil, false
		}
		out = append(out, ev.AsString())
	}
	return out, true
}

// methods decodes a rule's method: one method or a list of them, stored
// upper-cased under the field "methods".
func (d *decoder) methods(attrs hcl.Attributes, at fieldPath, dst *[]string) {
	attr, ok := attrs["method"]
	if !ok {
		return
	}
	at = at.field("methods")
	const hint = `Write one method, as in method = "POST", or a list, as in method = ["GET", "HEAD"]; leave method out to match any method`
	v, ok := d.value(attr, at, cty.DynamicPseudoType, "a method or a list of methods")
	if !ok {
		return
	}
	var out []string
	if v.Type().IsPrimitiveType() {
		sv, err := convert.Convert(v, cty.String)
		if err != nil {
			d.errorf(attr.Expr.Range(), "Incorrect attribute value type", "method must be a string or a list of strings: %s. %s.", err, hint)
			d.failed[at.String()] = true
			return
		}
		out = []string{sv.AsString()}
	} else {
		lv, err := convert.Convert(v, cty.List(cty.String))
		if err != nil {
			d.errorf(attr.Expr.Range(), "Incorrect attribute value type", "method must be a string or a list of strings: %s. %s.", err, hint)
			d.failed[at.String()] = true
			return
		}
		if !lv.IsWhollyKnown() {
			d.failed[at.String()] = true
			return
		}
		if lv.LengthInt() == 0 {
			d.errorf(attr.Expr.Range(), "Empty method list", "method = [] names no method. %s.", hint)
			d.failed[at.String()] = true
			return
		}
		if out, ok = d.listElems(attr, at, lv); !ok {
			return
		}
	}
	for i, m := range out {
		out[i] = strings.ToUpper(m)
	}
	*dst = out
}

func (d *decoder) strMap(attrs hcl.Attributes, name string, at fieldPath, dst *map[string]string) {
	attr, ok := attrs[name]
	if !ok {
		return
	}
	at = at.field(name)
	v, ok := d.value(attr, at, cty.Map(cty.String), "a map of strings")
	if !ok {
		return
	}
	if obj, ok := attr.Expr.(*hclsyntax.ObjectConsExpr); ok {
		for _, item := range obj.Items {
			k, diags := item.KeyExpr.Value(d.ctx)
			if diags.HasErrors() || k.IsNull() || !k.IsKnown() {
				continue
			}
			if k, err := convert.Convert(k, cty.String); err == nil {
				d.ranges[at.key(k.AsString()).String()] = hcl.RangeBetween(item.KeyExpr.Range(), item.ValueExpr.Range())
			}
		}
	}
	out := make(map[string]string, v.LengthInt())
	for k, ev := range v.AsValueMap() {
		if ev.IsNull() {
			d.errorf(d.rangeOf(at.key(k)), "Null map value", "The value of %q in %s is null; remove it or give it a value.", k, name)
			d.failed[at.String()] = true
			return
		}
		out[k] = ev.AsString()
	}
	*dst = out
}

// ports decodes a list of TCP ports, 1 to 65535.
func (d *decoder) ports(attrs hcl.Attributes, name string, at fieldPath, dst *[]uint16) {
	attr, ok := attrs[name]
	if !ok {
		return
	}
	at = at.field(name)
	v, ok := d.value(attr, at, cty.List(cty.Number), "a list of port numbers")
	if !ok {
		return
	}
	var out []uint16
	for i, ev := range v.AsValueSlice() {
		n, ok := int64(0), false
		if !ev.IsNull() {
			n, ok = wholeNumber(ev.AsBigFloat())
		}
		if !ok || n < 1 || n > 65535 {
			d.errorf(attr.Expr.Range(), "Invalid "+name, "Element %d of %s must be a port number from 1 to 65535.", i, name)
			d.failed[at.String()] = true
			return
		}
		out = append(out, uint16(n))
	}
	*dst = out
}

// integer decodes a whole number; explicit values must be positive.
func (d *decoder) integer(attrs hcl.Attributes, name string, at fieldPath, dst *int64) {
	attr, ok := attrs[name]
	if !ok {
		return
	}
	v, ok := d.value(attr, at.field(name), cty.Number, "a number")
	if !ok {
		return
	}
	n, ok := wholeNumber(v.AsBigFloat())
	if !ok || n <= 0 {
		d.errorf(attr.Expr.Range(), "Invalid "+name, "%s must be a positive whole number, such as 512.", name)
		d.failed[at.field(name).String()] = true
		return
	}
	*dst = n
}

func wholeNumber(f *big.Float) (int64, bool) {
	if !f.IsInt() {
		return 0, false
	}
	n, acc := f.Int64()
	return n, acc == big.Exact
}

// float decodes a number; explicit values must be positive.
func (d *decoder) float(attrs hcl.Attributes, name string, at fieldPath, dst *float64) {
	attr, ok := attrs[name]
	if !ok {
		return
	}
	v, ok := d.value(attr, at.field(name), cty.Number, "a number")
	if !ok {
		return
	}
	f, _ := v.AsBigFloat().Float64()
	if f <= 0 {
		d.errorf(attr.Expr.Range(), "Invalid "+name, "%s must be a positive number, such as 2 or 0.5.", name)
		d.failed[at.field(name).String()] = true
		return
	}
	*dst = f
}

// size decodes a byte size: a string with a unit ("4GiB") or a number of
// bytes. Explicit values must be positive.
func (d *decoder) size(attrs hcl.Attributes, name string, at fieldPath, dst *int64) {
	attr, ok := attrs[name]
	if !ok {
		return
	}
	at = at.field(name)
	v, ok := d.value(attr, at, cty.DynamicPseudoType, "a size")
	if !ok {
		return
	}
	hint := fmt.Sprintf(`Write %s as a size with a unit, such as %s = "4GiB" or "512MiB" (units B, KiB, MiB, GiB, TiB, KB, MB, GB, TB), or as a number of bytes`, name, name)
	var n int64
	switch v.Type() {
	case cty.Number:
		var ok bool
		if n, ok = wholeNumber(v.AsBigFloat()); !ok {
			d.errorf(attr.Expr.Range(), "Invalid size", "%s is not a whole number of bytes. %s.", v.AsBigFloat().Text('g', 10), hint)
			d.failed[at.String()] = true
			return
		}
	case cty.String:
		var err error
		if n, err = ParseSize(v.AsString()); err != nil {
			d.errorf(attr.Expr.Range(), "Invalid size", "%s. %s.", upperFirst(err.Error()), hint)
			d.failed[at.String()] = true
			return
		}
	default:
		d.errorf(attr.Expr.Range(), "Invalid size", "%s must be a string or a number, not %s. %s.", name, v.Type().FriendlyName(), hint)
		d.failed[at.String()] = true
		return
	}
	if n <= 0 {
		d.errorf(attr.Expr.Range(), "Invalid size", "%s must be positive. %s.", name, hint)
		d.failed[at.String()] = true
		return
	}
	*dst = n
}

// duration decodes a Go duration string; explicit values must be positive.
func (d *decoder) duration(attrs hcl.Attributes, name string, at fieldPath, dst *Duration) {
	attr, ok := attrs[name]
	if !ok {
		return
	}
	at = at.field(name)
	v, ok := d.value(attr, at, cty.String, `a duration string such as "30m"`)
	if !ok {
		return
	}
	s := v.AsString()
	dur, err := time.ParseDuration(s)
	if err != nil || dur <= 0 {
		d.errorf(attr.Expr.Range(), "Invalid duration", "%q is not a positive duration. Write it as a number with a unit: \"90s\", \"15m\", \"1h30m\" (units ns, us, ms, s, m, h).", s)
		d.failed[at.String()] = true
		return
	}
	*dst = Duration(dur)
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

// single returns the first block of a type that may appear at most once,
// reporting the others.
func (d *decoder) single(blocks []*hcl.Block) *hcl.Block {
	if len(blocks) == 0 {
		return nil
	}
	for _, b := range blocks[1:] {
		d.errorf(b.DefRange, "Duplicate "+b.Type+" block", "A session has at most one %s block; the first is at %s. Merge the two.", b.Type, blocks[0].DefRange)
	}
	return blocks[0]
}

func (d *decoder) session(block *hcl.Block) *Policy {
	p := &Policy{Label: block.Labels[0]}
	root := fieldPath{}
	d.ranges[""] = block.DefRange
	d.ranges["label"] = block.LabelRanges[0]

	content, diags := block.Body.Content(sessionSchema)
	d.diags = append(d.diags, diags...)
	attrs := content.Attributes
	d.str(attrs, "image", root, &p.Image)
	d.strList(attrs, "command", root, &p.Command)
	d.strMap(attrs, "env", root, &p.Env)
	d.str(attrs, "user", root, &p.User)
	d.str(attrs, "workdir", root, &p.Workdir)
	d.duration(attrs, "timeout", root, &p.Timeout)
	d.strList(attrs, "capabilities", root, &p.Capabilities)
	for i, c := range p.Capabilities {
		if canon := NormalizeCapability(c); isKnownCapability(canon) {
			p.Capabilities[i] = canon
		}
	}

	byType := content.Blocks.ByType()
	if b := d.single(byType["resources"]); b != nil {
		at := root.field("resources")
		d.ranges[at.String()] = b.DefRange
		c, diags := b.Body.Content(resourcesSchema)
		d.diags = append(d.diags, diags...)
		d.float(c.Attributes, "cpus", at, &p.Resources.CPUs)
		d.size(c.Attributes, "memory", at, &p.Resources.Memory)
		d.integer(c.Attributes, "pids", at, &p.Resources.Pids)
		d.size(c.Attributes, "disk", at, &p.Resources.Disk)
		d.size(c.Attributes, "log_size", at, &p.Resources.LogSize)
		d.size(c.Attributes, "audit_size", at, &p.Resources.AuditSize)
	}
	for i, b := range byType["workspace"] {
		p.Workspaces = append(p.Workspaces, d.workspace(b, root.field("workspaces").index(i)))
	}
	for i, b := range byType["mount"] {
		p.Mounts = append(p.Mounts, d.mount(b, root.field("mounts").index(i)))
	}
	if b := d.single(byType["egress"]); b != nil {
		at := root.field("egress")
		d.ranges[at.String()] = b.DefRange
		c, diags := b.Body.Content(egressSchema)
		d.diags = append(d.diags, diags...)
		e := &Egress{}
		d.strList(c.Attributes, "allow", at, &e.Allow)
		d.strList(c.Attributes, "deny", at, &e.Deny)
		d.strList(c.Attributes, "allow_private", at, &e.AllowPrivate)
		d.str(c.Attributes, "on_block", at, &e.OnBlock)
		d.boolean(c.Attributes, "ipv6", at, &e.IPv6)
		d.str(c.Attributes, "l7", at, &e.L7)
		d.str(c.Attributes, "inspect", at, &e.Inspect)
		d.ports(c.Attributes, "l7_ports", at, &e.L7Ports)
		for i, hb := range c.Blocks.OfType("http") {
			e.HTTP = append(e.HTTP, d.httpHost(hb, at.field("http").index(i)))
		}
		p.Egress = e
	}
	for i, b := range byType["credential"] {
		p.Credentials = append(p.Credentials, d.credential(b, root.field("credentials").index(i)))
	}
	for i, b := range byType["secret"] {
		p.Secrets = append(p.Secrets, d.secret(b, root.field("secrets").index(i)))
	}
	if b := d.single(byType["approval"]); b != nil {
		p.Approval = d.approval(b, root.field("approval"))
	}
	if b := d.single(byType["pool"]); b != nil {
		p.Pool = d.pool(b, root.field("pool"))
	}
	return p
}

// pool decodes a `pool { size = N }` block. size is required and must be
// a whole number; its range is checked with the other rules.
func (d *decoder) pool(b *hcl.Block, at fieldPath) *Pool {
	d.ranges[at.String()] = b.DefRange
	c, diags := b.Body.Content(poolSchema)
	d.diags = append(d.diags, diags...)
	pl := &Pool{}
	hint := fmt.Sprintf("Set size to the number of sandboxes to keep prepared, from 0 to %d, as in pool { size = 4 }.", MaxPoolSize)
	attr, ok := c.Attributes["size"]
	if !ok {
		d.errorf(b.DefRange, "Missing pool size", "A pool block needs size. %s", hint)
		d.failed[at.String()] = true
		return pl
	}
	sizeAt := at.field("size")
	v, ok := d.value(attr, sizeAt, cty.Number, "a whole number")
	if !ok {
		if !d.failed[sizeAt.String()] {
			d.errorf(attr.Expr.Range(), "Missing pool size", "size is null. %s", hint)
			d.failed[sizeAt.String()] = true
		}
		return pl
	}
	f := v.AsBigFloat()
	if !f.IsInt() {
		d.errorf(attr.Expr.Range(), "Invalid pool size", "%s is not a whole number. %s", f.Text('g', 10), hint)
		d.failed[sizeAt.String()] = true
		return pl
	}
	n, acc := f.Int64()
	if acc != big.Exact || n > math.MaxInt || n < math.MinInt {
		// Out of int range: report here what Validate reports for any
		// size out of range.
		reason := fmt.Sprintf("size %s is larger than the maximum %d", f.Text('g', 10), MaxPoolSize)
		if f.Sign() < 0 {
			reason = fmt.Sprintf("size %s is negative", f.Text('g', 10))
		}
		d.errorf(attr.Expr.Range(), "Invalid pool size", "%s. %s", reason, hint)
		d.failed[sizeAt.String()] = true
		return pl
	}
	pl.Size = int(n)
	return pl
}

// hostPath resolves a block's host path label against the manifest's
// directory.
func (d *decoder) hostPath(b *hcl.Block, at fieldPath) string {
	d.ranges[at.String()] = b.DefRange
	d.ranges[at.field("host_path").String()] = b.LabelRanges[0]
	hp := b.Labels[0]
	switch {
	case hp == "":
		return ""
	case strings.HasPrefix(hp, "~"):
		d.errorf(b.LabelRanges[0], "Home directory is not expanded", "%q starts with '~', which manifests do not expand. Write the absolute path, or a path relative to the manifest's directory.", hp)
		d.failed[at.field("host_path").String()] = true
		return hp
	case filepath.IsAbs(hp):
		return filepath.Clean(hp)
	default:
		return filepath.Join(d.dir, hp)
	}
}

func (d *decoder) workspace(b *hcl.Block, at fieldPath) Workspace {
	w := Workspace{HostPath: d.hostPath(b, at), DefaultDenyRead: true}
	c, diags := b.Body.Content(workspaceSchema)
	d.diags = append(d.diags, diags...)
	a := c.Attributes
	d.str(a, "target", at, &w.Target)
	d.str(a, "mode", at, &w.Mode)
	d.strList(a, "deny_read", at, &w.DenyRead)
	d.boolean(a, "default_deny_read", at, &w.DefaultDenyRead)
	d.strList(a, "protect", at, &w.Protect)
	d.boolean(a, "preserve_untracked", at, &w.PreserveUntracked)
	d.strList(a, "protect_refs", at, &w.ProtectRefs)
	d.strList(a, "git_allow", at, &w.GitAllow)
	d.str(a, "on_exit", at, &w.OnExit)
	return w
}

func (d *decoder) mount(b *hcl.Block, at fieldPath) Mount {
	m := Mount{HostPath: d.hostPath(b, at), ReadOnly: true, DefaultDenyRead: true}
	c, diags := b.Body.Content(mountSchema)
	d.diags = append(d.diags, diags...)
	d.str(c.Attributes, "target", at, &m.Target)
	d.boolean(c.Attributes, "read_only", at, &m.ReadOnly)
	d.strList(c.Attributes, "deny_read", at, &m.DenyRead)
	d.boolean(c.Attributes, "default_deny_read", at, &m.DefaultDenyRead)
	return m
}

func (d *decoder) credential(b *hcl.Block, at fieldPath) Credential {
	d.ranges[at.String()] = b.DefRange
	d.ranges[at.field("name").String()] = b.LabelRanges[0]
	cr := Credential{Name: b.Labels[0]}
	c, diags := b.Body.Content(credentialSchema)
	d.diags = append(d.diags, diags...)
	a := c.Attributes
	d.str(a, "issuer", at, &cr.Issuer)
	d.str(a, "audience", at, &cr.Audience)
	d.strList(a, "scopes", at, &cr.Scopes)
	d.duration(a, "ttl", at, &cr.TTL)
	d.str(a, "deliver", at, &cr.Deliver)
	d.str(a, "path", at, &cr.Path)
	d.str(a, "env_var", at, &cr.EnvVar)
	return cr
}

// httpHost decodes an egress `http "HOST" { default, rule { ... } }`
// block.
func (d *decoder) httpHost(b *hcl.Block, at fieldPath) HTTPHost {
	d.ranges[at.String()] = b.DefRange
	d.ranges[at.field("host").String()] = b.LabelRanges[0]
	h := HTTPHost{Host: b.Labels[0]}
	c, diags := b.Body.Content(httpSchema)
	d.diags = append(d.diags, diags...)
	d.str(c.Attributes, "default", at, &h.Default)
	for i, rb := range c.Blocks.OfType("rule") {
		h.Rules = append(h.Rules, d.httpRule(rb, at.field("rules").index(i)))
	}
	return h
}

func (d *decoder) httpRule(b *hcl.Block, at fieldPath) HTTPRule {
	d.ranges[at.String()] = b.DefRange
	var r HTTPRule
	c, diags := b.Body.Content(ruleSchema)
	d.diags = append(d.diags, diags...)
	a := c.Attributes
	d.methods(a, at, &r.Methods)
	d.str(a, "path", at, &r.Path)
	d.strList(a, "refs", at, &r.Refs)
	d.str(a, "action", at, &r.Action)
	d.str(a, "json_match", at, &r.JSONMatch)
	d.strList(a, "body_sha256", at, &r.BodySHA256)
	for i, jb := range c.Blocks.OfType("json") {
		jat := at.field("json").index(i)
		d.ranges[jat.String()] = jb.DefRange
		d.ranges[jat.field("field").String()] = jb.LabelRanges[0]
		m := HTTPJSONMatch{Field: jb.Labels[0]}
		jc, diags := jb.Body.Content(ruleJSONSchema)
		d.diags = append(d.diags, diags...)
		d.strList(jc.Attributes, "values", jat, &m.Values)
		r.JSON = append(r.JSON, m)
	}
	return r
}

// secret decodes a `secret "NAME" { from, env_var, path, inject { ... } }`
// block.
func (d *decoder) secret(b *hcl.Block, at fieldPath) Secret {
	d.ranges[at.String()] = b.DefRange
	d.ranges[at.field("name").String()] = b.LabelRanges[0]
	s := Secret{Name: b.Labels[0]}
	c, diags := b.Body.Content(secretSchema)
	d.diags = append(d.diags, diags...)
	a := c.Attributes
	d.str(a, "from", at, &s.From)
	d.str(a, "env_var", at, &s.EnvVar)
	d.str(a, "path", at, &s.Path)
	for i, ib := range c.Blocks.OfType("inject") {
		iat := at.field("inject").index(i)
		d.ranges[iat.String()] = ib.DefRange
		var in SecretInject
		ic, diags := ib.Body.Content(injectSchema)
		d.diags = append(d.diags, diags...)
		d.str(ic.Attributes, "host", iat, &in.Host)
		d.str(ic.Attributes, "header", iat, &in.Header)
		d.boolean(ic.Attributes, "bearer", iat, &in.Bearer)
		s.Inject = append(s.Inject, in)
	}
	return s
}

func (d *decoder) approval(b *hcl.Block, at fieldPath) *Approval {
	d.ranges[at.String()] = b.DefRange
	ap := &Approval{}
	c, diags := b.Body.Content(approvalSchema)
	d.diags = append(d.diags, diags...)
	d.duration(c.Attributes, "timeout", at, &ap.Timeout)
	d.str(c.Attributes, "on_timeout", at, &ap.OnTimeout)
	return ap
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
