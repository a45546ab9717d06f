// airlock-logger writes a session's output to its log files. containerd's
// shim runs it as the session's binary logger (`airlock-logger
// _airlock_logger DIR`) with stdout and stderr on fds 3 and 4; see package
// internal/logwriter. It is not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/logwriter"
)

func main() {
	if len(os.Args) != 3 || os.Args[1] != logwriter.Arg {
		fmt.Fprintln(os.Stderr, "usage: airlock-logger "+logwriter.Arg+" DIR (run by containerd's shim for airlockd)")
		os.Exit(2)
	}
	logwriter.Run(os.Args[2])
}
