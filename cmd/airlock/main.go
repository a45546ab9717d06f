// Command airlock is the command-line client of airlockd: it decodes
// session manifests locally (rendering diagnostics with source snippets),
// sends them to the daemon, and streams sessions' output.
//
// It holds no business logic: each command parses its flags, calls the
// api.Client or the policies package, and prints the result.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/internal/term"
)

// Exit codes.
const (
	exitOK      = 0
	exitFailure = 1   // the command failed
	exitUsage   = 2   // bad flags or arguments, or a bad manifest
	exitChanged = 3   // fmt --check: a file is not canonically formatted
	exitDaemon  = 125 // run/exec: the daemon failed, not the session's command
	exitNoBench = 125 // bench: airlock-bench is missing or cannot be run
)

// version is set at link time: -ldflags "-X main.version=v1.2.3".
var version = ""

func main() {
	c := &cli{
		stdin:  os.Stdin,
		stdout: os.Stdout,
		stderr: os.Stderr,
		getenv: os.Getenv,
		notify: func(ch chan<- os.Signal) { signal.Notify(ch, os.Interrupt, syscall.SIGTERM) },
		stopNotify: func(ch chan<- os.Signal) {
			signal.Stop(ch)
		},
		now:        time.Now,
		executable: os.Executable,
		lookPath:   exec.LookPath,
		exec:       syscall.Exec,
		environ:    os.Environ,
	}
	os.Exit(c.execute(context.Background(), os.Args[1:]))
}

// cli is one invocation: its I/O and environment, which tests replace.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	// notify and stopNotify subscribe a channel to SIGINT and SIGTERM.
	notify, stopNotify func(chan<- os.Signal)
	now                func() time.Time
	// executable, lookPath, exec and environ find and start airlock-bench:
	// os.Executable, exec.LookPath, syscall.Exec and os.Environ.
	executable func() (string, error)
	lookPath   func(file string) (string, error)
	exec       func(argv0 string, argv, envv []string) error
	environ    func() []string

	socket     string // --socket
	clientOnce sync.Once
	cl         *api.Client

	kubeOpts kubeOptions // --context, --kubeconfig, --namespace
	kubeOnce sync.Once
	kc       *kubeClient
	kubeErr  error
}

// client returns the API client for --socket, or with --context the one
// that reaches the cluster's Sessions on their nodes.
func (c *cli) client() *api.Client {
	c.clientOnce.Do(func() {
		if c.kubeOpts.on() {
			c.cl = c.kubeAPIClient()
			return
		}
		c.cl = api.NewClient(c.socket)
	})
	return c.cl
}

func (c *cli) defaultSocket() string {
	if s := c.getenv("AIRLOCK_SOCKET"); s != "" {
		return s
	}
	return api.DefaultSocket
}

// execute runs the command line args and returns the exit code.
func (c *cli) execute(ctx context.Context, args []string) int {
	// Output streams are written from more than one goroutine in run
	// (log frames and signal-forwarding warnings).
	c.stdout, c.stderr = &term.SyncWriter{W: c.stdout}, &term.SyncWriter{W: c.stderr}
	root := c.newRootCommand()
	// A command that parses its own arguments (bench) gets them as typed.
	if cmd, _, err := root.Find(args); err != nil || !cmd.DisableFlagParsing {
		args = normalizeArgs(args)
	}
	root.SetArgs(args)
	root.SetIn(c.stdin)
	root.SetOut(c.stdout)
	root.SetErr(c.stderr)
	cmd, err := root.ExecuteContextC(ctx)
	if c.cl != nil {
		c.cl.Close()
	}
	return c.exitCode(cmd, err)
}

// normalizeArgs accepts Terraform's single-dash -var spelling before "--".
func normalizeArgs(args []string) []string {
	out := make([]string, len(args))
	copy(out, args)
	for i, a := range out {
		if a == "--" {
			break
		}
		if a == "-var" || strings.HasPrefix(a, "-var=") {
			out[i] = "-" + a
		}
	}
	return out
}

// exitError ends a command with an exit code. A nil err means the message
// (if any) was already printed.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

func (e *exitError) Unwrap() error { return e.err }

// exitCodeOnly ends a command with code and prints nothing.
func exitCodeOnly(code int) error { return &exitError{code: code} }

// usageErrorf is a usage error: exit code 2.
func usageErrorf(format string, args ...any) error {
	return &exitError{code: exitUsage, err: fmt.Errorf(format, args...)}
}

// withCode ends a command with code and prints err.
func withCode(code int, err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	return &exitError{code: code, err: err}
}

// runE adapts a command body so that its plain errors exit with 1; errors
// that reach exitCode untagged come from cobra's own parsing (usage errors).
func runE(fn func(cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		return withCode(exitFailure, fn(cmd, args))
	}
}

