package api

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

// Change is one entry of a change set; Path is relative to the workspace.
type Change struct {
	Path       string `json:"path"`
	Kind       string `json:"kind"` // added, modified, deleted, renamed, mode, symlink, type
	Type       string `json:"type"` // file, dir, symlink, device, fifo, socket
	OldType    string `json:"old_type,omitempty"`
	OldPath    string `json:"old_path,omitempty"`
	Mode       uint32 `json:"mode"`
	OldMode    uint32 `json:"old_mode,omitempty"`
	Size       int64  `json:"size,omitempty"`
	LinkTarget string `json:"link_target,omitempty"`
	OldLink    string `json:"old_link,omitempty"`
	Binary     bool   `json:"binary,omitempty"`
}

// WorkspaceChanges is the change set of one overlay workspace.
type WorkspaceChanges struct {
	HostPath string   `json:"host_path"`
	Target   string   `json:"target"`
	Changes  []Change `json:"changes"`
	// Rejected and Conflicts say, by sandbox path, what a commit would
	// refuse now and why (filled by Review, not by Diff).
	Rejected  []Rejection `json:"rejected,omitempty"`
	Conflicts []Conflict  `json:"conflicts,omitempty"`
}

// ChangeSet lists what a session changed in its overlay workspaces.
type ChangeSet struct {
	Workspaces []WorkspaceChanges `json:"workspaces"`
}

// CommitRequest applies a session's change set to the host.
type CommitRequest struct {
	// Partial applies what no rule rejects and no conflict blocks.
	Partial bool `json:"partial,omitempty"`
	// Targets limits the commit to workspaces mounted at these sandbox paths.
	Targets []string `json:"targets,omitempty"`
}

// Rejection is a change a rule refused; Path is the sandbox path.
type Rejection struct {
	Path   string `json:"path"`
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
}

// Conflict is a change whose host file changed since the session started.
type Conflict struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// CommitResult reports what a commit did.
type CommitResult struct {
	Committed bool        `json:"committed"`
	Applied   []string    `json:"applied"`
	Rejected  []Rejection `json:"rejected,omitempty"`
	Conflicts []Conflict  `json:"conflicts,omitempty"`
}
