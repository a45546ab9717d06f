package agent

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/kube/apis/airlock/v1alpha1"
)

// writeStatus changes a Session's status through the status subresource
// with optimistic concurrency: it reads the Session afresh (never from a
// cache), lets mutate change it (false: nothing to write), and writes it
// with the resourceVersion it read; a conflict (409) starts over from a
// fresh read. It reports whether it wrote.
func writeStatus(ctx context.Context, c client.Client, fresh client.Reader, key client.ObjectKey, mutate func(*v1alpha1.Session) bool) (bool, error) {
	wrote := false
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		wrote = false
		var s v1alpha1.Session
		if err := fresh.Get(ctx, key, &s); err != nil {
			return err
		}
		before := s.Status.DeepCopy()
		if !mutate(&s) || equality.Semantic.DeepEqual(before, &s.Status) {
			return nil
		}
		if err := c.Status().Update(ctx, &s); err != nil {
			return err
		}
		wrote = true
		return nil
	})
	return wrote, err
}

// updateFresh is writeStatus for the Session itself (its finalizers).
func updateFresh(ctx context.Context, c client.Client, fresh client.Reader, key client.ObjectKey, mutate func(*v1alpha1.Session) bool) (bool, error) {
	wrote := false
	err := retry.RetryOnConflict(retry.DefaultBackoff, func() error {
		wrote = false
		var s v1alpha1.Session
		if err := fresh.Get(ctx, key, &s); err != nil {
			return err
		}
		if !mutate(&s) {
			return nil
		}
		if err := c.Update(ctx, &s); err != nil {
			return err
		}
		wrote = true
		return nil
	})
	return wrote, err
}

// timeOf is t as the API server keeps it (whole seconds), nil for nil.
func timeOf(t *time.Time) *metav1.Time {
	if t == nil {
		return nil
	}
	m := metav1.NewTime(t.UTC().Truncate(time.Second))
	return &m
}

// localStatus is st brought up to date with v, the Session's local
// session on node: its state, exit, timestamps, id and policy version.
// Placement's fields (placedAt) and conditions are kept.
func localStatus(st v1alpha1.SessionStatus, v *api.Session, node string, generation int64) v1alpha1.SessionStatus {
	st = *st.DeepCopy()
	st.ObservedGeneration = generation
	st.Node, st.ID = node, v.ID
	st.PolicyVersion = int32(v.PolicyVersion)
	st.Warm = v.Warm
	st.StartedAt, st.FinishedAt = timeOf(v.Started), timeOf(v.Finished)
	st.ExitCode = nil
	if v.ExitCode != nil {
		c := int32(*v.ExitCode)
		st.ExitCode = &c
	}
	st.Reason, st.Message = v.Reason, ""
	switch v.State {
	case api.StateCreated:
		st.State = v1alpha1.SessionPlaced
	case api.StateRunning:
		st.State = v1alpha1.SessionRunning
	case api.StateStopped:
		st.State = v1alpha1.SessionExited
		if v.Review {
			st.State = v1alpha1.SessionReview
			st.Message = "workspace changes wait for airlock commit or discard on node " + node
		}
	default: // api.StateUnknown
		st.State, st.Reason = v1alpha1.SessionFailed, "error"
		st.Message = "a cleanup step failed on node " + node + " (local session " + v.ID + "): delete the Session to remove what is left"
	}
	return st
}