func (c *cli) exitCode(cmd *cobra.Command, err error) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			c.printError(ee.err)
		}
		return ee.code
	}
	// Cobra's own errors: unknown commands and flags, bad arguments.
	path := "airlock"
	if cmd != nil {
		path = cmd.CommandPath()
	}
	fmt.Fprintf(c.stderr, "airlock: %s (see '%s --help')\n", oneLineSuggestions(err.Error()), path)
	return exitUsage
}

// oneLineSuggestions folds cobra's "Did you mean this?" block into the
// error's line.
func oneLineSuggestions(msg string) string {
	first, rest, ok := strings.Cut(msg, "\n\nDid you mean this?\n")
	if !ok {
		return strings.ReplaceAll(strings.TrimSpace(msg), "\n", "; ")
	}
	var names []string
	for _, f := range strings.Fields(rest) {
		names = append(names, strconv.Quote(f))
	}
	return fmt.Sprintf("%s; did you mean %s?", first, strings.Join(names, " or "))
}

// report prints err the way a command's final error is printed, for
// commands that go on after an error.
func (c *cli) report(err error) {
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err != nil {
			c.printError(ee.err)
		}
		return
	}
	c.printError(err)
}

// printError prints err as one line prefixed "airlock: ".
func (c *cli) printError(err error) {
	var ue *api.UnreachableError
	if errors.As(err, &ue) {
		fmt.Fprintf(c.stderr, "airlock: %s (is airlockd running? set --socket or AIRLOCK_SOCKET)\n", ue)
		return
	}
	msg := strings.TrimSpace(err.Error())
	msg = strings.ReplaceAll(msg, "\n", "; ")
	fmt.Fprintf(c.stderr, "airlock: %s\n", msg)
}

// warn prints a non-fatal problem.
func (c *cli) warn(format string, args ...any) {
	fmt.Fprintf(c.stderr, "airlock: "+format+"\n", args...)
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

func (c *cli) newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "airlock",
		Short: "Run coding agents in sandboxes scoped by an HCL manifest",
		Long: `airlock runs unattended coding agents in containerd sandboxes whose
filesystem, network egress and credentials are declared in an HCL manifest.
It talks to airlockd over a unix socket; validate and fmt work without it.
With --context (Kubernetes, preview) run, logs, wait, diff, commit, discard,
audit, ps, inspect and rm work on the cluster's Sessions instead, by name:
the API server, and the node agent running each Session.`,
		Example: `  airlock validate task.hcl
  airlock run -f task.hcl -- claude -p "fix the flaky test"
  airlock ps -a`,
		SilenceErrors: true,
		SilenceUsage:  true,
	}
	root.SetFlagErrorFunc(func(cmd *cobra.Command, err error) error {
		return usageErrorf("%s (see '%s --help')", err, cmd.CommandPath())
	})
	root.PersistentFlags().StringVar(&c.socket, "socket", c.defaultSocket(),
		"airlockd's unix socket (env AIRLOCK_SOCKET)")
	c.kubeOpts.addFlags(root)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return c.checkKubeCommand(cmd) }

	root.AddGroup(
		&cobra.Group{ID: "session", Title: "Sessions:"},
		&cobra.Group{ID: "manifest", Title: "Manifests:"},
		&cobra.Group{ID: "other", Title: "Other:"},
	)
	add := func(group string, cmds ...*cobra.Command) {
		for _, cmd := range cmds {
			cmd.GroupID = group
			root.AddCommand(cmd)
		}
	}
	add("session",
		c.newRunCommand(), c.newCreateCommand(), c.newUpdateCommand(), c.newStartCommand(), c.newExecCommand(), c.newAttachCommand(),
		c.newLogsCommand(), c.newPsCommand(), c.newStopCommand(), c.newRmCommand(),
		c.newInspectCommand(), c.newWaitCommand(), c.newAuditCommand(),
		c.newDiffCommand(), c.newCommitCommand(), c.newDiscardCommand(),
		c.newApprovalsCommand(), c.newApproveCommand(), c.newDenyCommand())
	add("manifest", c.newValidateCommand(), c.newFmtCommand())
	add("other", c.newImageCommand(), c.newPoolCommand(), c.newVersionCommand(), c.newBenchCommand(),
		c.newDoctorCommand())
	root.SetHelpCommandGroupID("other")
	root.SetCompletionCommandGroupID("other")
	return root
}

// exactArgs and friends return usage errors naming what is expected.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usageErrorf("%s takes %s (see '%s --help')", cmd.CommandPath(), what, cmd.CommandPath())
		}
		return nil
	}
}

func minArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) < n {
			return usageErrorf("%s takes %s (see '%s --help')", cmd.CommandPath(), what, cmd.CommandPath())
		}
		return nil
	}
}
