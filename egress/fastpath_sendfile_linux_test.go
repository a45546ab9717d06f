package egress_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// TestFastAttackSendfileRewrite: a client's kernel sends data it was
// given with sendfile(2) from the file's pages, and sends it again from
// them as they are then: a file rewritten after the send has its new
// bytes in the retransmission, at the same sequence numbers. Any
// unprivileged process can so send two copies of the same bytes that say
// different things, with no packet of its own making. The fast path holds
// a ClientHello that is not yet whole, unacknowledged, and the client's
// kernel sends its bytes again (rewritten from allowed.test to
// other.test, of the same length): the copy is refused for its other
// bytes, audited, and the server never answers.
func TestFastAttackSendfileRewrite(t *testing.T) {
	allowed := tls12Hello(append(sniExt("allowed.test"), tlsExt(0x7a7a, nil)...))
	other := tls12Hello(append(sniExt("other.test"), tlsExt(0x7a7a, []byte{0, 0})...))
	if len(allowed) != len(other) {
		t.Fatalf("hellos of %d and %d bytes", len(allowed), len(other))
	}
	path := filepath.Join(t.TempDir(), "hello")
	if err := os.WriteFile(path, allowed, 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fw := startFastWorld(t)
	c, err := fw.dialFrom(t.Context(), 0)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	// All but the last byte, from the file's pages: held, not whole.
	var serr error
	if err := rc.Write(func(fd uintptr) bool {
		var off int64
		_, serr = unix.Sendfile(int(fd), int(f.Fd()), &off, len(allowed)-1)
		return true
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	time.Sleep(50 * time.Millisecond)
	if _, err := f.WriteAt(other, 0); err != nil {
		t.Fatal(err)
	}
	// The retransmission timeout (at least 200 ms) passes: the bytes go
	// again, other.test's now.
	time.Sleep(1500 * time.Millisecond)
	_, _ = c.Write(other[len(other)-1:])
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	if cn, err := serverCertName(c); err == nil {
		t.Errorf("the server answered with the certificate of %q", cn)
	}
	ev := fw.audit.waitEvent(t, "fast", "l7", "refused", fw.https.String())
	if !strings.Contains(ev.Reason, "different bytes") {
		t.Errorf("refusal %+v: want the copy with other bytes named", ev)
	}
}
