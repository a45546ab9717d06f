package l7

import (
	"bytes"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"testing"
)

// chunkConn returns its chunks one a read, the last with err.
type chunkConn struct {
	net.Conn
	chunks [][]byte
	err    error
	reads  int
}

func (c *chunkConn) Read(p []byte) (int, error) {
	c.reads++
	if len(c.chunks) == 0 {
		return 0, c.err
	}
	n := copy(p, c.chunks[0])
	c.chunks[0] = c.chunks[0][n:]
	if len(c.chunks[0]) > 0 {
		return n, nil
	}
	c.chunks = c.chunks[1:]
	if len(c.chunks) == 0 {
		return n, c.err
	}
	return n, nil
}

// TestFlowConnReadAhead: small reads of an upstream connection are served
// from one read ahead, in order, and an error that came with bytes is
// returned once they are all read.
func TestFlowConnReadAhead(t *testing.T) {
	first := bytes.Repeat([]byte("a"), 40<<10)
	last := bytes.Repeat([]byte("b"), 10<<10)
	boom := errors.New("boom")
	cc := &chunkConn{chunks: [][]byte{first, last}, err: boom}
	c := &flowConn{Conn: cc}
	var got []byte
	buf := make([]byte, 16<<10+5)
	var err error
	for err == nil {
		var n int
		n, err = c.Read(buf)
		got = append(got, buf[:n]...)
	}
	if err != boom || !bytes.Equal(got, append(first, last...)) {
		t.Fatalf("read %d bytes, %v; want %d, boom", len(got), err, len(first)+len(last))
	}
	// A small read-ahead first (16 KiB, filled), then one large read
	// for the rest of the first chunk and one for the last.
	if cc.reads != 3 {
		t.Errorf("%d reads of the connection for 50 KiB in reads of 16 KiB, want 3", cc.reads)
	}
	if !c.large {
		t.Error("a connection whose read filled the small read-ahead does not read ahead large")
	}
	if c.ahead != nil {
		t.Error("a drained connection holds its read-ahead buffer")
	}

	// A read as large as the read-ahead goes to the connection.
	cc = &chunkConn{chunks: [][]byte{first}, err: io.EOF}
	c = &flowConn{Conn: cc}
	big := make([]byte, readAheadSize)
	if n, err := c.Read(big); n != len(first) || err != io.EOF || c.ahead != nil {
		t.Errorf("large read: %d, %v, buffered %d", n, err, c.w-c.r)
	}
}

// bytesAllocated is what f allocates, with the buffer pools emptied first
// (as a garbage collection or two between sessions leaves them).
func bytesAllocated(f func()) uint64 {
	runtime.GC()
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	f()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// TestSmallResponseSmallBuffers: a small response read from the upstream
// and held behind for the client takes small buffers: pools are emptied
// by garbage collections, which come every session or two, and every
// session's small fetch made a 256 KiB read-ahead and a 272 KiB
// write-behind buffer (about 230 KiB a session in the soak's heap
// profile).
func TestSmallResponseSmallBuffers(t *testing.T) {
	resp := bytes.Repeat([]byte("r"), 2<<10)
	var got bytes.Buffer
	n := bytesAllocated(func() {
		c := &flowConn{Conn: &chunkConn{chunks: [][]byte{slices.Clone(resp)}, err: io.EOF}}
		client, peer := net.Pipe()
		defer client.Close()
		done := make(chan struct{})
		go func() { defer close(done); _, _ = io.Copy(&got, peer) }()
		w := &closeNotifyConn{Conn: client, closed: make(chan struct{})}
		w.hold()
		buf := make([]byte, 4<<10)
		for {
			n, err := c.Read(buf)
			if _, werr := w.Write(buf[:n]); werr != nil {
				t.Error(werr)
			}
			if err != nil {
				break
			}
		}
		if err := w.release(); err != nil {
			t.Error(err)
		}
		client.Close()
		<-done
	})
	if !bytes.Equal(got.Bytes(), resp) {
		t.Fatalf("client got %d bytes, want the %d of the response", got.Len(), len(resp))
	}
	if n >= readAheadSize/2 {
		t.Errorf("a %d-byte response allocated %d bytes through the gateway's buffers; want less than %d", len(resp), n, readAheadSize/2)
	}
	t.Logf("%d bytes allocated for a %d-byte response", n, len(resp))
}

// TestWriteBehindOutgrown: writes held behind beyond the small buffer
// move to a large one and reach the client whole and in order, flushed
// when they would exceed writeBehindSize.
func TestWriteBehindOutgrown(t *testing.T) {
	client, peer := net.Pipe()
	var got bytes.Buffer
	done := make(chan struct{})
	go func() { defer close(done); _, _ = io.Copy(&got, peer) }()
	w := &closeNotifyConn{Conn: client, closed: make(chan struct{})}
	w.hold()
	var want []byte
	for i := range 40 {
		p := bytes.Repeat([]byte{byte('a' + i%26)}, 9<<10+i)
		want = append(want, p...)
		if _, err := w.Write(p); err != nil {
			t.Fatal(err)
		}
		w.wmu.Lock()
		if w.behind != nil && len(*w.behind) > writeBehindSize {
			t.Errorf("%d bytes held behind, more than %d", len(*w.behind), writeBehindSize)
		}
		w.wmu.Unlock()
	}
	if err := w.release(); err != nil {
		t.Fatal(err)
	}
	client.Close()
	<-done
	if !bytes.Equal(got.Bytes(), want) {
		t.Errorf("client got %d bytes, want the %d written, in order", got.Len(), len(want))
	}
}
