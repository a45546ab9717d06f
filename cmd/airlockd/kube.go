//go:build kubernetes

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/airlock-sandbox/airlock/daemon"
	"github.com/airlock-sandbox/airlock/daemon/httpapi"
	"github.com/airlock-sandbox/airlock/kube/agent"
)

// kubernetes build tag: make build's airlockd-kube).

// This is airlockd-kube: airlockd built with the kubernetes tag, which
// links the node agent (make build builds both).

const (
	defaultNodeLease      = agent.DefaultLeaseDuration
	defaultKubeListen     = agent.DefaultListen
	defaultKubeAuditEvery = agent.DefaultAuditStatusEvery
)

// kubeAgent is the node agent's configuration.
type kubeAgent agent.Config

func (k *kubeAgent) setCapacity(n int) { k.Capacity = n }

// setPoolRoom gives SessionPools the room the session limit leaves above
// the node's capacity (call after setCapacity).
func (k *kubeAgent) setPoolRoom(limit int) { k.PoolRoom = max(0, limit-k.Capacity) }

func (k *kubeAgent) setDraining(b *atomic.Bool) { k.Draining = b }

func (k *kubeAgent) setDaemon(root, version, runtime string) {
	k.Root, k.Version, k.Runtime = root, version, runtime
}

func (k *kubeAgent) run(ctx context.Context, d *daemon.Daemon) error {
	cfg := agent.Config(*k)
	// The node endpoint serves the same handlers as the socket.
	cfg.API = httpapi.New(d)
	return agent.Run(ctx, d, cfg)
}

// waitReported waits until the agent has written the Sessions of the
// local sessions ids as no longer Running (agent.WaitReported).
func (k *kubeAgent) waitReported(ctx context.Context, ids []string) ([]string, error) {
	return agent.WaitReported(ctx, agent.Config(*k), ids)
}

// reportDraining gives the node's AirlockNode no capacity at once
// (agent.ReportDraining).
func (k *kubeAgent) reportDraining(ctx context.Context) error {
	return agent.ReportDraining(ctx, agent.Config(*k))
}

// kubeConfig is the node agent's configuration from the --kubernetes
// flags, checked; the capacity and what the daemon knows are set later.
func kubeConfig(f kubeFlags) (*kubeAgent, error) {
	var rc *rest.Config
	var err error
	if f.kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", f.kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("--kubernetes: the API server's configuration (--kubeconfig FILE, or in a pod the in-cluster one): %w", err)
	}
	node := f.node
	if node == "" {
		if node, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("--node-name: no hostname: %w", err)
		}
		node = strings.ToLower(node)
	}
	// The node in the user agent: the API server's audit log and its
	// request logs tell one node's agent from another's, which a
	// DaemonSet's shared service account does not.
	rc.UserAgent = "airlockd/node-agent node/" + node
	// client-go's default is 5 requests a second: the placement leader's
	// reads of a burst of Sessions' claims and volumes, and a busy node's
	// status writes, would queue behind it.
	if rc.QPS == 0 {
		rc.QPS, rc.Burst = 50, 100
	}
	l, err := agent.ParseLabels(f.labels)
	if err != nil {
		return nil, fmt.Errorf("--node-labels: %w", err)
	}
	if _, _, err := net.SplitHostPort(f.listen); err != nil {
		return nil, fmt.Errorf("--kubernetes-listen %q: want HOST:PORT or :PORT: %w", f.listen, err)
	}
	if f.advertise != "" && net.ParseIP(f.advertise) == nil && len(validation.IsDNS1123Subdomain(f.advertise)) > 0 {
		return nil, fmt.Errorf("--kubernetes-advertise-address %q: want an IP address or a DNS name", f.advertise)
	}
	if f.auditEvery < 0 {
		return nil, fmt.Errorf("--kubernetes-audit-interval %s: want 0 or more", f.auditEvery)
	}
	cfg := &agent.Config{Kube: rc, Node: node, Labels: l, LeaseDuration: f.lease, Controller: f.controller,
		Listen: f.listen, Advertise: f.advertise, AuditStatusEvery: f.auditEvery}
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("--kubernetes: %w", err)
	}
	return (*kubeAgent)(cfg), nil
}
