package agent

import (
	"context"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/event"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// poke asks for a reconcile of the Session key: its status is written
// again if anything in it changed (the audit counts no more often than
// Config.AuditStatusEvery).
func (a *nodeAgent) poke(ctx context.Context, key types.NamespacedName) {
	select {
	case a.wake <- event.GenericEvent{Object: &v1alpha1.Session{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name}}}:
	case <-ctx.Done():
	}
}

// sessionKey is the Session local session v runs for; false for a
// session not run for one.
func sessionKey(v *api.Session) (types.NamespacedName, bool) {
	ns, name, ok := strings.Cut(v.Labels[LabelSession], "/")
	if !ok || v.Labels[LabelSessionUID] == "" {
		return types.NamespacedName{}, false
	}
	return types.NamespacedName{Namespace: ns, Name: name}, true
}

// followApprovals pokes a Session each time one of its requests is held
// or decided (through a SessionApproval, the node's API, the approver
// hook or a timeout), until ctx ends or the daemon stops: its status's
// pendingApprovals follow within followedEvery.
func (a *nodeAgent) followApprovals(ctx context.Context) {
	f, _ := a.d.Approvals().Follow("")
	defer f.Close()
	for {
		ev, err := f.Next(ctx)
		if err != nil {
			return
		}
		var id string
		if ev.Approval != nil {
			id = ev.Approval.Session
		}
		// A dropped event (this loop fell behind) may have been any
		// session's: all are looked at again.
		for _, v := range a.d.List(ctx) {
			if key, ok := sessionKey(&v); ok && (id == "" || v.ID == id) {
				a.poke(ctx, key)
			}
		}
	}
}

// watchAudit pokes, every period, the Sessions whose local sessions' audit
// counts changed since it last looked, until ctx ends: a Session's counts
// reach its status at most period late, however many
// events its session makes.
func (a *nodeAgent) watchAudit(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	seen := map[string]int64{}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		live := map[string]bool{}
		for _, v := range a.d.List(ctx) {
			key, ok := sessionKey(&v)
			if !ok {
				continue
			}
			live[v.ID] = true
			sum, err := a.d.AuditSummary(ctx, v.ID)
			if err != nil {
				continue
			}
			if n, ok := seen[v.ID]; !ok || n != sum.Events {
				seen[v.ID] = sum.Events
				a.poke(ctx, key)
			}
		}
		for id := range seen {
			if !live[id] {
				delete(seen, id)
			}
		}
	}
}
