package testutil

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"
)

// HeldConnections opens n connections to the HTTP server at addr as a
// client that holds them would: half send an unauthenticated request
// that announces a body and never sends it, half send one request and
// then idle. It waits (at most wait) for the server to close every one,
// and returns how many it still held open then.
func HeldConnections(t *testing.T, addr, path string, n int, wait time.Duration) int {
	t.Helper()
	conns := make([]net.Conn, 0, n)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := range n {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
		if i%2 == 0 {
			fmt.Fprintf(c, "POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: 200000\r\n\r\nx", path, addr)
		} else {
			fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, addr)
		}
	}
	open := make([]bool, n)
	for i := range open {
		open[i] = true
	}
	buf := make([]byte, 1<<16)
	deadline := time.Now().Add(wait)
	for {
		left := 0
		for i, c := range conns {
			if !open[i] {
				continue
			}
			_ = c.SetReadDeadline(time.Now().Add(time.Millisecond))
			for {
				_, err := c.Read(buf)
				var ne net.Error
				if errors.As(err, &ne) && ne.Timeout() {
					left++
					break
				}
				if err != nil {
					open[i] = false // closed by the server
					break
				}
			}
		}
		if left == 0 || time.Now().After(deadline) {
			return left
		}
		time.Sleep(100 * time.Millisecond)
	}
}
