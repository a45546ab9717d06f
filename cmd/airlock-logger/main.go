// airlock-logger writes a session's output to its log files. containerd's
// shim runs it as the session's binary logger (`airlock-logger
// _airlock_logger DIR _airlock_log_size BYTES`, the pairs in any order)
// with stdout and stderr on fds 3 and 4; see package internal/logwriter.
// It is not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/logwriter"
)

func main() {
	dir, limit, err := logwriter.ParseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "airlock-logger:", err)
		fmt.Fprintln(os.Stderr, "usage: airlock-logger "+logwriter.Arg+" DIR "+logwriter.SizeArg+" BYTES (run by containerd's shim for airlockd)")
		os.Exit(2)
	}
	if logwriter.WantsTTY(os.Args[1:]) {
		logwriter.RunTTY(dir, limit)
	}
	logwriter.Run(dir, limit)
}
