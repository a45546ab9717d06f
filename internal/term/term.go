// Package term holds the terminal helpers the airlock command-line tools
// share: a writer safe for concurrent use, and terminal detection.
package term

import (
	"io"
	"sync"
)

// SyncWriter serializes writes to W.
type SyncWriter struct {
	mu sync.Mutex
	W  io.Writer
}

func (s *SyncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.W.Write(p)
}
