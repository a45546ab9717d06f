package policies

import (
	"fmt"
	"strings"

	"github.com/hashicorp/hcl/v2/hclwrite"
	"github.com/zclconf/go-cty/cty"
)

// Repair is the smallest revision of a session's policy that would allow
// an action the session was refused or held for (a name, an address, an
// HTTP request, a write at commit, a read): the entries, rules or
// patterns to add or remove, computed by package policies/repair. It
// travels in audit events (field "repair") and in held approvals, and
// `airlock approve --revise` applies it as a revision.
type Repair struct {
	// Changes are the edits, in order; none when the policy already
	// allows the action (Allowed) or no policy change can (Reason says
	// why).
	Changes []RepairChange `json:"changes,omitempty"`
	// HCL shows the changes as manifest lines ("..." stands for the
	// entries a list keeps).
	HCL string `json:"hcl,omitempty"`
	// Note says what the changes allow beyond the action, or what they
	// assume (the port of a name looked up, say).
	Note string `json:"note,omitempty"`
	// Allowed says the policy allows the action already (a revision
	// since the decision did).
	Allowed bool `json:"allowed,omitempty"`
	// Revisable says a revision of the running session can make the
	// changes (airlock update, airlock approve --revise).
	Revisable bool `json:"revisable"`
	// Reason says, without Changes, why no policy change allows the
	// action; with Changes that are not Revisable, why a running session
	// cannot take them (each field and why, as policies.Diff refuses).
	Reason string `json:"reason,omitempty"`
}

// Fields a RepairChange edits.
const (
	RepairEgressAllow        = "egress.allow"
	RepairEgressDeny         = "egress.deny"
	RepairEgressAllowPrivate = "egress.allow_private"
	RepairEgressHTTP         = "egress.http"
	RepairProtect            = "workspace.protect"
	RepairGitAllow           = "workspace.git_allow"
	RepairPreserveUntracked  = "workspace.preserve_untracked"
	RepairWorkspaceDenyRead  = "workspace.deny_read"
	RepairWorkspaceDefault   = "workspace.default_deny_read"
	RepairMountDenyRead      = "mount.deny_read"
	RepairMountDefault       = "mount.default_deny_read"
)

// Operations of a RepairChange.
const (
	RepairAdd    = "add"
	RepairRemove = "remove"
	RepairInsert = "insert"
	RepairSet    = "set"
)

// RepairChange is one edit of a policy.
type RepairChange struct {
	// Field is one of the Repair* field constants.
	Field string `json:"field"`
	// Block is the label of the block the field is in: the http block's
	// host, the workspace's or mount's host path; empty for egress lists.
	Block string `json:"block,omitempty"`
	// Op is RepairAdd or RepairRemove (Value to or from a list),
	// RepairInsert (Rule into the http block, before rule Before, counted
	// from 1; 0 after the last) or RepairSet (the attribute to Value).
	Op    string `json:"op"`
	Value string `json:"value,omitempty"`
	// Rule is the HTTP rule RepairInsert inserts.
	Rule   *HTTPRule `json:"rule,omitempty"`
	Before int       `json:"before,omitempty"`
}

// String is c in one line: `egress.allow += "api.example.test:443"`.
func (c RepairChange) String() string {
	field := c.Field
	switch {
	case c.Field == RepairEgressHTTP:
		field = fmt.Sprintf("%s[%q]", c.Field, c.Block)
	case c.Block != "":
		kind, attr, _ := strings.Cut(c.Field, ".")
		field = fmt.Sprintf("%s[%q].%s", kind, c.Block, attr)
	}
	switch c.Op {
	case RepairAdd:
		return fmt.Sprintf("%s += %q", field, c.Value)
	case RepairRemove:
		return fmt.Sprintf("%s -= %q", field, c.Value)
	case RepairSet:
		return fmt.Sprintf("%s = %s", field, c.Value)
	case RepairInsert:
		where := "after the last rule"
		if c.Before > 0 {
			where = fmt.Sprintf("before rule %d", c.Before)
		}
		r := ""
		if c.Rule != nil {
			r = " " + c.Rule.String()
		}
		return fmt.Sprintf("%s: insert rule%s %s", field, r, where)
	}
	return field + " " + c.Op + " " + c.Value
}

// Summary is the repair's changes in one line, "; " between them.
func (r Repair) Summary() string {
	parts := make([]string, len(r.Changes))
	for i, c := range r.Changes {
		parts[i] = c.String()
	}
	return strings.Join(parts, "; ")
}

// RepairHCL renders changes as manifest lines, each inside its block:
//
//	egress {
//	  allow = [..., "api.example.test:443"]
//	}
//
// "..." stands for the entries the list keeps; a removed entry is named
// in a comment.
func RepairHCL(changes []RepairChange) string {
	var out []string
	for _, c := range changes {
		out = append(out, changeHCL(c))
	}
	return strings.Join(out, "\n")
}

func changeHCL(c RepairChange) string {
	kind, attr, _ := strings.Cut(c.Field, ".")
	open := kind + " {"
	if c.Block != "" {
		open = kind + " " + hclString(c.Block) + " {"
	}
	var line string
	switch c.Op {
	case RepairAdd:
		line = fmt.Sprintf("  %s = [..., %s]", attr, hclString(c.Value))
	case RepairRemove:
		line = fmt.Sprintf("  %s = [...] # without %s", attr, hclString(c.Value))
	case RepairSet:
		line = fmt.Sprintf("  %s = %s", attr, c.Value)
	case RepairInsert:
		if c.Rule == nil {
			return ""
		}
		f := hclwrite.NewEmptyFile()
		b := f.Body().AppendNewBlock("rule", nil).Body()
		if len(c.Rule.Methods) > 0 {
			setList(b, "method", c.Rule.Methods)
		}
		setNonEmpty(b, "path", c.Rule.Path)
		if c.Rule.Refs != nil {
			setList(b, "refs", c.Rule.Refs)
		}
		setNonEmpty(b, "action", c.Rule.Action)
		where := "# after the last rule"
		if c.Before > 0 {
			where = fmt.Sprintf("# before rule %d", c.Before)
		}
		var lines []string
		for _, l := range strings.Split(strings.TrimRight(string(hclwrite.Format(f.Bytes())), "\n"), "\n") {
			lines = append(lines, "  "+l)
		}
		return "egress {\n  http " + hclString(c.Block) + " {\n    " + where + "\n  " + strings.Join(lines, "\n  ") + "\n  }\n}"
	}
	return open + "\n" + line + "\n}"
}

// hclString is s as an HCL string literal.
func hclString(s string) string {
	return strings.TrimSpace(string(hclwrite.TokensForValue(cty.StringVal(s)).Bytes()))
}
