package httpapi

import (
	"context"
	"net"
)

type callerKey struct{}

// connContext records who is at the other end of an API connection (its
// http.Server's ConnContext): the user of a unix socket's peer.
func connContext(ctx context.Context, c net.Conn) context.Context {
	if who := peerName(c); who != "" {
		return context.WithValue(ctx, callerKey{}, who)
	}
	return ctx
}

// caller names the API's caller, for what is done in their name: "alice
// (uid 1000)", "uid 1000" for a uid without a name, or "api" when the
// connection did not say.
func caller(ctx context.Context) string {
	if who, ok := ctx.Value(callerKey{}).(string); ok {
		return who
	}
	return "api"
}
