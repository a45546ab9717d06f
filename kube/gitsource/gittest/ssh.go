package gittest

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// SSHD is the sshd the ssh servers run.
const SSHD = "/usr/sbin/sshd"

// SSH is a real sshd on a loopback port serving a Server's repositories
// over git's ssh transport: it takes the login of root with the client key
// it made alone, and runs git-shell for it (fetches and pushes, nothing
// else).
type SSH struct {
	// URL is the base URL of the repositories: a repository NAME is
	// URL/NAME.git.
	URL string
	// Addr is the server's address, HOST:PORT.
	Addr string
	// KeyFile is the private key the server takes (mode 0600).
	KeyFile string
	// KnownHosts is a known_hosts file that lists the server's host key
	// for its address alone.
	KnownHosts string
	// HostKey is the server's public host key, "TYPE BASE64".
	HostKey string

	cmd *exec.Cmd
	log *syncBuffer
}

// StartSSH starts an sshd serving s's repositories; it is stopped (by its
// pid) with the test. It needs root (sshd runs as root and takes root's
// login) and openssh-server (make deps installs it).
func (s *Server) StartSSH() *SSH {
	s.t.Helper()
	return s.StartSSHOn("127.0.0.1")
}

// StartSSHOn is StartSSH listening on loopback address host ("127.0.0.1"
// or "::1").
func (s *Server) StartSSHOn(host string) *SSH {
	s.t.Helper()
	t := s.t
	if os.Geteuid() != 0 {
		t.Skip("an ssh server needs root")
	}
	for _, p := range []string{SSHD, "/usr/bin/ssh-keygen", "/usr/bin/git-shell"} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("ssh git sources' tests need %s (make deps installs openssh-server, openssh-client and git): %v", p, err)
		}
	}
	// sshd's privilege separation directory (its service makes it).
	if err := os.MkdirAll("/run/sshd", 0o755); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	keygen := func(name string) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if out, err := exec.Command("/usr/bin/ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", name, "-f", p).CombinedOutput(); err != nil {
			t.Fatalf("ssh-keygen: %v: %s", err, out)
		}
		return p
	}
	hostKey := keygen("host_key")
	clientKey := keygen("client_key")
	pub, err := os.ReadFile(clientKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	hostPub, err := os.ReadFile(hostKey + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(hostPub))
	if len(f) < 2 {
		t.Fatalf("host key %q", hostPub)
	}
	// The key runs git-shell alone: fetches and pushes, no shell, no
	// forwarding.
	authorized := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(authorized, fmt.Appendf(nil, "restrict,command=\"git-shell -c \\\"$SSH_ORIGINAL_COMMAND\\\"\" %s", pub), 0o600); err != nil {
		t.Fatal(err)
	}
	h := &SSH{KeyFile: clientKey, HostKey: f[0] + " " + f[1]}
	for attempt := 0; ; attempt++ {
		port := freePort(t, host)
		h.Addr = net.JoinHostPort(host, strconv.Itoa(port))
		config := filepath.Join(dir, "sshd_config")
		if err := os.WriteFile(config, fmt.Appendf(nil, `Port %d
ListenAddress %s
HostKey %s
PidFile none
AuthorizedKeysFile %s
StrictModes no
PermitRootLogin prohibit-password
AllowUsers root
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AllowTcpForwarding no
AllowAgentForwarding no
AllowStreamLocalForwarding no
X11Forwarding no
PermitTTY no
PermitUserEnvironment no
PermitUserRC no
PrintMotd no
MaxStartups 50
LogLevel VERBOSE
`, port, host, hostKey, authorized), 0o600); err != nil {
			t.Fatal(err)
		}
		h.log = &syncBuffer{}
		h.cmd = exec.Command(SSHD, "-D", "-e", "-f", config)
		h.cmd.Stdout, h.cmd.Stderr = h.log, h.log
		h.cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "LC_ALL=C"}
		if err := h.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		exited := make(chan error, 1)
		go func() { exited <- h.cmd.Wait() }()
		if up(h.Addr, exited) {
			t.Cleanup(func() {
				// Stopped by its pid; the connections it forked end
				// with their git commands.
				h.cmd.Process.Signal(syscall.SIGTERM)
				select {
				case <-exited:
				case <-time.After(10 * time.Second):
					h.cmd.Process.Kill()
					<-exited
				}
				if t.Failed() {
					t.Logf("sshd on %s:\n%s", h.Addr, h.log.String())
				}
			})
			break
		}
		h.cmd.Process.Kill()
		<-exited
		if attempt == 2 || !strings.Contains(h.log.String(), "Address already in use") {
			t.Fatalf("sshd did not start on %s: %s", h.Addr, h.log.String())
		}
	}
	h.KnownHosts = h.WriteKnownHosts(t, h.Addr, h.HostKey)
	h.URL = "ssh://root@" + h.Addr + s.root
	return h
}

// WriteKnownHosts writes a known_hosts file that lists key (TYPE BASE64)
// for the address addr (HOST:PORT) and returns its path.
func (h *SSH) WriteKnownHosts(t testing.TB, addr, key string) string {
	t.Helper()
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "known_hosts")
	if err := os.WriteFile(p, []byte("["+host+"]:"+port+" "+key+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// Log is what sshd has written.
func (h *SSH) Log() string { return h.log.String() }

// freePort is a TCP port of loopback address host free when it was asked
// for.
func freePort(t testing.TB, host string) int {
	t.Helper()
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// up waits, at most 10 seconds, for an ssh server at addr to send its
// banner; false when it exited first or did not.
func up(addr string, exited chan error) bool {
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err
			return false
		default:
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.SetDeadline(time.Now().Add(2 * time.Second))
			line, _ := bufio.NewReader(c).ReadString('\n')
			c.Close()
			if strings.HasPrefix(line, "SSH-2.0-") {
				return true
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer // +checklocks:mu
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}
