package runner

import (
	"encoding/base64"
	"errors"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
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

// TestShellScript runs the shell's script with the system's bash: the
// protocol the runner parses is what the script writes.
func TestShellScript(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	ws := t.TempDir()
	cmd := exec.Command("bash", "-c", shellScript, "shell", "MARK", ws)
	cmd.Dir = ws
	in := strings.Join([]string{
		base64.StdEncoding.EncodeToString([]byte(`echo out; echo err >&2; exit 3`)),
		base64.StdEncoding.EncodeToString([]byte(`read x && echo "stdin: $x"; echo new > f`)),
		base64.StdEncoding.EncodeToString([]byte(`cat f`)),
	}, "\n") + "\n"
	cmd.Stdin = strings.NewReader(in)
	m := newMarkerStream([]byte("\nMARK "))
	cmd.Stdout = m
	done := make(chan error, 1)
	go func() { done <- cmd.Run() }()
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
	if err := <-done; err != nil {
		t.Errorf("shell exited with %v", err)
	}
}
