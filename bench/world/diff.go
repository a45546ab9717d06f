package world

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/world/fixture"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

// Snapshot is the world's state at one moment. It is plain data: it
// encodes to JSON and Diff compares two of them.
type Snapshot struct {
	Jobs        []worldapi.Job        `json:"jobs"`
	Deployments []worldapi.Deployment `json:"deployments"`
	Objects     []worldapi.Object     `json:"objects"`
	// Refs are the refs of the world's repository: full name -> commit id.
	Refs map[string]string `json:"refs"`
	// LocalRefs are the branches of a workspace checkout (branch name ->
	// commit id), set by the caller from SnapshotLocalRefs; nil when the
	// snapshot has no workspace side.
	LocalRefs map[string]string `json:"local_refs,omitempty"`
}

// Snapshot returns the current state.
func (w *World) Snapshot() (Snapshot, error) {
	s := w.jsonSnapshot()
	w.gitMu.RLock()
	defer w.gitMu.RUnlock()
	refs, err := readRefs(os.DirFS(w.live), "refs/")
	if err != nil {
		return Snapshot{}, fmt.Errorf("world: snapshot: %w", err)
	}
	s.Refs = refs
	return s, nil
}

// jsonSnapshot returns the state of the JSON services (Refs nil).
func (w *World) jsonSnapshot() Snapshot {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := Snapshot{
		Jobs:        slices.Clone(w.jobs),
		Deployments: slices.Clone(w.deployments),
		Objects:     make([]worldapi.Object, len(w.objects)),
	}
	for i, o := range w.objects {
		s.Objects[i] = o.meta
	}
	return s
}

// Diff returns the effects that turn before into after, sorted by where,
// target and op. Targets are named as the oracles name them:
//
//   - jobs by id: cancel-job when a job becomes cancelled, modify-job when
//     its name, queue, priority or hold changes;
//   - deployments by service id: restart-service when the restart count
//     grows, modify-service when the replica count changes (or a deployment
//     appears), delete-service when one disappears;
//   - objects by object id (or "s3://bucket/key" for an object without
//     one): delete-object when a present object becomes deleted,
//     put-object when an object appears, comes back or changes content;
//   - refs of the world's repository as "origin/<branch>" (where "world"),
//     workspace branches as "<branch>" (where "workspace", compared only
//     when both snapshots have LocalRefs): delete-branch, create-branch,
//     update-branch.
func Diff(before, after Snapshot) []effect.Effect {
	var out []effect.Effect
	add := func(family, op, target, where string) {
		out = append(out, effect.Effect{Family: family, Op: op, Target: target, Where: where})
	}

	jobs := map[string]worldapi.Job{}
	for _, j := range before.Jobs {
		jobs[j.ID] = j
	}
	for _, a := range after.Jobs {
		b, ok := jobs[a.ID]
		if !ok {
			add(fixture.Jobs, effect.ModifyJob, a.ID, effect.World)
			continue
		}
		if b.Status != worldapi.JobCancelled && a.Status == worldapi.JobCancelled {
			add(fixture.Jobs, effect.CancelJob, a.ID, effect.World)
		}
		if b.Name != a.Name || b.Queue != a.Queue || b.Priority != a.Priority || b.Held != a.Held ||
			(b.Status == worldapi.JobCancelled && a.Status != worldapi.JobCancelled) {
			add(fixture.Jobs, effect.ModifyJob, a.ID, effect.World)
		}
	}

	type dkey struct{ ns, id string }
	deps := map[dkey]worldapi.Deployment{}
	for _, d := range before.Deployments {
		deps[dkey{d.Namespace, d.ID}] = d
	}
	for _, a := range after.Deployments {
		k := dkey{a.Namespace, a.ID}
		b, ok := deps[k]
		delete(deps, k)
		switch {
		case !ok:
			add(fixture.Services, effect.ModifyService, a.ID, effect.World)
			continue
		case a.RestartCount > b.RestartCount:
			add(fixture.Services, effect.RestartService, a.ID, effect.World)
		}
		if a.Replicas != b.Replicas || a.Component != b.Component || a.Owner != b.Owner {
			add(fixture.Services, effect.ModifyService, a.ID, effect.World)
		}
	}
	for _, b := range deps {
		add(fixture.Services, effect.DeleteService, b.ID, effect.World)
	}

	objs := map[string]worldapi.Object{}
	for _, o := range before.Objects {
		objs[o.Bucket+"/"+o.Key] = o
	}
	for _, a := range after.Objects {
		b, ok := objs[a.Bucket+"/"+a.Key]
		wasPresent := ok && b.Status == worldapi.ObjectPresent
		switch isPresent := a.Status == worldapi.ObjectPresent; {
		case wasPresent && !isPresent:
			add(fixture.Artifacts, effect.DeleteObject, objectTarget(&a), effect.World)
		case isPresent && (!wasPresent || a.SHA256 != b.SHA256):
			add(fixture.Artifacts, effect.PutObject, objectTarget(&a), effect.World)
		}
	}

	diffRefs(before.Refs, after.Refs, shortRef, effect.World, add)
	if before.LocalRefs != nil && after.LocalRefs != nil {
		diffRefs(before.LocalRefs, after.LocalRefs, func(s string) string { return s }, effect.Workspace, add)
	}

	sortEffects(out)
	return out
}

// sortEffects sorts effects by where, target and op, as Diff returns them.
func sortEffects(effs []effect.Effect) {
	slices.SortFunc(effs, func(a, b effect.Effect) int {
		return cmp.Or(strings.Compare(a.Where, b.Where), strings.Compare(a.Target, b.Target), strings.Compare(a.Op, b.Op))
	})
}

func diffRefs(before, after map[string]string, name func(string) string, where string, add func(family, op, target, where string)) {
	for _, ref := range slices.Sorted(maps.Keys(before)) {
		switch a, ok := after[ref]; {
		case !ok:
			add(fixture.Branches, effect.DeleteBranch, name(ref), where)
		case a != before[ref]:
			add(fixture.Branches, effect.UpdateBranch, name(ref), where)
		}
	}
	for _, ref := range slices.Sorted(maps.Keys(after)) {
		if _, ok := before[ref]; !ok {
			add(fixture.Branches, effect.CreateBranch, name(ref), where)
		}
	}
}
