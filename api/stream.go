package api

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Streams carry process output (logs, exec) as frames so that stdout and
// stderr stay apart: an 8-byte header (kind, three zero bytes, big-endian
// uint32 payload length) followed by the payload.
const (
	FrameStdin  byte = 0 // client -> server
	FrameStdout byte = 1
	FrameStderr byte = 2
	FrameExit   byte = 3 // payload: JSON WaitResponse; last frame of an exec stream
	FrameError  byte = 4 // payload: JSON ErrorDetail; last frame
	FrameResize byte = 5 // client -> server: payload JSON WinSize, a terminal's new size
)

// StreamContentType is the media type of framed streams.
const StreamContentType = "application/vnd.airlock.stream"

// MaxFrame is the largest payload a reader accepts.
const MaxFrame = 1 << 20

// FrameWriter writes frames of one kind to a shared, locked writer.
type FrameWriter struct {
	mu   *sync.Mutex
	w    io.Writer
	kind byte
	// Flush, if set, is called after every frame (http.Flusher).
	flush func()
}

// NewFrameWriters returns writers for stdout and stderr frames sharing w.
func NewFrameWriters(w io.Writer, flush func()) (stdout, stderr *FrameWriter) {
	mu := &sync.Mutex{}
	return &FrameWriter{mu: mu, w: w, kind: FrameStdout, flush: flush},
		&FrameWriter{mu: mu, w: w, kind: FrameStderr, flush: flush}
}

// Kind returns a writer of another frame kind on the same stream.
func (f *FrameWriter) Kind(kind byte) *FrameWriter {
	return &FrameWriter{mu: f.mu, w: f.w, kind: kind, flush: f.flush}
}

func (f *FrameWriter) Write(p []byte) (int, error) {
	n := 0
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(p) > 0 {
		chunk := p
		if len(chunk) > MaxFrame {
			chunk = chunk[:MaxFrame]
		}
		// The flush happens under the lock too: stdout and stderr share the
		// underlying writer, which must see one caller at a time.
		if err := WriteFrame(f.w, nil, f.kind, chunk); err != nil {
			return n, err
		}
		if f.flush != nil {
			f.flush()
		}
		n += len(chunk)
		p = p[len(chunk):]
	}
	return n, nil
}

// WriteFrame writes one frame; mu may be nil.
func WriteFrame(w io.Writer, mu *sync.Mutex, kind byte, payload []byte) error {
	var hdr [8]byte
	hdr[0] = kind
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(payload)))
	if mu != nil {
		mu.Lock()
		defer mu.Unlock()
	}
	if _, err := w.Write(hdr[:]); err != nil {
		return err
	}
	_, err := w.Write(payload)
	return err
}

// ReadFrame reads one frame. It returns io.EOF only at a frame boundary.
func ReadFrame(r io.Reader) (kind byte, payload []byte, err error) {
	var hdr [8]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("truncated frame header: %w", err)
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[4:])
	if n > MaxFrame {
		return 0, nil, fmt.Errorf("frame of %d bytes exceeds limit %d", n, MaxFrame)
	}
	payload = make([]byte, n)
	if _, err := io.ReadFull(r, payload); err != nil {
		return 0, nil, fmt.Errorf("truncated frame: %w", err)
	}
	return hdr[0], payload, nil
}
