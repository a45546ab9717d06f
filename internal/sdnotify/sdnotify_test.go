package sdnotify

import (
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestNotify(t *testing.T) {
	for _, name := range []string{filepath.Join(t.TempDir(), "notify"), "@airlock-sdnotify-test-" + filepath.Base(t.TempDir())} {
		addr := &net.UnixAddr{Name: name, Net: "unixgram"}
		if name[0] == '@' {
			addr.Name = "\x00" + name[1:]
		}
		l, err := net.ListenUnixgram("unixgram", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("NOTIFY_SOCKET", name)
		Take()
		if v, ok := os.LookupEnv("NOTIFY_SOCKET"); ok {
			t.Errorf("NOTIFY_SOCKET=%q left for children", v)
		}
		if err := Notify("READY=1\nSTATUS=serving"); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 64)
		n, err := l.Read(buf)
		if err != nil || string(buf[:n]) != "READY=1\nSTATUS=serving" {
			t.Errorf("%s got %q, %v", name, buf[:n], err)
		}
		l.Close()
	}
	t.Setenv("NOTIFY_SOCKET", "")
	Take()
	if err := Notify("READY=1"); err != nil {
		t.Errorf("without a service manager: %v", err)
	}
}
