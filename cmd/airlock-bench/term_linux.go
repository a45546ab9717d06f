package main

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// terminalWidth returns w's width in columns when w is a terminal.
func terminalWidth(w io.Writer) (uint, bool) {
	if sw, ok := w.(*syncWriter); ok {
		w = sw.w
	}
	f, ok := w.(*os.File)
	if !ok {
		return 0, false
	}
	if _, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS); err != nil {
		return 0, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil || ws.Col == 0 {
		return 0, true
	}
	return uint(ws.Col), true
}
