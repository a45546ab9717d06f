// Package limitbuf is a buffer that keeps the first bytes written to it,
// up to a bound, and notes what it left out: the output of an operator's
// command (an exec issuer, an approver hook) is read whole only so far.
package limitbuf

import "bytes"

// Buffer keeps the first Max bytes written and notes the overflow. Writes
// never fail, so a command writing more is not stopped by a broken pipe.
type Buffer struct {
	Max int
	buf bytes.Buffer
	// Truncated is set once a write did not fit.
	Truncated bool
}

// New returns a Buffer that keeps at most max bytes.
func New(max int) *Buffer { return &Buffer{Max: max} }

func (l *Buffer) Write(p []byte) (int, error) {
	if room := l.Max - l.buf.Len(); room < len(p) {
		l.Truncated = true
		l.buf.Write(p[:max(room, 0)])
		return len(p), nil
	}
	return l.buf.Write(p)
}

// Bytes returns what was kept.
func (l *Buffer) Bytes() []byte { return l.buf.Bytes() }
