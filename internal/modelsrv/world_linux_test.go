package modelsrv_test

import (
	"crypto/rand"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/airlock-sandbox/airlock/internal/modelsrv"
	"github.com/airlock-sandbox/airlock/internal/testutil"
	"github.com/airlock-sandbox/airlock/internal/world"
)

// TestAgentsInWorld runs each real agent inside a test world's network
// namespace, where the only reachable hosts are the world's: the model
// server is a world host (api.<agent>.test, HTTPS with a certificate of the
// world's CA, HTTP/2 offered), the agent resolves names through the
// world's DNS server, and the DNS log shows every name the agent looked
// up besides the model API's.
func TestAgentsInWorld(t *testing.T) {
	testutil.RequiresRoot(t)
	bins := agentBinaries(t)
	w, err := world.Start(t.Context(), world.Config{Prefix: "ms" + strings.ToLower(rand.Text()[:5])})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Close(); err != nil {
			t.Error(err)
		}
	})
	etc := t.TempDir()
	caFile := filepath.Join(etc, "ca.pem")
	resolv := filepath.Join(etc, "resolv.conf")
	if err := os.WriteFile(caFile, w.CAPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(resolv, []byte("nameserver "+w.DNSAddr().String()+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// inWorld runs bin in the world's network namespace with the world's
	// DNS server as its resolver (resolv.conf bound over in a mount
	// namespace of its own).
	inWorld := func(bin string, args ...string) *exec.Cmd {
		return exec.Command("nsenter", append([]string{"--net=" + w.NetnsPath(), "unshare", "--mount", "--propagation", "private",
			"sh", "-c", `mount --bind "$0" /etc/resolv.conf && exec "$@"`, resolv, bin}, args...)...)
	}
	for i, agent := range []string{"claude", "codex"} {
		t.Run(agent, func(t *testing.T) {
			dir := t.TempDir()
			srv, err := modelsrv.New(workScript(dir))
			if err != nil {
				t.Fatal(err)
			}
			host := "api." + agent + ".test"
			if err := w.AddHost(host, netip.AddrFrom4([4]byte{10, 214, 0, byte(20 + i)}), world.WithHandler(srv), world.WithTLS()); err != nil {
				t.Fatal(err)
			}
			key := "sk-world-" + agent
			var args, env []string
			if agent == "claude" {
				args, env = claudeArgs("https://"+host, key, "-p", "do the work", "--permission-mode", "bypassPermissions")
			} else {
				args, env = codexArgs("https://"+host, key, "do the work")
			}
			before := len(w.DNSLog())
			cmd := inWorld(bins[agent], args...)
			cmd.Dir = dir
			cmd.Env = agentEnv(t.TempDir(), caFile, env...)
			start := time.Now()
			out := run(t, 3*time.Minute, cmd)
			logCalls(t, srv, start)
			checkWork(t, srv, dir, key, out)
			var names []string
			for _, q := range w.DNSLog()[before:] {
				if n := strings.TrimSuffix(q.Name, "."); !slices.Contains(names, n) {
					names = append(names, n)
				}
			}
			t.Logf("%s looked up: %v", agent, names)
			if !slices.Contains(names, host) {
				t.Errorf("%s never looked up %s: %v", agent, host, names)
			}
			for _, c := range srv.Calls() {
				if c.Header.Get("User-Agent") == "" {
					t.Errorf("call %s %s without a User-Agent", c.Method, c.Path)
				}
			}
		})
	}
}
