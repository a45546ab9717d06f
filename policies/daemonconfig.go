package policies

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/hclparse"
	"github.com/zclconf/go-cty/cty"
)

// SettingKind is the type of value a daemon setting takes.
type SettingKind int

const (
	// SettingString takes a string.
	SettingString SettingKind = iota
	// SettingBool takes true or false.
	SettingBool
	// SettingNumber takes a number.
	SettingNumber
	// SettingList takes a list of strings (or one string), each value
	// set in turn: a repeatable flag.
	SettingList
)

// Setting is one attribute a daemon configuration file may hold. airlockd
// derives them from its flags: the attribute of --dns-upstream is
// dns_upstream.
type Setting struct {
	Name string
	Kind SettingKind
	// Path marks values that name files or directories: a relative one
	// is taken from the configuration file's directory.
	Path bool
	// Set applies one value, as the flag's Set does; an error is
	// reported at the value in the file.
	Set func(value string) error
}

// DaemonConfig is a decoded daemon configuration file.
type DaemonConfig struct {
	// Applied names the settings the file set, in file order.
	Applied []string
	// Admission is the file's admission block, nil when it has none.
	Admission *Admission
}

// readConfigFile reads a daemon configuration file and returns its
// absolute path, from whose directory relative paths in it are taken.
func readConfigFile(path string) (abs string, src []byte, _ error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return "", nil, fmt.Errorf("read daemon configuration: %w", err)
	}
	abs, err = filepath.Abs(path)
	return abs, src, err
}

// LoadDaemonConfigFile reads and decodes a daemon configuration file (see
// DecodeDaemonConfig). A bad file yields a *DiagnosticsError; a file that
// cannot be read yields the os error.
func LoadDaemonConfigFile(path string, settings []Setting, skip func(name string) bool) (*DaemonConfig, error) {
	abs, src, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	c, diags := DecodeDaemonConfig(abs, src, settings, skip)
	if diags.HasErrors() {
		return nil, diags
	}
	return c, nil
}

// DecodeDaemonConfig decodes a daemon configuration file: top-level
// attributes, one per setting (a flag's name with '_' for '-'), and at
// most one `admission { ... }` block, the admission policy
// (DecodeAdmission's block). Each value is given to its setting's Set,
// unless skip reports the setting as given otherwise (a flag on the
// command line overrides the file). Unknown attributes, wrong types and
// values Set refuses are diagnostics with file:line, and then no Set
// that follows in the file is called; the ones before were. filename
// should be absolute: relative paths in Path settings are taken from its
// directory.
func DecodeDaemonConfig(filename string, src []byte, settings []Setting, skip func(name string) bool) (*DaemonConfig, *DiagnosticsError) {
	parser := hclparse.NewParser()
	c, diags := decodeDaemonConfig(parser, filename, src, settings, skip)
	return withDiagnostics(parser, c, diags)
}

func decodeDaemonConfig(parser *hclparse.Parser, filename string, src []byte, settings []Setting, skip func(string) bool) (*DaemonConfig, hcl.Diagnostics) {
	file, diags := parser.ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, diags
	}
	d := literalDecoder(diags)
	schema := &hcl.BodySchema{Blocks: []hcl.BlockHeaderSchema{{Type: "admission"}}}
	byName := map[string]Setting{}
	for _, s := range settings {
		byName[s.Name] = s
		schema.Attributes = append(schema.Attributes, hcl.AttributeSchema{Name: s.Name})
	}
	content, cdiags := file.Body.Content(schema)
	d.diags = append(d.diags, cdiags...)
	if d.diags.HasErrors() {
		return nil, d.diags
	}
	cfg := &DaemonConfig{}
	if blocks := content.Blocks.OfType("admission"); len(blocks) > 0 {
		b := blocks[0]
		for _, dup := range blocks[1:] {
			d.errorf(dup.DefRange, "Duplicate admission block", "A daemon configuration has one admission block; the first is at %s. Merge the two.", b.DefRange)
		}
		if attr, ok := content.Attributes["admission"]; ok {
			d.errorf(attr.NameRange, "Two admission policies",
				"The admission block at %s is this file's admission policy; remove the block or this attribute.", b.DefRange)
		}
		cfg.Admission = d.admission(b, filename)
	}
	dir := filepath.Dir(filename)
	for _, attr := range sortedAttributes(content.Attributes) {
		s := byName[attr.Name]
		values, ok := d.settingValues(attr, s)
		if !ok || d.diags.HasErrors() || (skip != nil && skip(s.Name)) {
			continue
		}
		for _, v := range values {
			if s.Path && v != "" && !filepath.IsAbs(v) {
				v = filepath.Join(dir, v)
			}
			if err := s.Set(v); err != nil {
				d.errorf(attr.Expr.Range(), "Invalid "+attr.Name, "%s.", strings.TrimSuffix(err.Error(), "."))
				break
			}
		}
		cfg.Applied = append(cfg.Applied, s.Name)
	}
	sortDiags(d.diags)
	if d.diags.HasErrors() {
		return nil, d.diags
	}
	return cfg, d.diags
}

