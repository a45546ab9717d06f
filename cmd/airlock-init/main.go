// airlock-init is the first process of every airlock sandbox. It waits for
// the session's command on a FIFO the daemon writes to, then executes it in
// place; see package internal/launch. It is not meant to be run by hand.
package main

import (
	"fmt"
	"os"

	"github.com/airlock-sandbox/airlock/internal/launch"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: airlock-init DIR (run by airlockd inside a sandbox)")
		os.Exit(2)
	}
	os.Exit(launch.RunInit(os.Args[1]))
}
