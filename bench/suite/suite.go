// Package suite loads an operator's own replay suite (docs/suites.md): a
// directory of HCL files that states the prompts of the operator's
// unattended work, the oracle label of each (the effects its request
// authorizes), the world's initial state for the services they use, the
// perimeter to test (the operator's own manifests), and optionally a fixed
// action list per prompt.
//
// Every mistake is reported with file:line before anything runs (Load
// returns a *DiagnosticsError listing them all), and a suite that loads is
// complete: every effect its labels name exists in its world, every
// manifest it names loads and validates with the prompt's variables, and
// every action list is non-empty.
//
// The oracle labels (Prompt.Authorized, Prompt.Protected) are for the
// evaluator and the report only; the runner never derives a session's
// authority from them.
package suite

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/airlock-sandbox/airlock/bench/authgate"
	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/policy"
	"github.com/airlock-sandbox/airlock/bench/world/fixture"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
	"github.com/airlock-sandbox/airlock/policies"
)

// FamilyPrefix starts the family name under which a suite's prompts run
// and are reported: "suite-NAME".
const FamilyPrefix = "suite-"

// DefaultUser is the account the requests come from when the suite names
// none.
const DefaultUser = "alex"

// DefaultTimeout bounds one run when the suite does not say.
const DefaultTimeout = 2 * time.Minute

// Effect ops of an external service (External): its snapshot's items
// that appeared, disappeared or changed. The target is "SERVICE/ITEM".
const (
	CreateItem = "create-item"
	DeleteItem = "delete-item"
	ModifyItem = "modify-item"
)

// Ops lists every effect op an oracle label may name.
var Ops = []string{
	effect.DeleteBranch, effect.UpdateBranch, effect.CreateBranch,
	effect.CancelJob, effect.ModifyJob,
	effect.RestartService, effect.ModifyService, effect.DeleteService,
	effect.DeleteObject, effect.PutObject,
	effect.WorkspaceWrite,
	effect.CloseIssue, effect.ReopenIssue, effect.CommentIssue, effect.LabelIssue,
	effect.PublishModel, effect.ForcePublishModel, effect.PushPackage, effect.DeletePackage, effect.UseCredential,
	effect.ExternalShare,
	CreateItem, DeleteItem, ModifyItem,
}

// Suite is a loaded suite.
type Suite struct {
	// Name is the suite block's label; Family is FamilyPrefix+Name.
	Name        string
	Family      string
	Description string
	// Dir is the suite's directory, as given to Load.
	Dir string
	// User is the account the requests come from.
	User string
	// Timeout bounds one run (one action, or one agent's task); BudgetUSD
	// bounds what one agent run may spend on a real model API (0: no
	// bound but the timeout).
	Timeout   time.Duration
	BudgetUSD float64
	// Manifest is the default perimeter: the path of the operator's
	// manifest, for the prompts that name none; or Generator, which
	// generates each prompt's manifest from its text.
	Manifest  string
	Generator *Generator
	// World is the services' initial state.
	World World
	// Externals are the services the world does not have.
	Externals []*External
	// Prompts are in file order (files sorted by name).
	Prompts []*Prompt
}

// Prompt returns the prompt with id, or nil.
func (s *Suite) Prompt(id string) *Prompt {
	for _, p := range s.Prompts {
		if p.ID == id {
			return p
		}
	}
	return nil
}

// Prompt is one request of the suite with its oracle label.
type Prompt struct {
	ID string
	// Pos is where the prompt is defined, "file:line".
	Pos  string
	Text string
	// Authorized are the effects the request authorizes (workspace
	// directories expanded to the files the world has under them).
	Authorized []effect.Effect
	// Protected names items whose change the report flags as protected,
	// besides those the world marks protected.
	Protected []string
	// Trap marks a request that looks as if it authorized more than it
	// does; Note says why.
	Trap bool
	Note string
	// Actions are the commands run for the prompt without an agent (and
	// replayed by a scripted agent), each judged by its own effects.
	Actions []string
	// Manifest is the perimeter of this prompt: the operator's manifest
	// (the suite's default unless the prompt names its own), loaded with
	// Vars.
	Manifest string
	Vars     map[string]string
	Policy   *policies.Policy
	// Generator, instead of Manifest, generates the prompt's perimeter
	// from its text.
	Generator *Generator
}

// GeneratorFamilies are the families whose manifest generator a suite may
// use (bench/manifest): AmPermBench's.
var GeneratorFamilies = []string{"clean-up-branches", "cancel-jobs", "restart-services", "clean-up-artifacts"}

// Generator is AmPermBench's manifest generator of one family with an
// operator policy: the perimeter made from a request's words, the
// policy's grants and what a listing of the world shows.
type Generator struct {
	Family string
	// PolicyPath is the operator policy's file, "" for the one shipped
	// for the family (bench/policy).
	PolicyPath string
	Operator   *policy.Operator
}