// settingValues evaluates attr as s's kind and returns its values as
// flag strings.
func (d *decoder) settingValues(attr *hcl.Attribute, s Setting) ([]string, bool) {
	at := fieldPath{}.field(attr.Name)
	switch s.Kind {
	case SettingBool:
		v, ok := d.value(attr, at, cty.Bool, "true or false")
		if !ok {
			return nil, false
		}
		return []string{strconv.FormatBool(v.True())}, true
	case SettingNumber:
		v, ok := d.value(attr, at, cty.Number, "a number")
		if !ok {
			return nil, false
		}
		f, _ := v.AsBigFloat().Float64()
		return []string{strconv.FormatFloat(f, 'g', -1, 64)}, true
	case SettingList:
		// One string is a list of one.
		if v, diags := attr.Expr.Value(nil); !diags.HasErrors() && v.Type() == cty.String {
			return []string{v.AsString()}, true
		}
		v, ok := d.value(attr, at, cty.List(cty.String), "a list of strings")
		if !ok {
			return nil, false
		}
		return d.listElems(attr, at, v)
	default:
		v, ok := d.value(attr, at, cty.String, "a string")
		if !ok {
			return nil, false
		}
		return []string{v.AsString()}, true
	}
}

// sortedAttributes returns attrs in source order.
func sortedAttributes(attrs hcl.Attributes) []*hcl.Attribute {
	out := make([]*hcl.Attribute, 0, len(attrs))
	for _, a := range attrs {
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b *hcl.Attribute) int { return a.NameRange.Start.Byte - b.NameRange.Start.Byte })
	return out
}

// DaemonPaths are the paths a daemon configuration file names that a
// host check needs: where the runtime binaries are, the state root, and
// the admission policy's host path roots (where workspaces live).
type DaemonPaths struct {
	BinDir    string
	Root      string
	HostPaths []string
	// Runtime is the OCI runtime setting (runtime), "" when unset.
	Runtime string
}

// ReadDaemonPaths reads bin_dir, root, runtime and the admission block's
// host_paths from the daemon configuration file at path, relative paths
// taken from its directory; other settings are not checked (airlockd
// --check-config does). A missing bin_dir or root is "", and no
// admission block gives no host paths.
func ReadDaemonPaths(path string) (*DaemonPaths, error) {
	abs, src, err := readConfigFile(path)
	if err != nil {
		return nil, err
	}
	parser := hclparse.NewParser()
	p, diags := readDaemonPaths(parser, abs, src)
	out, derr := withDiagnostics(parser, p, diags)
	if derr.HasErrors() {
		return nil, derr
	}
	return out, nil
}

func readDaemonPaths(parser *hclparse.Parser, filename string, src []byte) (*DaemonPaths, hcl.Diagnostics) {
	file, diags := parser.ParseHCL(src, filename)
	if diags.HasErrors() {
		return nil, diags
	}
	d := literalDecoder(diags)
	content, _, cdiags := file.Body.PartialContent(&hcl.BodySchema{
		Attributes: []hcl.AttributeSchema{{Name: "bin_dir"}, {Name: "root"}, {Name: "admission"}, {Name: "runtime"}},
		Blocks:     []hcl.BlockHeaderSchema{{Type: "admission"}},
	})
	d.diags = append(d.diags, cdiags...)
	p := &DaemonPaths{}
	dir := filepath.Dir(filename)
	for name, dst := range map[string]*string{"bin_dir": &p.BinDir, "root": &p.Root} {
		d.str(content.Attributes, name, fieldPath{}, dst)
		if *dst != "" && !filepath.IsAbs(*dst) {
			*dst = filepath.Join(dir, *dst)
		}
	}
	d.str(content.Attributes, "runtime", fieldPath{}, &p.Runtime)
	if blocks := content.Blocks.OfType("admission"); len(blocks) > 0 {
		if a := d.admission(blocks[0], filename); a != nil {
			p.HostPaths = a.HostPaths
		}
	}
	var admFile string
	d.str(content.Attributes, "admission", fieldPath{}, &admFile)
	if d.diags.HasErrors() {
		return nil, d.diags
	}
	if admFile != "" {
		if !filepath.IsAbs(admFile) {
			admFile = filepath.Join(dir, admFile)
		}
		src, err := os.ReadFile(admFile)
		if err != nil {
			d.errorf(content.Attributes["admission"].Expr.Range(), "Unreadable admission policy", "%s.", err)
			return nil, d.diags
		}
		a, adiags := decodeAdmission(parser, admFile, src)
		d.diags = append(d.diags, adiags...)
		if a != nil {
			p.HostPaths = a.HostPaths
		}
	}
	if d.diags.HasErrors() {
		return nil, d.diags
	}
	return p, d.diags
}
