//go:build !kubernetes

package main

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/airlock-sandbox/airlock/daemon"
)

// This airlockd is built without the node agent, whose Kubernetes client
// libraries double the binary and its start-up memory: airlockd-kube, the
// same daemon built with the kubernetes tag (make build), has it.

const (
	defaultNodeLease      = 40 * time.Second
	defaultKubeListen     = ":10265"
	defaultKubeAuditEvery = 5 * time.Second
)

type kubeAgent struct{}

func (*kubeAgent) setCapacity(int)                  {}
func (*kubeAgent) setPoolRoom(int)                  {}
func (*kubeAgent) setDaemon(string, string, string) {}
func (*kubeAgent) setDraining(*atomic.Bool)         {}
func (*kubeAgent) run(context.Context, *daemon.Daemon) error {
	return errors.New("built without Kubernetes support")
}

func (*kubeAgent) waitReported(context.Context, []string) ([]string, error) { return nil, nil }

func (*kubeAgent) reportDraining(context.Context) error { return nil }

func kubeConfig(kubeFlags) (*kubeAgent, error) {
	return nil, errors.New("--kubernetes: this airlockd is built without the node agent; run airlockd-kube, the same daemon with it (make build builds both)")
}
