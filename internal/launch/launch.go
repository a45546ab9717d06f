// Package launch separates preparing a sandbox from choosing what it runs.
//
// A session's container is started with airlock-init as its main process.
// airlock-init waits on a FIFO in a small directory bind-mounted read-only
// into the sandbox; the daemon writes the session's argv and environment to
// it, and airlock-init execve(2)s the command in place, so the command
// becomes the container's init with the pid, namespaces, cgroup, limits,
// credentials, seccomp filter and capabilities the runtime set up. Until
// then the sandbox is ready but runs nothing of the session's: that is what
// lets the daemon prepare sandboxes ahead of time (a warm pool) and start a
// session by writing one message.
//
// The protocol, per sandbox directory:
//
//   - ctl is a FIFO airlock-init holds open read-write (so it never sees
//     EOF, and a daemon restart between two writers loses nothing); it reads
//     one JSON Message terminated by a newline.
//   - ack is a FIFO airlock-init holds open read-write with O_CLOEXEC from
//     the start. A successful execve closes it, so the daemon reading ack
//     sees EOF and nothing else. A failed one writes a JSON Failure first
//     and exits 127 (not found) or 126 (not executable).
//
// airlock-init opens ack before ctl, so once the daemon's open of ctl for
// writing returns, ack has its writer and EOF on ack cannot be premature.
package launch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/containerd/errdefs"
)

// Names inside the sandbox and the launch directory.
const (
	// SandboxDir is where the launch directory appears in the sandbox.
	SandboxDir = "/run/airlock/init"
	// Binary is airlock-init's file name, in the daemon's bin dir and in
	// the launch directory.
	Binary  = "airlock-init"
	ctlName = "ctl"
	ackName = "ack"
)

// SandboxBinary is airlock-init's path inside the sandbox.
const SandboxBinary = SandboxDir + "/" + Binary

// MaxMessage bounds a Message's encoded size.
const MaxMessage = 1 << 20

// Message is what the daemon sends: the command and its full environment.
type Message struct {
	Args []string `json:"args"`
	Env  []string `json:"env"`
}

// Failure is what airlock-init reports when execve fails.
type Failure struct {
	Error    string `json:"error"`
	NotFound bool   `json:"not_found,omitempty"`
}

// CtlPath and AckPath name the FIFOs in a launch directory.
func CtlPath(dir string) string { return filepath.Join(dir, ctlName) }
func AckPath(dir string) string { return filepath.Join(dir, ackName) }

// Dir is a sandbox's launch directory on the host.
type Dir struct {
	path string
	ctl  *os.File // write end, held once the sandbox is ready
}

// Prepare creates the launch directory dir with airlock-init (linked or
// copied from initBinary) and the two FIFOs, owned by the sandbox user.
func Prepare(dir, initBinary string, uid, gid uint32) (*Dir, error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	if err := Install(initBinary, filepath.Join(dir, Binary)); err != nil {
		return nil, err
	}
	for _, name := range []string{ctlName, ackName} {
		p := filepath.Join(dir, name)
		if err := syscall.Mkfifo(p, 0o600); err != nil {
			return nil, fmt.Errorf("mkfifo %s: %w", p, err)
		}
		if err := os.Chown(p, int(uid), int(gid)); err != nil {
			return nil, err
		}
	}
	return &Dir{path: dir}, nil
}

// Open returns the launch directory of a sandbox prepared earlier (by a
// previous daemon process).
func Open(dir string) *Dir { return &Dir{path: dir} }

// Path is the directory on the host.
func (d *Dir) Path() string { return d.path }

// Install puts a copy of airlock-init at dst: a hard link to initBinary
// where the filesystem allows, a copy otherwise. dst must not exist.
func Install(initBinary, dst string) error {
	if err := os.Link(initBinary, dst); err != nil {
		if err := copyFile(initBinary, dst); err != nil {
			return fmt.Errorf("install %s: %w", Binary, err)
		}
	}
	return nil
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o555)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// Ready waits until airlock-init is waiting for its command and keeps the
// write end of ctl open. A sandbox whose init died or never came up fails
// with ctx's error.
func (d *Dir) Ready(ctx context.Context) error {
	if d.ctl != nil {
		return nil
	}
	type result struct {
		f   *os.File
		err error
	}
	ch := make(chan result, 1)
	ctl := CtlPath(d.path)
	go func() {
		// Blocks until the reader is there: that is the point.
		f, err := os.OpenFile(ctl, os.O_WRONLY, 0)
		ch <- result{f, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			return fmt.Errorf("launch: %w", r.err)
		}
		d.ctl = r.f
		return nil
	case <-ctx.Done():
		// Release the blocked open with a reader of our own.
		if rf, err := os.OpenFile(ctl, os.O_RDONLY|syscall.O_NONBLOCK, 0); err == nil {
			r := <-ch
			if r.f != nil {
				r.f.Close()
			}
			rf.Close()
		}
		return fmt.Errorf("launch: airlock-init in the sandbox is not waiting: %w", ctx.Err())
	}
}

// ExecError is a command airlock-init could not execute.
type ExecError struct {
	Program string
	Failure Failure
}

func (e *ExecError) Error() string {
	return fmt.Sprintf("exec %q in the sandbox: %s", e.Program, e.Failure.Error)
}

// Unwrap classifies the failure: the command is the caller's mistake.
func (e *ExecError) Unwrap() error { return errdefs.ErrInvalidArgument }

// Launch sends the command and waits until airlock-init has executed it,
// or returns an *ExecError saying why it could not. It can be called once.
func (d *Dir) Launch(ctx context.Context, m Message) error {
	if len(m.Args) == 0 {
		return fmt.Errorf("launch: empty command: %w", errdefs.ErrInvalidArgument)
	}
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	if len(b) > MaxMessage {
		return fmt.Errorf("launch: command and environment are %d bytes, more than %d: %w", len(b), MaxMessage, errdefs.ErrInvalidArgument)
	}
	if err := d.Ready(ctx); err != nil {
		return err
	}
	ack, err := os.OpenFile(AckPath(d.path), os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	defer ack.Close()
	ctl := d.ctl
	d.ctl = nil
	_, werr := ctl.Write(append(b, '\n'))
	if cerr := ctl.Close(); werr == nil {
		werr = cerr
	}
	if werr != nil {
		return fmt.Errorf("launch: send command: %w", werr)
	}
	deadline := time.Now().Add(30 * time.Second)
	if dl, ok := ctx.Deadline(); ok {
		deadline = dl
	}
	if err := ack.SetReadDeadline(deadline); err != nil {
		return err
	}
	reply, err := io.ReadAll(io.LimitReader(ack, 64<<10))
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("launch: no answer from airlock-init: %w", errdefs.ErrUnavailable)
		}
		return fmt.Errorf("launch: %w", err)
	}
	if len(reply) == 0 {
		return nil
	}
	var f Failure
	if err := json.Unmarshal(reply, &f); err != nil {
		return fmt.Errorf("launch: bad answer from airlock-init: %q", reply)
	}
	return &ExecError{Program: m.Args[0], Failure: f}
}

// Close releases the write end of ctl without sending anything; the
// sandbox's init keeps waiting.
func (d *Dir) Close() {
	if d.ctl != nil {
		d.ctl.Close()
		d.ctl = nil
	}
}

// Clean removes airlock-init and the FIFOs once the command runs, so the
// sandbox sees an empty directory.
func (d *Dir) Clean() error {
	d.Close()
	var errs []error
	for _, name := range []string{ctlName, ackName, Binary} {
		if err := os.Remove(filepath.Join(d.path, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
