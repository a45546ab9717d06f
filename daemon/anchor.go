package daemon

import (
	"context"
	"path/filepath"
	"time"

	containerd "github.com/containerd/containerd/v2/client"

	"github.com/airlock-sandbox/airlock/internal/log"
	"github.com/airlock-sandbox/airlock/runtime"
)

// shimGroup is the runc shim group every session joins unless
// Config.ShimPerSession is set.
const shimGroup = "airlock-sessions"

// anchorOptions places the anchor's root under the daemon's root and its
// cgroup beside (not under) the sessions' parent cgroup.
func (d *Daemon) anchorOptions() runtime.AnchorOptions {
	return runtime.AnchorOptions{
		Dir:        filepath.Join(d.cfg.Root, "shim-anchor"),
		InitBinary: d.initBinary(),
		CgroupPath: "/airlock-" + d.prefix + "-" + runtime.AnchorID,
	}
}

// startAnchor starts (or, after a restart, re-adopts) the shim anchor and
// keeps it running until the daemon stops. Without an anchor sessions
// still work, each group of overlapping ones sharing a shim that exits
// with the last of them; so a failure is logged, not fatal.
func (d *Daemon) startAnchor(ctx context.Context) {
	if d.rt.ShimGroup() == "" {
		return
	}
	exit, err := d.rt.EnsureAnchor(ctx, d.anchorOptions())
	if err != nil {
		log.G(ctx).Warn("sessions share a shim only while they overlap: the shim anchor did not start", "error", err)
	}
	d.wg.Add(1)
	go func() {
		defer d.wg.Done()
		d.keepAnchor(log.With(d.stopCtx, "component", "shim-anchor"), exit)
	}()
}

// keepAnchor restarts the anchor whenever it exits (or could not start),
// backing off up to 30 s, until the daemon stops.
func (d *Daemon) keepAnchor(ctx context.Context, exit <-chan containerd.ExitStatus) {
	backoff := time.Second
	for {
		if exit != nil {
			select {
			case <-ctx.Done():
				return
			case st := <-exit:
				log.G(ctx).Warn("shim anchor exited; starting a new one", "exit", st.ExitCode())
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		var err error
		if exit, err = d.rt.EnsureAnchor(ctx, d.anchorOptions()); err != nil {
			log.G(ctx).Warn("restart shim anchor", "error", err, "retry_in", backoff.String())
			exit = nil
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
	}
}

// stopAnchor removes the anchor when no session task is left for the
// shared shim to serve; otherwise it stays for the next daemon, like the
// sessions themselves.
func (d *Daemon) stopAnchor(ctx context.Context) error {
	if d.rt.ShimGroup() == "" {
		return nil
	}
	n, err := d.rt.SessionTasks(ctx)
	if err != nil {
		return err
	}
	if n > 0 {
		log.G(ctx).Info("leaving the shim anchor to the next daemon", "session_tasks", n)
		return nil
	}
	return d.rt.RemoveAnchor(ctx)
}
