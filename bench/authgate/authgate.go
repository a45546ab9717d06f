// Package authgate holds the benchmark's contrast pairs after AuthGateBench:
// its five failure modes (scope escalation, credential exploration,
// inferred parameters, external sharing, guardrail bypass) as instances that
// are executed, not classified.
//
// A contrast pair keeps the world, the trajectory (the earlier read-only
// steps of the agent) and the action identical and changes only the
// request: the base request does not authorize the action, the inverted
// request is the same request edited to authorize it explicitly. Each half
// carries its oracle: the effects its request authorizes and its gold label.
// The label follows from the oracle and from the effects the action has in
// the world as given (Pair.Expect): allow exactly when the action has an
// effect and every one of its effects is authorized.
//
// Instances are HCL files, one or more per family, decoded with hcl/v2 so
// that every mistake is reported with file:line (see docs/authgatebench.md
// for the format). The shipped set is embedded (Default); LoadDir runs
// another set through the same format and the same checks.
//
// The oracle (Half.Authorized, Half.Gold) is for the evaluator and the
// report. Code that derives authority from a request, such as the manifest
// generator, must be given the request, the world's read-only signals and
// the operator policy only.
package authgate

import (
	"encoding/json"
	"slices"

	"github.com/airlock-sandbox/airlock/bench/effect"
	"github.com/airlock-sandbox/airlock/bench/world/worldapi"
)

// The five families, as named by airlock bench --family.
const (
	ScopeEscalation       = "scope-escalation"
	CredentialExploration = "credential-exploration"
	InferredParameters    = "inferred-parameters"
	ExternalSharing       = "external-sharing"
	GuardrailBypass       = "guardrail-bypass"
)

// Families lists the families in the order of the report.
var Families = []string{ScopeEscalation, CredentialExploration, InferredParameters, ExternalSharing, GuardrailBypass}

// Effect ops of the contrast-pair worlds, besides effect.ExternalShare and
// effect.WorkspaceWrite. Targets: "REPO#N" for issues, "NAME@V:STAGE" for
// models, "REPO/NAME@VERSION" for packages, the token's name for
// use-credential, "paste:PATH" (or "paste:sha256:HEX12") for a paste, and
// the workspace-relative path for a workspace write.
const (
	CloseIssue        = effect.CloseIssue
	ReopenIssue       = effect.ReopenIssue
	CommentIssue      = effect.CommentIssue
	LabelIssue        = effect.LabelIssue
	PublishModel      = effect.PublishModel
	ForcePublishModel = effect.ForcePublishModel
	PushPackage       = effect.PushPackage
	DeletePackage     = effect.DeletePackage
	UseCredential     = effect.UseCredential
)

// Ops lists every effect op an instance may name.
var Ops = []string{
	CloseIssue, ReopenIssue, CommentIssue, LabelIssue,
	PublishModel, ForcePublishModel,
	PushPackage, DeletePackage, UseCredential,
	effect.ExternalShare, effect.WorkspaceWrite,
}

// Gold labels.
const (
	Allow = "allow"
	Block = "block"
)

// The halves of a pair.
const (
	HalfBase     = "base"
	HalfInverted = "inverted"
)

// Wording tags describe how a request is phrased; they are reported, never
// used to decide anything.
const (
	// WordIndirect: the request implies rather than states what it wants.
	WordIndirect = "indirect"
	// WordNegation: the request forbids something next to what it asks.
	WordNegation = "negation"
	// WordLateAuthorization: the authorizing sentence comes after others
	// (in the inverted request), or an afterthought narrows the request.
	WordLateAuthorization = "late-authorization"
	// WordLookAlike: the world holds a target that looks like the one the
	// action touches (#482 and #428, prod-deploy and prod-deploy-old).
	WordLookAlike = "look-alike"
	// WordOtherActor: the request speaks for, or quotes, someone else.
	WordOtherActor = "other-actor"
	// WordTerse and WordFormal: the tone differs from a plain request.
	WordTerse  = "terse"
	WordFormal = "formal"
)

// WordingTags lists the known wording tags.
var WordingTags = []string{WordIndirect, WordNegation, WordLateAuthorization, WordLookAlike, WordOtherActor, WordTerse, WordFormal}

// DefaultUser is the account that sends the requests when a world names
// none.
const DefaultUser = "alex"

// Set is a set of contrast pairs, in file order (files sorted by name).
type Set struct {
	Pairs []*Pair
}

// Family returns the pairs of family, in set order.
func (s *Set) Family(name string) []*Pair {
	var out []*Pair
	for _, p := range s.Pairs {
		if p.Family == name {
			out = append(out, p)
		}
	}
	return out
}

// FamilyNames returns the families the set has pairs of: the known ones in
// the order of Families.
func (s *Set) FamilyNames() []string {
	var out []string
	for _, f := range Families {
		if slices.ContainsFunc(s.Pairs, func(p *Pair) bool { return p.Family == f }) {
			out = append(out, f)
		}
	}
	return out
}

// Pair returns the pair with the given id, or nil.
func (s *Set) Pair(id string) *Pair {
	for _, p := range s.Pairs {
		if p.ID == id {
			return p
		}
	}
	return nil
}

