package e2e

import (
	"context"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/creack/pty"

	"github.com/airlock-sandbox/airlock/internal/testutil"
)

// ptyCLI is the airlock CLI running on a real pseudo-terminal, as in an
// operator's terminal emulator.
type ptyCLI struct {
	t    *testing.T
	cmd  *exec.Cmd
	ptmx *os.File
	mu   sync.Mutex
	out  strings.Builder
	read chan struct{} // closed when the output ends
	mark int           // expect looks after this offset
	code int
	done chan struct{}
}

func startPTY(t *testing.T, rows, cols uint16, args ...string) *ptyCLI {
	t.Helper()
	cmd := exec.Command(filepath.Join(h.Env.BinDir, "airlock"), args...)
	cmd.Env = append(os.Environ(), "AIRLOCK_SOCKET="+h.Socket, "TERM=xterm")
	ptmx, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: rows, Cols: cols})
	if err != nil {
		t.Fatal(err)
	}
	p := &ptyCLI{t: t, cmd: cmd, ptmx: ptmx, read: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.read)
		buf := make([]byte, 4096)
		for {
			n, err := ptmx.Read(buf)
			p.mu.Lock()
			p.out.Write(buf[:n])
			p.mu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	go func() {
		defer close(p.done)
		err := cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			p.code = ee.ExitCode()
		} else if err != nil {
			p.code = -1
		}
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
		ptmx.Close()
	})
	return p
}

func (p *ptyCLI) screen() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.out.String()
}

