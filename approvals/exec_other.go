//go:build !unix

package approvals

import "os/exec"

// setProcessGroup leaves cmd as is: cancellation kills the process only.
func setProcessGroup(*exec.Cmd) {}
