// Package fsscope is airlock's filesystem perimeter: it decides what of
// the host a sandbox sees, keeps the sandbox's writes to an overlay
// workspace away from the host until they are reviewed, and applies them
// safely when they are committed.
//
// # Lifecycle
//
//	s, _ := fsscope.Setup(ctx, stateDir, policy, sandboxUser) // mounts in stateDir, baseline, masks
//	spec opts: s.SpecOpt()                                    // the sandbox's bind mounts, masks last
//	... the sandbox runs; s.Diff / s.UnifiedDiff work meanwhile ...
//	s.Teardown(ctx, true)                                     // sandbox gone: unmount, keep the changes
//	s.Finish(ctx, audit) or s.Commit / s.Discard              // on_exit, or airlock commit/discard
//	s.Teardown(ctx, false)                                    // remove everything
//
// After a daemon restart, Load re-opens a session from its state
// directory; Cleanup removes whatever a session left after a crash. Both,
// like every other method, first complete or undo a commit that a crash
// interrupted.
//
// The state directory (mode 0700) holds fsscope.json, the baselines, the
// mask sources (masks/), the quota filesystem (disk.img mounted on
// upper/, holding ws<N>/upper and ws<N>/work) and the mount sources the
// sandbox binds (mnt/ws<N>, mnt/m<N>). Nothing else of the host is mounted
// into the sandbox: every bind is of a single mount (no submounts), with
// nosuid and nodev.
//
// # Workspaces and the sandbox user
//
// An overlay workspace is an overlayfs with the host directory as its
// read-only lower layer and an upper directory on a quota-limited
// filesystem, mounted with redirect_dir=off, metacopy=off, index=off and
// xino=off so that the upper directory is a plain description of the
// changes (whiteouts, opaque directories, copied-up files). An ro or rw
// workspace is a bind of the host directory.
//
// The sandbox runs as a non-root user. When that user is not the owner of
// the workspace directory, the workspace is mounted idmapped (owner ->
// sandbox user, uid and gid): the sandbox sees the owner's files as its
// own and, in an rw workspace, creates files owned by the owner. The
// mapping is put on the host-side mounts, which runc binds unchanged
// (checked with runc 1.5.3; no "idmap" mount option is needed in the
// spec). Overlayfs itself cannot be idmapped (mount_setattr fails with
// EINVAL on kernel 6.18), so for an overlay the idmapping is on its lower
// layer: files the sandbox writes land in the upper directory owned by the
// sandbox user, which does not matter, as a commit gives every file its
// host owner. Files owned by other users appear as the overflow user
// (65534) and cannot be changed. Where the host filesystem does not
// support idmapped mounts, Setup fails; the daemon can then run the
// session as WorkspaceOwner, which needs no idmapping. Extra mounts are
// not idmapped.
//
// # deny_read
//
// deny_read patterns (glob syntax: see package glob; matched without
// regard to case or Unicode normalisation) and, unless the manifest turns
// them off, DefaultDenyRead are matched against the host tree at Setup,
// walking it beneath the workspace root without following symlinks or
// crossing mounts. A matching directory or file is covered by a read-only
// bind of an empty, root-owned, mode-0 directory or file, mounted after
// the workspace; every other hard link to a matching file in the
// workspace is covered too. Symlinks are not masked: whatever they reach
// is masked under its own path, so following them (or "..", or
// /proc/self/root) lands on the mask. The masks cannot be renamed,
// unlinked, hard-linked or unmounted from the sandbox, nor from a user
// namespace it creates (the kernel locks them). A git config that holds
// credentials (tokens in URLs, credential helpers, http extra headers) is
// covered by a read-only copy without them, so git keeps working; writes
// to that config fail. Files created after Setup are not masked, and a
// hard link to a file outside the workspace cannot be recognised. Fresh
// tells whether the host trees are still exactly as Setup scanned them,
// for a sandbox prepared ahead of its session.
//
// # Commit
//
// Commit reads the upper directory and the host directory (never the
// overlay), evaluates the rules (protect, preserve_untracked,
// protect_refs, git_exec: hooks, command-running git config and the
// scripts they name; git_meta: inside a git directory only inert files,
// see gitmeta.go; symlink_escape: links whose target leaves the
// workspace, or that send a host link out of it; special files) and checks every path it would touch against the baseline recorded at
// Setup (type, inode, size, mtime, ctime, mode, owner; a content hash on
// filesystems with coarse timestamps). Then, for one workspace at a time:
// a journal is written to the state directory; every new file is staged
// in a directory inside the workspace root (owned as it will be, without
// setuid, setgid or world-write bits the host entry did not have) and synced, so a full disk fails before the host
// tree changes; then each change is applied with one rename (RENAME_EXCHANGE
// for a replacement, RENAME_NOREPLACE for a new path; removed entries are
// moved into the staging directory), after checking the path once more.
// Every path is resolved with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_XDEV), so no symlink is followed and no mount crossed, even if
// the host tree is changed during the commit. On any failure the applied
// steps are undone; after a crash, the journal lets the next operation
// undo them. The upper directory is never modified by a commit.
package fsscope
