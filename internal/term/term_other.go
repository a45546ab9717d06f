//go:build !linux

package term

import "io"

// Width reports no terminal outside Linux.
func Width(io.Writer) (uint, bool) { return 0, false }
