//go:build kubernetes

package main

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"time"

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
	defaultNodeLease  = agent.DefaultLeaseDuration
	defaultKubeListen = agent.DefaultListen
)

// kubeAgent is the node agent's configuration.
type kubeAgent agent.Config

func (k *kubeAgent) setCapacity(n int) { k.Capacity = n }

func (k *kubeAgent) setDaemon(root, version, runtime string) {
	k.Root, k.Version, k.Runtime = root, version, runtime
}

func (k *kubeAgent) run(ctx context.Context, d *daemon.Daemon) error {
	cfg := agent.Config(*k)
	// The node endpoint serves the same handlers as the socket.
	cfg.API = httpapi.New(d)
	return agent.Run(ctx, d, cfg)
}

// kubeConfig is the node agent's configuration from the --kubernetes
// flags, checked; the capacity and what the daemon knows are set later.
func kubeConfig(kubeconfig, node, labels, listen, advertise string, lease time.Duration, controller bool) (*kubeAgent, error) {
	var rc *rest.Config
	var err error
	if kubeconfig != "" {
		rc, err = clientcmd.BuildConfigFromFlags("", kubeconfig)
	} else {
		rc, err = rest.InClusterConfig()
	}
	if err != nil {
		return nil, fmt.Errorf("--kubernetes: the API server's configuration (--kubeconfig FILE, or in a pod the in-cluster one): %w", err)
	}
	rc.UserAgent = "airlockd/node-agent"
	if node == "" {
		if node, err = os.Hostname(); err != nil {
			return nil, fmt.Errorf("--node-name: no hostname: %w", err)
		}
		node = strings.ToLower(node)
	}
	l, err := agent.ParseLabels(labels)
	if err != nil {
		return nil, fmt.Errorf("--node-labels: %w", err)
	}
	if _, _, err := net.SplitHostPort(listen); err != nil {
		return nil, fmt.Errorf("--kubernetes-listen %q: want HOST:PORT or :PORT: %w", listen, err)
	}
	if advertise != "" && net.ParseIP(advertise) == nil && len(validation.IsDNS1123Subdomain(advertise)) > 0 {
		return nil, fmt.Errorf("--kubernetes-advertise-address %q: want an IP address or a DNS name", advertise)
	}
	cfg := &agent.Config{Kube: rc, Node: node, Labels: l, LeaseDuration: lease, Controller: controller,
		Listen: listen, Advertise: advertise}
	if err := cfg.Check(); err != nil {
		return nil, fmt.Errorf("--kubernetes: %w", err)
	}
	return (*kubeAgent)(cfg), nil
}
