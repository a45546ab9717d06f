package l7

import (
	"bytes"
	"errors"
	"io"
	"net"
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
	if cc.reads != 2 {
		t.Errorf("%d reads of the connection for 50 KiB in reads of 16 KiB, want 2", cc.reads)
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
