package runtime

import "github.com/airlock-sandbox/airlock/internal/logwriter"

// Log file names inside a session's log directory; see package logwriter.
const (
	StdoutLog = logwriter.StdoutLog
	StderrLog = logwriter.StderrLog
	EOFSuffix = logwriter.EOFSuffix
)

// RunLogger runs the log writer on dir; it never returns. airlockd keeps
// this mode so shims of sessions started by older daemons keep working.
func RunLogger(dir string) { logwriter.Run(dir) }
