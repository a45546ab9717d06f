// Package caller carries, in a request's context, who asked for what the
// daemon does in their name: the user of the API socket's peer, or a
// Kubernetes user authenticated by the node endpoint. Decisions and
// commits record it in the session's audit.
package caller

import "context"

type key struct{}

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
