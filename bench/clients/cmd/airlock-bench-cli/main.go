// Command airlock-bench-cli is the benchmark's multi-call client binary:
// squeue, scontrol, scancel, kubectl, aws and git-credential-airlock,
// selected by the name it is called by. See package clients.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-sandbox/airlock/bench/clients"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := clients.Main(ctx, os.Args, clients.OSEnv())
	stop()
	os.Exit(code)
}
