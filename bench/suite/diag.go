package suite

import "github.com/airlock-sandbox/airlock/bench/internal/hclcheck"

// DiagnosticsError carries every problem of a suite, each with the file
// and line it is about (a manifest's problems with the manifest's). Load
// returns it.
type DiagnosticsError = hclcheck.Error

// Diagnostic is one problem, "file:line: summary; detail".
type Diagnostic = hclcheck.Diagnostic
