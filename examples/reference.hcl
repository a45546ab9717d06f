# reference.hcl: every block and attribute of an airlock session manifest.
#
# A manifest declares optional variables and exactly one session. Values
# are data: strings (with "${var.NAME}" interpolation), numbers, bools,
# lists, maps, var.NAME references, comparisons and conditionals. The daemon
# evaluates manifests it did not write, so there are no functions (file(),
# env(), ...), no for expressions and no arithmetic; numbers are zero or
# between 1e-9 and 2^63-1 in magnitude.
#
#   airlock validate examples/reference.hcl
#   airlock run -f examples/reference.hcl -var task="fix the flaky test"
#
# Relative host paths (workspace and mount labels) resolve against the
# directory of this file. Host paths must exist when the session is
# created, not when the manifest is decoded.

# variable "NAME" declares var.NAME. A -var NAME=VALUE on the command line
# overrides the default; a variable with neither is an error, and so is a
# -var for a variable the manifest does not declare.
variable "task" {
  description = "What the agent is asked to do."
  default     = "describe the repository"
}

variable "cpus" {
  # type is optional: string, number, bool or any. Without it, a default's
  # type is used; -var values are converted to it.
  type    = number
  default = 2
}

# session "LABEL": the label is a human name for the session, not its id.
session "reference" {
  # Required. An image reference known to the daemon's image store.
  image = "airlock/agent:bookworm"

  # The argv of the session's main process. `airlock run ... -- CMD ARGS`
  # replaces it. Leave it out to run the image's default command.
  command = ["sh", "-c", "echo ${var.task}"]

  # Added to the process environment.
  env = {
    LANG       = "C.UTF-8"
    GIT_AUTHOR = "airlock agent"
  }

  # Numeric "uid" or "uid:gid" ("1000" means 1000:1000); names are not
  # resolved. Default "65534:65534" (nobody). The daemon's admission policy
  # says which ids it admits; the built-in one refuses uid 0 and gid 0. When
  # a policy admits uid 0 it still draws a warning.
  user = "1000:1000"

  # Absolute working directory inside the sandbox. Default "/".
  workdir = "/workspace"

  # Wall-clock limit, as a Go duration ("90s", "30m", "1h30m"). Default "30m".
  timeout = "45m"

  # Linux capabilities granted to the process; every other one is dropped.
  # "NET_BIND_SERVICE" and "cap_net_bind_service" mean CAP_NET_BIND_SERVICE.
  # Default: none. The daemon's admission policy says which it admits; the
  # built-in one admits only CAP_KILL, CAP_NET_BIND_SERVICE and
  # CAP_SYS_CHROOT. Capabilities that commonly break out of a sandbox
  # (CAP_SYS_ADMIN, CAP_NET_ADMIN, CAP_SYS_PTRACE, ...) draw a warning when
  # a policy admits them.
  capabilities = ["NET_BIND_SERVICE"]

  # At most one. Every attribute is optional.
  resources {
    cpus   = var.cpus # CPUs, fractions allowed (0.5). Default 1.
    memory = "4GiB"   # Memory limit. Default "1GiB"; at least "16MiB".
    pids   = 512      # Process limit. Default 512.
    disk   = "2GiB"   # Quota on what the session writes to its overlay workspaces. Default "4GiB".
    # Caps on what the session makes the daemon write under its --root;
    # neither counts against disk. log_size: the recorded output, stdout
    # and stderr together (4KiB to 16GiB); beyond it the rest is dropped,
    # with a marker line in `airlock logs` and an audit event.
    # audit_size: the audit log (64KiB to 4GiB); beyond it events are
    # counted, not written, and the audit says so.
    log_size   = "64MiB" # Default "64MiB".
    audit_size = "16MiB" # Default "16MiB".
    # Sizes take B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB
    # (powers of 1000); a plain number is bytes.
    # The daemon's admission policy bounds these and timeout (built-in:
    # cpus 16, memory "64GiB", pids 32768, disk "256GiB", timeout "24h");
    # a value left out (or equal to its default) gets the default, or the
    # bound when that is lower.
  }

  # At most one. airlockd keeps size sandboxes of this policy prepared
  # ahead of time: container created, workspace mounts, network namespace
  # and rules, and credential directories ready; the main process not yet
  # chosen. A session created with the same policy (equal in everything but
  # command and timeout) takes one of them and starts in milliseconds. Each
  # prepared sandbox serves exactly one session and is never reused; the
  # daemon prepares a replacement in the background. Credentials are minted
  # when a session takes a sandbox, not when it is prepared.
  pool {
    size = 2 # Required: a whole number from 0 to 64; 0 keeps none prepared.
  }

  # workspace "HOSTPATH": a host directory exposed to the session; any
  # number of them, each with its own target.
  workspace "." {
    # Required. Absolute path inside the sandbox; not "/", nor under /proc,
    # /sys or /dev.
    target = "/workspace"

    # overlay (default): the session writes to a copy-on-write layer; the
    #   host directory is untouched until the changes are committed.
    # ro: read-only.
    # rw: writes go straight to the host directory (draws a warning); no
    # commit policy applies. When the session ends, entries it left setuid,
    # setgid or world-writable lose those bits (audited); until then they
    # are visible on the host as the sandbox made them.
    mode = "overlay"

    # Globs, relative to the workspace root, that the session cannot read.
    # "**" matches any number of directories. Every attempt to open a
    # masked path fails (EPERM) and is audited as fs/read_denied.
    deny_read = ["**/.env*", "**/*.pem", "secrets/**"]

    # Also mask the built-in list of credential files (.env files, private
    # keys, .netrc, .git-credentials, package-registry files such as .npmrc,
    # .pypirc, .cargo/credentials, .m2/settings.xml, container and cluster
    # configs such as .docker/config.json and .kube/config, cloud credential
    # files). Default true; never masks .git/config as a whole (credentials
    # in it are stripped from the copy the session reads).
    # In overlay and ro mode the session sees the names the workspace had
    # when it started: a file created on the host later is not there at all.
    # In rw mode it sees the live host directory, and a file the host
    # creates during the session is not masked. deny_read does not cover
    # git history: a masked file that is or was committed can be read from
    # .git/objects (git show HEAD:.env); airlock validate warns when a
    # masked path is tracked or in the history.
    default_deny_read = true

    # Overlay only: globs a commit may not change. A commit that touches one
    # is refused. As in .gitignore, a pattern without a slash matches at
    # any depth ("*.lock"), and a leading slash anchors one at the
    # workspace root ("/package.json": the top-level file, not
    # node_modules/x/package.json).
    protect = [".github/**", "config/prod/**", "/package.json"]

    # Overlay only: a commit keeps untracked files in the host directory
    # that the session deleted. Default false.
    preserve_untracked = true

    # Overlay only: git refs (full names or globs) a commit may not move,
    # nor a protected branch's upstream (branch.<name>.remote, merge,
    # rebase, and that remote's url and fetch refspecs), which decides
    # where the operator's next git pull moves the branch, nor a merge
    # left in progress on one (MERGE_HEAD, whose commits the operator's
    # next git commit there would take as parents). When set, the ref rules (with the built-in rule against hooks and
    # command-running config) govern each repository's .git directory, and
    # protect governs the working tree only. An entry starting with "!" is
    # an exception: it un-protects the refs the rest of it matches. Entries
    # are read in order and the last one matching a ref decides, as in
    # .gitignore; here every branch under release/ is protected except the
    # release/next-* ones, and "!" alone is an error.
    protect_refs = ["refs/heads/main", "refs/tags/*", "refs/heads/release/**", "!refs/heads/release/next-*"]

    # Overlay only: git metadata a commit may carry although it is not
    # known to be inert. Whatever the other settings say, inside every git
    # directory (.git, .git/modules/*, worktrees, bare repositories, any
    # directory git would take for one) a commit accepts only what git
    # writes in ordinary use: objects and packs, the index (when every
    # entry is a path git accepts in a tree, none inside .git), refs and
    # their logs, packed-refs, state files (HEAD, ORIG_HEAD, FETCH_HEAD,
    # COMMIT_EDITMSG, MERGE_*, ...) as regular files, and config whose
    # changed keys run nothing (rule git_meta). A new git directory or
    # gitfile, commondir, gitdir, alternates, info/attributes, an
    # in-progress rebase's todo list and any symlink there are rejected
    # unless a glob here names them. Hooks and command-running config keys
    # (core.fsmonitor, include.path, *.command, credential helpers, any
    # alias, fetch refspecs writing outside refs/remotes/, ...) are never
    # committed, nor changes to worktree files the host's installed hooks
    # or command-running config name (rule git_exec).
    # Default empty.
    git_allow = ["vendor/lib/.git"]

    # Overlay only: what happens to the changes when the session ends.
    # review (default): keep them for `airlock diff`, `commit` or `discard`.
    # commit: commit them automatically (protect rules still apply).
    # discard: throw them away.
    on_exit = "review"
  }

  # mount "HOSTPATH": an extra host path (a directory or a regular file)
  # bound into the sandbox. Host paths of workspaces and mounts are resolved
  # (symlinks and "..") and must pass the daemon's admission policy, which
  # never admits /, /etc, /proc, /sys, /dev, /boot, /run, /var/run, the
  # daemon's and containerd's state and sockets, anything beneath them or a
  # directory containing them, nor a unix socket anywhere.
  # deny_read applies here as in a workspace: the mount's own patterns
  # (relative to the mounted directory) and, unless default_deny_read =
  # false, the default credential-file list. A file mount, or a directory
  # mount, whose host path or target matches a pattern is masked whole.
  # A read-only directory mount shows the names it had when the session
  # started; a read-write one is the live host directory, where a file the
  # host creates during the session is not masked.
  mount "/usr/share/ca-certificates" {
    target            = "/usr/local/share/ca-certificates" # Required, absolute.
    read_only         = true                               # Default true.
    deny_read         = ["private/"]                       # Default [].
    default_deny_read = true                               # Default true; false would let public certificates (*.pem) through.
  }

  # At most one. Without it the session reaches loopback only.
  # The sandbox resolves names only through airlock's DNS proxy: allowed
  # names are answered and their addresses opened for this session; other
  # names are refused.
  egress {
    # Entries:
    #   "api.example.com"         this name only
    #   "*.example.com"           names under example.com, not example.com
    #   "10.0.0.0/8", "192.0.2.7" IPv4 CIDR or address
    #   "2001:db8::/32"           IPv6 CIDR or address
    # each optionally with a port: "api.example.com:443", "10.0.0.0/8:443",
    # "[2001:db8::/32]:443".
    allow = ["api.anthropic.com:443", "*.githubusercontent.com:443", "git.corp.test:443", "registry.corp.test:443", "ssh.corp.test:22"]

    # Same syntax; deny wins over allow.
    deny = ["gist.githubusercontent.com"]

    # Private ranges whose addresses DNS answers may pin. An allowed name
    # that resolves into 10.0.0.0/8, 172.16.0.0/12, 192.168.0.0/16,
    # 100.64.0.0/10 (CGNAT) or fc00::/7 (ULA) is otherwise answered without
    # those addresses (REFUSED if none is left), so a public name cannot
    # lead into the operator's network. Each entry is a CIDR or address
    # inside one of those ranges. airlockd --allow-private does the same
    # for every session. Never pinned, whatever this says: loopback,
    # link-local, cloud metadata addresses (169.254.169.254, 168.63.129.16,
    # 100.100.100.200, fd00:ec2::254, ...), the daemon's session pools and
    # uplink, and the host's own addresses. Address entries in allow are
    # not affected: "10.0.0.0/8" there opens the range without DNS.
    allow_private = ["10.20.0.0/16"]

    # What a blocked connection sees: "reject" (fails fast, default) or
    # "drop" (silently discarded).
    on_block = "reject"

    # Allow IPv6 (AAAA answers are pinned and used). Default false.
    ipv6 = false

    # The L7 gateway: "off" (default) or "check". With "check", TCP to
    # allowed destinations on ports 80 and 443 passes only if its TLS SNI
    # or HTTP Host is a name whose DNS answer pinned that address for this
    # session (or the address is allowed by a CIDR entry); UDP to those
    # ports (QUIC) is blocked, so clients fall back to TCP. http blocks, secrets and
    # approvals need it. What it never sees: other ports and protocols
    # (ssh.corp.test, allowed above on port 22, carries anything there
    # once pinned), and the inside of TLS to a host it does not terminate
    # (see inspect). So a host with an http block or a secret must be
    # allowed only on ports of l7_ports: "git.corp.test" on every port is
    # refused, since a request on another port would pass by its rules.
    l7 = "check"

    # The TCP ports the gateway checks (TLS or HTTP, told apart by their
    # first bytes). Default [80, 443]; only with l7 = "check". Other
    # allowed ports are pinned in the kernel as without the gateway.
    l7_ports = [80, 443]

    # Which TLS connections the gateway terminates (with a per-session CA
    # the sandbox trusts; the key stays in airlockd):
    # "rules" (default): only those to hosts with an http block or a
    #   secret. Other TLS is checked by its SNI and passed through
    #   unterminated, so the Host header inside it is not seen: on an
    #   address shared by several names (a CDN that routes by Host),
    #   `curl -H 'Host: other.test' https://allowed.test/` still reaches
    #   other.test, and those requests are not audited one by one.
    # "all": every host; every request's Host is checked against the SNI
    #   and the pins, and every request is audited. Clients that pin their
    #   server's certificate (and so refuse the session CA) fail.
    # Either way, the gateway verifies the upstream's certificate itself.
    inspect = "rules"

    # http "HOST": ordered rules for one host, or for the names under a
    # domain ("*.corp.test", not corp.test itself). The host must be
    # allowed above on ports of l7_ports, and on no other (for a wildcard,
    # no name under it either); at most one block per host. Hosts
    # without a block pass after the Host/SNI check. A host with a block
    # is terminated, so its requests are seen and audited one by one.
    http "git.corp.test" {
      # What a request no rule matches gets: "allow" (default), "deny"
      # (403 with a JSON reason) or "ask" (held for a person, see
      # approval).
      default = "deny"

      # Rules are checked in order; the first that matches decides. Every
      # attribute but action is optional; one left out matches anything.
      rule {
        # A method or a list of them; upper-cased.
        method = ["GET", "HEAD"]
        # A glob over the decoded, cleaned path (no query): "*" matches
        # within one segment, "**" (a whole segment) across segments.
        path   = "/**"
        action = "allow" # Required: "allow", "deny" or "ask".
      }

      # refs: globs of git refs. A rule with refs matches only git
      # smart-HTTP pushes (POST .../git-receive-pack), and only when every
      # ref the push updates matches one of them; the gateway reads the
      # push's ref commands. Here the agent may push its own branches
      # (fetch goes by the rule above).
      rule {
        method = "POST"
        path   = "/**/git-receive-pack"
        refs   = ["refs/heads/agent/*"]
        action = "allow"
      }

      # Any other push (to main, to a tag) waits for a person.
      rule {
        method = "POST"
        path   = "/**/git-receive-pack"
        action = "ask"
      }

      rule {
        method = "POST"
        path   = "/**/git-upload-pack"
        action = "allow"
      }

      # json "FIELD": a condition on a top-level field of a JSON body, for
      # bulk calls whose targets travel in it; values are globs in the
      # path grammar. A rule with json matches only a body the gateway
      # read whole (at most 64 KiB, not compressed) that is a JSON object
      # in which every named field holds a string or a non-empty list of
      # strings: an allow rule if every string matches, a deny or ask rule
      # if any does. Otherwise a later rule or default decides (here
      # "deny"). A body naming a field twice, or in another case, is
      # refused. Here the agent may delete its own branches in bulk.
      rule {
        method = "POST"
        path   = "/api/v1/repos/*/*/branches:delete"
        json "names" {
          values = ["agent/*"]
        }
        action = "allow"
      }
      # json_match = "every" makes a deny or ask rule match as an allow
      # rule does: only a body every target of which matches. Here a bulk
      # delete of release branches alone is held for a person; one that
      # also names anything else, or that the gateway cannot read, falls
      # through to the default and is refused. Default "any" (a deny or
      # ask rule matches if any target does, and any body it cannot read).
      rule {
        method     = "POST"
        path       = "/api/v1/repos/*/*/branches:delete"
        json_match = "every"
        json "names" {
          values = ["release/*"]
        }
        action = "ask"
      }

      # body_sha256: SHA-256 digests (sha256sum FILE) of whole request
      # bodies. An allow rule matches only a body the gateway read whole
      # (at most 1 MiB, not compressed) whose digest is listed: uploads of
      # exactly these contents, as a file's digest pins what may leave.
      # A deny or ask rule matches a listed digest, and any body the
      # gateway cannot read whole. The same content in a multipart form
      # or compressed has another digest. Here one attachment may be
      # uploaded; anything else falls through to the default.
      rule {
        method      = "POST"
        path        = "/api/v1/repos/*/*/issues/*/assets"
        body_sha256 = ["9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"]
        action      = "allow"
      }
    }
  }
  # credential "NAME": a short-lived token minted for the session at start
  # and revoked when it ends. NAME uses letters, digits, '.', '_' and '-'.
  credential "git" {
    issuer   = "airlock"       # Default "airlock"; or an issuer configured in the daemon.
    audience = "git.corp.test" # Required: the service the token is for.
    # Required: what the token may do, as the audience understands it.
    scopes = ["git.fetch repo=app", "git.push repo=app ref=refs/heads/agent/*"]
    ttl    = "15m" # Lifetime. Default "15m", at most "12h".
    # "file" (default): a read-only file at path, by default
    # /run/airlock/credentials/NAME. "env": the variable env_var
    # (draws a warning: every child process inherits it). "gateway":
    # never in the sandbox; a secret with from = "credential:NAME" says
    # which hosts the L7 gateway injects it into (see secret below).
    deliver = "file"
    path    = "/run/airlock/credentials/git"
  }

  credential "registry" {
    audience = "registry.corp.test"
    scopes   = ["packages.publish name=app"]
    deliver  = "env"
    env_var  = "REGISTRY_TOKEN" # Required with deliver = "env".
  }

  # secret "NAME": a value the sandbox never holds. The sandbox gets a
  # placeholder (random, per session); the L7 gateway replaces it by the
  # value only in requests to the inject hosts, over TLS it terminated,
  # with the upstream's certificate verified. A placeholder the gateway
  # sees going anywhere else (another host, plain HTTP, a URL or a body)
  # is blocked and audited. Through a host it does not terminate (SNI
  # only, see inspect) the placeholder leaves unseen, and is worthless
  # there. NAME uses letters, digits and '_', not starting with a digit.
  # Needs l7 = "check".
  secret "ANTHROPIC_API_KEY" {
    # Required: where airlockd reads the value, when the session starts.
    # "file:/PATH" (absolute, a file on the daemon's host), "env:VAR"
    # (airlockd's own environment), or "credential:NAME" (the token of
    # this manifest's credential NAME, which must say deliver = "gateway":
    # minted by its issuer and refreshed, never in the sandbox). The
    # admission policy says which files and variables it admits; the
    # built-in one admits only the files in /etc/airlock/secrets/HOST/,
    # each injected into HOST alone.
    from = "file:/etc/airlock/secrets/api.anthropic.com/key"

    # Where the sandbox finds the placeholder: an environment variable, a
    # read-only file, or both. With neither, the variable named NAME.
    env_var = "ANTHROPIC_API_KEY"
    path    = "/run/airlock/secrets/anthropic"

    # Where the value may go: one exact host (no wildcard:
    # that would send the value to any name under it), allowed above on
    # port 443 (ports of l7_ports, and no other), and how: header = "NAME"
    # sets that header to the value
    # (replacing the placeholder where the request carried it), or
    # bearer = true sets Authorization: Bearer VALUE; one of the two.
    # Host, Content-Length, Transfer-Encoding, Expect, Connection,
    # Keep-Alive, Upgrade, TE, Trailer, HTTP2-Settings and Proxy-* belong
    # to the gateway. One value per host and header, across secrets.
    inject {
      host   = "api.anthropic.com"
      header = "x-api-key"
    }
  }
  # The gateway also refuses the value itself (8 bytes or longer) in any
  # request it sees, but in the bound header to a bound host: a copy the
  # sandbox found on disk is blocked and audited as an exfiltration. A
  # secret with no inject block is only guarded so (a warning says so):
  # here a production registry token left in the workspace's deploy
  # configuration can reach no host through the gateway.
  secret "PROD_REGISTRY_TOKEN" {
    from = "file:/etc/airlock/secrets/registry.corp.test/prod-deploy"
  }

  secret "CORP_GIT_TOKEN" {
    from = "env:CORP_GIT_TOKEN" # Needs an admission policy listing it.
    inject {
      host   = "git.corp.test"
      bearer = true
    }
  }

  # A credential minted for the session by an issuer, injected by the
  # gateway: the sandbox holds only the placeholder in REGISTRY_API.
  credential "registry-api" {
    audience = "registry.corp.test"
    scopes   = ["packages.publish name=app"]
    deliver  = "gateway"
  }
  secret "REGISTRY_API" {
    from = "credential:registry-api"
    inject {
      host   = "registry.corp.test"
      bearer = true
    }
  }

  # At most one. How requests held by an "ask" rule or default are
  # decided when no person does (airlock approvals, approve ID, deny ID).
  # A held request keeps its connection open until then; a denial or a
  # timeout answers 403 with a JSON body naming the rule.
  approval {
    timeout    = "5m"   # Default "5m", at most "24h".
    on_timeout = "deny" # Default and only choice: "deny".
  }
}
