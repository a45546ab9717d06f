package runner

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/bench/clients"
)

func status(marker, stdout string, code int, stderr, fp string) string {
	return stdout + "\n" + marker + " " + strconv.Itoa(code) + " " + base64.StdEncoding.EncodeToString([]byte(stderr)) + " " + fp + "\n"
}

func TestMarkerStream(t *testing.T) {
	const marker = "airlock-bench-0123"
	stream := status(marker, "", 0, "", "fp0") +
		status(marker, "hello\nworld", 1, "oops\n", "fp1") +
		status(marker, "no newline "+strings.Repeat("x", 3*maxOutput), 0, "", "fp1")
	for _, chunk := range []int{1, 3, 7, 64, len(stream)} {
		m := newMarkerStream([]byte("\n" + marker + " "))
		for i := 0; i < len(stream); i += chunk {
			if _, err := m.Write([]byte(stream[i:min(i+chunk, len(stream))])); err != nil {
				t.Fatal(err)
			}
		}
		want := []markerResult{
			{text: "", code: 0, fingerprint: "fp0"},
			{text: "hello\nworld", code: 1, stderr: "oops\n", fingerprint: "fp1"},
		}
		for i, w := range want {
			r := <-m.results
			if r != w {
				t.Fatalf("chunk %d: result %d = %+v, want %+v", chunk, i, r, w)
			}
		}
		r := <-m.results
		if r.err != nil || !strings.HasPrefix(r.text, "no newline xxx") || len(r.text) != maxOutput {
			t.Fatalf("chunk %d: long output kept %d bytes (err %v), want the first %d", chunk, len(r.text), r.err, maxOutput)
		}
		select {
		case r := <-m.results:
			t.Fatalf("chunk %d: extra result %+v", chunk, r)
		default:
		}
	}

	m := newMarkerStream([]byte("\n" + marker + " "))
	m.Write([]byte("\n" + marker + " x y z\n"))
	if r := <-m.results; r.err == nil {
		t.Error("a bad status line was accepted")
	}
	m.fail(errors.New("gone"))
	m.fail(errors.New("twice"))
	if r := <-m.results; r.err == nil || r.err.Error() != "gone" {
		t.Errorf("fail delivered %+v", r)
	}
}

// TestShell runs the shell the runner execs in a session (clients.Shell)
// with the system's bash: the protocol the runner parses is what the shell
// writes.
func TestShell(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	ws := t.TempDir()
	t.Chdir(ws)
	in := strings.Join([]string{
		base64.StdEncoding.EncodeToString([]byte(`echo out; echo err >&2; exit 3`)),
		base64.StdEncoding.EncodeToString([]byte(`read x && echo "stdin: $x"; echo new > f`)),
		base64.StdEncoding.EncodeToString([]byte(`cat f`)),
		base64.StdEncoding.EncodeToString([]byte(`kill -TERM $$`)),
		"not base64!",
	}, "\n") + "\n"
	pr, pw, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	m := newMarkerStream([]byte("\nMARK "))
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		_, _ = io.Copy(m, pr)
	}()
	done := make(chan error, 1)
	go func() {
		defer pw.Close()
		if code := clients.Shell([]string{"MARK", ws}, strings.NewReader(in), pw, io.Discard); code != 0 {
			done <- fmt.Errorf("shell exited with status %d", code)
			return
		}
		done <- nil
	}()
	next := func() markerResult {
		select {
		case r := <-m.results:
			return r
		case <-time.After(10 * time.Second):
			t.Fatal("no status line")
		}
		return markerResult{}
	}
	start := next()
	if len(start.fingerprint) != 64 {
		t.Fatalf("first status %+v: want a fingerprint", start)
	}
	r := next()
	if r.text != "out\n" || r.code != 3 || r.stderr != "err" || r.fingerprint != start.fingerprint {
		t.Errorf("first command = %+v", r)
	}
	r = next()
	if r.text != "" || r.code != 0 || r.fingerprint == start.fingerprint {
		t.Errorf("second command (stdin must be empty, the tree changed) = %+v", r)
	}
	changed := r.fingerprint
	r = next()
	if r.text != "new\n" || r.fingerprint != changed {
		t.Errorf("third command = %+v", r)
	}
	if r = next(); r.code != 128+15 {
		t.Errorf("a command ended by SIGTERM = %+v, want status %d", r, 128+15)
	}
	if r = next(); r.code != 2 || !strings.Contains(r.stderr, "not base64") {
		t.Errorf("a line that is not base64 = %+v, want status 2 and a reason", r)
	}
	if err := <-done; err != nil {
		t.Errorf("shell: %v", err)
	}
	<-copied
}

// TestFingerprint: the fingerprint changes with what a command can change
// in a tree (content size, mode, time, a new or removed entry, a link's
// target) and not otherwise.
func TestFingerprint(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "a"), []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("a", filepath.Join(dir, "l")); err != nil {
		t.Fatal(err)
	}
	fp := clients.Fingerprint(dir)
	if len(fp) != 64 || clients.Fingerprint(dir) != fp {
		t.Fatalf("fingerprint %q is not stable", fp)
	}
	if clients.Fingerprint("") != "" {
		t.Error("no workspace must give an empty fingerprint")
	}
	old := time.Unix(1700000000, 0)
	for _, change := range []func() error{
		func() error { return os.WriteFile(filepath.Join(dir, "a"), []byte("22"), 0o644) },
		func() error { return os.Chmod(filepath.Join(dir, "a"), 0o600) },
		func() error { return os.Chtimes(filepath.Join(dir, "a"), old, old) },
		func() error { return os.Mkdir(filepath.Join(dir, "d"), 0o755) },
		func() error { return os.Remove(filepath.Join(dir, "d")) },
		func() error {
			if err := os.Remove(filepath.Join(dir, "l")); err != nil {
				return err
			}
			return os.Symlink("b", filepath.Join(dir, "l"))
		},
	} {
		if err := change(); err != nil {
			t.Fatal(err)
		}
		next := clients.Fingerprint(dir)
		if next == fp {
			t.Errorf("a change left the fingerprint %s", fp)
		}
		fp = next
	}
}
