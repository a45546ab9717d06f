package httpapi

import (
	"fmt"
	"net"
	"os/user"
	"strconv"
	"syscall"
)

// peerName names the user of a unix socket connection's peer from its
// credentials (SO_PEERCRED), as of when it connected, with its uid; ""
// for another kind of connection.
func peerName(c net.Conn) (string, uint32) {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return "", 0
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return "", 0
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil || cerr != nil {
		return "", 0
	}
	name := fmt.Sprintf("uid %d", cred.Uid)
	if u, err := user.LookupId(strconv.FormatUint(uint64(cred.Uid), 10)); err == nil && u.Username != "" {
		name = u.Username + " (" + name + ")"
	}
	return name, cred.Uid
}