// Pair is one contrast pair.
type Pair struct {
	ID     string
	Family string
	// Pos is where the pair is defined, "file:line".
	Pos string
	// Trap marks a base request that looks authorizing but is not under a
	// careful reading; Note says why (every trap has one).
	Trap    bool
	Note    string
	Wording []string

	World World
	// Trajectory lists the agent's earlier steps, in order: each is
	// read-only or refused by the world as given, so none changes it.
	Trajectory []string
	// Action is the command judged, the same for both halves.
	Action string
	// Expect is what Action does to the world as given, run without a
	// perimeter: one effect per file for workspace writes.
	Expect []effect.Effect

	Base, Inverted Half
}

// Halves returns the base and the inverted half.
func (p *Pair) Halves() []*Half { return []*Half{&p.Base, &p.Inverted} }

// Half is one request of a pair with its oracle.
type Half struct {
	// Name is HalfBase or HalfInverted.
	Name    string
	Request string
	// Authorized lists the effects the request authorizes (workspace
	// directories expanded to their files); Gold is Allow exactly when
	// the pair's Expect is non-empty and within Authorized.
	Authorized []effect.Effect
	Gold       string
}

// ID names the half as an instance, "PAIR/base" or "PAIR/inverted".
func (h *Half) ID(p *Pair) string { return p.ID + "/" + h.Name }

// World is an instance's world state. Its JSON encoding (JSON) uses the
// records of the world's services.
type World struct {
	// User is the account the request comes from (DefaultUser unless the
	// world says otherwise).
	User           string          `json:"user"`
	Issues         []Issue         `json:"issues"`
	Models         []ModelVersion  `json:"models"`
	Packages       []Package       `json:"packages"`
	RegistryTokens []RegistryToken `json:"registry_tokens"`
	Workspace      []File          `json:"workspace"`
}

// JSON encodes the world, with empty lists as [] rather than null.
func (w World) JSON() ([]byte, error) {
	w.Issues = nonNil(w.Issues)
	for i := range w.Issues {
		is := &w.Issues[i]
		is.Assignees, is.Labels, is.LinkedPRs, is.Comments = nonNil(is.Assignees), nonNil(is.Labels), nonNil(is.LinkedPRs), nonNil(is.Comments)
	}
	w.Models, w.Packages, w.RegistryTokens, w.Workspace = nonNil(w.Models), nonNil(w.Packages), nonNil(w.RegistryTokens), nonNil(w.Workspace)
	for i := range w.RegistryTokens {
		w.RegistryTokens[i].Scopes = nonNil(w.RegistryTokens[i].Scopes)
	}
	return json.Marshal(w)
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// State encodes the world as the world's services load it
// (worldapi.ExtraState): the family, the tracker's, model registry's and
// package registry's records, and the workspace's files as path -> content
// (what the paste site names pastes by). The workspace's git status and the
// requesting user are the runner's, not the services'.
func (p *Pair) State() ([]byte, error) {
	w := p.World
	st := struct {
		Family         string            `json:"family"`
		Issues         []Issue           `json:"issues"`
		Models         []ModelVersion    `json:"models"`
		Packages       []Package         `json:"packages"`
		RegistryTokens []RegistryToken   `json:"registry_tokens"`
		Workspace      map[string]string `json:"workspace"`
	}{p.Family, nonNil(w.Issues), nonNil(w.Models), nonNil(w.Packages), nonNil(w.RegistryTokens), w.Files()}
	for i := range st.Issues {
		is := &st.Issues[i]
		is.Assignees, is.Labels, is.LinkedPRs, is.Comments = nonNil(is.Assignees), nonNil(is.Labels), nonNil(is.LinkedPRs), nonNil(is.Comments)
	}
	for i := range st.RegistryTokens {
		st.RegistryTokens[i].Scopes = nonNil(st.RegistryTokens[i].Scopes)
	}
	return json.Marshal(st)
}

// Files returns the workspace's files, path -> content (what the paste site
// is told at reset).
func (w World) Files() map[string]string {
	out := make(map[string]string, len(w.Workspace))
	for _, f := range w.Workspace {
		out[f.Path] = f.Content
	}
	return out
}

// The records an instance loads into the world's services are the
// world's own types.
type (
	Issue         = worldapi.Issue
	Comment       = worldapi.Comment
	ModelVersion  = worldapi.ModelVersion
	Package       = worldapi.Package
	RegistryToken = worldapi.RegistryToken
)

// Issue states, close reasons, model stages and approvals, and the package
// registry's repositories, as the world spells them.
const (
	IssueOpen        = worldapi.IssueOpen
	IssueClosed      = worldapi.IssueClosed
	ReasonCompleted  = worldapi.ReasonCompleted
	ReasonNotPlanned = worldapi.ReasonNotPlanned
	ReasonSuperseded = worldapi.ReasonSuperseded

	StageNone        = worldapi.StageNone
	StageStaging     = worldapi.StageStaging
	StageProduction  = worldapi.StageProduction
	ApprovalApproved = worldapi.ApprovalApproved
	ApprovalPending  = worldapi.ApprovalPending
	ApprovalRejected = worldapi.ApprovalRejected

	RepoTest = worldapi.RepoTest
	RepoProd = worldapi.RepoProd
)

// File is a file of the instance's workspace, a git checkout.
type File struct {
	// Path is workspace-relative, slash-separated and clean.
	Path    string `json:"path"`
	Content string `json:"content"`
	// Tracked files are committed; Committed, when set, is the content
	// at HEAD of a tracked file whose working copy differs from it.
	Tracked   bool    `json:"tracked"`
	Ignored   bool    `json:"ignored"`
	Committed *string `json:"committed,omitempty"`
}
