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
// sandbox binds (mnt/ws<N>, mnt/m<N>). The layers of the frozen views are
// detached mounts, attached nowhere. Nothing else of the host is mounted
// into the sandbox: every bind is of a single mount (no submounts), with
// nosuid and nodev.
//
// # Workspaces and the sandbox user
//
// An overlay workspace is an overlayfs with the frozen view of the host
// directory (see below) as its read-only lower layer and an upper
// directory on a quota-limited filesystem, mounted with redirect_dir=off, metacopy=off, index=off and
// xino=off so that the upper directory is a plain description of the
// changes (whiteouts, opaque directories, copied-up files). An ro
// workspace is the frozen view itself, an rw workspace a bind of the host
// directory.
//
// The sandbox runs as a non-root user. When that user is not the owner of
// the workspace directory, the workspace is mounted idmapped (owner ->
// sandbox user, uid and gid): the sandbox sees the owner's files as its
// own and, in an rw workspace, creates files owned by the owner. The
// mapping is put on the host-side mounts, which runc binds unchanged
// (checked with runc 1.5.3; no "idmap" mount option is needed in the
// spec). Overlayfs itself cannot be idmapped (mount_setattr fails with
// EINVAL on kernel 6.18), so for an overlay (and the frozen view) the
// idmapping is on the layers beneath it: files the sandbox writes land in the upper directory owned by the
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
// bind of an empty, root-owned directory or file of its own (masks/),
// mounted after the workspace; every other hard link to a matching file in
// the workspace is covered too. With a ReadAudit (WithReadAudit) the mask
// is readable by mode and every open of it is refused (EPERM) by a
// fanotify permission mark on its inode and reported; without, it is mode
// 0 and the kernel refuses the open (EACCES). Symlinks are not masked: whatever they reach
// is masked under its own path, so following them (or "..", or
// /proc/self/root) lands on the mask. The bind-mounted masks cannot be
// renamed, unlinked, hard-linked or unmounted from the sandbox, nor from a
// user namespace it creates (the kernel locks them).
//
// In an overlay workspace a masked regular file is not a mount but the
// frozen view's own entry (mask.InView): an empty file with no redirect,
// owned by an ID no scanned file has (65534 unless taken: pickMaskOwner;
// mapped to itself by the idmapping) and mode
// 0444 with a ReadAudit (whose mark is then on the workspace overlay's
// inode for that path) or 0 without. The sandbox, not its owner, cannot
// read, write, chmod, touch or hard-link it, but it can remove or rename
// it (git clean -fdx), which a mount would refuse with EBUSY: deny_read
// stops reads, and a removal is a change the commit judges like any
// other; a change that writes a masked path is rejected (RuleDenyRead), so
// a masked credential file cannot be replaced. The unified diff of a
// change to a masked path, or to one a deny_read pattern matches, shows
// the sandbox's side only, and rename detection never compares such a
// file's content. A git config that holds
// credentials (tokens in URLs, credential helpers, http extra headers) is
// covered by a read-only copy without them, so git keeps working; writes
// to that config fail. A hard link to a file outside the workspace cannot
// be recognised.
//
// Extra mounts get the same treatment: a directory mount is scanned and
// masked with its own deny_read patterns and the defaults; a file or
// directory mount whose own host path or sandbox target the default list
// covers (a mount of ~/.aws, or of any file at .docker/config.json) is not
// bound at all, and the sandbox gets an empty mask in its place.
//
// # Names that appear later: the frozen view
//
// Masks are planned from the scan, so a file created on the host after
// Setup (a new .env.local, a credential file written by a tool the
// operator runs) would not be masked if the sandbox saw the live host
// directory. So an overlay or ro workspace, and a read-only directory
// mount, is not the live directory but a frozen view of it (frozenView):
// a read-only overlay whose only listed layer is a "names layer", a
// private tmpfs holding every scanned directory, symlink and special file,
// and every regular file as an empty, metadata-only file (overlayfs
// metacopy) with the host file's owner, mode, size and modification time
// and a redirect to the same path in the host directory, which is a
// data-only layer: overlayfs reads file data from it but never lists it or
// looks a name up in it. A name the scan did not see does not exist in the
// sandbox, whatever it is called and wherever it appears; a masked path
// has no redirect at all in the names layer (an empty file, an empty
// directory), so even without its mask nothing leads to the host's data.
// An overlay workspace puts its copy-on-write upper directory over that
// view (two overlays; the outer one keeps metacopy and redirect_dir off, so
// the upper directory stays a plain description of the changes).
//
// Why this and not the alternatives: the design already says the host
// workspace is not to be changed while a session is open, so a snapshot
// taken at Setup gives up nothing the session was promised; copying the
// data would cost as much as the tree is large, and the names alone cost a
// few system calls and under 1 KiB of kernel memory per entry
// (BenchmarkFrozenView10k: 10,000 files in about 130 ms and 0.75 KiB each
// on a 2-vCPU host, against about 50 ms for the scan, BenchmarkScan10k). Masking at read time (FUSE, or fanotify
// permission events on the whole workspace) would put a daemon process in
// the path of every open, and the masks would stop being enforced, or
// every open would hang, whenever that process dies or restarts; the
// ReadAudit marks only the masks, which stay empty whether or not it runs. Masking whole directories
// cannot stop a new name appearing in a directory the sandbox must read.
// A watcher that masks new names after the fact leaves a window in which
// they are readable.
//
// What the frozen view changes for the session: content written on the
// host to a file that existed at Setup is seen (under a name deny_read
// does not match it is not protected anyway); files deleted on the host
// fail to open; inode numbers and change times are the view's own, so the
// first `git status` in the sandbox re-reads the tracked files (it already
// does when the workspace is idmapped, since the owner differs). Opening
// and reading a file through two overlays costs more than through one:
// BenchmarkGitStatus10k, which re-reads 10,000 files each time, takes
// about 0.55 s on a 2-vCPU host, against 0.25 s over the live directory. A
// workspace on overlayfs cannot have an overlay workspace (the kernel
// stacks at most two overlays); Setup fails and says so. The frozen view
// needs overlayfs data-only layers (the datadir+ parameter) and tmpfs
// extended attributes (CONFIG_TMPFS_XATTR).
//
// An rw workspace and a read-write mount are binds of the live host
// directory, since the sandbox's writes must reach it: there, masks are
// planned at Setup and a file the host creates during the session is not
// masked. Use overlay (or ro) where that matters. A mount point inside the
// host directory is never entered by the scan: the frozen view shows it as
// an empty directory, and in a live view it is masked, since the bind would
// show the unscanned directory the host mount covers.
//
// # What deny_read does not cover, and what is audited
//
// Git history: a masked file that git tracks, or that any commit reachable
// from a ref holds, is readable in the sandbox through .git/objects (git
// show HEAD:.env). TrackedDenied and CommittedDenied list such paths;
// airlock validate warns about them, and the daemon audits the tracked
// ones when a session starts (Session.DenyRead). Rewriting the history the
// sandbox sees is not attempted.
//
// Reads of masked paths: with a ReadAudit, each open of a mask, however
// it is reached (a symlink, a hard link's own mask, /proc/self/root), is
// refused and reported with the mask's sandbox path, its rule and the
// opener's pid; the daemon audits it as fs/read_denied. Only the masks'
// inodes are marked, so no other open waits for anything. While no
// ReadAudit holds the marks (the daemon is restarting) a mask opens as
// the empty file or directory it is: nothing is read, and nothing is
// reported until Load re-arms the marks. Reports come through a bounded
// queue; past it they are counted (MaskRead.Dropped), never waited for.
// The masks planned at Setup are audited too (Session.DenyRead). The
// ReadAudit needs fanotify permission events
// (CONFIG_FANOTIFY_ACCESS_PERMISSIONS) and CAP_SYS_ADMIN; where it cannot
// start, the daemon says so in its log, and the masks are mode 0, refused
// by the kernel unaudited.
//
// Fresh tells whether the host trees are still exactly as Setup scanned
// them, for a sandbox prepared ahead of its session.
//
// # Commit
//
// Commit reads the upper directory and the host directory (never the
// overlay), evaluates the rules (protect, preserve_untracked,
// protect_refs: protected refs' values, loose and packed storage read
// together, see refvalues.go; git_exec: hooks, command-running git config and the
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
//
// The change set and commit result types are declared in the leaf package
// fsscope/change, which the api package serves as they are.
package fsscope
