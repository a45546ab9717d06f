package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policies"
)

// exitInterrupted is the exit code when run is interrupted before the
// session exists (128 + SIGINT).
const exitInterrupted = 130

func (c *cli) newRunCommand() *cobra.Command {
	var (
		mo         manifestOptions
		rm, detach bool
		gs         gitSourceOptions
		tf         terminalFlags
	)
	cmd := &cobra.Command{
		Use:   "run -f MANIFEST [flags] [-- COMMAND [ARG...]]",
		Short: "Run a session, stream its output and exit with its exit code",
		Long: `Run decodes the manifest locally (a bad manifest is reported with
file:line and nothing is sent), creates and starts the session, copies its
stdout and stderr to airlock's stdout and stderr, and exits with the exit code
of the session's command as the daemon reports it (128+N when signal N ended
it). A COMMAND after "--" replaces the manifest's command. What the daemon
accepts with a warning (a writable workspace, a capability that weakens the
sandbox, ...) is printed on stderr as "airlock: warning: ..." before the
session's output. The daemon refuses what its admission policy does not
admit (host paths, users, capabilities, resources, session count) with the
rule it broke, and creates nothing.

With -it the session's main process gets a pseudo-terminal connected to
airlock's own (which must be one): keys go to it as typed (ctrl-c
included), its screen shows here, and resizing this terminal resizes it.
The detach keys (ctrl-p ctrl-q; --detach-keys) disconnect and leave the
session running: "airlock attach ID" connects again. With -dit the session
starts with a terminal and nobody attached. Under a terminal, stdout and
stderr are one stream.

SIGINT or SIGTERM asks the daemon to stop the session (SIGTERM, then SIGKILL
after the grace period); a second one kills it at once. With --rm the session
is removed when it ends, however it ends.

With --context (Kubernetes, preview) run creates a Session of the manifest
(named after its label) in the namespace, waits for a node agent to run it,
streams its output from that node and exits with its exit code; -d prints
the Session's name; -it connects this terminal to the Session's once its
node runs it (what it showed before is in airlock logs). SIGINT or SIGTERM
stops waiting: the Session runs on unless --rm deletes it.

Exit codes: the command's own, 2 for a bad manifest or usage, 125 when the
daemon fails.`,
		Example: `  airlock run -f examples/hello.hcl
  airlock run --rm -f task.hcl --var prompt="fix the flaky test"
  airlock run -f task.hcl -- sh -c 'go test ./... 2>&1 | tail'
  airlock run -d -f task.hcl --name nightly
  airlock run -it -f examples/claude-code.hcl`,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			if rm && detach {
				return usageErrorf("--rm and --detach cannot be used together")
			}
			if err := tf.check(true); err != nil {
				return err
			}
			keys, err := parseDetachKeys(tf.detachKeys)
			if err != nil {
				return usageErrorf("%v", err)
			}
			if gs.set(cmd) && !c.kubeOpts.on() {
				return errGitSourceLocal
			}
			sources, err := gs.workspaceSources()
			if err != nil {
				return err
			}
			p, err := c.policy(&mo, args, false)
			if err != nil {
				return err
			}
			p.Terminal = tf.tty
			if c.kubeOpts.on() {
				var term *kubeTerminal
				if tf.tty {
					term = &kubeTerminal{keys: keys, noStdin: !tf.interactive}
				}
				return c.kubeRun(cmd.Context(), p, sources, rm, detach, term)
			}
			if tf.tty && !detach {
				return c.runTerminal(cmd.Context(), p, rm, !tf.interactive, keys)
			}
			if detach {
				s, err := c.client().CreateSession(cmd.Context(), api.CreateRequest{Policy: *p, Start: true})
				if err != nil {
					return withCode(exitDaemon, err)
				}
				c.printWarnings(s)
				fmt.Fprintln(c.stdout, s.ID)
				return nil
			}
			return c.run(cmd.Context(), p, rm)
		}),
	}
	mo.addFlags(cmd)
	gs.addFlags(cmd)
	cmd.Flags().BoolVar(&rm, "rm", false, "remove the session when it ends")
	cmd.Flags().BoolVarP(&detach, "detach", "d", false, "print the session id and return without waiting")
	tf.add(cmd, true)
	return cmd
}

func (c *cli) newCreateCommand() *cobra.Command {
	var mo manifestOptions
	cmd := &cobra.Command{
		Use:   "create -f MANIFEST [flags] [-- COMMAND [ARG...]]",
		Short: "Create a session without starting it; print its id",
		Long: `Create decodes the manifest locally, creates the session and prints its
id. Start it with "airlock start ID". A COMMAND after "--" replaces the
manifest's command. The daemon's warnings are printed on stderr as
"airlock: warning: ...".`,
		Example: `  id=$(airlock create -f task.hcl -- make test)
  airlock start "$id" && airlock wait "$id"`,
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			p, err := c.policy(&mo, args, false)
			if err != nil {
				return err
			}
			s, err := c.client().CreateSession(cmd.Context(), api.CreateRequest{Policy: *p})
			if err != nil {
				return err
			}
			c.printWarnings(s)
			fmt.Fprintln(c.stdout, s.ID)
			return nil
		}),
	}
	mo.addFlags(cmd)
	return cmd
}

