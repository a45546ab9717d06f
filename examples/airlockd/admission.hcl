# admission.hcl: an airlockd admission policy, given with
#
#   airlockd --admission examples/airlockd/admission.hcl
#
# Whoever can use airlockd's socket can ask for sessions, and a session's
# user, capabilities and host paths act on this host: with no user
# namespace, uid 0 in a sandbox with a writable mount is root on the host
# files it reaches. airlockd admits a request only within this policy and
# refuses the rest with HTTP 403 naming the rule; nothing is created for a
# refused request. --socket-group needs a policy file: every member of the
# group can use the socket.
#
# Without --admission, the built-in policy applies: any host path (but the
# protected ones below), any uid and gid but 0, the capabilities CAP_KILL,
# CAP_NET_BIND_SERVICE and CAP_SYS_CHROOT, secrets from the files in
# /etc/airlock/secrets/HOST/ only, each injected into HOST alone, and the
# limits shown in the comments of the limits block.
#
# Refused whatever this file says, as workspaces and mounts: /, /etc,
# /proc, /sys, /dev, /boot, /run, /var/run, /var/lib/containerd, airlockd's
# --root (its state and signing keys, and the embedded containerd's root
# and socket), its --bin-dir and binary and the absolute paths in its
# --issuer commands (for writable use), its --socket, the socket of an
# external --containerd, anything beneath them, and any directory that
# contains one of them (so /var/lib is refused when --root is
# /var/lib/airlock). Unix sockets, devices, fifos and files with more than
# one hard link are refused as host paths anywhere. Host paths are resolved (symlinks and "..") before they
# are checked, and the session is given the resolved path.
#
# The file holds one admission block (the block a daemon configuration
# file will hold). Values are literals: no variables or functions.
admission {
  # Required. Host directories under which a workspace or mount may name a
  # path (the directory itself or anything beneath it). ["/"] admits every
  # path that is not protected.
  host_paths = ["/srv/agents", "/home"]

  # Host directories under which only read-only use is admitted: workspaces
  # with mode = "ro" and mounts with read_only = true. Overlay workspaces
  # count as writable: their changes can be committed to the host.
  # Default: none.
  read_only_paths = ["/opt/datasets", "/usr/share/ca-certificates"]

  # Kubernetes node agents only (airlockd-kube --kubernetes): host
  # directories under which a Session's workspace may be the directory of
  # the PersistentVolume (local or hostPath) its claim is bound to
  # (spec.workspaceSources volume). No session may name a path under them
  # as a host_path, so they may not overlap host_paths or read_only_paths.
  # Default: none.
  # volume_paths = ["/srv/airlock/volumes"]

  # The uids and gids a session's user may have: numeric ids or inclusive
  # ranges "FIRST-LAST". A user "1000" has gid 1000. Default: every id but
  # 0 ("1-4294967294"). Sessions have no user namespace: a sandbox's uid is
  # that uid on the host files it is given, so a caller who may pick any
  # uid can act as any host user on the host paths admitted above (another
  # user's home, a service's data). Admit only the ids your callers are.
  # Admitting 0 lets a session own files as root on every writable host
  # path it is given.
  users  = ["1000-59999", "65534"]
  groups = ["1000-59999", "65534"]

  # Capabilities a manifest may grant. Default: CAP_KILL,
  # CAP_NET_BIND_SERVICE, CAP_SYS_CHROOT. Names as in a manifest
  # ("NET_BIND_SERVICE" means CAP_NET_BIND_SERVICE). CAP_SETUID, CAP_SETGID,
  # CAP_CHOWN, CAP_FOWNER, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and
  # CAP_MKNOD let a session act as any uid or gid on the host files it is
  # given: they are refused unless users and groups admit every id.
  capabilities = ["CAP_NET_BIND_SERVICE", "CAP_KILL"]

  # Where a manifest's secret blocks may take their value from, and which
  # hosts each source may be injected into. airlockd reads the value as
  # root and the L7 gateway sends it to the manifest's inject hosts, so a
  # source admitted for a host is one every caller may have sent there.
  # One block per source glob ("*" does not cross '/'): "file:/PATH" for
  # a file on this host, "env:VAR" for a variable of airlockd's
  # environment. hosts: exact names, "*.suffix" for the names under a
  # domain, or "{dir}": the name of the directory holding the file.
  # Default: the block below for /etc/airlock/secrets/*/* alone, so
  # /etc/airlock/secrets/api.anthropic.com/key goes to api.anthropic.com
  # and nowhere else (a directory the operator fills and only root may
  # read or write). No environment variable is admitted unless listed:
  # airlockd's environment may hold what no session should reach. A file
  # source is resolved (symlinks and "..") and must be admitted for every
  # inject host both as written and resolved; it must be a regular file
  # with one name (no other hard link), checked again whenever it is read.
  secret_source "file:/etc/airlock/secrets/*/*" {
    hosts = ["{dir}"]
  }
  secret_source "env:ANTHROPIC_API_KEY" {
    hosts = ["api.anthropic.com"]
  }
  secret_source "file:/etc/airlock/corp/*" {
    hosts = ["git.corp.test", "*.registry.corp.test"]
  }

  # Repositories the Kubernetes node agent may fetch a Session's workspace
  # from (spec.workspaceSources), and the branches it may push the
  # session's committed changes to. One block per URL glob ("*" does not
  # cross '/'; the host is named, never a glob): http or https URLs in
  # canonical form, without credentials, or ssh://USER@HOST[:PORT]/PATH
  # (not git's scp-like USER@HOST:PATH). The agent fetches and pushes as
  # root, with this host's network, so a source admitted here is one every
  # caller that may create Sessions can have this host reach. push_branches:
  # branch names or globs; none: fetch only. token_file: a file on this
  # host holding a token sent to these repositories as HTTP basic
  # authentication with username (default "x-access-token"), for private
  # repositories and pushes; read by airlockd as root at each fetch and
  # push, given to git through its environment, refused as a workspace or
  # mount; every Session that may name these repositories uses it.
  # namespaces: the Kubernetes namespaces whose Sessions the block admits
  # (default: every one), so that a namespace has its own token and push
  # branches; blocks for one URL glob may not share a namespace. An ssh
  # block names ssh_key_file (this host's private key, the only identity
  # ssh offers; refused as a workspace or mount) and known_hosts (the host
  # keys trusted; a host not listed is refused, never trusted on first
  # use), both required, and no token_file or username.
  # Default: no git source.
  git_source "https://git.corp.test/agents/*" {
    push_branches = ["airlock/*"]
    token_file    = "/etc/airlock/git/corp.token"
  }
  git_source "https://git.corp.test/team-a/*" {
    namespaces    = ["team-a"]
    push_branches = ["airlock/team-a/*"]
    token_file    = "/etc/airlock/git/team-a.token"
  }
  git_source "ssh://git@git.corp.test/infra/*" {
    push_branches = ["airlock/*"]
    ssh_key_file  = "/etc/airlock/git/id_ed25519"
    known_hosts   = "/etc/airlock/git/known_hosts"
  }

  # Upper bounds. A session that asks for more is refused; one that leaves
  # a value out (or gives exactly the manifest default, as the CLI fills
  # it in) gets the manifest default (cpus 1, memory 1GiB, pids 512, disk
  # 4GiB for overlay upper directories, timeout 30m), or the bound when the
  # bound is lower. Every attribute is optional; its default is the
  # built-in bound.
  limits {
    cpus     = 4       # Default 16.
    memory   = "8GiB"  # Default "64GiB".
    pids     = 4096    # Default 32768.
    disk     = "16GiB" # Default "256GiB".
    # What one session's output and audit may take under --root
    # (resources.log_size, audit_size). Defaults "1GiB" and "256MiB".
    log_size   = "256MiB"
    audit_size = "64MiB"
    timeout  = "4h"    # Default "24h".
    sessions = 32      # Sessions held at once, in any state, plus sandboxes
                       # prepared for warm pools. Default 256.
  }
}
