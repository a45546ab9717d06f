// Package sdnotify tells systemd (or any service manager speaking its
// notification protocol, sd_notify(3)) how the daemon's start and stop
// go: READY=1 once the API is served, STOPPING=1 when it stops. The unit
// is Type=notify, so `systemctl start airlockd` returns once the socket
// answers.
package sdnotify

import (
	"fmt"
	"net"
	"os"
	"sync"
)

var (
	mu     sync.Mutex
	socket string
)

// Take reads the service manager's socket from NOTIFY_SOCKET and removes
// the variable from the environment, so that no child (the embedded
// containerd speaks the protocol too) reports in the daemon's name. Call
// it first in main.
func Take() {
	mu.Lock()
	defer mu.Unlock()
	socket = os.Getenv("NOTIFY_SOCKET")
	_ = os.Unsetenv("NOTIFY_SOCKET")
}

// Notify sends state ("READY=1", "STOPPING=1", "STATUS=...", lines joined
// by \n) to the service manager; without one it does nothing.
func Notify(state string) error {
	mu.Lock()
	s := socket
	mu.Unlock()
	if s == "" {
		return nil
	}
	addr := &net.UnixAddr{Name: s, Net: "unixgram"}
	if s[0] == '@' {
		addr.Name = "\x00" + s[1:] // an abstract socket
	}
	c, err := net.DialUnix("unixgram", nil, addr)
	if err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	defer c.Close()
	if _, err := c.Write([]byte(state)); err != nil {
		return fmt.Errorf("sd_notify: %w", err)
	}
	return nil
}
