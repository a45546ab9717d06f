//go:build !linux

package httpapi

import "net"

// peerName is "": peer credentials are read on Linux only.
func peerName(net.Conn) (string, uint32) { return "", 0 }
