package policies

import (
	"fmt"
	"io"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/hashicorp/hcl/v2"
)

// DiagnosticsError carries the diagnostics of a manifest together with its
// source, so that they can be rendered with file:line snippets. Load and
// LoadFile return it when the manifest has errors; Decode also when it has
// only warnings.
type DiagnosticsError struct {
	diags hcl.Diagnostics
	files map[string]*hcl.File
}

// Error is a one-line summary: the first error, and how many others there
// are, e.g. `x.hcl:3,11-15: Invalid mode; "overlayy" is not ... (and 2 more)`.
func (e *DiagnosticsError) Error() string {
	var first *hcl.Diagnostic
	n := 0
	for _, d := range e.diags {
		if d.Severity == hcl.DiagError {
			if first == nil {
				first = d
			}
			n++
		}
	}
	if first == nil {
		return fmt.Sprintf("manifest has no errors (%d warnings)", len(e.diags))
	}
	s := oneLine(first.Error())
	if n > 1 {
		s += fmt.Sprintf(" (and %d more)", n-1)
	}
	return s
}

// Unwrap classifies a bad manifest as errdefs.ErrInvalidArgument.
func (e *DiagnosticsError) Unwrap() error { return errdefs.ErrInvalidArgument }

// Write renders every diagnostic in the style of Terraform, with a source
// snippet for each. width wraps the text (0: no wrapping); color adds
// terminal escape sequences.
func (e *DiagnosticsError) Write(w io.Writer, color bool, width uint) error {
	return hcl.NewDiagnosticTextWriter(w, e.files, width, color).WriteDiagnostics(e.diags)
}

// HasErrors reports whether any diagnostic is an error.
func (e *DiagnosticsError) HasErrors() bool {
	return e != nil && e.diags.HasErrors()
}

// Diagnostics returns every diagnostic, errors and warnings, in source
// order of discovery.
func (e *DiagnosticsError) Diagnostics() []Diagnostic {
	return e.filter(func(*hcl.Diagnostic) bool { return true })
}

// Errors returns the error diagnostics.
func (e *DiagnosticsError) Errors() []Diagnostic {
	return e.filter(func(d *hcl.Diagnostic) bool { return d.Severity == hcl.DiagError })
}

// Warnings returns the warning diagnostics.
func (e *DiagnosticsError) Warnings() []Diagnostic {
	return e.filter(func(d *hcl.Diagnostic) bool { return d.Severity == hcl.DiagWarning })
}

func (e *DiagnosticsError) filter(keep func(*hcl.Diagnostic) bool) []Diagnostic {
	if e == nil {
		return nil
	}
	var out []Diagnostic
	for _, d := range e.diags {
		if keep(d) {
			out = append(out, newDiagnostic(d))
		}
	}
	return out
}

// Diagnostic is one manifest problem as plain values.
type Diagnostic struct {
	// Severity is "error" or "warning".
	Severity string `json:"severity"`
	Summary  string `json:"summary"`
	Detail   string `json:"detail,omitempty"`
	// Filename, Line and Column locate the start of the subject (1-based);
	// EndLine and EndColumn its end.
	Filename  string `json:"filename,omitempty"`
	Line      int    `json:"line,omitempty"`
	Column    int    `json:"column,omitempty"`
	EndLine   int    `json:"end_line,omitempty"`
	EndColumn int    `json:"end_column,omitempty"`
}

// String renders d as "file:line,col: Summary; Detail".
func (d Diagnostic) String() string {
	loc := d.Filename
	if d.Line > 0 {
		loc = fmt.Sprintf("%s:%d,%d", d.Filename, d.Line, d.Column)
	}
	s := loc + ": " + d.Summary
	if loc == "" {
		s = d.Summary
	}
	if d.Detail != "" {
		s += "; " + d.Detail
	}
	return s
}

func newDiagnostic(d *hcl.Diagnostic) Diagnostic {
	out := Diagnostic{Severity: "error", Summary: d.Summary, Detail: d.Detail}
	if d.Severity == hcl.DiagWarning {
		out.Severity = "warning"
	}
	if d.Subject != nil {
		out.Filename = d.Subject.Filename
		out.Line, out.Column = d.Subject.Start.Line, d.Subject.Start.Column
		out.EndLine, out.EndColumn = d.Subject.End.Line, d.Subject.End.Column
	}
	return out
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
