#!/usr/bin/env bash
# install-deps.sh BIN_DIR: installs what airlock needs on a Debian machine, idempotently.
#   - Debian packages (apt-get) that are missing
#   - containerd, containerd-shim-runc-v2, ctr and runc, built from the Go module proxy at the
#     versions pinned in hack/versions.env, cached under $AIRLOCK_CACHE (default
#     /var/cache/airlock) and copied into BIN_DIR.
#   - crun, the other OCI runtime airlockd --runtime takes, Debian's package at the version
#     pinned in hack/versions.env, copied into BIN_DIR.
#   - npm (Debian's nodejs and npm) when there is no npm at all, for the agent images' packages
#   - chromium, which the console's test drives headless (Debian's, not pinned: its security
#     updates replace the version the archive serves)
#   - openssh-client (the ssh git workspace sources run) and openssh-server, whose sshd the
#     tests of ssh sources run on a loopback port of their own; a system ssh service the
#     package would start is stopped and disabled when this script installed it
#   - containernetworking-plugins (Debian's CNI plugins, in /usr/lib/cni): the pod network of
#     the kubelet TestDaemonSetUnderKubelet runs (bridge, host-local, loopback), inside a
#     network namespace of the test's
# A second run with nothing missing takes well under a second.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
bin_dir="${1:?usage: install-deps.sh BIN_DIR}"
cache="${AIRLOCK_CACHE:-/var/cache/airlock}"
mkdir -p "$bin_dir" "$cache/bin"

log() { printf 'install-deps: %s\n' "$*" >&2; }

apt_packages=(libseccomp-dev pkg-config mmdebstrap git iproute2 ca-certificates jq chromium openssh-client openssh-server containernetworking-plugins)
missing=()
# Any npm will do (npm ci of a version 3 lockfile needs npm 7 or later): one
# that came with a Node.js from elsewhere is kept.
command -v npm >/dev/null || apt_packages+=(nodejs npm)
for p in "${apt_packages[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[[ "$(dpkg-query -W -f='${Status} ${Version}' crun 2>/dev/null)" == "install ok installed $CRUN_VERSION" ]] ||
	missing+=("crun=$CRUN_VERSION")
if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		log "missing Debian packages: ${missing[*]} (run as root to install them)"
		exit 1
	fi
	log "installing Debian packages: ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq >/dev/null
	# openssh-server's package starts sshd on port 22 (password logins on) as it installs:
	# a policy-rc.d that forbids starting ssh keeps it from running even for the moment
	# before it is stopped below. One the machine already has is left alone.
	ours_policy=""
	if [[ " ${missing[*]} " == *" openssh-server "* && ! -e /usr/sbin/policy-rc.d ]]; then
		ours_policy=/usr/sbin/policy-rc.d
		printf '#!/bin/sh\n# install-deps.sh: no ssh service while openssh-server installs\ncase "$1" in ssh|sshd|ssh.service|ssh.socket) exit 101 ;; esac\nexit 0\n' >"$ours_policy"
		chmod 0755 "$ours_policy"
		trap 'rm -f "$ours_policy"' EXIT
	fi
	apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
	if [[ -n "$ours_policy" ]]; then
		rm -f "$ours_policy"
		trap - EXIT
	fi
	# The tests run sshd themselves: a service listening on port 22 was not asked for.
	if [[ " ${missing[*]} " == *" openssh-server "* ]]; then
		log "stopping and disabling the ssh service openssh-server started (the tests run their own sshd)"
		if [[ -d /run/systemd/system ]]; then
			systemctl disable --now ssh.service ssh.socket >/dev/null 2>&1 || true
		else
			# No systemd: the package's init script may have started it.
			invoke-rc.d ssh stop >/dev/null 2>&1 || true
			update-rc.d ssh disable >/dev/null 2>&1 || true
		fi
	fi
fi

# crun (airlockd --runtime crun) refuses every container on a hybrid cgroup host whose v2
# hierarchy holds a controller ("cgroups in hybrid mode not supported"). Where /sys/fs/cgroup
# holds v1 hierarchies and v2 is at unified, each controller left on v2 and not enabled below
# its root is mounted as a v1 hierarchy of its own, as systemd does on hybrid hosts
# (`airlock doctor` checks the layout as crun-cgroup). runc uses the new hierarchy as it does
# the others.
cg=/sys/fs/cgroup
if [[ "$(stat -f -c %T "$cg" 2>/dev/null)" == tmpfs && "$(stat -f -c %T "$cg/unified" 2>/dev/null)" == cgroup2fs ]] &&
	[[ -z "$(tr -d '[:space:]' <"$cg/unified/cgroup.subtree_control")" ]]; then
	for c in $(cat "$cg/unified/cgroup.controllers"); do
		log "mounting the $c cgroup controller as a v1 hierarchy at $cg/$c (crun refuses controllers on a hybrid host's v2 hierarchy)"
		mkdir -p "$cg/$c" && mount -t cgroup -o "$c" cgroup "$cg/$c" ||
			log "could not mount $c at $cg/$c: sessions on crun will fail; airlock doctor says more"
	done
fi

# build_into DIR PKG... : go install the packages into DIR unless DIR/.done exists.
build_into() {
	local dir="$1"
	shift
	[[ -f "$dir/.done" ]] && return 0
	local tmp
	tmp="$(mktemp -d "$cache/bin/.build.XXXXXX")"
	log "building $* (one-time, cached in $dir)"
	GOBIN="$tmp" GOFLAGS=-buildvcs=false "$@"
	touch "$tmp/.done"
	rm -rf "$dir"
	mv "$tmp" "$dir"
}

ctd_dir="$cache/bin/containerd-$CONTAINERD_VERSION"
build_into "$ctd_dir" go install -trimpath \
	-tags "no_btrfs no_devmapper no_zfs" \
	-ldflags "-s -w -X github.com/containerd/containerd/v2/version.Version=$CONTAINERD_VERSION" \
	"github.com/containerd/containerd/v2/cmd/containerd@$CONTAINERD_VERSION" \
	"github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2@$CONTAINERD_VERSION" \
	"github.com/containerd/containerd/v2/cmd/ctr@$CONTAINERD_VERSION"

runc_dir="$cache/bin/runc-$RUNC_VERSION"
CGO_ENABLED=1 build_into "$runc_dir" go install -trimpath -tags seccomp \
	-ldflags "-s -w -X main.version=${RUNC_VERSION#v}" \
	"github.com/opencontainers/runc@$RUNC_VERSION"

for f in "$ctd_dir"/containerd "$ctd_dir"/containerd-shim-runc-v2 "$ctd_dir"/ctr "$runc_dir"/runc /usr/bin/crun; do
	dst="$bin_dir/$(basename "$f")"
	if [[ ! -x "$dst" ]] || ! cmp -s "$f" "$dst"; then
		install -m 0755 "$f" "$dst.tmp" && mv "$dst.tmp" "$dst"
	fi
done
