package runner

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/airlock-sandbox/airlock/bench/world"
	"github.com/airlock-sandbox/airlock/credentials/verify"
	testworld "github.com/airlock-sandbox/airlock/internal/world"
)

// Worlds are independent instances of the benchmark world behind one set of
// host names, so that workers can run actions in parallel, each against
// its own state. A request goes to the instance its session is bound to:
// the session is read from the token's "sub" claim (the instance then
// verifies the token as usual). A request whose token is no session's but
// one of the package registry's static tokens goes to the one worker's
// instance that has it loaded (when exactly one has). Other requests that
// name no bound session (git's first, anonymous request of every
// exchange, which changes nothing; the paste site's, which take no
// token) go to the instance RouteUnbound names, by default an extra
// instance whose state nobody measures.
type Worlds struct {
	list    []*world.World // workers' instances, then the extra one
	mu      sync.RWMutex
	owner   map[string]int // +checklocks:mu
	unbound int            // +checklocks:mu
}

// NewWorlds builds n instances (and the extra one) checking tokens with v.
func NewWorlds(ctx context.Context, n int, v *verify.Verifier, opts ...world.Option) (_ *Worlds, retErr error) {
	ws := &Worlds{owner: map[string]int{}, unbound: -1}
	defer func() {
		if retErr != nil {
			ws.Close()
		}
	}()
	for range n + 1 {
		w, err := world.New(ctx, v, opts...)
		if err != nil {
			return nil, err
		}
		ws.list = append(ws.list, w)
	}
	return ws, nil
}

// Len is the number of workers' instances.
func (ws *Worlds) Len() int { return len(ws.list) - 1 }

// World returns instance i.
func (ws *Worlds) World(i int) *world.World { return ws.list[i] }

// Bind sends the requests of session to instance i.
func (ws *Worlds) Bind(session string, i int) {
	ws.mu.Lock()
	ws.owner[session] = i
	ws.mu.Unlock()
}

// Unbind forgets session.
func (ws *Worlds) Unbind(session string) {
	ws.mu.Lock()
	delete(ws.owner, session)
	ws.mu.Unlock()
}

// RouteUnbound sends the requests that name no bound session to worker
// instance i instead of the extra instance; an i out of [0, Len()) sends
// them to the extra instance again. They are the paste site's, which take no token, and those with a
// registry token that no single worker's instance holds (every instance
// loaded the same instance data, say). Only one instance receives them,
// so a runner measuring them runs the sessions that make them one at a
// time, with RouteUnbound naming that session's instance.
func (ws *Worlds) RouteUnbound(i int) {
	ws.mu.Lock()
	if i >= ws.Len() {
		i = -1
	}
	ws.unbound = i
	ws.mu.Unlock()
}

func (ws *Worlds) pick(r *http.Request) *world.World {
	raw, err := verify.TokenFromRequest(r)
	if err == nil {
		if sub := tokenSubject(raw); sub != "" {
			ws.mu.RLock()
			i, ok := ws.owner[sub]
			ws.mu.RUnlock()
			if ok {
				return ws.list[i]
			}
		} else if w := ws.holder(raw); w != nil {
			return w
		}
	}
	ws.mu.RLock()
	i := ws.unbound
	ws.mu.RUnlock()
	if i >= 0 {
		return ws.list[i]
	}
	return ws.list[len(ws.list)-1]
}

// holder returns the one worker's instance that holds raw as a registry
// token, or nil if none or several do.
func (ws *Worlds) holder(raw string) *world.World {
	var found *world.World
	for _, w := range ws.list[:len(ws.list)-1] {
		if w.HasRegistryToken(raw) {
			if found != nil {
				return nil
			}
			found = w
		}
	}
	return found
}

// tokenSubject returns the unverified "sub" claim of a compact JWS, or "".
func tokenSubject(raw string) string {
	parts := strings.Split(raw, ".")
	if len(parts) != 3 || len(parts[1]) > 16<<10 {
		return ""
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return ""
	}
	var c struct {
		Sub string `json:"sub"`
	}
	if json.Unmarshal(b, &c) != nil {
		return ""
	}
	return c.Sub
}

// Handler serves one service of the instance each request belongs to.
func (ws *Worlds) Handler(service func(*world.World) http.Handler) http.Handler {
	hs := make(map[*world.World]http.Handler, len(ws.list))
	for _, w := range ws.list {
		hs[w] = service(w)
	}
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		hs[ws.pick(r)].ServeHTTP(rw, r)
	})
}

