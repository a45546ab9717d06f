package daemon

import (
	"context"
	"fmt"
	"net"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/runtime"
)

// Attach connects to the terminal of a session's main process, which the
// session's policy asked for (policies.Policy.Terminal). The connection
// reads the terminal's output from now on and writes its input; it ends
// when the main process does. Closing it detaches: the session runs on.
//
// The terminal is held by the session's logger, a child of containerd's
// shim, so a session keeps its terminal while the daemon restarts and
// can be attached again afterwards.
func (d *Daemon) Attach(ctx context.Context, id string) (*net.UnixConn, error) {
	s, err := d.get(id)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	state, tty := s.rec.State, s.rec.Policy.Terminal
	s.mu.Unlock()
	if !tty {
		return nil, fmt.Errorf("session %q has no terminal: it was created without one (airlock run -it, or \"terminal\": true in the policy sent to the API): %w", id, errdefs.ErrFailedPrecondition)
	}
	if state != api.StateRunning && state != api.StateCreated {
		return nil, fmt.Errorf("session %q is %s: its terminal has gone with its main process: %w", id, state, errdefs.ErrFailedPrecondition)
	}
	return d.rt.AttachTTY(ctx, id, s.logDir())
}

// Resize sets the size of the terminal of a session's main process.
func (d *Daemon) Resize(ctx context.Context, id string, size runtime.WinSize) error {
	s, err := d.get(id)
	if err != nil {
		return err
	}
	s.mu.Lock()
	tty := s.rec.Policy.Terminal
	s.mu.Unlock()
	if !tty {
		return fmt.Errorf("session %q has no terminal: %w", id, errdefs.ErrFailedPrecondition)
	}
	if size.Cols == 0 || size.Rows == 0 {
		return fmt.Errorf("terminal size %dx%d: columns and rows must be positive: %w", size.Cols, size.Rows, errdefs.ErrInvalidArgument)
	}
	return d.rt.Resize(ctx, id, uint32(size.Cols), uint32(size.Rows))
}
