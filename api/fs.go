package api

import "github.com/airlock-sandbox/airlock/fsscope/change"

// Filesystem review routes (overlay workspaces):
//
//	GET  /v1/sessions/{id}/diff                 -> ChangeSet
//	GET  /v1/sessions/{id}/diff?format=unified  -> text/x-diff (unified diff of text files)
//	POST /v1/sessions/{id}/commit               CommitRequest -> CommitResult
//	POST /v1/sessions/{id}/discard              -> 204
//
// Commit and discard need a session whose main process has ended. A commit
// that is refused (a protected path, a conflict) returns 200 with nothing
// in Applied unless Partial was set; Committed says whether the host changed.

// The change set and commit result are declared once, in package change,
// which fsscope produces and this package serves as they are.
type (
	// Change is one entry of a change set; Path is relative to the workspace.
	Change = change.Change
	// WorkspaceChanges is the change set of one overlay workspace.
	WorkspaceChanges = change.Workspace
	// ChangeSet lists what a session changed in its overlay workspaces.
	ChangeSet = change.Set
	// Rejection is a change a rule refused; Path is the sandbox path.
	Rejection = change.Rejection
	// Conflict is a change whose host file changed since the session started.
	Conflict = change.Conflict
	// CommitResult reports what a commit did.
	CommitResult = change.CommitResult
)

// CommitRequest applies a session's change set to the host.
type CommitRequest struct {
	// Partial applies what no rule rejects and no conflict blocks.
	Partial bool `json:"partial,omitempty"`
	// Targets limits the commit to workspaces mounted at these sandbox paths.
	Targets []string `json:"targets,omitempty"`
}
