package worldapi

import "strconv"

// The records of the services that AmPermBench's families do not use: the
// issue tracker, the model registry, the package registry and the paste
// site. They start empty; ExtraState is what an instance loads into them.

// Issue is an issue of the tracker.
type Issue struct {
	Repo   string `json:"repo"`
	Number int    `json:"number"`
	Title  string `json:"title"`
	// Body is the issue's description (may be empty).
	Body        string   `json:"body,omitempty"`
	State       string   `json:"state"`        // IssueOpen or IssueClosed
	StateReason string   `json:"state_reason"` // "" or one of the Reason* values
	Author      string   `json:"author"`
	Assignees   []string `json:"assignees"`
	Labels      []string `json:"labels"`
	// Board is the project board the issue is on ("" for none) and
	// Column its column there.
	Board     string    `json:"board"`
	Column    string    `json:"column"`
	LinkedPRs []int     `json:"linked_prs"`
	Comments  []Comment `json:"comments"`
}

// Issue states and the reasons a closed issue carries.
const (
	IssueOpen   = "open"
	IssueClosed = "closed"

	ReasonCompleted  = "completed"
	ReasonNotPlanned = "not_planned"
	ReasonSuperseded = "superseded"
)

// IssueTarget names an issue as effects do: "REPO#N".
func IssueTarget(repo string, number int) string { return repo + "#" + strconv.Itoa(number) }

// Comment is a comment on an issue.
type Comment struct {
	Author string `json:"author"`
	Body   string `json:"body"`
}

// IssueList is the body of GET /v1/repos/{repo}/issues.
type IssueList struct {
	Issues []Issue `json:"issues"`
}

// CloseRequest is the body of POST .../issues/{n}/close. An empty Reason
// is ReasonCompleted; a Comment is added as the issue is closed (not if
// it was closed already).
type CloseRequest struct {
	Reason  string `json:"reason,omitempty"`
	Comment string `json:"comment,omitempty"`
}

// CommentRequest is the body of POST .../issues/{n}/comments.
type CommentRequest struct {
	Body string `json:"body"`
}

// LabelRequest is the body of POST .../issues/{n}/labels: Add are added
// (if missing) after Remove are removed (if present).
type LabelRequest struct {
	Add    []string `json:"add,omitempty"`
	Remove []string `json:"remove,omitempty"`
}

// IssueResponse is the answer of the tracker's POST routes: the issue
// after the request, and whether the request changed it (closing a closed
// issue or reopening an open one does not).
type IssueResponse struct {
	Issue   Issue `json:"issue"`
	Changed bool  `json:"changed"`
}

// ModelVersion is a version of a model in the registry.
type ModelVersion struct {
	Name        string `json:"name"`
	Version     string `json:"version"`
	Stage       string `json:"stage"`    // StageNone, StageStaging or StageProduction
	Approval    string `json:"approval"` // ApprovalApproved, ApprovalPending or ApprovalRejected
	ApprovedBy  string `json:"approved_by"`
	PublishedBy string `json:"published_by"`
	// Forced is set by a publish to production that force let through
	// without approval, and cleared by any other publish.
	Forced bool `json:"forced"`
}

// Model stages and approvals.
const (
	StageNone       = "none"
	StageStaging    = "staging"
	StageProduction = "production"

	ApprovalApproved = "approved"
	ApprovalPending  = "pending"
	ApprovalRejected = "rejected"
)

// ModelTarget names a model version's publication as effects do:
// "NAME@V:STAGE".
func ModelTarget(name, version, stage string) string { return name + "@" + version + ":" + stage }

// ModelList is the body of GET /v1/models.
type ModelList struct {
	Models []ModelVersion `json:"models"`
}

// PublishRequest is the body of POST /v1/models/{name}/versions/{v}:publish.
type PublishRequest struct {
	Stage string `json:"stage"`
	Force bool   `json:"force,omitempty"`
}

// Package is a package version in a repository of the package registry.
type Package struct {
	Repo    string `json:"repo"` // RepoTest or RepoProd
	Name    string `json:"name"`
	Version string `json:"version"`
	// SHA256 is the hex SHA-256 of the pushed content (as the state gives
	// it for a package loaded with the state).
	SHA256   string `json:"sha256"`
	PushedBy string `json:"pushed_by"`
}

// The package registry's repositories.
const (
	RepoTest = "test"
	RepoProd = "prod"
)

// PackageTarget names a package version as effects do:
// "REPO/NAME@VERSION".
func PackageTarget(repo, name, version string) string { return repo + "/" + name + "@" + version }

// PackageList is the body of GET /v1/repos/{repo}/packages.
type PackageList struct {
	Packages []Package `json:"packages"`
}

// RegistryToken is a static token of the package registry, accepted
// besides the session's token: a request that sends Secret as its bearer
// token (or Basic password) is authorized by Scopes. An Expired token is
// refused (401 "token NAME expired").
type RegistryToken struct {
	Name    string   `json:"name"`
	Secret  string   `json:"secret"`
	Scopes  []string `json:"scopes"`
	Expired bool     `json:"expired"`
}

// PasteResponse is the answer of POST /documents.
type PasteResponse struct {
	Key string `json:"key"`
	URL string `json:"url"`
}

// ExtraState is the state an instance loads into the services that
// AmPermBench's families leave empty (see World.LoadState). Empty fields
// leave their service empty.
type ExtraState struct {
	// Family names the instance's family: the effects of these services
	// carry it, and resetting it resets them alone. Required unless the
	// whole state is empty.
	Family         string          `json:"family"`
	Issues         []Issue         `json:"issues,omitempty"`
	Models         []ModelVersion  `json:"models,omitempty"`
	Packages       []Package       `json:"packages,omitempty"`
	RegistryTokens []RegistryToken `json:"registry_tokens,omitempty"`
	// Workspace is the instance's workspace files, by workspace-relative
	// path: the paste site names what a paste shared by the file whose
	// content it is.
	Workspace map[string]string `json:"workspace,omitempty"`
}

// Kinds of the targets of these services, in ErrorDetail.Kind.
const (
	KindIssue    = "issue"
	KindModel    = "model"
	KindPackage  = "package"
	KindDocument = "document"
)
