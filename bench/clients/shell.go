package clients

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// ShellCommand is the hidden command of airlock-bench-cli that the bench
// runner execs once per session to run its actions (see Shell).
const ShellCommand = "bench-shell"

// maxShellLine bounds one command line of the shell's input.
const maxShellLine = 16 << 20

// Shell runs one command per line of in (base64, so that a command may
// hold anything) as `bash -c CMD` with an empty standard input, each in a
// new process of its own, as an exec would; args are the marker and,
// optionally, the workspace to fingerprint. The command's standard output
// is out itself; its standard error is collected, and after the command a
// status line follows on out:
//
//	\nMARKER STATUS STDERR-BASE64 FINGERPRINT\n
//
// STATUS is the exit status (128+N for signal N, as a shell reports it),
// the standard error has its trailing newlines removed, and FINGERPRINT
// identifies the workspace tree (every entry's path, type, mode, size,
// modification time and link target; empty without a workspace), which
// tells whether the command changed the workspace. A status line for no
// command, with the fingerprint, comes first. Everything travels on one
// stream: the frames of two streams written at once are not safe to
// interleave in an exec stream.
//
// A command costs one fork and exec in the sandbox; the loop, the decoding
// and the fingerprint take none.
func Shell(args []string, in io.Reader, out *os.File, diag io.Writer) int {
	if len(args) < 1 || len(args) > 2 {
		fmt.Fprintf(diag, "usage: %s %s MARKER [WORKSPACE]\n", BinaryName, ShellCommand)
		return 2
	}
	marker, ws := args[0], ""
	if len(args) == 2 {
		ws = args[1]
	}
	status := func(code int, stderr []byte) error {
		_, err := fmt.Fprintf(out, "\n%s %d %s %s\n", marker, code, base64.StdEncoding.EncodeToString(stderr), Fingerprint(ws))
		return err
	}
	if err := status(0, nil); err != nil {
		return 1
	}
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 64<<10), maxShellLine)
	for sc.Scan() {
		var stderr bytes.Buffer
		code := 0
		cmd, err := base64.StdEncoding.DecodeString(sc.Text())
		if err != nil {
			fmt.Fprintf(&stderr, "%s: command line is not base64: %v", ShellCommand, err)
			code = 2
		} else {
			code = runBash(string(cmd), out, &stderr)
		}
		if err := status(code, bytes.TrimRight(stderr.Bytes(), "\n")); err != nil {
			return 1
		}
	}
	if err := sc.Err(); err != nil {
		fmt.Fprintf(diag, "%s: %v\n", ShellCommand, err)
		return 1
	}
	return 0
}

// runBash runs `bash -c cmd` with an empty standard input and returns its
// exit status as a shell reports it.
func runBash(cmd string, stdout *os.File, stderr *bytes.Buffer) int {
	c := exec.Command("bash", "-c", cmd)
	c.Stdout, c.Stderr = stdout, stderr
	err := c.Run()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return 128 + int(ws.Signal())
		}
		return ee.ExitCode()
	case errors.Is(err, exec.ErrNotFound):
		fmt.Fprintf(stderr, "%s: bash: %v", ShellCommand, err)
		return 127
	default:
		fmt.Fprintf(stderr, "%s: %v", ShellCommand, err)
		return 126
	}
}

// Fingerprint hashes the tree under dir: for every entry its path relative
// to dir, type, mode, size, modification time and link target. Entries
// that cannot be read are left out. It returns "" for dir "".
func Fingerprint(dir string) string {
	if dir == "" {
		return ""
	}
	h := sha256.New()
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil // unreadable: left out, as find(1) would
		}
		fi, err := d.Info()
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		link := ""
		if fi.Mode()&fs.ModeSymlink != 0 {
			link, _ = os.Readlink(p)
		}
		fmt.Fprintf(h, "%s\t%o\t%d\t%d\t%s\n", rel, uint32(fi.Mode()), fi.Size(), fi.ModTime().UnixNano(), link)
		return nil
	})
	return hex.EncodeToString(h.Sum(nil))
}
