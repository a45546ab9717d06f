//go:build !linux

package main

import "io"

// terminalWidth reports no terminal outside Linux.
func terminalWidth(io.Writer) (uint, bool) { return 0, false }
