package main

import (
	"errors"
	"io"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/airlock-sandbox/airlock/api"
)

func TestParseDetachKeys(t *testing.T) {
	for _, tc := range []struct {
		in      string
		want    string
		wantErr string
	}{
		{in: "ctrl-p,ctrl-q", want: "\x10\x11"},
		{in: "ctrl-X,x", want: "\x18x"},
		{in: "ctrl-@,ctrl-_", want: "\x00\x1f"},
		{in: "", want: ""},
		{in: "ctrl-1", wantErr: `after ctrl- comes a letter`},
		{in: "ctrl-p,,", wantErr: `want a single character or ctrl-X`},
		{in: "alt-p", wantErr: `want a single character or ctrl-X`},
	} {
		got, err := parseDetachKeys(tc.in)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("parseDetachKeys(%q) = %q, %v; want error %q", tc.in, got, err, tc.wantErr)
			}
			continue
		}
		if err != nil || string(got) != tc.want {
			t.Errorf("parseDetachKeys(%q) = %q, %v; want %q", tc.in, got, err, tc.want)
		}
	}
}

// The detach reader passes keys through, including a begun sequence that
// did not complete, and detaches at the whole sequence, whatever the
// chunking of the reads.
func TestDetachReader(t *testing.T) {
	seq := []byte("\x10\x11")
	for _, tc := range []struct{ in, want string }{
		{"ls\r\x10\x11rest", "ls\r"},
		{"a\x10b\x10\x10\x11", "a\x10b\x10"},
		{"\x10\x10\x11", "\x10"},
	} {
		for _, one := range []bool{false, true} {
			var r io.Reader = strings.NewReader(tc.in)
			if one {
				r = iotest.OneByteReader(r)
			}
			got, err := io.ReadAll(&detachReader{r: r, seq: seq})
			if !errors.Is(err, api.ErrDetached) || string(got) != tc.want {
				t.Errorf("%q (one byte at a time: %v): read %q, %v; want %q, ErrDetached", tc.in, one, got, err, tc.want)
			}
		}
	}
	got, err := io.ReadAll(&detachReader{r: strings.NewReader("ab\x10"), seq: seq})
	if err != nil || string(got) != "ab" {
		t.Errorf("EOF mid-sequence: %q, %v", got, err)
	}
}

// The terminal flags refuse what cannot work before anything is created.
func TestTerminalFlagErrors(t *testing.T) {
	manifest := writeFile(t, "hello.hcl", helloHCL)
	h := newHarness(t)
	h.run("", "run", "-it", "-f", manifest).check(t, exitUsage, "", "airlock: -t needs a terminal on stdin, and airlock's stdin is not one (run it from a terminal; for a pipe, use -i without -t)\n")
	h.run("", "run", "-i", "-f", manifest).check(t, exitUsage, "", "airlock: -i needs -t (-it) with run: a session's main process reads input only through a terminal (airlock exec -i streams a pipe)\n")
	h.run("", "run", "-it", "--detach-keys", "ctrl-1", "-f", manifest).check(t, exitUsage, "", "airlock: invalid --detach-keys \"ctrl-1\": \"ctrl-1\": after ctrl- comes a letter or one of @ [ \\ ] ^ _\n")
	if creates, _, _ := h.d.recorded(); len(creates) != 0 {
		t.Fatalf("created %d sessions on bad terminal flags", len(creates))
	}
	h.run("", "run", "-dit", "-f", manifest, "--", "emit", "block").check(t, 0, "s1\n", "")
	creates, _, _ := h.d.recorded()
	if len(creates) != 1 || !creates[0].Policy.Terminal || !creates[0].Start {
		t.Fatalf("run -dit sent %+v, want a started session with a terminal", creates)
	}
	h.run("", "exec", "-t", "s1", "--", "sh").check(t, exitUsage, "", "airlock: -t needs -i (-it): the terminal's input is airlock's stdin\n")
	h.run("", "exec", "-it", "s1", "--", "sh").check(t, exitUsage, "", "airlock: -t needs a terminal on stdin, and airlock's stdin is not one (run it from a terminal; for a pipe, use -i without -t)\n")
	h.run("", "attach", "s1").check(t, exitUsage, "", "airlock: attach needs a terminal on stdin, and airlock's stdin is not one (run it from a terminal; airlock logs -f follows a session's output without one)\n")
}
