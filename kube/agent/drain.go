package agent

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// WaitReported waits until no Session placed on cfg.Node whose local
// session is one of ids is reported Running any more: what a node agent
// that stops its sessions on its way out (airlockd --stop-sessions-on-exit)
// waits for before it stops, so that their Sessions say how they ended
// instead of being marked lost a lease later. The agent, still running,
// writes the status; this reads it from the API server. It returns the
// names of those still Running when ctx ends.
func WaitReported(ctx context.Context, cfg Config, ids []string) ([]string, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	c, err := agentClient(cfg)
	if err != nil {
		return nil, err
	}
	var running []string
	for {
		var l v1alpha1.SessionList
		err := c.List(ctx, &l, client.MatchingFields{"spec.nodeName": cfg.Node})
		if err == nil {
			running = running[:0]
			for _, s := range l.Items {
				if s.Status.State == v1alpha1.SessionRunning && slices.Contains(ids, s.Status.ID) {
					running = append(running, s.Namespace+"/"+s.Name)
				}
			}
			if len(running) == 0 {
				return nil, nil
			}
		}
		select {
		case <-ctx.Done():
			if err != nil {
				return running, fmt.Errorf("Sessions on node %s: %w", cfg.Node, err)
			}
			return running, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ReportDraining writes cfg.Node's AirlockNode with no capacity at once,
// so that placement sends the node nothing more while its airlockd stops
// (the agent's own reports, every few seconds, keep it so while
// cfg.Draining is set; the next agent's registration writes the capacity
// again).
func ReportDraining(ctx context.Context, cfg Config) error {
	c, err := agentClient(cfg)
	if err != nil {
		return err
	}
	for {
		var n v1alpha1.AirlockNode
		if err := c.Get(ctx, client.ObjectKey{Name: cfg.Node}, &n); err != nil {
			return fmt.Errorf("AirlockNode %s: %w", cfg.Node, err)
		}
		if n.Status.Capacity == 0 {
			return nil
		}
		n.Status.Capacity = 0
		err := c.Status().Update(ctx, &n)
		if !apierrors.IsConflict(err) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// agentClient is a client of the API server with the agent's scheme, for
// airlockd's own calls around the agent's run (it has none of the agent's
// caches).
func agentClient(cfg Config) (client.Client, error) {
	scheme, err := Scheme()
	if err != nil {
		return nil, err
	}
	return client.New(cfg.Kube, client.Options{Scheme: scheme})
}
