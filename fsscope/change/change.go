// Package change declares what a review of a sandbox's overlay workspaces
// produces: the change set (Set, Workspace, Change) and what a commit did
// with it (CommitResult, Rejection, Conflict).
//
// fsscope computes these values and the api package serves them as they
// are, so both import this package and nothing converts between them. It
// lives beside fsscope, which defines what the values mean, and imports
// nothing, so the public api package can depend on it without pulling in
// the filesystem perimeter. The JSON tags are airlockd's wire format
// (GET /v1/sessions/{id}/diff, POST /v1/sessions/{id}/commit).
package change

// Kind says what happened to a path.
type Kind string

const (
	// KindAdded: the path did not exist on the host.
	KindAdded Kind = "added"
	// KindModified: a regular file's content changed (Mode is its new
	// mode, which may have changed too).
	KindModified Kind = "modified"
	// KindDeleted: the path was removed.
	KindDeleted Kind = "deleted"
	// KindRenamed: a regular file moved from OldPath to Path with its
	// content unchanged (detected by identical content).
	KindRenamed Kind = "renamed"
	// KindMode: only the permission bits changed (OldMode to Mode).
	KindMode Kind = "mode"
	// KindSymlink: an existing symlink now points elsewhere.
	KindSymlink Kind = "symlink"
	// KindType: the path exists on both sides with different file types
	// (OldType to Type).
	KindType Kind = "type"
)

// File types of a change.
const (
	TypeFile    = "file"
	TypeDir     = "dir"
	TypeSymlink = "symlink"
	TypeDevice  = "device"
	TypeFIFO    = "fifo"
	TypeSocket  = "socket"
)

// Change is one entry of a change set. Paths are relative to the
// workspace root, slash-separated.
type Change struct {
	Path    string `json:"path"`
	Kind    Kind   `json:"kind"`
	Type    string `json:"type"` // file, dir, symlink, device, fifo, socket
	OldType string `json:"old_type,omitempty"`
	OldPath string `json:"old_path,omitempty"`
	// Mode and OldMode are permission bits (including setuid, setgid and
	// sticky, as the sandbox set them; commit strips setuid and setgid).
	Mode       uint32 `json:"mode"`
	OldMode    uint32 `json:"old_mode,omitempty"`
	Size       int64  `json:"size,omitempty"`
	LinkTarget string `json:"link_target,omitempty"`
	OldLink    string `json:"old_link,omitempty"`
	Binary     bool   `json:"binary,omitempty"`
}

// Workspace is the change set of one overlay workspace.
type Workspace struct {
	HostPath string   `json:"host_path"`
	Target   string   `json:"target"`
	Changes  []Change `json:"changes"`
	// Rejected and Conflicts say, by sandbox path, what a commit would
	// refuse now and why (filled by a review, not by a plain diff).
	Rejected  []Rejection `json:"rejected,omitempty"`
	Conflicts []Conflict  `json:"conflicts,omitempty"`
}

// Set lists what a session changed in its overlay workspaces.
type Set struct {
	Workspaces []Workspace `json:"workspaces"`
}

// Len returns the number of changes in all workspaces.
func (c *Set) Len() int {
	n := 0
	for _, w := range c.Workspaces {
		n += len(w.Changes)
	}
	return n
}

// Rejection is a change a rule refused. Path is the sandbox path; Rule
// names the rule (fsscope.RuleProtect and its siblings).
type Rejection struct {
	Path   string `json:"path"`
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
}

// Conflict is a change whose host path changed since the session started.
type Conflict struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
}

// CommitResult reports what a commit did, per sandbox path. Committed says
// whether the host changed (something was applied).
type CommitResult struct {
	Committed bool        `json:"committed"`
	Applied   []string    `json:"applied"`
	Rejected  []Rejection `json:"rejected,omitempty"`
	Conflicts []Conflict  `json:"conflicts,omitempty"`
}
