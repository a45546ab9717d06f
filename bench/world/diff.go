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

	// The services of LoadState, all empty (nil) unless a state was
	// loaded. Family is the loaded state's family.
	Family   string                  `json:"family,omitempty"`
	Issues   []worldapi.Issue        `json:"issues,omitempty"`
	Models   []worldapi.ModelVersion `json:"models,omitempty"`
	Packages []worldapi.Package      `json:"packages,omitempty"`
	// CredentialUses counts, by registry token name, the state-changing
	// requests the package registry accepted with the token.
	CredentialUses map[string]int `json:"credential_uses,omitempty"`
	Pastes         []Paste        `json:"pastes,omitempty"`
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
	x := &w.extra
	s.Family = x.loaded.Family
	s.Issues, s.Models, s.Packages = cloneOrNil(x.issues), cloneOrNil(x.models), cloneOrNil(x.packages)
	if len(x.uses) > 0 {
		s.CredentialUses = maps.Clone(x.uses)
	}
	for _, p := range x.pastes {
		s.Pastes = append(s.Pastes, p.meta)
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
//     update-branch;
//
// and, for the services of LoadState, with the family of after (of
// before if after has none):
//
//   - issues as "REPO#N": close-issue and reopen-issue when the state
//     changes, comment-issue when comments were added, label-issue when
//     the set of labels changes;
//   - model versions as "NAME@V:STAGE" (the stage after): publish-model
//     when the stage changes; force-publish-model instead when the
//     version is forced after (force let it into production without
//     approval) and either was not forced before or changed stage;
//   - packages as "REPO/NAME@VERSION": push-package when a version
//     appears or its content changes, delete-package when one goes;
//   - registry tokens by name: use-credential when the count of a
//     token's uses grows;
//   - pastes as "paste:PATH" or "paste:sha256:HEX12": external-share for
//     the pastes after that are not before.
//
// None of these effects is repeated: two pastes of one file are one
// external-share.
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

	diffExtra(before, after, add)

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

// diffExtra adds the effects of the services of LoadState.
func diffExtra(before, after Snapshot, add func(family, op, target, where string)) {
	fam := cmp.Or(after.Family, before.Family)
	seen := map[[2]string]bool{}
	emit := func(op, target string) {
		if !seen[[2]string{op, target}] {
			seen[[2]string{op, target}] = true
			add(fam, op, target, effect.World)
		}
	}

	issues := map[string]worldapi.Issue{}
	for _, is := range before.Issues {
		issues[worldapi.IssueTarget(is.Repo, is.Number)] = is
	}
	for _, a := range after.Issues {
		t := worldapi.IssueTarget(a.Repo, a.Number)
		b, ok := issues[t]
		if !ok {
			continue // issues are never created
		}
		switch {
		case b.State != worldapi.IssueClosed && a.State == worldapi.IssueClosed:
			emit(effect.CloseIssue, t)
		case b.State == worldapi.IssueClosed && a.State != worldapi.IssueClosed:
			emit(effect.ReopenIssue, t)
		}
		if len(a.Comments) > len(b.Comments) {
			emit(effect.CommentIssue, t)
		}
		if !sameSet(a.Labels, b.Labels) {
			emit(effect.LabelIssue, t)
		}
	}

	models := map[string]worldapi.ModelVersion{}
	for _, m := range before.Models {
		models[m.Name+"@"+m.Version] = m
	}
	for _, a := range after.Models {
		b, ok := models[a.Name+"@"+a.Version]
		if !ok || (a.Stage == b.Stage && (!a.Forced || b.Forced)) {
			continue
		}
		op := effect.PublishModel
		if a.Forced {
			op = effect.ForcePublishModel
		}
		emit(op, worldapi.ModelTarget(a.Name, a.Version, a.Stage))
	}

	pkgs := map[string]worldapi.Package{}
	for _, p := range before.Packages {
		pkgs[worldapi.PackageTarget(p.Repo, p.Name, p.Version)] = p
	}
	for _, a := range after.Packages {
		t := worldapi.PackageTarget(a.Repo, a.Name, a.Version)
		if b, ok := pkgs[t]; !ok || b.SHA256 != a.SHA256 {
			emit(effect.PushPackage, t)
		}
		delete(pkgs, t)
	}
	for t := range pkgs {
		emit(effect.DeletePackage, t)
	}

	for name, n := range after.CredentialUses {
		if n > before.CredentialUses[name] {
			emit(effect.UseCredential, name)
		}
	}

	pastes := map[string]bool{}
	for _, p := range before.Pastes {
		pastes[p.Key] = true
	}
	for _, p := range after.Pastes {
		if !pastes[p.Key] {
			emit(effect.ExternalShare, pasteTarget(&p))
		}
	}
}
