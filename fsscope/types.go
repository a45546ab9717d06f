package fsscope

import (
	"time"

	"github.com/airlock-sandbox/airlock/policies"
)

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
	Type    string `json:"type"`
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

// Len returns the number of changes in all workspaces.
func (c *ChangeSet) Len() int {
	n := 0
	for _, w := range c.Workspaces {
		n += len(w.Changes)
	}
	return n
}

// Rules that reject a change at commit.
const (
	RuleProtect           = "protect"
	RulePreserveUntracked = "preserve_untracked"
	RuleProtectRefs       = "protect_refs"
	// RuleGitExec rejects changes that would make git run a command on the
	// host: hooks, and config variables such as core.fsmonitor or any
	// alias. It cannot be turned off.
	RuleGitExec = "git_exec"
	// RuleGitMeta rejects changes inside a git directory that are not
	// known to be inert (see gitInert): a new git directory, commondir,
	// gitdir files, alternates, info/attributes, any symlink, hooks. A
	// workspace's git_allow list exempts paths from it by name.
	RuleGitMeta = "git_meta"
	// RuleSymlinkEscape rejects a symlink whose target, resolved against
	// its own location, leaves the workspace, and a change that makes one
	// of the host's existing links leave it (cur -> lib/../x once lib
	// becomes a link).
	RuleSymlinkEscape = "symlink_escape"
	// RuleSpecialFile rejects device nodes, FIFOs and sockets.
	RuleSpecialFile = "special_file"
	// RuleDependency rejects a change that needs a rejected or conflicting
	// one (a file in a rejected new directory, a directory whose content
	// cannot all be deleted).
	RuleDependency = "dependency"
)

// CommitOptions control Commit.
type CommitOptions struct {
	// Partial applies the changes no rule rejects and no conflict blocks;
	// without it, any rejection or conflict means nothing is applied.
	Partial bool
	// Targets limits the commit to the workspaces mounted at these sandbox
	// paths; empty means every overlay workspace.
	Targets []string
	// Audit receives one event per rejection and conflict, and one per
	// applied change.
	Audit func(Event)
}

// Rejection is a change a rule refused. Path is the sandbox path.
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

// CommitResult reports what a commit did, per sandbox path.
type CommitResult struct {
	Applied   []string    `json:"applied"`
	Rejected  []Rejection `json:"rejected,omitempty"`
	Conflicts []Conflict  `json:"conflicts,omitempty"`
}

// Audit event types.
const (
	EventRejected = "fs.commit.rejected"
	EventConflict = "fs.commit.conflict"
	EventApplied  = "fs.commit.applied"
	// EventModeNormalised: an rw workspace entry the sandbox left setuid,
	// setgid or world-writable had those bits removed when it ended.
	EventModeNormalised = "fs.rw.mode_normalised"
)

// Event is an audit record of a commit decision.
type Event struct {
	Time time.Time `json:"time"`
	Type string    `json:"type"`
	// Path is the sandbox path; HostPath the host path it maps to.
	Path     string `json:"path"`
	HostPath string `json:"host_path"`
	Kind     Kind   `json:"kind,omitempty"`
	Rule     string `json:"rule,omitempty"`
	Reason   string `json:"reason,omitempty"`
}

// QuotaBackend is the filesystem that holds a session's overlay upper
// directories and bounds their size.
type QuotaBackend string

const (
	// QuotaImage is a sparse ext4 image file in the state directory,
	// loop-mounted. Its blocks come from the host disk as they are written;
	// it survives a daemon restart and a reboot, so a session kept for
	// review survives them too. Needs mkfs.ext4 and loop devices.
	QuotaImage QuotaBackend = "image"
	// QuotaTmpfs is a size-limited tmpfs: nothing to format, but its pages
	// are memory (or swap), and it does not survive a reboot.
	QuotaTmpfs QuotaBackend = "tmpfs"
)

// DefaultDisk is the upper-directory quota of a session whose manifest sets
// no resources.disk.
const DefaultDisk = policies.DefaultDisk
