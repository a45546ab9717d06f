# airlockd.hcl: airlockd's configuration, read with
#
#   airlockd --config /etc/airlock/airlockd.hcl
#
# `make install` puts this file there (with the paths of its PREFIX and
# the images it installed) unless one is there already; the systemd unit
# starts airlockd with it. Every airlockd flag but --config is an
# attribute, named with _ for - (--dns-upstream is dns_upstream); a
# repeatable flag takes a list. Flags given on the command line override
# the file. Relative paths are taken from this file's directory. A bad
# file stops airlockd with the line of each problem, before it makes
# anything. See `airlockd --help` for every setting.

# State: sessions, the embedded containerd, signing keys. Keep it on a
# filesystem with overlayfs and idmapped mounts (airlock doctor checks).
root = "/var/lib/airlock"

# The API socket. Whoever can use it can ask for sessions (within the
# admission policy below).
socket = "/run/airlock/airlock.sock"

# containerd, containerd-shim-runc-v2, runc and airlock-init.
bin_dir = "/usr/local/libexec/airlock"

# Image archives imported at start unless the store has their images.
image = ["/usr/local/share/airlock/images/agent.tar"]

log_level  = "info"
log_format = "text"

# Sessions that declare egress need an uplink: "host" NATs their traffic
# out of this host's routes (and keeps it off this host's own services),
# "netns:NAME" hands it to a namespace you route yourself.
# uplink       = "host"
# dns_upstream = ["10.0.0.53"]

# Let a group use the socket (mode 0660). Every member can create
# sessions, so airlockd refuses this without an admission policy.
# socket_group = "airlock"

# Which host paths, users, capabilities and resources API callers may ask
# for. Without it, the built-in policy applies (airlockd --help);
# examples/airlockd/admission.hcl explains each attribute.
# admission {
#   host_paths = ["/srv/agents"]
#   users      = ["1000-59999"]
#   groups     = ["1000-59999"]
# }
