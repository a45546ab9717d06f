package runner

import (
	"testing"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/world"
)

func TestAttribute(t *testing.T) {
	a := effect.Effect{Family: "cancel-jobs", Op: effect.CancelJob, Target: "job-a", Where: effect.World}
	b := effect.Effect{Family: "cancel-jobs", Op: effect.CancelJob, Target: "job-b", Where: effect.World}
	c := effect.Effect{Family: "cancel-jobs", Op: effect.CancelJob, Target: "job-c", Where: effect.World}
	ws := effect.Effect{Family: "cancel-jobs", Op: effect.WorkspaceWrite, Target: "cluster/jobs.json", Where: effect.Workspace}
	events := []world.Event{
		{Seq: 1, Method: "GET", Path: "/jobs", Decision: world.DecisionAllow},
		{Seq: 2, Method: "POST", Path: "/jobs/cancel", Targets: []string{"job-a", "job-b"}, Decision: world.DecisionAllow},
		{Seq: 3, Method: "POST", Path: "/jobs/job-b/cancel", Targets: []string{"job-b"}, Decision: world.DecisionAllow},
		{Seq: 4, Method: "POST", Path: "/jobs/job-c/cancel", Targets: []string{"job-c"}, Decision: world.DecisionDeny},
	}
	got := attribute([]effect.Effect{a, b, c, ws}, events)
	want := []Cause{
		{Effect: a, Seq: 2, Method: "POST", Path: "/jobs/cancel"},
		{Effect: b, Seq: 3, Method: "POST", Path: "/jobs/job-b/cancel"},
		{Effect: c, Note: CauseUnclaimed},
		{Effect: ws, Note: CauseCommand},
	}
	if len(got) != len(want) {
		t.Fatalf("%d causes, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("cause %d: %+v, want %+v", i, got[i], want[i])
		}
	}
}
