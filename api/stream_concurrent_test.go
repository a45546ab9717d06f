package api

import (
	"bytes"
	"errors"
	"io"
	"sync"
	"testing"
)

// TestFrameWritersConcurrent: stdout and stderr written at the same time,
// each write followed by a flush of the shared writer, still decode as whole
// frames.
func TestFrameWritersConcurrent(t *testing.T) {
	var buf bytes.Buffer
	var flushes int
	stdout, stderr := NewFrameWriters(&buf, func() { flushes++; _ = buf.Len() })
	var wg sync.WaitGroup
	for _, w := range []*FrameWriter{stdout, stderr} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 500; i++ {
				if _, err := w.Write([]byte("0123456789")); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	counts := map[byte]int{}
	for {
		kind, payload, err := ReadFrame(&buf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if string(payload) != "0123456789" {
			t.Fatalf("torn frame %q", payload)
		}
		counts[kind]++
	}
	if counts[FrameStdout] != 500 || counts[FrameStderr] != 500 || flushes != 1000 {
		t.Errorf("frames %v, flushes %d; want 500 each and 1000 flushes", counts, flushes)
	}
}
