// Command airlock-bench runs the permission benchmark (bench/SPEC.md)
// against real airlock sandboxes. `airlock bench` runs it: it is a binary of
// its own because the benchmark runner links containerd's client, gRPC and
// the chart library, which would otherwise slow the start of every airlock
// command.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/term"
)

// Exit codes, as airlock's (docs/cli.md).
const (
	exitOK      = 0
	exitFailure = 1 // the benchmark could not run, or failed
	exitUsage   = 2 // bad flags or arguments
)

// name prefixes every message of the program.
const name = "airlock-bench"

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = ""

func main() {
	c := &cli{
		stdout: os.Stdout,
		stderr: os.Stderr,
		getenv: os.Getenv,
		notify: func(ch chan<- os.Signal) { signal.Notify(ch, os.Interrupt, syscall.SIGTERM) },
		stopNotify: func(ch chan<- os.Signal) {
			signal.Stop(ch)
		},
		now: time.Now,
	}
	os.Exit(c.execute(context.Background(), os.Args[1:]))
}

// cli is one invocation: its I/O and environment, which tests replace.
type cli struct {
	stdout, stderr io.Writer
	getenv         func(string) string
	// notify and stopNotify subscribe a channel to SIGINT and SIGTERM.
	notify, stopNotify func(chan<- os.Signal)
	now                func() time.Time

	socket string // --socket
}

// execute runs the command line args and returns the exit code.
func (c *cli) execute(ctx context.Context, args []string) int {
	// The progress bar and the interrupt warning write from other
	// goroutines than the runner's log.
	c.stdout, c.stderr = &term.SyncWriter{W: c.stdout}, &term.SyncWriter{W: c.stderr}
	root := c.newBenchCommand()
	root.SetArgs(args)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	return c.exitCode(cmd, err)
}

func (c *cli) defaultSocket() string {
	if s := c.getenv("AIRLOCK_SOCKET"); s != "" {
		return s
	}
	return api.DefaultSocket
}

// exitError ends the command with an exit code and prints err.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }

func (e *exitError) Unwrap() error { return e.err }

// usageErrorf is a usage error: exit code 2.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// runE adapts the command's body so that its plain errors exit with 1;
// errors that reach exitCode untagged come from cobra's own parsing (usage
// errors).
func runE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		err := fn(cmd, args)
		var ee *exitError
		if err == nil || errors.As(err, &ee) {
			return err
		}
		return &exitError{code: exitFailure, err: err}
	}
}

func (c *cli) exitCode(cmd *cobra.Command, err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		c.printError(ee.err)
		return ee.code
	}
	path := name
	if cmd != nil {
		path = cmd.CommandPath()
	}
	c.printError(fmt.Errorf("%w (see '%s --help')", err, path))
	return exitUsage
}

// printError prints err as one line prefixed with the program's name.
func (c *cli) printError(err error) {
	var ue *api.UnreachableError
	if errors.As(err, &ue) {
		fmt.Fprintf(c.stderr, "%s: %s (is airlockd running? set --socket or AIRLOCK_SOCKET)\n", name, ue)
		return
	}
	msg := strings.ReplaceAll(strings.TrimSpace(err.Error()), "\n", "; ")
	fmt.Fprintf(c.stderr, "%s: %s\n", name, msg)
}

// warn prints a non-fatal problem.
func (c *cli) warn(format string, args ...any) {
	fmt.Fprintf(c.stderr, name+": "+format+"\n", args...)
}

func clientVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// exactArgs returns a usage error naming what is expected.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s takes %s (see '%s --help')", cmd.CommandPath(), what, cmd.CommandPath())
		}
		return nil
	}
}