// expect waits for output after the last match that matches re, and
// returns the submatches.
func (p *ptyCLI) expect(re string) []string {
	p.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(30 * time.Second)
	for {
		p.mu.Lock()
		s := p.out.String()
		p.mu.Unlock()
		if loc := rx.FindStringSubmatchIndex(s[p.mark:]); loc != nil {
			m := rx.FindStringSubmatch(s[p.mark:])
			p.mark += loc[1]
			return m
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("no %q on the terminal after 30s; it shows:\n%q", re, s[p.mark:])
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (p *ptyCLI) send(keys string) {
	p.t.Helper()
	if _, err := io.WriteString(p.ptmx, keys); err != nil {
		p.t.Fatal(err)
	}
}

func (p *ptyCLI) wait() int {
	p.t.Helper()
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.t.Fatalf("airlock %v still runs; terminal:\n%q", p.cmd.Args[1:], p.screen())
	}
	select {
	case <-p.read:
	case <-time.After(5 * time.Second):
	}
	return p.code
}

// A session run with -it: keystrokes reach its shell and its screen comes
// back, the size and a resize of airlock's terminal reach the session
// (stty size), ctrl-c interrupts the command in the foreground, the
// detach keys leave it running, and attach connects again, also after
// the daemon restarted. exec -it gets a terminal of its own.
func TestTerminal(t *testing.T) {
	testutil.RequiresRoot(t)
	m := filepath.Join(t.TempDir(), "tty.hcl")
	if err := os.WriteFile(m, []byte(`session "tty" {
  image   = "airlock/agent:bookworm"
  command = ["bash", "--norc", "-i"]
  timeout = "10m"
  env = {
    PS1 = "tty$ "
  }
  resources {
    memory = "256MiB"
    pids   = 64
  }
}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	run := startPTY(t, 24, 80, "run", "-it", "-f", m)
	run.expect(`tty\$ `)
	run.send("stty size\r")
	run.expect(`[\r\n]24 80\r\n`)
	run.send("echo typed-$((6*7))\r")
	run.expect(`[\r\n]typed-42\r\n`)

	// A resize of the outer terminal: SIGWINCH to airlock, a resize
	// frame to the daemon, the session's terminal resized.
	if err := pty.Setsize(run.ptmx, &pty.Winsize{Rows: 33, Cols: 101}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		run.send("stty size\r")
		got := run.expect(`[\r\n](\d+ \d+)\r\n`)
		if got[1] == "33 101" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("stty size after the resize: %s, want 33 101", got[1])
		}
		time.Sleep(100 * time.Millisecond)
	}

	// ctrl-c is a key like any other: the terminal inside makes it
	// SIGINT for the foreground command.
	run.send("sleep 300\r")
	time.Sleep(300 * time.Millisecond)
	run.send("\x03")
	run.send("echo after-$((1+1))\r")
	run.expect(`[\r\n]after-2\r\n`)

	// A program that redraws on SIGWINCH, as a full-screen one does.
	// (Not the interactive shell itself: SIGWINCH goes to the
	// terminal's foreground process group, which job control gives to
	// the command.)
	run.send(`bash -c 'trap "echo redraw-\$((4*4))" WINCH; while :; do sleep 0.1; done'` + "\r")
	time.Sleep(300 * time.Millisecond)

	// Detach: airlock exits 0 and says how to come back.
	run.send("\x10\x11")
	if code := run.wait(); code != 0 {
		t.Fatalf("detach: exit %d; terminal:\n%q", code, run.screen())
	}
	id := run.expect(`detached from session ([0-9a-f]+); it runs on`)[1]
	t.Cleanup(func() { airlock(t, "", "rm", "-f", id) })
	if r := airlock(t, "", "inspect", id); !strings.Contains(r.stdout, `"state": "running"`) {
		t.Fatalf("after detach: %s %s", r.stdout, r.stderr)
	}

	// exec -it: a terminal of its own, at its own size.
	ex := startPTY(t, 20, 70, "exec", "-it", id, "--", "bash", "--norc", "-i")
	ex.expect(`tty\$ `)
	ex.send("stty size; tty\r")
	ex.expect(`[\r\n]20 70\r\n/dev/pts/\d+\r\n`)
	ex.send("exit 3\r")
	if code := ex.wait(); code != 3 {
		t.Fatalf("exec -it: exit %d, want 3; terminal:\n%q", code, ex.screen())
	}

	// The daemon restarts; the session's terminal is held by its logger
	// (a child of containerd's shim) and attach finds it again.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := h.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// Attach at the size the session's terminal has: it still gets
	// SIGWINCH, so a full-screen program redraws for the newcomer.
	at := startPTY(t, 33, 101, "attach", id)
	at.expect(`redraw-16`)
	at.send("\x03")
	if err := pty.Setsize(at.ptmx, &pty.Winsize{Rows: 40, Cols: 120}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	at.send("stty size\r")
	at.expect(`[\r\n]40 120\r\n`)
	at.send("echo back-$((2+3))\r")
	at.expect(`[\r\n]back-5\r\n`)
	// A second client watches without taking over (--no-stdin) and sees
	// the same screen.
	watch := startPTY(t, 40, 120, "attach", "--no-stdin", "--detach-keys", "ctrl-x", id)
	time.Sleep(500 * time.Millisecond)
	watch.send("echo ignored\r")
	at.send("echo both-$((3+4))\r")
	watch.expect(`[\r\n]both-7\r\n`)
	if strings.Contains(at.screen(), "ignored") {
		t.Errorf("keys of a --no-stdin attach reached the session:\n%q", at.screen())
	}
	watch.send("\x18")
	if code := watch.wait(); code != 0 {
		t.Fatalf("detach with ctrl-x: exit %d", code)
	}
	// The main process ends: attach exits with its code.
	at.send("exit 7\r")
	if code := at.wait(); code != 7 {
		t.Fatalf("attach: exit %d, want 7; terminal:\n%q", code, at.screen())
	}
	if r := airlock(t, "", "logs", id); !strings.Contains(r.stdout, "typed-42") || !strings.Contains(r.stdout, "back-5") {
		t.Errorf("the terminal's output is not in the session's log: %q", r.stdout)
	}
}

// Attach to a session without a terminal is refused with the reason.
func TestAttachWithoutTerminal(t *testing.T) {
	testutil.RequiresRoot(t)
	r := airlock(t, "", "run", "-d", "-f", "hello.hcl", "--", "sleep", "60")
	id := strings.TrimSpace(r.stdout)
	if r.code != 0 || id == "" {
		t.Fatalf("run -d: %+v", r)
	}
	t.Cleanup(func() { airlock(t, "", "rm", "-f", id) })
	p := startPTY(t, 24, 80, "attach", id)
	if code := p.wait(); code != 125 {
		t.Fatalf("attach: exit %d, want 125", code)
	}
	p.expect(`session "` + id + `" has no terminal: it was created without one`)
}
