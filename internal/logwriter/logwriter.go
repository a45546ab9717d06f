// Package logwriter is the log writer of session output: containerd's
// shim runs it (as airlock-logger, a small static binary) with the
// session's stdout and stderr, and it appends each to its file.
package logwriter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/containerd/containerd/v2/core/runtime/v2/logging"
)

// Log file names inside a session's log directory. The logger creates the
// ".eof" marker of a stream once that stream is closed and fully written, so
// a follower knows it has seen everything.
const (
	StdoutLog = "stdout.log"
	StderrLog = "stderr.log"
	EOFSuffix = ".eof"
)

// Arg is the first argument containerd's shim passes to the logger binary;
// the second is the session's log directory.
const Arg = "_airlock_logger"

// Run implements containerd's binary logging protocol: the shim
// starts the logger with the task's stdout and stderr as fds 3 and 4; it
// copies each into its file in dir. It never returns.
func Run(dir string) {
	logging.Run(func(_ context.Context, cfg *logging.Config, ready func() error) error {
		return copyLogs(dir, cfg.Stdout, cfg.Stderr, ready)
	})
}

func copyLogs(dir string, stdout, stderr io.Reader, ready func() error) error {
	if !filepath.IsAbs(dir) {
		return fmt.Errorf("log dir %q is not absolute", dir)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	var files []*os.File
	for _, name := range []string{StdoutLog, StderrLog} {
		_ = os.Remove(filepath.Join(dir, name+EOFSuffix))
		f, err := os.OpenFile(filepath.Join(dir, name), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
		if err != nil {
			return err
		}
		defer f.Close()
		files = append(files, f)
	}
	if err := ready(); err != nil {
		return err
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, src := range []io.Reader{stdout, stderr} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := io.Copy(files[i], src)
			errs[i] = err
			name := []string{StdoutLog, StderrLog}[i]
			_ = os.WriteFile(filepath.Join(dir, name+EOFSuffix), nil, 0o600)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}
