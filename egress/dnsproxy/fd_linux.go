package dnsproxy

import (
	"syscall"
	"unsafe"
)

// fdExchange says whether upstream UDP exchanges use the socket's
// descriptor directly (exchangeFD).
const fdExchange = true

// fdRead and fdWrite read and write a non-blocking socket as raw system
// calls, without telling the scheduler. They never block, but in a
// virtual machine a call on a socket takes long enough (tens of
// microseconds, the packet's path through the network stack included)
// that the runtime's monitor, told of it, takes the goroutine's P away
// and wakes another thread to run it: a thread switch per call. The
// proxy's other socket calls (recvmmsg, sendmmsg) are raw for the same
// reason.
func fdRead(fd uintptr, b []byte) (int, error) {
	return rawIO(syscall.SYS_READ, fd, b)
}

func fdWrite(fd uintptr, b []byte) (int, error) {
	return rawIO(syscall.SYS_WRITE, fd, b)
}

func rawIO(trap, fd uintptr, b []byte) (int, error) {
	n, _, errno := syscall.RawSyscall(trap, fd, uintptr(unsafe.Pointer(unsafe.SliceData(b))), uintptr(len(b)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}
