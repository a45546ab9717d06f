package logwriter

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The relay gives every connected client the output written after it
// connected, takes their input into the FIFO, and drops a client that
// goes away without disturbing the others.
func TestRelayFansOutAndTakesInput(t *testing.T) {
	dir := filepath.Join(t.TempDir(), strings.Repeat("long-directory-name-", 6)) // beyond a unix socket address
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, TTYInput)
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := newRelay(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	// The shim's side of the FIFO.
	shim, err := os.OpenFile(fifo, os.O_RDONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer shim.Close()

	a, err := DialTTY(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := DialTTY(dir)
	if err != nil {
		t.Fatal(err)
	}
	waitClients(t, r, 2)
	_, _ = r.Write([]byte("screen"))
	for _, c := range []io.Reader{a, b} {
		got := make([]byte, 6)
		_ = c.(interface{ SetReadDeadline(time.Time) error }).SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(c, got); err != nil || string(got) != "screen" {
			t.Fatalf("client got %q, %v; want the output", got, err)
		}
	}
	if _, err := a.Write([]byte("keys")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(shim, got); err != nil || string(got) != "keys" {
		t.Fatalf("FIFO got %q, %v; want the client's input", got, err)
	}
	a.Close()
	waitClients(t, r, 1)
	// The FIFO keeps a writer: the shim would close the terminal at EOF.
	_, _ = b.Write([]byte("more"))
	if _, err := io.ReadFull(shim, got); err != nil || string(got) != "more" {
		t.Fatalf("after a client left, FIFO got %q, %v", got, err)
	}
	r.close()
	rest, _ := io.ReadAll(b)
	if len(rest) != 0 {
		t.Fatalf("unexpected output %q", rest)
	}
}

// A client that does not read is dropped; the writer never waits.
func TestRelayDropsSlowClient(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, TTYInput), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := newRelay(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	c, err := DialTTY(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitClients(t, r, 1)
	chunk := bytes.Repeat([]byte("x"), copyBuf)
	start := time.Now()
	for range 4 * clientQueue {
		_, _ = r.Write(chunk)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("writes took %v with a stuck client", d)
	}
	waitClients(t, r, 0)
}

func waitClients(t *testing.T, r *relay, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		r.mu.Lock()
		got := len(r.clients)
		r.mu.Unlock()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("relay has %d clients, want %d", got, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Past the cap on the log, an attached client still gets the terminal's
// output: the cap is on the file, not on the relay.
func TestRelayOutlivesLogCap(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, TTYInput), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := newRelay(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	c, err := DialTTY(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	waitClients(t, r, 1)
	const limit = 64 << 10
	screen := bytes.Repeat([]byte("0123456789abcdef"), 4*limit/16) // 4x the cap
	got := make(chan []byte, 1)
	go func() {
		b, _ := io.ReadAll(c)
		got <- b
	}()
	if err := copyLogs(dir, limit, io.TeeReader(pipe(t, screen), r), pipe(t, nil), func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	r.close()
	if b := <-got; !bytes.Equal(b, screen) {
		t.Fatalf("client got %d bytes, want all %d", len(b), len(screen))
	}
	st, err := os.Stat(filepath.Join(dir, StdoutLog))
	if err != nil || st.Size() > limit+1024 {
		t.Fatalf("stdout.log: %v, %v; want it capped near %d bytes", st, err, limit)
	}
}
