package launch

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// RunInit is airlock-init's main: it waits for the command in dir and
// executes it in place. It returns only on failure, with the exit status.
func RunInit(dir string) int {
	// ack first: see the package comment.
	ack, err := os.OpenFile(AckPath(dir), os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-init: %v\n", err)
		return 125
	}
	// ctl is held read-write too: it never reports EOF, so a daemon that
	// restarts between two writers loses nothing, and messages are lines.
	ctl, err := os.OpenFile(CtlPath(dir), os.O_RDWR, 0)
	if err != nil {
		fmt.Fprintf(os.Stderr, "airlock-init: %v\n", err)
		return 125
	}
	line, err := bufio.NewReader(io.LimitReader(ctl, MaxMessage+1)).ReadBytes('\n')
	ctl.Close()
	var m Message
	if err != nil {
		return fail(ack, Failure{Error: "read launch message: " + err.Error()}, 125)
	}
	if err := json.Unmarshal(line, &m); err != nil || len(m.Args) == 0 {
		return fail(ack, Failure{Error: "malformed launch message"}, 125)
	}
	path, err := lookPath(m.Args[0], m.Env)
	if err != nil {
		if errors.Is(err, errNotFound) || errors.Is(err, os.ErrNotExist) {
			return fail(ack, Failure{Error: err.Error(), NotFound: true}, 127)
		}
		return fail(ack, Failure{Error: err.Error()}, 126)
	}
	err = syscall.Exec(path, m.Args, m.Env)
	code := 126
	if errors.Is(err, syscall.ENOENT) {
		code = 127
	}
	return fail(ack, Failure{Error: err.Error(), NotFound: code == 127}, code)
}

func fail(ack *os.File, f Failure, code int) int {
	b, _ := json.Marshal(f)
	_, _ = ack.Write(b)
	fmt.Fprintf(os.Stderr, "airlock-init: %s\n", f.Error)
	return code
}

var errNotFound = errors.New("executable file not found in $PATH")

// lookPath resolves prog as a shell would: names with a slash as they are,
// others through PATH of the command's environment.
func lookPath(prog string, env []string) (string, error) {
	if strings.Contains(prog, "/") {
		return prog, checkExecutable(prog)
	}
	pathEnv := "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathEnv = v
		}
	}
	for _, dir := range strings.Split(pathEnv, ":") {
		if dir == "" {
			dir = "."
		}
		p := dir + "/" + prog
		if checkExecutable(p) == nil {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: %w", prog, errNotFound)
}

func checkExecutable(p string) error {
	fi, err := os.Stat(p)
	if err != nil {
		return err
	}
	if fi.IsDir() {
		return fmt.Errorf("%s: is a directory", p)
	}
	return syscall.Access(p, 0x1) // X_OK
}
