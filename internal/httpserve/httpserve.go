// Package httpserve makes the HTTP servers airlockd serves on TCP
// addresses (the console, metrics, credential verification), bounded so
// that a client cannot hold the daemon's resources: any local user can
// connect to a loopback port, and a daemon out of file descriptors can no
// longer open a file, a socket or a namespace for any session.
package httpserve

import (
	"net"
	"net/http"
	"strconv"
	"time"

	"golang.org/x/net/netutil"
)

// Limits bound a server's connections.
type Limits struct {
	// ReadTimeout bounds reading a request, body included: a client that
	// announces a body and never sends it is cut off.
	ReadTimeout time.Duration
	// WriteTimeout bounds writing a response.
	WriteTimeout time.Duration
	// IdleTimeout closes a keep-alive connection with no request.
	IdleTimeout time.Duration
	// MaxHeaderBytes bounds a request's header.
	MaxHeaderBytes int
	// MaxConns bounds the connections served at once; more wait to be
	// accepted.
	MaxConns int
}

// Default are the limits of airlockd's TCP servers: pages and scrapes
// take well under a second; a console page of a 2 MiB diff is the
// largest response.
var Default = Limits{
	ReadTimeout:    30 * time.Second,
	WriteTimeout:   2 * time.Minute,
	IdleTimeout:    time.Minute,
	MaxHeaderBytes: 64 << 10,
	MaxConns:       256,
}

// Server returns an http.Server for h with lim's timeouts and header
// bound.
func Server(h http.Handler, lim Limits) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: min(10*time.Second, lim.ReadTimeout),
		ReadTimeout:       lim.ReadTimeout,
		WriteTimeout:      lim.WriteTimeout,
		IdleTimeout:       lim.IdleTimeout,
		MaxHeaderBytes:    lim.MaxHeaderBytes,
	}
}

// Listener returns l accepting at most lim.MaxConns connections at once.
func Listener(l net.Listener, lim Limits) net.Listener {
	if lim.MaxConns <= 0 {
		return l
	}
	return netutil.LimitListener(l, lim.MaxConns)
}

// LoopbackHosts are the Host headers that name a loopback listener on
// port: a server on loopback answers only to them, since a web page whose
// name an attacker rebinds to 127.0.0.1 (DNS rebinding) sends its own.
func LoopbackHosts(port int) []string {
	p := strconv.Itoa(port)
	return []string{"127.0.0.1:" + p, "localhost:" + p, "[::1]:" + p}
}
