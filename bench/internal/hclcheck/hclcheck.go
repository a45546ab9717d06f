// Package hclcheck holds what the benchmark's HCL formats (the contrast
// pairs' instances, bench/authgate; an operator's suite, bench/suite)
// share to report their mistakes: an error carrying every diagnostic with
// its file and line, and the decoding of a list of strings with each
// element's range.
package hclcheck

import (
	"fmt"
	"io"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
)

// Error carries every problem of a set of HCL files, each with the file
// and line it is about.
type Error struct {
	diags hcl.Diagnostics
	files map[string]*hcl.File
	// what names the files as a whole ("instance set", "suite").
	what string
}

// NewError returns the error of diags, whose sources are files (for
// Write's snippets); what names the files as a whole.
func NewError(what string, diags hcl.Diagnostics, files map[string]*hcl.File) *Error {
	return &Error{diags: diags, files: files, what: what}
}

// Error is the first error as "file:line: summary; detail" and how many
// others there are.
func (e *Error) Error() string {
	errs := e.Errors()
	if len(errs) == 0 {
		return e.what + " has no errors"
	}
	s := errs[0].String()
	if len(errs) > 1 {
		s += fmt.Sprintf(" (and %d more)", len(errs)-1)
	}
	return s
}

// Unwrap classifies the files as errdefs.ErrInvalidArgument.
func (e *Error) Unwrap() error { return errdefs.ErrInvalidArgument }

// Errors returns the error diagnostics in the order they were found.
func (e *Error) Errors() []Diagnostic {
	if e == nil {
		return nil
	}
	var out []Diagnostic
	for _, d := range e.diags {
		if d.Severity != hcl.DiagError {
			continue
		}
		dd := Diagnostic{Summary: d.Summary, Detail: strings.Join(strings.Fields(d.Detail), " ")}
		if d.Subject != nil {
			dd.File, dd.Line = d.Subject.Filename, d.Subject.Start.Line
		}
		out = append(out, dd)
	}
	return out
}

// Write renders every diagnostic with a source snippet where the source
// is known; width wraps the text (0: no wrapping).
func (e *Error) Write(w io.Writer, width uint) error {
	return hcl.NewDiagnosticTextWriter(w, e.files, width, false).WriteDiagnostics(e.diags)
}

// Diagnostic is one problem.
type Diagnostic struct {
	File    string
	Line    int
	Summary string
	Detail  string
}

// String renders d as "file:line: summary; detail".
func (d Diagnostic) String() string {
	s := d.Summary
	if d.File != "" {
		s = fmt.Sprintf("%s:%d: %s", d.File, d.Line, d.Summary)
	}
	if d.Detail != "" {
		s += "; " + d.Detail
	}
	return s
}

// Str is a string of a list, with its range.
type Str struct {
	V   string
	Rng hcl.Range
}

// StringList decodes expr as a list of strings, each trimmed, with each
// element's range; a missing attribute (nil, or null) is an empty list.
// Problems are appended to diags; what names the attribute in them.
func StringList(expr hcl.Expression, what string, diags *hcl.Diagnostics) []Str {
	if expr == nil {
		return nil
	}
	if v, d := expr.Value(nil); !d.HasErrors() && v.IsNull() {
		return nil
	}
	elems, d := hcl.ExprList(expr)
	if d.HasErrors() {
		rng := expr.Range()
		*diags = append(*diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Invalid " + what,
			Detail: what + " is a list of strings, written [\"...\", \"...\"].", Subject: &rng})
		return nil
	}
	var out []Str
	for _, e := range elems {
		var s string
		if d := gohcl.DecodeExpression(e, nil, &s); d.HasErrors() {
			*diags = append(*diags, d...)
			continue
		}
		out = append(out, Str{V: strings.TrimSpace(s), Rng: e.Range()})
	}
	return out
}
