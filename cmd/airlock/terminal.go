package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/policies"
)

// defaultDetachKeys is the key sequence that detaches from a session's
// terminal, as in docker.
const defaultDetachKeys = "ctrl-p,ctrl-q"

// parseDetachKeys reads a detach sequence: comma-separated keys, each a
// single character or ctrl-X (X a letter or one of @ [ \ ] ^ _). The
// empty string disables detaching.
func parseDetachKeys(s string) ([]byte, error) {
	if s == "" {
		return nil, nil
	}
	var seq []byte
	for _, k := range strings.Split(s, ",") {
		switch {
		case len(k) == 1:
			seq = append(seq, k[0])
		case len(k) == 6 && strings.HasPrefix(strings.ToLower(k), "ctrl-"):
			c := k[5]
			switch {
			case c >= 'a' && c <= 'z':
				seq = append(seq, c-'a'+1)
			case c >= 'A' && c <= 'Z':
				seq = append(seq, c-'A'+1)
			case c == '@' || c == '[' || c == '\\' || c == ']' || c == '^' || c == '_':
				seq = append(seq, c-'@')
			default:
				return nil, fmt.Errorf("invalid --detach-keys %q: %q: after ctrl- comes a letter or one of @ [ \\ ] ^ _", s, k)
			}
		default:
			return nil, fmt.Errorf("invalid --detach-keys %q: %q: want a single character or ctrl-X, comma-separated (e.g. %s)", s, k, defaultDetachKeys)
		}
	}
	return seq, nil
}

// detachReader passes keystrokes through until it has read the detach
// sequence, then returns api.ErrDetached. The keys of a sequence begun
// but not completed are passed on as they were typed.
type detachReader struct {
	r       io.Reader
	seq     []byte
	matched int
	out     []byte // read, to be returned
	done    bool
	buf     [4096]byte
}

func (d *detachReader) Read(p []byte) (int, error) {
	for len(d.out) == 0 {
		if d.done {
			return 0, api.ErrDetached
		}
		n, err := d.r.Read(d.buf[:])
		for _, b := range d.buf[:n] {
			if d.done {
				break
			}
			if b == d.seq[d.matched] {
				d.matched++
				if d.matched == len(d.seq) {
					d.done = true
				}
				continue
			}
			d.out = append(d.out, d.seq[:d.matched]...)
			d.matched = 0
			if b == d.seq[0] {
				d.matched = 1
				if len(d.seq) == 1 {
					d.done = true
				}
				continue
			}
			d.out = append(d.out, b)
		}
		if err != nil && len(d.out) == 0 && !d.done {
			return 0, err
		}
	}
	n := copy(p, d.out)
	d.out = d.out[n:]
	return n, nil
}

// terminalFlags are the flags of run and exec that ask for a terminal.
type terminalFlags struct {
	interactive, tty bool
	detachKeys       string
}

func (f *terminalFlags) add(cmd *cobra.Command, withDetach bool) {
	cmd.Flags().BoolVarP(&f.interactive, "interactive", "i", false, "stream stdin to the command")
	cmd.Flags().BoolVarP(&f.tty, "tty", "t", false, "give the command a pseudo-terminal (with -i: -it); stdin must be a terminal")
	if withDetach {
		addDetachKeys(cmd, &f.detachKeys)
	}
}

func addDetachKeys(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "detach-keys", defaultDetachKeys, `the keys that detach from the terminal, leaving the session running ("" disables)`)
}

// localTerminal is airlock's own terminal, in raw mode while a session's
// terminal is connected to it.
type localTerminal struct {
	fd    int
	state *term.State
}

// openTerminal checks that stdin is a terminal, for what (the flag or
// command that asks for one).
func (c *cli) openTerminal(what string) (*localTerminal, error) {
	f, ok := c.stdin.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		hint := "for a pipe, use -i without -t"
		if what == "attach" {
			hint = "airlock logs -f follows a session's output without one"
		}
		return nil, usageErrorf("%s needs a terminal on stdin, and airlock's stdin is not one (run it from a terminal; %s)", what, hint)
	}
	return &localTerminal{fd: int(f.Fd())}, nil
}

// raw puts the terminal in raw mode: keys go to the session as typed
// (ctrl-c included); restore puts it back.
func (t *localTerminal) raw() error {
	st, err := term.MakeRaw(t.fd)
	if err != nil {
		return fmt.Errorf("making the terminal raw: %w", err)
	}
	t.state = st
	return nil
}

