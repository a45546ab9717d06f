package kubetest

import "syscall"

// sysProcAttr has the kernel kill a control-plane process when the thread
// that started it ends, which is when the test binary dies without cleaning
// up (Go's threads outlive their goroutines, except those a goroutine locked
// and never unlocked).
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
