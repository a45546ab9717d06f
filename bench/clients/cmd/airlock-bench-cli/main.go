// Command airlock-bench-cli is the benchmark's multi-call client binary:
// squeue, scontrol, scancel, kubectl, aws, git-credential-airlock, gh,
// modelctl, pkgctl and pastebin, selected by the name it is called by. See
// package clients.
// `airlock-bench-cli bench-shell MARKER [WORKSPACE]` is the shell the bench
// runner runs its actions through (clients.Shell).
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/airlock-sandbox/airlock/bench/clients"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == clients.ShellCommand {
		os.Exit(clients.Shell(os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := clients.Main(ctx, os.Args, clients.OSEnv())
	stop()
	os.Exit(code)
}
