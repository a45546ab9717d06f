package runner

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/containerd/errdefs"

	testworld "github.com/airlock-sandbox/airlock/internal/world"
	"github.com/airlock-sandbox/airlock/policies"
)

// Models are the model API hosts of the world: one per world instance
// (model-N.bench.test), so that each worker's agent talks to a model of
// its own, served over HTTP on port 80 and HTTPS on 443 with a
// certificate of the world's CA. What a host answers is set per agent run
// (Set): a scripted model server (internal/modelsrv). Each host has an API
// key of its own, in a file under the stack's secrets directory
// (DIR/HOST/key), which the stack's daemon admits for injection into HOST
// alone.
type Models struct {
	hosts []string
	keys  []string
	dir   string
	slots []*modelSlot
	// up is the real model API every worker's agent reaches instead, when
	// the stack has one (StackConfig.ModelUpstream).
	up *Upstream
	// caDir is the host directory of the bundle trusting up's extra
	// roots, mounted into sessions without the gateway; empty if none.
	caDir string
}

// Upstream is a real model API that agents working on tasks reach: its
// one host name is published in the world, and each connection to it is
// relayed from the bench's process through the host's routes to the real
// host (internal/world's AddRelay). That is the only way out of the world,
// for that name alone; the world's services stay inside. TLS passes the
// relay end to end: the agent (in a mode without the L7 gateway) or the
// gateway verifies the real host's certificate.
type Upstream struct {
	// Host is the API's host name (api.anthropic.com), reached on port
	// 443.
	Host string
	// Key is the operator's API key: in a file only the stack's daemon
	// reads, injected by the gateway where a mode has it, in the agent's
	// environment otherwise.
	Key string
	// Dial opens a connection to the API (default: TCP to Host:443
	// through the host's resolver and routes).
	Dial func(ctx context.Context) (net.Conn, error)
	// ExtraRoots (PEM) are trusted for the API besides the host's system
	// roots: by the gateway, and in sessions without it (a bundle of the
	// system roots and these, mounted read-only). For a stand-in API.
	ExtraRoots []byte
}

// relayIP is the world address of the upstream API's relay: after the
// model hosts (from + 16).
const relayOffset = 40

// systemRoots is the host's CA bundle.
const systemRoots = "/etc/ssl/certs/ca-certificates.crt"

// caMount is where sessions without the gateway find the bundle that
// trusts an upstream's extra roots.
const caMount = "/opt/airlock-bench-ca"

// serveUpstream publishes up in the world through a relay and writes its
// key under dir.
func serveUpstream(n *testworld.World, m *Models, up *Upstream, root string) error {
	if up.Host == "" || up.Key == "" {
		return fmt.Errorf("model upstream: a host and a key are required: %w", errdefs.ErrInvalidArgument)
	}
	dial := up.Dial
	if dial == nil {
		dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", net.JoinHostPort(up.Host, "443"))
		}
	}
	ip := n.Net().Addr()
	for range relayOffset {
		ip = ip.Next()
	}
	if err := n.AddRelay(up.Host, ip, 443, dial); err != nil {
		return err
	}
	file := filepath.Join(m.dir, up.Host, "key")
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(file, []byte(up.Key+"\n"), 0o600); err != nil {
		return err
	}
	if len(up.ExtraRoots) > 0 {
		m.caDir = filepath.Join(root, "model-ca")
		sys, _ := os.ReadFile(systemRoots)
		if err := os.MkdirAll(m.caDir, 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(m.caDir, "bundle.pem"), append(append(sys, '\n'), up.ExtraRoots...), 0o644); err != nil {
			return err
		}
	}
	m.up = up
	return nil
}

// modelHostFmt names instance N's model host.
const modelHostFmt = "model-%d.bench.test"

