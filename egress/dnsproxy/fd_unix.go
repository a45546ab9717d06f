//go:build unix && !linux

package dnsproxy

import "syscall"

// fdExchange says whether upstream UDP exchanges use the socket's
// descriptor directly (exchangeFD).
const fdExchange = true

func fdRead(fd uintptr, b []byte) (int, error)  { return syscall.Read(int(fd), b) }
func fdWrite(fd uintptr, b []byte) (int, error) { return syscall.Write(int(fd), b) }
