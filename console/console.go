// Package console serves airlockd's web console: a few server-rendered
// pages (html/template, no script) for an operator's daily work.
//
//   - / lists the sessions with their state, and the requests held for
//     approval, each with allow and deny buttons and a reason;
//   - /sessions/{id} shows one session: its held requests, the change set
//     of its overlay workspaces and their unified diff with commit and
//     discard buttons, and its audit timeline.
//
// It serves the daemon in process through the Daemon interface (a part
// of httpapi.Daemon), and decides approvals in the name of "console"
// (with the peer's user on a unix socket), as the API decides them in the
// name of its caller.
//
// Who may use it (Serve):
//   - on a unix socket ("unix:/path"): the socket is made as the API's is
//     (mode 0600, or 0660 owned by the API's socket group), and every
//     connection's peer credentials must name root, airlockd's user or a
//     member of that group;
//   - on TCP: a loopback address unless AllowRemote, and a bearer token,
//     read from TokenFile or generated at start into console.token under
//     the daemon's root (mode 0600). A page accepts the token once, as
//     ?token= (then redirects to the URL without it) or an Authorization
//     header, and sets a random session cookie (HttpOnly, SameSite=Strict);
//     the Host header must name the loopback address.
//
// Every POST carries a CSRF token (an HMAC of the session cookie under a
// key made at start) and an Origin (or Referer) naming the page's own
// host. Every response forbids caching and framing and sets a
// Content-Security-Policy that allows no script and styles only from the
// console itself.
//
// The sandbox chooses file names, diff lines, request hosts, paths and
// bodies, and audit subjects: html/template escapes all of them for the
// place they appear in, none is ever a link, and a held request's body is
// shown with every non-printable character escaped.
package console

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/containerd/errdefs"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/approvals"
	"github.com/airlock-sandbox/airlock/daemon/httpapi"
	"github.com/airlock-sandbox/airlock/internal/httpserve"
	"github.com/airlock-sandbox/airlock/internal/log"
)

// Daemon is what the console needs of airlockd (*daemon.Daemon, any
// httpapi.Daemon). Errors carry errdefs classes.
type Daemon interface {
	List(ctx context.Context) []api.Session
	Inspect(ctx context.Context, id string) (*api.Session, error)
	AuditEach(ctx context.Context, id string, fn func(raw json.RawMessage) error) error
	Diff(ctx context.Context, id string) (*api.ChangeSet, error)
	UnifiedDiff(id string) (func(ctx context.Context, w io.Writer) error, error)
	Commit(ctx context.Context, id string, req api.CommitRequest) (*api.CommitResult, error)
	Discard(ctx context.Context, id string) error
	Approvals() *approvals.Store
}

// TokenFileName is the file under the daemon's root that a generated
// token is written to.
const TokenFileName = "console.token"

// minToken is the shortest token a --console-token-file may hold.
const minToken = 32

// Config says where and to whom the console is served.
type Config struct {
	// Listen is "unix:/abs/path" or a TCP host:port.
	Listen string
	// AllowRemote allows a TCP address that is not loopback.
	AllowRemote bool
	// TokenFile holds the bearer token for TCP (at least 32 characters,
	// readable by its owner alone); empty: a token is generated at start
	// into Root/console.token.
	TokenFile string
	// Root is the daemon's state directory.
	Root string
	// Group is the API socket's group: on a unix socket its members may
	// use the console (and the socket is made 0660 for them).
	Group string
	// SessionPools are the daemon's session address ranges: a TCP
	// address in one is refused, even with AllowRemote.
	SessionPools []netip.Prefix
}

// Check checks cfg without listening: the address, and that TokenFile
// and AllowRemote go with a TCP address.
func (cfg Config) Check() error {
	if path, ok := strings.CutPrefix(cfg.Listen, "unix:"); ok {
		if !filepath.IsAbs(path) {
			return fmt.Errorf("console: unix socket path %q must be absolute: %w", path, errdefs.ErrInvalidArgument)
		}
		if cfg.TokenFile != "" || cfg.AllowRemote {
			return fmt.Errorf("console: a token file and remote addresses are for a TCP address; on a unix socket, peer credentials decide: %w", errdefs.ErrInvalidArgument)
		}
		return nil
	}
	_, err := checkTCP(cfg.Listen, cfg.AllowRemote, cfg.SessionPools)
	return err
}

// Server is a console being served.
type Server struct {
	srv *http.Server
	l   net.Listener
	// URL is where to open it (without the token); empty on a unix
	// socket.
	URL string
	// TokenFile is the file holding the token, for TCP.
	TokenFile string
	// generated is set when TokenFile was made by Serve (and is removed
	// by Close).
	generated bool
}

