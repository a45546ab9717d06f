package main

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policies"
)

func (c *cli) newStartCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "start ID...",
		Short: "Start created sessions",
		Long:  `Start starts the main process of each created session and prints its id.`,
		Example: `  airlock start 3f9c2a1b
  airlock logs -f 3f9c2a1b`,
		Args: minArgs(1, "at least one session ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return c.eachSession(args, "starting", func(id string) error {
				_, err := c.client().StartSession(cmd.Context(), id)
				return err
			})
		}),
	}
}

func (c *cli) newStopCommand() *cobra.Command {
	var grace time.Duration
	cmd := &cobra.Command{
		Use:   "stop [flags] ID...",
		Short: "Stop running sessions",
		Long: `Stop sends SIGTERM to each session's main process, then SIGKILL once the
grace period has passed, and prints the id when the process has exited.
--time 0 kills at once. A stopped session keeps its workspace changes until
it is removed.`,
		Example: `  airlock stop 3f9c2a1b
  airlock stop --time 0 3f9c2a1b 77d0e415`,
		Args: minArgs(1, "at least one session ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if grace < 0 {
				return usageErrorf("--time must not be negative")
			}
			req := api.StopRequest{Grace: policies.Duration(grace)}
			if grace == 0 {
				req.Grace = killNow
			}
			return c.eachSession(args, "stopping", func(id string) error {
				_, err := c.client().StopSession(cmd.Context(), id, req)
				return err
			})
		}),
	}
	cmd.Flags().DurationVarP(&grace, "time", "t", 10*time.Second, "grace period between SIGTERM and SIGKILL")
	return cmd
}

func (c *cli) newRmCommand() *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "rm [flags] ID...",
		Short: "Remove sessions and everything they own",
		Long: `Rm removes each stopped session with its overlay, logs and kernel
objects, and prints its id. With --force a running session is killed first.`,
		Example: `  airlock rm 3f9c2a1b
  airlock rm -f $(airlock ps -aq)`,
		Args: minArgs(1, "at least one session ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			return c.eachSession(args, "removing", func(id string) error {
				if c.kubeOpts.on() {
					// Deleting the Session: its node removes its
					// local session, running or not.
					return c.kubeRm(cmd.Context(), id)
				}
				return c.client().RemoveSession(cmd.Context(), id, force)
			})
		}),
	}
	cmd.Flags().BoolVarP(&force, "force", "f", false, "kill running sessions before removing them")
	return cmd
}

// eachSession applies fn to each id, printing the ids it succeeded for and
// an error line for each failure; it fails if any failed.
func (c *cli) eachSession(ids []string, verb string, fn func(id string) error) error {
	failed := 0
	for _, id := range ids {
		if err := fn(id); err != nil {
			if len(ids) == 1 {
				return err
			}
			c.report(fmt.Errorf("%s %s: %w", verb, id, err))
			failed++
			continue
		}
		fmt.Fprintln(c.stdout, id)
	}
	if failed > 0 {
		return exitCodeOnly(exitFailure)
	}
	return nil
}

func (c *cli) newInspectCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "inspect ID",
		Short: "Print a session's state and policy as JSON",
		Long: `Inspect prints everything the daemon knows about a session as JSON: its
state, timestamps, exit code, the policy it runs under and the resources it
owns.`,
		Example: `  airlock inspect 3f9c2a1b
  airlock inspect 3f9c2a1b | jq .policy.egress`,
		Args: exactArgs(1, "one session ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if c.kubeOpts.on() {
				return c.kubeInspect(cmd.Context(), args[0])
			}
			s, err := c.client().InspectSession(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			return c.printJSON(s)
		}),
	}
}

func (c *cli) newWaitCommand() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "wait [flags] ID...",
		Short: "Wait for sessions to end and print their exit codes",
		Long: `Wait blocks until each session's main process has exited and prints its
exit code, one line per session. airlock itself exits 0 unless waiting failed.`,
		Example: `  airlock wait 3f9c2a1b
  airlock wait --json 3f9c2a1b`,
		Args: minArgs(1, "at least one session ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			for _, id := range args {
				w, err := c.client().WaitSession(cmd.Context(), id)
				if err != nil {
					return fmt.Errorf("waiting for session %s: %w", id, err)
				}
				if asJSON {
					if err := c.printJSON(w); err != nil {
						return err
					}
					continue
				}
				fmt.Fprintln(c.stdout, w.ExitCode)
			}
			return nil
		}),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print {exit_code, reason} as JSON")
	return cmd
}

