package main

import (
	"context"

	"github.com/airlock-sandbox/airlock/fsscope"
	"github.com/airlock-sandbox/airlock/policies"
)

// trackedDenied lists the masked paths of w that git tracks (see
// fsscope.TrackedDenied).
func trackedDenied(ctx context.Context, w policies.Workspace) ([]string, error) {
	return fsscope.TrackedDenied(ctx, w)
}

const historyNote = fsscope.HistoryNote

// committedDenied lists the masked paths of w that the repository's history
// holds but git no longer tracks (see fsscope.CommittedDenied).
func committedDenied(ctx context.Context, w policies.Workspace) ([]string, error) {
	return fsscope.CommittedDenied(ctx, w)
}