// World is the initial state of the world's services for a suite.
type World struct {
	// Fixture holds the git repository, the jobs, the services and the
	// objects, as the world loads them (world.WithFixture).
	Fixture *fixture.Fixture
	// Workspace are the files of the session's workspace besides the
	// repository's checkout (or, without a repository, all of it).
	Workspace []File
	// Repo reports whether the suite declares a repository: the
	// workspace is then a checkout of it.
	Repo bool
	// Extra are the issue tracker's, the model registry's and the
	// package registry's records and the registry tokens (the world's
	// services of AuthGateBench's families), as the world loads them
	// (authgate.Services.State).
	Extra *authgate.Services
}

// File is a file of the workspace.
type File struct {
	Path    string
	Content string
}

// External is a service the world does not have, reset and snapshotted by
// the operator's commands, run on the host (outside every sandbox) in the
// suite's directory.
type External struct {
	Name string
	Pos  string
	// Reset puts the service back to its initial state; Snapshot prints
	// its state on stdout as a JSON object of item id -> any JSON value.
	Reset, Snapshot []string
	// Timeout bounds each command.
	Timeout time.Duration
}

// Items lists every item id the world has, by the effect ops that name
// it.
func (w *World) items() map[string][]string {
	fx := w.Fixture
	out := map[string][]string{}
	add := func(id string, ops ...string) {
		for _, op := range ops {
			out[op] = append(out[op], id)
		}
	}
	if w.Repo {
		for _, name := range append([]string{fx.Git.MainBranch}, branchNames(fx)...) {
			add(name, effect.DeleteBranch, effect.UpdateBranch)
			add("origin/"+name, effect.DeleteBranch, effect.UpdateBranch)
		}
	}
	for _, j := range fx.Jobs {
		add(j.ID, effect.CancelJob, effect.ModifyJob)
	}
	for _, d := range fx.Deployments {
		add(d.ID, effect.RestartService, effect.ModifyService, effect.DeleteService)
	}
	for _, o := range fx.Objects {
		add(o.ID, effect.DeleteObject, effect.PutObject)
	}
	return out
}

func branchNames(fx *fixture.Fixture) []string {
	var out []string
	for _, b := range fx.Git.Branches {
		out = append(out, b.Name)
	}
	return out
}

// Item is what the world knows of an item an effect names: its owner and
// whether it is protected.
type Item struct {
	Owner     string
	Protected bool
}

// Item returns the item an effect target names: a branch (local or
// "origin/"), a job, a service or an object.
func (w *World) Item(target string) (Item, bool) {
	fx := w.Fixture
	name := strings.TrimPrefix(target, "origin/")
	if w.Repo {
		if name == fx.Git.MainBranch {
			return Item{Protected: true}, true
		}
		for _, b := range fx.Git.Branches {
			if b.Name == name {
				return Item{Owner: b.Owner, Protected: b.Protected}, true
			}
		}
	}
	for _, j := range fx.Jobs {
		if j.ID == target {
			return Item{Owner: j.Owner, Protected: j.Protected}, true
		}
	}
	for _, d := range fx.Deployments {
		if d.ID == target {
			return Item{Owner: d.Owner, Protected: d.Protected}, true
		}
	}
	for _, o := range fx.Objects {
		if o.ID == target {
			return Item{Owner: o.Owner, Protected: o.Protected}, true
		}
	}
	return Item{}, false
}

// Services lists the world's services the suite's state fills: "git",
// "jobs", "services", "objects".
func (w *World) Services() []string {
	var out []string
	if w.Repo {
		out = append(out, "git")
	}
	if len(w.Fixture.Jobs) > 0 {
		out = append(out, "jobs")
	}
	if len(w.Fixture.Deployments) > 0 {
		out = append(out, "services")
	}
	if len(w.Fixture.Objects) > 0 {
		out = append(out, "objects")
	}
	if s := w.Extra; s != nil {
		if len(s.Issues) > 0 {
			out = append(out, "tracker")
		}
		if len(s.Models) > 0 {
			out = append(out, "models")
		}
		if len(s.Packages) > 0 || len(s.RegistryTokens) > 0 {
			out = append(out, "packages")
		}
	}
	return out
}

// Job states a suite may give, as the scheduler names them.
var jobStates = []string{worldapi.JobRunning, worldapi.JobQueued, worldapi.JobCancelled}

func oneOf(v string, set []string) bool { return slices.Contains(set, v) }

func quoteList(vs []string) string {
	var q []string
	for _, v := range vs {
		q = append(q, fmt.Sprintf("%q", v))
	}
	return strings.Join(q, ", ")
}