// Serve publishes the services on the network under their audiences'
// names, each on its own address after the DNS server's (.4 to .11: git,
// jobs, services, objects, then the tracker, the model registry, the
// package registry and the paste site), over HTTP on port 80 and HTTPS on
// port 443 (a certificate of the world's CA for the name the client asks
// for). Each address but the paste site's also carries the service's
// admin name (world.AdminHosts), published in the world's DNS with the
// same address and served by the same handler: two names on one address.
// A request whose Host is neither name is answered 421 (Misdirected
// Request), as a virtual-host ingress answers. A name outside the world's
// zone (the paste site's, paste.share.test) is published as a foreign
// host: the world's DNS answers for that one name.
func (ws *Worlds) Serve(n *testworld.World) error {
	ip := n.Net().Addr().Next().Next().Next().Next()
	for _, s := range serviceHosts(ws.list[0].Audiences()) {
		names := []string{s.host}
		if s.admin != "" {
			names = append(names, s.admin)
		}
		h := vhost(names, ws.Handler(s.h))
		if !inZone(s.host, n.Zone()) {
			if err := n.AddForeignHost(s.host, ip, h, testworld.WithPlainHTTP()); err != nil {
				return err
			}
			ip = ip.Next()
			continue
		}
		if err := n.AddHost(s.host, ip, testworld.WithHandler(h), testworld.WithTLS()); err != nil {
			return err
		}
		if s.admin != "" {
			// The address is served already: this only publishes the name.
			if err := n.AddHost(s.admin, ip); err != nil {
				return err
			}
		}
		ip = ip.Next()
	}
	return nil
}

// inZone reports whether host is zone (fully qualified) or a name in it.
func inZone(host, zone string) bool {
	h := "." + strings.ToLower(strings.TrimSuffix(host, ".")) + "."
	return strings.HasSuffix(h, "."+strings.ToLower(zone))
}

// serviceHost is a service as Serve publishes it.
type serviceHost struct {
	host, admin string
	h           func(*world.World) http.Handler
}

// serviceHosts lists the services in the order of their addresses.
func serviceHosts(a world.Audiences) []serviceHost {
	admin := world.AdminHosts
	return []serviceHost{
		{a.Git, admin.Git, (*world.World).GitHandler},
		{a.Jobs, admin.Jobs, (*world.World).JobsHandler},
		{a.Services, admin.Services, (*world.World).ServicesHandler},
		{a.Objects, admin.Objects, (*world.World).ObjectsHandler},
		{a.Tracker, admin.Tracker, (*world.World).TrackerHandler},
		{a.Models, admin.Models, (*world.World).ModelsHandler},
		{a.Packages, admin.Packages, (*world.World).PackagesHandler},
		{a.Paste, admin.Paste, (*world.World).PasteHandler},
	}
}

// vhost serves h to requests whose Host (without its port, in any case,
// with or without a trailing dot) is one of names, and answers 421 to
// others.
func vhost(names []string, h http.Handler) http.Handler {
	return http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hp, _, err := net.SplitHostPort(host); err == nil {
			host = hp
		}
		host = strings.TrimSuffix(strings.ToLower(host), ".")
		if !slices.Contains(names, host) {
			http.Error(rw, fmt.Sprintf("no virtual host %q on this address", r.Host), http.StatusMisdirectedRequest)
			return
		}
		h.ServeHTTP(rw, r)
	})
}

// Close closes every instance.
func (ws *Worlds) Close() error {
	var errs []error
	for _, w := range ws.list {
		errs = append(errs, w.Close())
	}
	return errors.Join(errs...)
}

// DaemonVerifier checks tokens against the daemon's verification
// endpoints, reached over its API socket (/v1/credentials/...): keys,
// revocation by introspection, and rejection reports for the session's
// audit log.
func DaemonVerifier(socket string) *verify.Verifier {
	hc := &http.Client{
		Timeout: 10 * time.Second,
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				var d net.Dialer
				return d.DialContext(ctx, "unix", socket)
			},
			MaxIdleConnsPerHost: 8,
		},
	}
	base := "http://airlockd/v1/credentials"
	opt := verify.WithHTTPClient(hc)
	v, err := verify.New(verify.NewRemoteKeys(base+"/.well-known/jwks.json", opt), verify.NewIntrospector(base+"/v1/introspect", opt),
		verify.WithReporter(verify.NewHTTPReporter(base+"/v1/report", opt)))
	if err != nil {
		// New fails only without keys or a revocation checker.
		panic(fmt.Sprintf("daemon verifier: %v", err))
	}
	return v
}
