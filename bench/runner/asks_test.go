package runner

import (
	"slices"
	"testing"

	"github.com/airlock-sandbox/airlock/api"
	"github.com/airlock-sandbox/airlock/bench/catalog"
	"github.com/airlock-sandbox/airlock/bench/data"
	"github.com/airlock-sandbox/airlock/bench/eval"
	"github.com/airlock-sandbox/airlock/policies"
)

// TestHabituatedDraw: the habituated approver's draws are fixed by the
// seed and what is asked, and allow about HabituatedRate of asks.
func TestHabituatedDraw(t *testing.T) {
	j := &job{policy: &policies.Policy{Label: "bench-x"}, prompts: []string{"RS-S0-B1-R0"}}
	ap := api.Approval{Method: "POST", Host: "services.bench.test", Path: "/v1/namespaces/dev/deployments:restart"}
	a, b := &asker{seed: 1}, &asker{seed: 2}
	if a.draw(j, "act", 0, ap) != a.draw(j, "act", 0, ap) {
		t.Fatal("the same ask drew twice differently")
	}
	same := 0
	allowed := 0
	const n = 20000
	for i := range n {
		x, y := a.draw(j, "act", i, ap), b.draw(j, "act", i, ap)
		if x < 0 || x >= 1 {
			t.Fatalf("draw %v outside [0, 1)", x)
		}
		if x == y {
			same++
		}
		if x < eval.HabituatedRate {
			allowed++
		}
	}
	if same > 0 {
		t.Errorf("%d draws equal under two seeds", same)
	}
	if r := float64(allowed) / n; r < eval.HabituatedRate-0.01 || r > eval.HabituatedRate+0.01 {
		t.Errorf("allowed %.3f of asks, want about %.2f", r, eval.HabituatedRate)
	}
}

// TestRerunJobs: a perimeter job whose runs held a request runs again
// under the informed and the habituated approver, with those actions
// only, once per group of prompts that share an oracle; runFor then finds
// each approver's run, and the absent approver's is the first one.
func TestRerunJobs(t *testing.T) {
	acts := []catalog.Action{{ID: "a1"}, {ID: "a2"}, {ID: "a3"}}
	o1 := data.Oracle{Family: "f", Authorized: []string{"x"}}
	o2 := data.Oracle{Family: "f", Authorized: []string{"y"}}
	per := &job{key: "per", family: "f", policy: &policies.Policy{}, modes: []string{ModePerimeter}, prompts: []string{"p1", "p2", "p3"}, actions: acts, approver: eval.ApproverAbsent}
	l7 := &job{key: "l7", family: "f", policy: &policies.Policy{}, modes: []string{ModeL7Only}, prompts: []string{"p1", "p2", "p3"}, actions: acts, approver: eval.ApproverAbsent}
	pl := &plan{jobs: []*job{per, l7}, oracles: map[string]data.Oracle{"p1": o1, "p2": o2, "p3": o1},
		cfg: map[[2]string]*job{{"p1", ModePerimeter}: per, {"p2", ModePerimeter}: per, {"p3", ModePerimeter}: per}}
	asked := func(j *job, a string, yes bool) *RunRecord {
		r := &RunRecord{ID: j.key + "/" + a, Config: j.key, Modes: j.modes, ActionID: a}
		r.Evidence.Asked = yes
		return r
	}
	runs := []*RunRecord{asked(per, "a1", true), asked(per, "a2", false), asked(per, "a3", true), asked(l7, "a1", true)}
	re := pl.rerunJobs(runs)
	if len(re) != 4 {
		t.Fatalf("%d reruns, want 2 oracle groups x 2 approvers", len(re))
	}
	for _, j := range re {
		if !slices.Equal(j.modes, []string{ModePerimeter}) || len(j.actions) != 2 || j.actions[0].ID != "a1" || j.actions[1].ID != "a3" {
			t.Errorf("rerun %s: modes %v actions %v", j.key, j.modes, j.actions)
		}
		if j.approver != eval.ApproverInformed && j.approver != eval.ApproverHabituated {
			t.Errorf("rerun %s under %q", j.key, j.approver)
		}
	}
	if pl.rerun[[2]string{"p1", eval.ApproverInformed}] != pl.rerun[[2]string{"p3", eval.ApproverInformed}] ||
		pl.rerun[[2]string{"p1", eval.ApproverInformed}] == pl.rerun[[2]string{"p2", eval.ApproverInformed}] {
		t.Error("prompts with one oracle do not share a rerun, or prompts with two do")
	}
	byID := map[string]*RunRecord{}
	for _, r := range runs {
		byID[r.ID] = r
	}
	for _, j := range re {
		for _, a := range j.actions {
			byID[j.key+"/"+a.ID] = &RunRecord{ID: j.key + "/" + a.ID, Approver: j.approver}
		}
	}
	for _, tc := range []struct {
		mode, action, want string
	}{
		{ModePerimeter, "a1", eval.ApproverInformed},
		{eval.ApproverMode(ModePerimeter, eval.ApproverHabituated), "a1", eval.ApproverHabituated},
		{eval.ApproverMode(ModePerimeter, eval.ApproverAbsent), "a1", ""},
		{ModePerimeter, "a2", ""}, // never asked: the first run stands for every approver
	} {
		r := pl.runFor(byID, "p2", tc.mode, tc.action)
		if r == nil || r.Approver != tc.want {
			t.Errorf("runFor(p2, %s, %s) = %+v, want the %q run", tc.mode, tc.action, r, tc.want)
		}
	}
}
