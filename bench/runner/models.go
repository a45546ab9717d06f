package runner

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

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

// Upstream is a real model API that agents working on tasks reach. Its one
// host name is published in the world, on an address where the bench's own
// proxy answers (internal/world's AddForeignHost): it terminates the
// sandbox's TLS with a certificate of the world's CA for that name alone,
// refuses any request for another name, puts the operator's key into the
// request (whatever key the agent sent: it holds a placeholder) and sends
// it on over TLS, verified, to the real host through the host's routes.
// That is the only way out of the world, for that name alone, and the key
// never enters a sandbox in any mode; the world's services stay inside.
type Upstream struct {
	// Host is the API's host name (api.anthropic.com), reached on port
	// 443.
	Host string
	// Key is the operator's API key, held by the bench's proxy alone.
	Key string
	// Bearer sends the key as "Authorization: Bearer" (OpenAI's API);
	// otherwise as x-api-key (Anthropic's).
	Bearer bool
	// Dial opens a connection to the API (default: TCP to Host:443
	// through the host's resolver and routes).
	Dial func(ctx context.Context) (net.Conn, error)
	// ExtraRoots (PEM) are trusted for the API besides the host's system
	// roots: for a stand-in API.
	ExtraRoots []byte
}

// upstreamOffset places the upstream API's name in the world: after the
// model hosts (from + 16).
const upstreamOffset = 40

// systemRoots is the host's CA bundle.
const systemRoots = "/etc/ssl/certs/ca-certificates.crt"

// caMount is where sessions without the gateway find the bundle that
// trusts the world's CA beside the system roots (the upstream API's name
// is served with a certificate of the world's CA).
const caMount = "/opt/airlock-bench-ca"

// Placeholder is the API key an agent holds when the bench's proxy puts
// the real one in.
const Placeholder = "sk-airlock-bench-placeholder"

// maxUpstreamRequests bounds the requests the proxy carries at once.
const maxUpstreamRequests = 64

// serveUpstream publishes up in the world behind the bench's proxy, and
// writes the bundle sessions without the gateway trust into root.
func serveUpstream(n *testworld.World, m *Models, up *Upstream, root string) error {
	if up.Host == "" || up.Key == "" {
		return fmt.Errorf("model upstream: a host and a key are required: %w", errdefs.ErrInvalidArgument)
	}
	h, err := upstreamProxy(up)
	if err != nil {
		return err
	}
	ip := n.Net().Addr()
	for range upstreamOffset {
		ip = ip.Next()
	}
	if err := n.AddForeignHost(up.Host, ip, h); err != nil {
		return err
	}
	m.caDir = filepath.Join(root, "model-ca")
	sys, _ := os.ReadFile(systemRoots)
	if err := os.MkdirAll(m.caDir, 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(m.caDir, "bundle.pem"), append(append(sys, '\n'), n.CAPEM()...), 0o644); err != nil {
		return err
	}
	m.up = up
	return nil
}

// upstreamProxy is the handler of the upstream API's name in the world.
func upstreamProxy(up *Upstream) (http.Handler, error) {
	roots, err := x509.SystemCertPool()
	if err != nil {
		roots = x509.NewCertPool()
	}
	if len(up.ExtraRoots) > 0 && !roots.AppendCertsFromPEM(up.ExtraRoots) {
		return nil, fmt.Errorf("model upstream: no certificate in the extra roots: %w", errdefs.ErrInvalidArgument)
	}
	dial := up.Dial
	if dial == nil {
		dial = func(ctx context.Context) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "tcp", net.JoinHostPort(up.Host, "443"))
		}
	}
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.Out.URL.Scheme, r.Out.URL.Host, r.Out.Host = "https", up.Host, up.Host
			r.Out.Header.Del("X-Api-Key")
			r.Out.Header.Del("Authorization")
			if up.Bearer {
				r.Out.Header.Set("Authorization", "Bearer "+up.Key)
			} else {
				r.Out.Header.Set("X-Api-Key", up.Key)
			}
		},
		Transport: &http.Transport{
			// Whatever address a request names, the connection goes to
			// the API's host alone.
			DialContext:         func(ctx context.Context, _, _ string) (net.Conn, error) { return dial(ctx) },
			TLSClientConfig:     &tls.Config{RootCAs: roots, ServerName: up.Host, MinVersion: tls.VersionTLS12},
			ForceAttemptHTTP2:   true,
			TLSHandshakeTimeout: 15 * time.Second,
			IdleConnTimeout:     90 * time.Second,
		},
		FlushInterval: -1, // server-sent events as they come
		ErrorHandler: func(rw http.ResponseWriter, _ *http.Request, err error) {
			http.Error(rw, "airlock bench: model API unreachable: "+strings.ReplaceAll(err.Error(), up.Key, "[api key]"), http.StatusBadGateway)
		},
	}
	slots := make(chan struct{}, maxUpstreamRequests)
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hp, _, err := net.SplitHostPort(host); err == nil {
			host = hp
		}
		if r.TLS == nil || !strings.EqualFold(strings.TrimSuffix(host, "."), up.Host) || !strings.EqualFold(r.TLS.ServerName, up.Host) {
			http.Error(rw, fmt.Sprintf("airlock bench: this address serves %s alone", up.Host), http.StatusMisdirectedRequest)
			return
		}
		select {
		case slots <- struct{}{}:
			defer func() { <-slots }()
		default:
			http.Error(rw, "airlock bench: too many model API requests at once", http.StatusTooManyRequests)
			return
		}
		rp.ServeHTTP(rw, r)
	}), nil
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

// upstreamCAArgs make the stack's daemon's gateway trust the world's CA
// when it dials a world host for TLS it terminates: to inject a model
// host's key on verified TLS, and to check the HTTP rules of a request to
// the paste site over HTTPS. The world's services hold certificates of
// that CA alone.
func (s *Stack) upstreamCAArgs() ([]string, error) {
	ca := filepath.Join(s.Root, "world-ca.pem")
	pem := s.Network.CAPEM()
	if err := os.WriteFile(ca, pem, 0o644); err != nil {
		return nil, err
	}
	return []string{"--upstream-ca", ca}, nil
}

// admissionArgs give the stack's daemon the built-in admission policy with
// the stack's own secret directories as well: the model API keys
// (ROOT/secrets/HOST/key) and each worker's registry tokens
// (SecretsDir(i)/HOST/NAME), each file admitted for its directory's host
// alone.
func (s *Stack) admissionArgs() ([]string, error) {
	dirs := []string{policies.DefaultSecretDir, filepath.Join(s.Root, "secrets")}
	for i := range s.cfg.Workers {
		dirs = append(dirs, s.SecretsDir(i))
	}
	adm := filepath.Join(s.Root, "admission.hcl")
	src, err := policies.DefaultAdmissionFile(dirs...)
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(adm, []byte(src), 0o644); err != nil {
		return nil, err
	}
	if _, err := policies.LoadAdmissionFile(adm); err != nil {
		return nil, fmt.Errorf("the bench daemon's admission policy: %w", err)
	}
	return []string{"--admission", adm}, nil
}

// Len is the number of model hosts.
func (m *Models) Len() int { return len(m.hosts) }