func (t *localTerminal) restore() {
	if t.state != nil {
		_ = term.Restore(t.fd, t.state)
		t.state = nil
	}
}

// size is the terminal's size; zero if unknown.
func (t *localTerminal) size() api.WinSize {
	w, h, err := term.GetSize(t.fd)
	if err != nil || w <= 0 || h <= 0 || w > 0xffff || h > 0xffff {
		return api.WinSize{}
	}
	return api.WinSize{Cols: uint16(w), Rows: uint16(h)}
}

// watchResize delivers the terminal's size each time it changes
// (SIGWINCH), until ctx ends.
func (t *localTerminal) watchResize(ctx context.Context) <-chan api.WinSize {
	out := make(chan api.WinSize, 1)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGWINCH)
	go func() {
		defer signal.Stop(sig)
		for {
			select {
			case <-sig:
				if ws := t.size(); ws.Cols > 0 {
					select {
					case <-out:
					default:
					}
					out <- ws
				}
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

// attachTerminal connects airlock's terminal to session id's: raw mode,
// keystrokes in (up to the detach keys), resizes, output out. started, if
// set, runs once the terminal is connected (run -it starts the session
// there, so that no output is missed). It returns the session's exit code
// as an exitError, or nil when detached.
func (c *cli) attachTerminal(ctx context.Context, id string, detachKeys []byte, noStdin bool, lt *localTerminal, started func() error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var in io.Reader = c.stdin
	if len(detachKeys) > 0 {
		in = &detachReader{r: c.stdin, seq: detachKeys}
	}
	if noStdin {
		// Keystrokes are read for the detach keys only.
		in = &dropReader{r: in}
	}
	t := api.Terminal{In: in, Out: c.stdout, Size: lt.size(), Resize: lt.watchResize(ctx)}
	var startErr error
	attached := func() {
		if started != nil {
			if startErr = started(); startErr != nil {
				cancel()
			}
		}
	}
	wr, err := c.client().Attach(ctx, id, t, attached)
	lt.restore()
	switch {
	case startErr != nil:
		return withCode(exitDaemon, fmt.Errorf("starting session %s: %w", id, startErr))
	case errors.Is(err, api.ErrDetached):
		fmt.Fprintf(c.stderr, "\r\nairlock: detached from session %s; it runs on (airlock attach %s)\n", id, id)
		return nil
	case err != nil && errors.Is(err, context.Canceled) && ctx.Err() != nil:
		return withCode(exitDaemon, err)
	case err != nil && errors.As(err, new(*api.Error)):
		return withCode(exitDaemon, err)
	case err != nil:
		return withCode(exitDaemon, fmt.Errorf("terminal of session %s: %w (the session runs on: airlock attach %s)", id, err, id))
	}
	return exitCodeOnly(wr.ExitCode)
}

// dropReader reads r and returns nothing of it, but its errors (the
// detach).
type dropReader struct{ r io.Reader }

func (d *dropReader) Read(p []byte) (int, error) {
	for {
		_, err := d.r.Read(p)
		if err != nil {
			return 0, err
		}
	}
}

func (c *cli) newAttachCommand() *cobra.Command {
	var (
		detachKeys string
		noStdin    bool
	)
	cmd := &cobra.Command{
		Use:   "attach [flags] ID",
		Short: "Connect this terminal to a session's terminal",
		Long: `Attach connects airlock's terminal to the terminal of a session's main
process (a session run with -it): what the session shows from now on
appears here, keystrokes go to it, and a resize of this terminal resizes
it. The detach keys (ctrl-p ctrl-q unless --detach-keys says otherwise)
disconnect and leave the session running; attach again at any time, also
after airlockd restarted. When the main process ends, attach exits with its
exit code. Several attach may watch one session; each one's keystrokes
reach it. With --no-stdin keystrokes other than the detach keys are not
sent: watch without taking over.

A session without a terminal is refused with the reason (use airlock logs
-f to follow its output).`,
		Example: `  airlock attach 3f9c2a1b
  airlock attach --no-stdin 3f9c2a1b
  airlock attach --detach-keys ctrl-x,x 3f9c2a1b`,
		Args: exactArgs(1, "a session ID"),
		RunE: runE(func(cmd *cobra.Command, args []string) error {
			keys, err := parseDetachKeys(detachKeys)
			if err != nil {
				return usageErrorf("%v", err)
			}
			lt, err := c.openTerminal("attach")
			if err != nil {
				return err
			}
			if err := lt.raw(); err != nil {
				return err
			}
			defer lt.restore()
			sigs := make(chan os.Signal, 1)
			c.notify(sigs)
			defer c.stopNotify(sigs)
			ctx, cancel := context.WithCancel(cmd.Context())
			defer cancel()
			go func() {
				select {
				case <-sigs:
					// SIGINT/SIGTERM to airlock itself detaches; keys typed
					// in the terminal (ctrl-c) go to the session.
					cancel()
				case <-ctx.Done():
				}
			}()
			err = c.attachTerminal(ctx, args[0], keys, noStdin, lt, nil)
			if errors.Is(err, context.Canceled) && cmd.Context().Err() == nil {
				lt.restore()
				fmt.Fprintf(c.stderr, "\r\nairlock: detached from session %s (signal); it runs on\n", args[0])
				return nil
			}
			return err
		}),
	}
	addDetachKeys(cmd, &detachKeys)
	cmd.Flags().BoolVar(&noStdin, "no-stdin", false, "watch: send no keystrokes but the detach keys")
	return cmd
}

// checkTerminalFlags refuses combinations of -i, -t and -d that cannot work.
func (f *terminalFlags) check(mainProcess bool) error {
	if f.tty && !f.interactive && !mainProcess {
		return usageErrorf("-t needs -i (-it): the terminal's input is airlock's stdin")
	}
	if f.interactive && !f.tty && mainProcess {
		return usageErrorf("-i needs -t (-it) with run: a session's main process reads input only through a terminal (airlock exec -i streams a pipe)")
	}
	return nil
}

// runTerminal runs session p with a terminal connected to airlock's: it
// creates the session, attaches, and starts it once attached, so that the
// first byte of output shows. SIGINT or SIGTERM to airlock stops the
// session (keys typed, ctrl-c included, go to the session instead).
//
// Without input (-t alone), keys but the detach keys are not sent.
func (c *cli) runTerminal(ctx context.Context, p *policies.Policy, rm, noStdin bool, keys []byte) error {
	lt, err := c.openTerminal("-t")
	if err != nil {
		return err
	}
	cl := c.client()
	p.Terminal = true
	s, err := cl.CreateSession(ctx, api.CreateRequest{Policy: *p})
	if err != nil {
		return withCode(exitDaemon, err)
	}
	c.printWarnings(s)
	id := s.ID
	if err := lt.raw(); err != nil {
		_ = cl.RemoveSession(context.WithoutCancel(ctx), id, true)
		return err
	}
	defer lt.restore()

	sigs := make(chan os.Signal, 4)
	c.notify(sigs)
	defer c.stopNotify(sigs)
	done := make(chan struct{})
	forwarded := make(chan struct{})
	var stops sync.WaitGroup
	go func() {
		defer close(forwarded)
		c.forwardSignals(ctx, cl, id, sigs, 0, done, &stops)
	}()
	err = c.attachTerminal(ctx, id, keys, noStdin, lt, func() error {
		_, err := cl.StartSession(ctx, id)
		return err
	})
	close(done)
	<-forwarded
	stops.Wait()
	if rm {
		var ee *exitError
		switch {
		case err == nil: // detached
			c.warn("--rm: session %s runs on, so it stays (airlock rm -f %s removes it)", id, id)
		case errors.As(err, &ee) && ee.err == nil: // it ended
			if rerr := cl.RemoveSession(context.WithoutCancel(ctx), id, true); rerr != nil && !api.IsNotFound(rerr) {
				c.warn("removing session %s: %v", id, rerr)
			}
		}
	}
	return err
}

// execTerminal runs req in session id with a terminal connected to
// airlock's.
func (c *cli) execTerminal(ctx context.Context, id string, req api.ExecRequest) error {
	lt, err := c.openTerminal("-t")
	if err != nil {
		return err
	}
	if err := lt.raw(); err != nil {
		return err
	}
	defer lt.restore()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	t := api.Terminal{In: c.stdin, Out: c.stdout, Size: lt.size(), Resize: lt.watchResize(ctx)}
	code, err := c.client().ExecTerminal(ctx, id, req, t)
	lt.restore()
	if err != nil {
		return withCode(exitDaemon, err)
	}
	return exitCodeOnly(code)
}
