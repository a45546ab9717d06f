// airlock-init is the first process of every airlock sandbox. It waits for
// the session's command on a FIFO the daemon writes to, then executes it in
// place; see package internal/launch. With --pause it is the process of the
// daemon's shim anchor instead: it sleeps until SIGTERM or SIGINT. It is not
// meant to be run by hand.
package main

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-sandbox/airlock/internal/launch"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: airlock-init DIR | --pause (run by airlockd inside a sandbox)")
		os.Exit(2)
	}
	if os.Args[1] == "--pause" {
		// As the first process of its pid namespace it has no default
		// signal handlers; these two end it cleanly.
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
		<-sig
		os.Exit(0)
	}
	os.Exit(launch.RunInit(os.Args[1]))
}
