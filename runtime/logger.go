package runtime

import (
	"io"

	"github.com/airlock-sandbox/airlock/internal/logwriter"
)

// Log file names inside a session's log directory; see package logwriter.
const (
	StdoutLog     = logwriter.StdoutLog
	StderrLog     = logwriter.StderrLog
	EOFSuffix     = logwriter.EOFSuffix
	DroppedSuffix = logwriter.DroppedSuffix
)

// LogsOptions select which of a session's recorded streams a reader of its
// output gets, and whether it follows them until the output ends.
type LogsOptions struct {
	Follow bool
	Stdout io.Writer // nil: stdout not wanted
	Stderr io.Writer // nil: stderr not wanted
}

// LogDropped says how much of a stream the cap on output kept out of its
// file; see package logwriter.
type LogDropped = logwriter.Dropped

// IsLoggerCall reports whether args (os.Args[1:]) are those containerd's
// shim passes to the log writer.
func IsLoggerCall(args []string) bool {
	for i := 0; i+1 < len(args); i += 2 {
		if args[i] == LoggerArg {
			return true
		}
	}
	return false
}

// RunLogger runs the log writer with args (os.Args[1:]); it never
// returns. airlockd keeps this mode so shims of sessions started by older
// daemons keep working.
func RunLogger(args []string) error {
	dir, limit, err := logwriter.ParseArgs(args)
	if err != nil {
		return err
	}
	if logwriter.WantsTTY(args) {
		logwriter.RunTTY(dir, limit)
	}
	logwriter.Run(dir, limit)
	return nil
}
