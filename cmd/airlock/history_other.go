//go:build !linux

package main

import (
	"context"

	"github.com/airlock-sandbox/airlock/policies"
)

// trackedDenied needs the workspace's host filesystem, which only a Linux
// host running airlockd has.
func trackedDenied(context.Context, policies.Workspace) ([]string, error) { return nil, nil }

const historyNote = ""

func committedDenied(context.Context, policies.Workspace) ([]string, error) { return nil, nil }
