package httpapi

import (
	"context"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime/debug"
	"time"

	"github.com/airlock-sandbox/airlock/internal/log"
)

// DebugHandler serves Go's runtime profiles (net/http/pprof under
// /debug/pprof/) and POST /debug/free-os-memory, which runs a garbage
// collection and returns as much memory to the operating system as it
// can (runtime/debug.FreeOSMemory), so that resident memory measured
// right after shows what the daemon keeps, not what its allocator has
// yet to give back.
func DebugHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("POST /debug/free-os-memory", func(w http.ResponseWriter, _ *http.Request) {
		debug.FreeOSMemory()
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// ServeDebug serves DebugHandler on the unix socket path, mode 0600 (as
// containerd's debug socket), until ctx is done. The profiles show the
// daemon's stacks and command line: only root should read them.
func ServeDebug(ctx context.Context, socket string) (*http.Server, error) {
	l, err := Listen(socket, "")
	if err != nil {
		return nil, err
	}
	srv := &http.Server{Handler: DebugHandler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	context.AfterFunc(ctx, func() { _ = srv.Close(); _ = os.Remove(socket) })
	log.G(ctx).Info("serving debug endpoints", "socket", socket)
	return srv, nil
}