// run creates and starts a session, streams its output until it exits,
// and returns its exit code as an exitError.
func (c *cli) run(ctx context.Context, p *policies.Policy, rm bool) error {
	cl := c.client()
	sigs := make(chan os.Signal, 4)
	c.notify(sigs)
	defer c.stopNotify(sigs)

	s, pending, err := createStarted(ctx, cl, p, sigs)
	if err != nil {
		return err
	}
	c.printWarnings(s)
	id := s.ID

	done := make(chan struct{})
	forwarded := make(chan struct{})
	var stops sync.WaitGroup
	go func() {
		defer close(forwarded)
		c.forwardSignals(ctx, cl, id, sigs, pending, done, &stops)
	}()

	streamCtx, cancelStreams := context.WithCancel(ctx)
	defer cancelStreams()
	logsErr := make(chan error, 1)
	go func() {
		logsErr <- cl.Logs(streamCtx, id, api.LogsOptions{Follow: true}, c.stdout, c.stderr)
	}()
	wr, waitErr := cl.WaitSession(streamCtx, id)
	if waitErr != nil {
		cancelStreams()
	}
	lerr := <-logsErr
	close(done)
	<-forwarded
	stops.Wait()

	var errs []error
	if waitErr != nil {
		errs = append(errs, fmt.Errorf("waiting for session %s: %w", id, waitErr))
	} else if lerr != nil {
		errs = append(errs, fmt.Errorf("streaming the output of session %s: %w", id, lerr))
	}
	if rm {
		if err := cl.RemoveSession(context.WithoutCancel(ctx), id, true); err != nil && !api.IsNotFound(err) {
			errs = append(errs, fmt.Errorf("removing session %s: %w", id, err))
		}
	}
	for _, err := range errs {
		c.report(err)
	}
	if waitErr != nil || lerr != nil {
		return exitCodeOnly(exitDaemon)
	}
	return exitCodeOnly(wr.ExitCode)
}

// createStarted creates and starts the session. A signal meanwhile is
// counted and returned, to be forwarded once the session exists; a second
// one abandons the request.
func createStarted(ctx context.Context, cl *api.Client, p *policies.Policy, sigs <-chan os.Signal) (*api.Session, int, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type result struct {
		s   *api.Session
		err error
	}
	res := make(chan result, 1)
	go func() {
		s, err := cl.CreateSession(ctx, api.CreateRequest{Policy: *p, Start: true})
		res <- result{s, err}
	}()
	pending := 0
	for {
		select {
		case r := <-res:
			if errors.Is(r.err, context.Canceled) && pending > 1 {
				return nil, 0, &exitError{code: exitInterrupted, err: errors.New("interrupted while creating the session")}
			}
			if r.err != nil {
				return nil, 0, withCode(exitDaemon, r.err)
			}
			return r.s, pending, nil
		case <-sigs:
			pending++
			if pending > 1 {
				cancel()
			}
		}
	}
}

// forwardSignals turns SIGINT/SIGTERM into stop requests until done is
// closed: the first stops with the default grace period, later ones kill.
// The requests run on their own; wg counts them.
func (c *cli) forwardSignals(ctx context.Context, cl *api.Client, id string, sigs <-chan os.Signal, pending int, done <-chan struct{}, wg *sync.WaitGroup) {
	n := 0
	stop := func() {
		n++
		req := api.StopRequest{}
		if n > 1 {
			req.Grace = killNow
		}
		wg.Go(func() {
			if _, err := cl.StopSession(context.WithoutCancel(ctx), id, req); err != nil && !api.IsNotFound(err) {
				c.warn("stopping session %s: %v", id, err)
			}
		})
	}
	for range pending {
		stop()
	}
	for {
		select {
		case <-sigs:
			stop()
		case <-done:
			return
		}
	}
}

// killNow is the shortest grace period: SIGKILL right after SIGTERM. (A
// zero grace cannot be sent: an omitted grace means the daemon's default.)
const killNow = policies.Duration(time.Nanosecond)

// printWarnings prints on stderr what the daemon accepted in the policy
// with a warning (a writable workspace, a capability that weakens the
// sandbox, ...), one line each, and a wait of a second or more for a
// place among the sandboxes being prepared.
func (c *cli) printWarnings(s *api.Session) {
	for _, w := range s.Warnings {
		c.warn("warning: %s", w)
	}
	if q := s.Queued.Std(); q >= queuedNote {
		c.warn("note: the create waited %s for its turn among the sandboxes being prepared (airlockd --max-preparing)", q.Round(100*time.Millisecond))
	}
}

// queuedNote is the shortest wait for a place to prepare a sandbox that
// `airlock run` mentions.
const queuedNote = time.Second
