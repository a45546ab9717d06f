package httpapi

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/runtime"
)

// socketPair returns the two ends of a connected unix stream socket: the
// daemon's end (what Attach returns) and the terminal's.
func socketPair(t *testing.T) (daemonEnd, terminal *net.UnixConn) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	var conns [2]*net.UnixConn
	for i, fd := range fds {
		f := fdFile(fd)
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			t.Fatal(err)
		}
		conns[i] = c.(*net.UnixConn)
	}
	return conns[0], conns[1]
}

// lockedBuffer is a bytes.Buffer safe for a writer and a poller.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// Attach carries the terminal both ways, turns resize frames into Resize
// calls, and ends with the main process's exit status once the terminal
// ends.
func TestAttachCarriesTerminal(t *testing.T) {
	daemonEnd, term := socketPair(t)
	defer term.Close()
	resized := make(chan runtime.WinSize, 4)
	f := &fakeDaemon{
		attach: func(context.Context, string) (*net.UnixConn, error) { return daemonEnd, nil },
		resize: func(_ string, ws runtime.WinSize) error { resized <- ws; return nil },
		wait:   func(string) (*api.WaitResponse, error) { return &api.WaitResponse{ExitCode: 3, Reason: "exited"}, nil },
	}
	s := serve(t, f)
	inR, inW := io.Pipe()
	defer inW.Close()
	resize := make(chan api.WinSize, 1)
	var out lockedBuffer
	type result struct {
		w   *api.WaitResponse
		err error
	}
	res := make(chan result, 1)
	attached := make(chan struct{})
	go func() {
		w, err := s.client.Attach(t.Context(), "s1", api.Terminal{In: inR, Out: &out, Size: api.WinSize{Cols: 100, Rows: 30}, Resize: resize}, func() { close(attached) })
		res <- result{w, err}
	}()
	<-attached
	// One row off and back, for a SIGWINCH that makes the program redraw.
	if a, b := <-resized, <-resized; a != (runtime.WinSize{Cols: 100, Rows: 31}) || b != (runtime.WinSize{Cols: 100, Rows: 30}) {
		t.Fatalf("sizes at attach %+v, %+v; want 100x31, 100x30", a, b)
	}
	if _, err := inW.Write([]byte("ls\r")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 3)
	_ = term.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(term, got); err != nil || string(got) != "ls\r" {
		t.Fatalf("terminal got %q, %v", got, err)
	}
	resize <- api.WinSize{Cols: 40, Rows: 10}
	select {
	case ws := <-resized:
		if ws != (runtime.WinSize{Cols: 40, Rows: 10}) {
			t.Fatalf("resize %+v, want 40x10", ws)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no resize")
	}
	if _, err := term.Write([]byte("screen\r\n")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(out.String(), "screen") {
		if time.Now().After(deadline) {
			t.Fatalf("output %q", out.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	term.Close() // the main process ended
	r := <-res
	if r.err != nil || r.w == nil || r.w.ExitCode != 3 {
		t.Fatalf("Attach = %+v, %v; want exit code 3", r.w, r.err)
	}
}

// A detach (ErrDetached from the keystrokes) hangs up; the terminal
// stays, and Attach says it detached.
func TestAttachDetach(t *testing.T) {
	daemonEnd, term := socketPair(t)
	defer term.Close()
	f := &fakeDaemon{attach: func(context.Context, string) (*net.UnixConn, error) { return daemonEnd, nil }}
	s := serve(t, f)
	attached := make(chan struct{})
	_, err := s.client.Attach(t.Context(), "s1", api.Terminal{In: detachAfter{attached}}, func() { close(attached) })
	if !errors.Is(err, api.ErrDetached) {
		t.Fatalf("Attach = %v, want ErrDetached", err)
	}
	// The daemon closed its end of the terminal connection.
	_ = term.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := term.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("terminal read after detach: %v, want EOF", err)
	}
}

// detachAfter detaches once the client is attached.
type detachAfter struct{ attached chan struct{} }

func (d detachAfter) Read([]byte) (int, error) {
	<-d.attached
	return 0, api.ErrDetached
}

// Attach to a session without a terminal is a 409 with the reason;
// a bad request line or size is a 400.
func TestAttachRefusals(t *testing.T) {
	f := &fakeDaemon{attach: func(_ context.Context, id string) (*net.UnixConn, error) {
		return nil, fmt.Errorf("session %q has no terminal: it was created without one: %w", id, errdefs.ErrFailedPrecondition)
	}}
	s := serve(t, f)
	_, err := s.client.Attach(t.Context(), "s1", api.Terminal{}, nil)
	var ae *api.Error
	if !errors.As(err, &ae) || ae.Status != http.StatusConflict || !strings.Contains(ae.Message, "has no terminal") {
		t.Fatalf("Attach = %v, want 409 has no terminal", err)
	}
	for _, tc := range []struct{ body, want string }{
		{"", "attach request: first line must be the JSON request"},
		{"{size\n", "attach request: invalid character"},
		{`{"size":{"cols":0,"rows":5}}` + "\n", "attach request: size 0x5"},
	} {
		resp, body := s.do(http.MethodPost, "/v1/sessions/s1/attach", tc.body)
		if d := errorBody(t, body); resp.StatusCode != 400 || !strings.HasPrefix(d.Message, tc.want) {
			t.Errorf("body %q: %d %+v, want 400 %q", tc.body, resp.StatusCode, d, tc.want)
		}
	}
}

// An exec with a terminal gets its size and resize frames.
func TestExecTerminalResizes(t *testing.T) {
	f := &fakeDaemon{known: map[string]bool{"s1": true}}
	f.exec = func(ctx context.Context, _ string, o runtime.ExecOptions) (int, error) {
		if !o.TTY || o.Size != (runtime.WinSize{Cols: 80, Rows: 24}) {
			return -1, fmt.Errorf("tty %v size %+v", o.TTY, o.Size)
		}
		select {
		case ws := <-o.Resize:
			fmt.Fprintf(o.Stdout, "%dx%d", ws.Cols, ws.Rows)
			return 0, nil
		case <-time.After(5 * time.Second):
			return -1, errors.New("no resize")
		}
	}
	s := serve(t, f)
	resize := make(chan api.WinSize, 1)
	resize <- api.WinSize{Cols: 120, Rows: 40}
	var out lockedBuffer
	code, err := s.client.ExecTerminal(t.Context(), "s1", api.ExecRequest{Command: []string{"sh"}}, api.Terminal{Out: &out, Size: api.WinSize{Cols: 80, Rows: 24}, Resize: resize})
	if err != nil || code != 0 || out.String() != "120x40" {
		t.Fatalf("ExecTerminal = %d, %v, output %q", code, err, out.String())
	}
}

func fdFile(fd int) *os.File { return os.NewFile(uintptr(fd), "socketpair") }

// TestAttachOutranClient: when the logger lets a client go for falling
// behind a flood of output (it closes the client's connection) while the
// session runs on, the client hears so at once, instead of hanging with
// its keys going nowhere until the session ends.
func TestAttachOutranClient(t *testing.T) {
	daemonEnd, term := socketPair(t)
	ended := make(chan struct{})
	defer close(ended)
	f := &fakeDaemon{
		attach:  func(context.Context, string) (*net.UnixConn, error) { return daemonEnd, nil },
		resize:  func(string, runtime.WinSize) error { return nil },
		inspect: func(id string) (*api.Session, error) { return &api.Session{ID: id, State: api.StateRunning}, nil },
		wait: func(string) (*api.WaitResponse, error) {
			<-ended
			return &api.WaitResponse{ExitCode: 0}, nil
		},
	}
	s := serve(t, f)
	inR, inW := io.Pipe()
	defer inW.Close()
	attached := make(chan struct{})
	res := make(chan error, 1)
	go func() {
		_, err := s.client.Attach(t.Context(), "s1", api.Terminal{In: inR, Out: io.Discard}, func() { close(attached) })
		res <- err
	}()
	<-attached
	term.Close() // the logger drops this client
	select {
	case err := <-res:
		if !errdefs.IsUnavailable(err) || !strings.Contains(err.Error(), "outran this client") {
			t.Errorf("attach ended with %v, want unavailable: output outran this client", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the client still hangs after its terminal connection was dropped")
	}
}

// TestAttachCap: a session takes maxAttached clients at once; one more
// is refused with a 409 saying why (each costs the logger an output
// queue), and once one detaches, another is taken.
func TestAttachCap(t *testing.T) {
	var terms []*net.UnixConn
	var mu sync.Mutex
	ended := make(chan struct{})
	f := &fakeDaemon{
		attach: func(context.Context, string) (*net.UnixConn, error) {
			d, term := socketPair(t)
			mu.Lock()
			terms = append(terms, term)
			mu.Unlock()
			return d, nil
		},
		resize:  func(string, runtime.WinSize) error { return nil },
		inspect: func(id string) (*api.Session, error) { return &api.Session{ID: id, State: api.StateRunning}, nil },
		wait: func(string) (*api.WaitResponse, error) {
			<-ended
			return &api.WaitResponse{ExitCode: 0}, nil
		},
	}
	s := serve(t, f)
	defer close(ended)
	type client struct {
		in  *io.PipeWriter
		res chan error
	}
	attach := func(id string) client {
		inR, inW := io.Pipe()
		attached := make(chan struct{})
		c := client{in: inW, res: make(chan error, 1)}
		go func() {
			_, err := s.client.Attach(t.Context(), id, api.Terminal{In: inR, Out: io.Discard}, func() { close(attached) })
			c.res <- err
		}()
		select {
		case <-attached:
		case err := <-c.res:
			c.res <- err
		}
		return c
	}
	var clients []client
	for range maxAttached {
		c := attach("s1")
		select {
		case err := <-c.res:
			t.Fatalf("client %d of %d refused: %v", len(clients)+1, maxAttached, err)
		default:
		}
		clients = append(clients, c)
	}
	extra := attach("s1")
	select {
	case err := <-extra.res:
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Status != http.StatusConflict || !strings.Contains(ae.Message, "clients attached") {
			t.Errorf("client %d: %v, want 409 naming the cap", maxAttached+1, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("client %d was taken", maxAttached+1)
	}
	// Another session is not held to this one's clients.
	other := attach("s2")
	select {
	case err := <-other.res:
		t.Errorf("a client of another session refused: %v", err)
	default:
	}
	// One detaches: its place is free again.
	clients[0].in.CloseWithError(api.ErrDetached)
	if err := <-clients[0].res; err != nil && !errors.Is(err, api.ErrDetached) {
		t.Fatalf("detach: %v", err)
	}
	var again client
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		again = attach("s1")
		select {
		case err := <-again.res:
			if time.Now().After(deadline) {
				t.Fatalf("after a detach, a new client is still refused: %v", err)
			}
			continue
		default:
		}
		break
	}
	for _, c := range append(clients[1:], again, other) {
		c.in.CloseWithError(api.ErrDetached)
		<-c.res
	}
}