func (c *cli) newLogsCommand() *cobra.Command {
	var follow, stdoutOnly, stderrOnly bool
	cmd := &cobra.Command{
		Use:   "logs [flags] ID",
		Short: "Print a session's output",
		Long: `Logs copies the output of a session's main process: its stdout to
airlock's stdout and its stderr to airlock's stderr. With --follow it keeps
going until the process has exited. Output beyond the session's
resources.log_size (default 64MiB, both streams together) is dropped; a
line "[airlock: output truncated: ...]" marks where, and the stream ends
with "[airlock: N bytes of stdout dropped]".`,
		Example: `  airlock logs 3f9c2a1b
  airlock logs -f --stderr-only 3f9c2a1b`,
		Args: exactArgs(1, "one session ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if stdoutOnly && stderrOnly {
				return usageErrorf("--stdout-only and --stderr-only cannot be used together")
			}
			opts := api.LogsOptions{Follow: follow, Stdout: !stderrOnly, Stderr: !stdoutOnly}
			return c.client().Logs(cmd.Context(), args[0], opts, c.stdout, c.stderr)
		}),
	}
	cmd.Flags().BoolVarP(&follow, "follow", "f", false, "keep streaming until the session's process exits")
	cmd.Flags().BoolVar(&stdoutOnly, "stdout-only", false, "print only stdout")
	cmd.Flags().BoolVar(&stderrOnly, "stderr-only", false, "print only stderr")
	return cmd
}

func (c *cli) newExecCommand() *cobra.Command {
	var (
		tf      terminalFlags
		env     []string
		workdir string
	)
	cmd := &cobra.Command{
		Use:   "exec [flags] ID -- COMMAND [ARG...]",
		Short: "Run a command in a running session",
		Long: `Exec runs COMMAND in a running session, under the session's user and
restrictions, copies its stdout and stderr, and exits with its exit code (125
when the daemon fails). With -i, airlock's stdin is streamed to the command.
With -it the command gets a pseudo-terminal connected to airlock's own
(which must be one): keys as typed, its screen, resizes. It has no detach
keys: the command ends when airlock does.
Put "--" before COMMAND when it has flags of its own.`,
		Example: `  airlock exec 3f9c2a1b -- git -C /workspace status
  tar -c src | airlock exec -i 3f9c2a1b -- tar -x -C /tmp
  airlock exec -it 3f9c2a1b -- bash`,
		Args: minArgs(2, "a session ID and a COMMAND"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			req := api.ExecRequest{Command: args[1:], Workdir: workdir}
			for _, kv := range env {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usageErrorf("invalid --env %q: want NAME=VALUE", kv)
				}
				if req.Env == nil {
					req.Env = map[string]string{}
				}
				req.Env[k] = v
			}
			if err := tf.check(false); err != nil {
				return err
			}
			if tf.tty {
				return c.execTerminal(cmd.Context(), args[0], req)
			}
			var stdin io.Reader
			if tf.interactive {
				stdin = c.stdin
			}
			code, err := c.client().Exec(cmd.Context(), args[0], req, stdin, c.stdout, c.stderr)
			if err != nil {
				return withCode(exitDaemon, err)
			}
			return exitCodeOnly(code)
		}),
	}
	tf.add(cmd, false)
	cmd.Flags().StringArrayVarP(&env, "env", "e", nil, "set an environment variable: NAME=VALUE (repeatable)")
	cmd.Flags().StringVarP(&workdir, "workdir", "w", "", "working directory inside the session")
	return cmd
}

func (c *cli) newPsCommand() *cobra.Command {
	var all, quiet, asJSON, noTrunc bool
	cmd := &cobra.Command{
		Use:   "ps [flags]",
		Short: "List sessions",
		Long: `Ps lists running sessions, newest first; --all lists sessions in every
state (created, running, stopped, unknown). With --context it lists every
Session of the namespace, in any state, with its node and exit code.`,
		Example: `  airlock ps
  airlock ps -a --json | jq -r '.[] | select(.state == "stopped") | .id'`,
		Args: exactArgs(0, "no arguments"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if c.kubeOpts.on() {
				return c.kubePs(cmd.Context(), quiet, asJSON)
			}
			list, err := c.client().ListSessions(cmd.Context())
			if err != nil {
				return err
			}
			if !all {
				list = slices.DeleteFunc(list, func(s api.Session) bool { return s.State != api.StateRunning })
			}
			slices.SortStableFunc(list, func(a, b api.Session) int { return b.Created.Compare(a.Created) })
			switch {
			case asJSON:
				if list == nil {
					list = []api.Session{}
				}
				return c.printJSON(list)
			case quiet:
				for _, s := range list {
					fmt.Fprintln(c.stdout, s.ID)
				}
				return nil
			}
			tw := tabwriter.NewWriter(c.stdout, 0, 8, 3, ' ', 0)
			fmt.Fprintln(tw, "ID\tLABEL\tSTATE\tIMAGE\tCREATED\tCOMMAND")
			for _, s := range list {
				command := commandString(s.Command)
				if !noTrunc {
					command = truncate(command, 40)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n",
					s.ID, s.Label, stateString(s), s.Image, ago(c.now(), s.Created), command)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().BoolVarP(&all, "all", "a", false, "list sessions in every state, not only running ones")
	cmd.Flags().BoolVarP(&quiet, "quiet", "q", false, "print only ids")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the sessions as a JSON array")
	cmd.Flags().BoolVar(&noTrunc, "no-trunc", false, "do not shorten commands")
	return cmd
}

// stateString adds how a stopped session ended: "stopped (0)".
func stateString(s api.Session) string {
	if s.State == api.StateStopped && s.ExitCode != nil {
		return fmt.Sprintf("%s (%d)", s.State, *s.ExitCode)
	}
	return s.State
}

func (c *cli) printJSON(v any) error {
	enc := json.NewEncoder(c.stdout)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
