package fsscope

import (
	"time"

	"github.com/airlock-sandbox/airlock/fsscope/change"
	"github.com/airlock-sandbox/airlock/policies"
)

// The change set and commit result are declared in package change, which
// the api package serves as they are; these names keep fsscope's own.
type (
	Kind             = change.Kind
	Change           = change.Change
	WorkspaceChanges = change.Workspace
	ChangeSet        = change.Set
	Rejection        = change.Rejection
	Conflict         = change.Conflict
	CommitResult     = change.CommitResult
)

// Kinds of change (see package change).
const (
	KindAdded    = change.KindAdded
	KindModified = change.KindModified
	KindDeleted  = change.KindDeleted
	KindRenamed  = change.KindRenamed
	KindMode     = change.KindMode
	KindSymlink  = change.KindSymlink
	KindType     = change.KindType
)

// File types of a change (see package change).
const (
	TypeFile    = change.TypeFile
	TypeDir     = change.TypeDir
	TypeSymlink = change.TypeSymlink
	TypeDevice  = change.TypeDevice
	TypeFIFO    = change.TypeFIFO
	TypeSocket  = change.TypeSocket
)

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
	// RuleDenyRead rejects a change that writes a path deny_read masked,
	// or makes one of its directories anything but a directory (a
	// symlink to a directory of the sandbox's would lead there):
	// the sandbox may remove such a file (a masked file of an overlay
	// workspace), never put content of its own in its place, since the
	// host's tools read credentials and settings from there (a kubeconfig
	// exec entry, a yarnPath). It cannot be turned off.
	RuleDenyRead = "deny_read"
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
