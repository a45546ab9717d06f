package load

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/perf/stats"
)

// StreamResult is one bulk TCP transfer, as the sender saw it.
type StreamResult struct {
	Bytes   int64   `json:"bytes"`
	Seconds float64 `json:"seconds"`
	Gbps    float64 `json:"gbps"`
}

// Stream connects to addr and writes for d (at most maxBytes if > 0), then
// half-closes the connection and waits for the peer to close.
func Stream(ctx context.Context, addr string, d time.Duration, maxBytes int64) (*StreamResult, error) {
	if d <= 0 {
		return nil, errors.New("stream: duration must be positive")
	}
	var dialer net.Dialer
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	c, err := dialer.DialContext(dctx, "tcp", addr)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("stream: %w", err)
	}
	defer c.Close()
	buf := make([]byte, 128<<10)
	for i := range buf {
		buf[i] = byte(i)
	}
	start := time.Now()
	deadline := start.Add(d)
	if err := c.SetWriteDeadline(deadline); err != nil {
		return nil, err
	}
	var sent int64
	for time.Now().Before(deadline) && ctx.Err() == nil && (maxBytes <= 0 || sent < maxBytes) {
		p := buf
		if maxBytes > 0 && maxBytes-sent < int64(len(p)) {
			p = p[:maxBytes-sent]
		}
		n, err := c.Write(p)
		sent += int64(n)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				break
			}
			return nil, fmt.Errorf("stream: write: %w", err)
		}
	}
	elapsed := time.Since(start)
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.CloseWrite()
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, _ = io.Copy(io.Discard, c)
	return &StreamResult{Bytes: sent, Seconds: elapsed.Seconds(), Gbps: gbps(sent, elapsed)}, nil
}

func gbps(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) * 8 / d.Seconds() / 1e9
}

// Connects opens and closes n TCP connections to addr one after another
// and returns the connect times (µs).
func Connects(ctx context.Context, addr string, n int) (stats.Summary, error) {
	var dialer net.Dialer
	lat := make([]float64, 0, n)
	for range n {
		if err := ctx.Err(); err != nil {
			return stats.Summary{}, err
		}
		dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		t0 := time.Now()
		c, err := dialer.DialContext(dctx, "tcp", addr)
		rtt := time.Since(t0)
		cancel()
		if err != nil {
			return stats.Summary{}, fmt.Errorf("connect: %w", err)
		}
		c.Close()
		lat = append(lat, float64(rtt)/float64(time.Microsecond))
	}
	return stats.Summarize(lat), nil
}

// Transfer is one connection a Sink received.
type Transfer struct {
	Bytes int64
	// Elapsed runs from the first byte to the end of the stream.
	Elapsed time.Duration
}

// Gbps is the transfer's receive rate.
func (t Transfer) Gbps() float64 { return gbps(t.Bytes, t.Elapsed) }

// Sink accepts connections and discards what they send, recording each
// connection that carried data. Connections without data (connect tests)
// are closed at once.
type Sink struct {
	l    net.Listener
	wg   sync.WaitGroup
	mu   sync.Mutex
	done []Transfer
	n    atomic.Int64
}

// NewSink serves l until Close.
func NewSink(l net.Listener) *Sink {
	s := &Sink{l: l}
	s.wg.Add(1)
	go s.serve()
	return s
}

func (s *Sink) serve() {
	defer s.wg.Done()
	for {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		s.n.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(2 * time.Minute))
			buf := make([]byte, 256<<10)
			var total int64
			var first time.Time
			for {
				n, err := c.Read(buf)
				if n > 0 && total == 0 {
					first = time.Now()
				}
				total += int64(n)
				if err != nil {
					break
				}
			}
			if total > 0 {
				s.mu.Lock()
				s.done = append(s.done, Transfer{Bytes: total, Elapsed: time.Since(first)})
				s.mu.Unlock()
			}
		}()
	}
}

// Accepted counts the connections accepted so far.
func (s *Sink) Accepted() int64 { return s.n.Load() }

// Take returns and forgets the transfers finished so far.
func (s *Sink) Take() []Transfer {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.done
	s.done = nil
	return out
}

// Addr is the listening address.
func (s *Sink) Addr() net.Addr { return s.l.Addr() }

// Close stops accepting and waits for open connections to end.
func (s *Sink) Close() error {
	err := s.l.Close()
	s.wg.Wait()
	return err
}