// Serve listens on cfg.Listen and serves the console of d until Close.
func Serve(ctx context.Context, d Daemon, cfg Config) (_ *Server, retErr error) {
	s := &Server{}
	var opts []Option
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	if path, ok := strings.CutPrefix(cfg.Listen, "unix:"); ok {
		gid := -1
		if cfg.Group != "" {
			g, err := httpapi.LookupGroup(cfg.Group)
			if err != nil {
				return nil, err
			}
			gid = g
		}
		l, err := httpapi.Listen(path, cfg.Group)
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		s.l = l
		opts = append(opts, WithPeerCheck(func(p Peer) error { return allowPeer(p, gid) }), WithLoopbackNames())
	} else {
		host, err := checkTCP(cfg.Listen, cfg.AllowRemote, cfg.SessionPools)
		if err != nil {
			return nil, err
		}
		tok, file, generated, err := loadToken(cfg)
		if err != nil {
			return nil, err
		}
		s.TokenFile, s.generated = file, generated
		defer func() {
			if retErr != nil && generated {
				_ = os.Remove(file)
			}
		}()
		l, err := net.Listen("tcp", net.JoinHostPort(host, portOf(cfg.Listen)))
		if err != nil {
			return nil, fmt.Errorf("console: %w", err)
		}
		s.l = l
		s.URL = "http://" + l.Addr().String() + "/"
		opts = append(opts, WithToken(tok))
		if !cfg.AllowRemote {
			opts = append(opts, WithHosts(httpserve.LoopbackHosts(l.Addr().(*net.TCPAddr).Port)...))
		}
	}
	s.srv = httpserve.Server(New(d, opts...), limits)
	s.srv.BaseContext = func(net.Listener) context.Context { return context.WithoutCancel(ctx) }
	s.srv.ConnContext = connContext
	l := s.l
	if s.URL != "" {
		// TCP: any local user can connect. (A unix socket's mode keeps
		// out all but root and the group, and the peer's credentials
		// are read from the connection itself, which a limiting
		// listener would hide.)
		l = httpserve.Listener(l, limits)
	}
	go func() { _ = s.srv.Serve(l) }()
	log.G(ctx).Info("serving console", "address", s.l.Addr().String(), "url", s.URL, "token_file", s.TokenFile)
	return s, nil
}

// Addr is the address the console listens on.
func (s *Server) Addr() net.Addr { return s.l.Addr() }

// Close stops serving, and removes a generated token file.
func (s *Server) Close() error {
	err := s.srv.Close()
	if s.generated {
		if rerr := os.Remove(s.TokenFile); rerr != nil && !errors.Is(rerr, os.ErrNotExist) {
			err = errors.Join(err, rerr)
		}
	}
	return err
}

// checkTCP checks a TCP listen address and returns the host to bind:
// loopback ("localhost" is 127.0.0.1) unless allowRemote; never every
// interface, a name, or an address in the session pools.
func checkTCP(addr string, allowRemote bool, pools []netip.Prefix) (string, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("console: listen address %q: want unix:/path or host:port: %w", addr, errdefs.ErrInvalidArgument)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("console: listen address %q: bad port: %w", addr, errdefs.ErrInvalidArgument)
	}
	if host == "localhost" {
		return "127.0.0.1", nil
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.IsUnspecified() {
		return "", fmt.Errorf("console: listen address %q: the host must be one IP address or localhost (not every interface, which may include ones sessions reach): %w", addr, errdefs.ErrInvalidArgument)
	}
	for _, p := range pools {
		if p.Contains(ip.Unmap()) {
			return "", fmt.Errorf("console: listen address %q is in the session pool %s, where sessions live: %w", addr, p, errdefs.ErrInvalidArgument)
		}
	}
	if !ip.IsLoopback() && !allowRemote {
		return "", fmt.Errorf("console: listen address %q is not loopback: whoever reaches it with the token can approve requests and commit changes, and the token and pages travel in clear; use a loopback address (and an ssh tunnel), or --console-allow-remote: %w",
			addr, errdefs.ErrInvalidArgument)
	}
	return host, nil
}

func portOf(addr string) string {
	_, port, _ := net.SplitHostPort(addr)
	return port
}

// loadToken reads cfg.TokenFile, or generates a token into
// Root/console.token.
func loadToken(cfg Config) (token, file string, generated bool, _ error) {
	if cfg.TokenFile != "" {
		b, err := readOwnFile(cfg.TokenFile)
		if err != nil {
			return "", "", false, err
		}
		tok := strings.TrimSpace(string(b))
		if len(tok) < minToken || strings.ContainsAny(tok, " \t\r\n") {
			return "", "", false, fmt.Errorf("console token file %s: want one token of at least %d characters without spaces: %w", cfg.TokenFile, minToken, errdefs.ErrInvalidArgument)
		}
		return tok, cfg.TokenFile, false, nil
	}
	if cfg.Root == "" {
		return "", "", false, fmt.Errorf("console: no token file and no root to generate one in: %w", errdefs.ErrInvalidArgument)
	}
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", "", false, err
	}
	tok := hex.EncodeToString(b[:])
	file = filepath.Join(cfg.Root, TokenFileName)
	f, err := os.CreateTemp(cfg.Root, ".console-token-")
	if err != nil {
		return "", "", false, err
	}
	_, werr := io.WriteString(f, tok+"\n")
	if cerr := f.Close(); werr == nil {
		werr = cerr
	}
	if werr == nil {
		// CreateTemp makes the file 0600; say so whatever the umask.
		werr = os.Chmod(f.Name(), 0o600)
	}
	if werr == nil {
		werr = os.Rename(f.Name(), file)
	}
	if werr != nil {
		_ = os.Remove(f.Name())
		return "", "", false, fmt.Errorf("console token file: %w", werr)
	}
	return tok, file, true, nil
}

// limits bound the console server's connections (tests shorten them).
var limits = httpserve.Default

// readOwnFile reads a token file that no one but root or airlockd's user
// could have written or can read: a regular file (not through a symlink
// at its last component), owned by one of them, mode 0600 or narrower.
// A file someone else planted would give them the token.
func readOwnFile(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("console token file: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("console token file: %w", err)
	}
	if !st.Mode().IsRegular() || st.Mode().Perm()&0o077 != 0 {
		return nil, fmt.Errorf("console token file %s has mode %s: it must be a regular file only its owner can read (chmod 0600): %w",
			path, st.Mode(), errdefs.ErrPermissionDenied)
	}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok && sys.Uid != 0 && int(sys.Uid) != os.Geteuid() {
		return nil, fmt.Errorf("console token file %s is owned by uid %d: it must be root's or airlockd's, or whoever owns it knows the token: %w",
			path, sys.Uid, errdefs.ErrPermissionDenied)
	}
	return io.ReadAll(io.LimitReader(f, 4096))
}