// serveModels publishes n model hosts on the world's network, on the
// addresses after the services', and writes their keys under dir.
func serveModels(n *testworld.World, count int, dir string) (*Models, error) {
	m := &Models{dir: dir}
	// The services take the addresses from the DNS server's + 4 on (see
	// Worlds.Serve); the model hosts follow, from + 16.
	ip := n.Net().Addr()
	for range 16 {
		ip = ip.Next()
	}
	for i := range count {
		host := fmt.Sprintf(modelHostFmt, i)
		var rnd [16]byte
		if _, err := rand.Read(rnd[:]); err != nil {
			return nil, err
		}
		key := "sk-bench-" + hex.EncodeToString(rnd[:])
		file := filepath.Join(dir, host, "key")
		if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
			return nil, err
		}
		if err := os.WriteFile(file, []byte(key+"\n"), 0o600); err != nil {
			return nil, err
		}
		slot := &modelSlot{}
		if err := n.AddHost(host, ip, testworld.WithHandler(slot), testworld.WithTLS()); err != nil {
			return nil, err
		}
		m.hosts, m.keys, m.slots = append(m.hosts, host), append(m.keys, key), append(m.slots, slot)
		ip = ip.Next()
	}
	return m, nil
}

// Host is instance i's model host (the upstream API's, if any).
func (m *Models) Host(i int) string {
	if m.up != nil {
		return m.up.Host
	}
	return m.hosts[i]
}

// Key is the API key of instance i's model host.
func (m *Models) Key(i int) string {
	if m.up != nil {
		return m.up.Key
	}
	return m.keys[i]
}

// Upstream is the real model API, or nil.
func (m *Models) Upstream() *Upstream { return m.up }

// KeySource is where a session's secret block reads instance i's key
// from: a file the stack's daemon admits for Host(i) alone.
func (m *Models) KeySource(i int) string {
	return "file:" + filepath.Join(m.dir, m.Host(i), "key")
}

// Set makes h answer instance i's model host (nil: 503).
func (m *Models) Set(i int, h http.Handler) { m.slots[i].set(h) }

// modelSlot is a model host's handler: whatever was set last.
type modelSlot struct {
	mu sync.Mutex
	h  http.Handler // +checklocks:mu
}

func (s *modelSlot) set(h http.Handler) {
	s.mu.Lock()
	s.h = h
	s.mu.Unlock()
}

func (s *modelSlot) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	h := s.h
	s.mu.Unlock()
	if h == nil {
		http.Error(w, "no agent runs against this model host now", http.StatusServiceUnavailable)
		return
	}
	h.ServeHTTP(w, r)
}

// modelDaemonArgs are the flags that let the stack's daemon carry agents'
// model traffic: its gateway trusts the world's CA when it dials a model
// host (to inject the key on verified TLS), and its admission policy, the
// built-in one otherwise, also admits the model hosts' key files, each for
// its own host.
func (s *Stack) modelDaemonArgs() ([]string, error) {
	ca := filepath.Join(s.Root, "world-ca.pem")
	pem := s.Network.CAPEM()
	if up := s.cfg.ModelUpstream; up != nil {
		// The real API's certificate: the host's roots, and any extra.
		sys, err := os.ReadFile(systemRoots)
		if err != nil && len(up.ExtraRoots) == 0 {
			return nil, fmt.Errorf("model upstream: the gateway verifies %s with the host's CA bundle: %w", up.Host, err)
		}
		pem = append(append(append(slices.Clone(pem), '\n'), sys...), up.ExtraRoots...)
	}
	if err := os.WriteFile(ca, pem, 0o644); err != nil {
		return nil, err
	}
	secrets := filepath.Join(s.Root, "secrets")
	adm := filepath.Join(s.Root, "admission.hcl")
	src := fmt.Sprintf(`# The built-in admission policy, and the bench's model API keys.
admission {
  host_paths   = ["/"]
  users        = ["1-4294967294"]
  groups       = ["1-4294967294"]
  capabilities = [%s]
  secret_source "file:%s/*/*" {
    hosts = ["{dir}"]
  }
  secret_source "file:%s/*/*" {
    hosts = ["{dir}"]
  }
}
`, hclStrings(policies.SafeCapabilities), policies.DefaultSecretDir, secrets)
	if err := os.WriteFile(adm, []byte(src), 0o644); err != nil {
		return nil, err
	}
	if _, err := policies.LoadAdmissionFile(adm); err != nil {
		return nil, fmt.Errorf("the bench daemon's admission policy: %w", err)
	}
	return []string{"--upstream-ca", ca, "--admission", adm}, nil
}

// hclStrings lists ss as HCL strings, comma-separated.
func hclStrings(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// Len is the number of model hosts.
func (m *Models) Len() int { return len(m.hosts) }
