package httpapi

import (
	"context"
	"net"

	"github.com/airlock-sandbox/airlock/internal/caller"
)

// connContext records who is at the other end of an API connection (its
// http.Server's ConnContext): the user of a unix socket's peer.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if who, uid := peerName(c); who != "" {
		return caller.WithPeer(ctx, who, uid)
	}
	return ctx
}
