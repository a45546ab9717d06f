//go:build !linux

package hostcheck

import (
	"context"
	"runtime"
)

type host struct{}

func defaultHost() host { return host{} }

func run(context.Context, Config, host) []Result {
	return []Result{{
		Name:   "kernel",
		Status: StatusFail,
		Detail: "airlock runs on Linux only; this is " + runtime.GOOS,
		Fix:    "run airlock on Linux",
	}}
}
