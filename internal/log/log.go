// Package log carries a *slog.Logger in a context, after containerd's log.G.
package log

import (
	"context"
	"log/slog"
)

type loggerKey struct{}

// WithLogger returns a context that carries l.
func WithLogger(ctx context.Context, l *slog.Logger) context.Context {
	return context.WithValue(ctx, loggerKey{}, l)
}

// G returns the logger carried by ctx, or slog.Default.
func G(ctx context.Context) *slog.Logger {
	if l, ok := ctx.Value(loggerKey{}).(*slog.Logger); ok && l != nil {
		return l
	}
	return slog.Default()
}

// With returns a context whose logger has the given attributes added.
func With(ctx context.Context, args ...any) context.Context {
	return WithLogger(ctx, G(ctx).With(args...))
}
