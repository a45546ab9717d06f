package authgate

import "github.com/airlock-sandbox/airlock/bench/internal/hclcheck"

// DiagnosticsError carries every problem of an instance set, each with the
// file and line it is about. LoadDir, LoadFS and Default return it when a
// file has errors.
type DiagnosticsError = hclcheck.Error

// Diagnostic is one problem, "file:line: summary; detail".
type Diagnostic = hclcheck.Diagnostic
