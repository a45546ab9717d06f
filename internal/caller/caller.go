// Package caller carries, in a request's context, who asked for what the
// daemon does in their name: the user of the API socket's peer, or a
// Kubernetes user authenticated by the node endpoint. Decisions and
// commits record it in the session's audit.
package caller

import "context"

type key struct{}

type uidKey struct{}

// WithPeer returns ctx naming who as the caller, a unix socket's peer of
// uid (SO_PEERCRED).
func WithPeer(ctx context.Context, who string, uid uint32) context.Context {
	return context.WithValue(With(ctx, who), uidKey{}, uid)
}

// IsRoot reports whether ctx's caller is a unix socket peer of uid 0: the
// node's operator, not a member of the socket's group.
func IsRoot(ctx context.Context) bool {
	uid, ok := ctx.Value(uidKey{}).(uint32)
	return ok && uid == 0
}

// With returns ctx naming who as the caller.
func With(ctx context.Context, who string) context.Context {
	return context.WithValue(ctx, key{}, who)
}

// Name names ctx's caller: "alice (uid 1000)", "uid 1000" for a uid
// without a name, "kubernetes user alice" through the node endpoint, or
// "api" when nothing said.
func Name(ctx context.Context) string {
	if who, ok := ctx.Value(key{}).(string); ok && who != "" {
		return who
	}
	return "api"
}
