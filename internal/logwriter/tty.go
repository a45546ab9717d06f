package logwriter

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/runtime/v2/logging"
	"golang.org/x/sys/unix"
)

// Files of a session whose main process has a terminal, in its log
// directory.
//
// TTYInput is a FIFO the runtime makes before the task: the shim copies
// what is written to it into the terminal. The shim closes the terminal
// when the FIFO's last writer goes away, so the logger holds it open for
// the life of the task; attach clients come and go.
//
// TTYSocket is the logger's unix socket: a client that connects gets the
// terminal's output from then on, and what it writes is the terminal's
// input. The logger is a child of containerd's shim, not of airlockd, so
// the socket outlives a restart of the daemon.
const (
	TTYInput  = "tty.in"
	TTYSocket = "tty.sock"
)

// clientQueue is how many chunks of output wait for a slow client before
// the logger drops it (a client never holds the session's output up).
const clientQueue = 256

// RunTTY is Run for a task with a terminal: the terminal's output (the
// task's stdout) goes to stdout.log, capped as with Run, and to every
// client connected to TTYSocket, and the clients' input goes to
// TTYInput. It never returns.
func RunTTY(dir string, limit int64) {
	logging.Run(func(_ context.Context, cfg *logging.Config, ready func() error) error {
		r, err := newRelay(dir)
		if err != nil {
			return err
		}
		defer r.close()
		return copyLogs(dir, limit, io.TeeReader(cfg.Stdout, r), cfg.Stderr, ready)
	})
}

// relay hands the terminal's output to its clients and their input to
// the terminal.
type relay struct {
	ln      net.Listener
	in      *os.File
	mu      sync.Mutex
	clients map[*ttyClient]bool
	closed  bool
	writers sync.WaitGroup
}

type ttyClient struct {
	conn net.Conn
	out  chan []byte
}

func newRelay(dir string) (*relay, error) {
	if !filepath.IsAbs(dir) {
		return nil, errors.New("log dir is not absolute")
	}
	// Read and write: opening a FIFO so never blocks, and the shim's
	// reader never sees its last writer go.
	in, err := os.OpenFile(filepath.Join(dir, TTYInput), os.O_RDWR, 0)
	if err != nil {
		return nil, err
	}
	sock := filepath.Join(dir, TTYSocket)
	_ = os.Remove(sock)
	var ln net.Listener
	err = viaDir(dir, func(short string) (err error) {
		ln, err = net.Listen("unix", short)
		return err
	})
	if err != nil {
		in.Close()
		return nil, err
	}
	if err := os.Chmod(sock, 0o600); err != nil {
		ln.Close()
		in.Close()
		return nil, err
	}
	r := &relay{ln: ln, in: in, clients: map[*ttyClient]bool{}}
	go r.accept()
	return r, nil
}

func (r *relay) accept() {
	for {
		conn, err := r.ln.Accept()
		if err != nil {
			return
		}
		c := &ttyClient{conn: conn, out: make(chan []byte, clientQueue)}
		r.mu.Lock()
		if r.closed {
			r.mu.Unlock()
			conn.Close()
			return
		}
		r.clients[c] = true
		r.writers.Add(1)
		r.mu.Unlock()
		go func() {
			defer r.writers.Done()
			for b := range c.out {
				if _, err := conn.Write(b); err != nil {
					r.drop(c)
				}
			}
			conn.Close()
		}()
		go func() {
			_, _ = io.Copy(r.in, conn)
			r.drop(c)
		}()
	}
}

// drop disconnects a client; safe to repeat.
func (r *relay) drop(c *ttyClient) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.clients[c] {
		delete(r.clients, c)
		close(c.out)
		// Unblocks the input copy; the writer closes the connection
		// once the queued output is out.
		if uc, ok := c.conn.(*net.UnixConn); ok {
			_ = uc.CloseRead()
		}
	}
}

// Write hands p to every client; it never fails, and never waits.
func (r *relay) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.clients) == 0 {
		return len(p), nil
	}
	b := append([]byte(nil), p...)
	for c := range r.clients {
		select {
		case c.out <- b:
		default:
			delete(r.clients, c)
			close(c.out)
		}
	}
	return len(p), nil
}

// close ends the relay: the clients get the output queued so far, then
// the end of the stream.
func (r *relay) close() {
	r.mu.Lock()
	r.closed = true
	for c := range r.clients {
		delete(r.clients, c)
		close(c.out)
	}
	r.mu.Unlock()
	r.ln.Close()
	r.in.Close()
	done := make(chan struct{})
	go func() {
		r.writers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(time.Second):
	}
}

// DialTTY connects to the relay of the terminal whose log directory is
// dir.
func DialTTY(dir string) (*net.UnixConn, error) {
	var conn net.Conn
	err := viaDir(dir, func(short string) (err error) {
		conn, err = net.Dial("unix", short)
		return err
	})
	if err != nil {
		return nil, err
	}
	return conn.(*net.UnixConn), nil
}

// viaDir calls fn with a path to dir's TTYSocket short enough for a unix
// socket address (108 bytes), whatever the length of dir: it goes
// through a descriptor of dir in /proc/self/fd.
func viaDir(dir string, fn func(path string) error) error {
	d, err := os.OpenFile(dir, os.O_RDONLY|unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		return err
	}
	defer d.Close()
	return fn("/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + TTYSocket)
}
