package term

import (
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// Width returns w's width in columns and whether w is a terminal (width 0
// when a terminal does not say).
func Width(w io.Writer) (uint, bool) {
	if sw, ok := w.(*SyncWriter); ok {
		w = sw.W
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
