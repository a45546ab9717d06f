package suite

import (
	"fmt"
	"io"
	"strings"

	"github.com/containerd/errdefs"
	"github.com/hashicorp/hcl/v2"
)

// DiagnosticsError carries every problem of a suite, each with the file
// and line it is about (a manifest's problems with the manifest's).
type DiagnosticsError struct {
	diags hcl.Diagnostics
	files map[string]*hcl.File
}

// Error is the first error as "file:line: summary; detail" and how many
// others there are.
func (e *DiagnosticsError) Error() string {
	errs := e.Errors()
	if len(errs) == 0 {
		return "suite has no errors"
	}
	s := errs[0].String()
	if len(errs) > 1 {
		s += fmt.Sprintf(" (and %d more)", len(errs)-1)
	}
	return s
}

// Unwrap classifies a bad suite as errdefs.ErrInvalidArgument.
func (e *DiagnosticsError) Unwrap() error { return errdefs.ErrInvalidArgument }

// Errors returns the error diagnostics in the order they were found.
func (e *DiagnosticsError) Errors() []Diagnostic {
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
// is the suite's own; width wraps the text (0: no wrapping).
func (e *DiagnosticsError) Write(w io.Writer, width uint) error {
	return hcl.NewDiagnosticTextWriter(w, e.files, width, false).WriteDiagnostics(e.diags)
}

// Diagnostic is one problem of a suite.
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
