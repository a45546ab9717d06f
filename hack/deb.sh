#!/usr/bin/env bash
# deb.sh BIN_DIR OUT_DIR [--image NAME=FILE]...
#
# Builds a Debian package of airlock with Debian's own dpkg-deb: the tree
# `make install` lays out with PREFIX=/usr (hack/install.sh, staged with
# DESTDIR), /etc/airlock/airlockd.hcl as a conffile, and maintainer scripts
# that reload systemd and leave enabling the service to the operator.
# `make deb` calls it; it prints the package's path. DEB_COMPRESS=none
# skips the compression (tests).
set -euo pipefail

bin_dir="${1:?usage: deb.sh BIN_DIR OUT_DIR [--image NAME=FILE]...}"
out="${2:?usage: deb.sh BIN_DIR OUT_DIR [--image NAME=FILE]...}"
shift 2
src="$(cd "$(dirname "$0")/.." && pwd)"
log() { echo "deb: $*" >&2; }

command -v dpkg-deb >/dev/null || { log "dpkg-deb is missing (Debian's dpkg package)"; exit 1; }
arch="$(dpkg --print-architecture)"
base="$(sed -n 's/^var Version = "\(.*\)"$/\1/p' "$src/daemon/daemon.go")"
[[ -n "$base" ]] || { log "no version in daemon/daemon.go"; exit 1; }
# 0.1.0-dev -> 0.1.0~dev, then the commit: sorts before 0.1.0 itself.
version="${base//-/\~}"
if rev="$(git -C "$src" rev-parse --short=12 HEAD 2>/dev/null)"; then
	version="$version+git$rev"
fi

stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
root="$stage/root"
DESTDIR="$root" PREFIX=/usr SYSCONFDIR=/etc STATEDIR=/var/lib/airlock RUNDIR=/run/airlock \
	UNITDIR=/lib/systemd/system bash "$src/hack/install.sh" install "$bin_dir" "$@"
# dpkg keeps the list of installed files; make uninstall's is not wanted.
rm -f "$root/usr/share/airlock/installed-files"

mkdir -p "$root/DEBIAN"
installed_size="$(du -sk --exclude=DEBIAN "$root" | cut -f1)"
cat > "$root/DEBIAN/control" <<EOF
Package: airlock
Version: $version
Architecture: $arch
Maintainer: airlock <airlock@localhost>
Installed-Size: $installed_size
Depends: libc6, libseccomp2
Recommends: systemd
Section: admin
Priority: optional
Homepage: https://github.com/airlock-sandbox/airlock
Description: run coding agents unattended in containerd sandboxes
 airlockd runs each agent session in a hardened containerd sandbox whose
 filesystem, network egress and credentials are scoped by an HCL manifest:
 a copy-on-write workspace reviewed before commit, a DNS allowlist pinned
 into nftables with an L7 gateway, and short-lived scoped credentials.
 The package carries its own containerd and runc (at the versions airlock
 pins, in /usr/libexec/airlock) and the agent images it imports at start.
EOF
echo /etc/airlock/airlockd.hcl > "$root/DEBIAN/conffiles"
cat > "$root/DEBIAN/postinst" <<'EOF'
#!/bin/sh
set -e
# Not into another root (dpkg --root, DPKG_ROOT): that is not this host's
# systemd.
if [ "$1" = configure ] && [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
	echo "airlock: enable the service with: systemctl enable --now airlockd" >&2
fi
EOF
cat > "$root/DEBIAN/postrm" <<'EOF'
#!/bin/sh
set -e
if [ -z "${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
	systemctl daemon-reload || true
fi
# The state directory (/var/lib/airlock) holds sessions' data and signing
# keys: it stays, also on purge.
EOF
chmod 0755 "$root/DEBIAN/postinst" "$root/DEBIAN/postrm"

mkdir -p "$out"
deb="$out/airlock_${version}_${arch}.deb"
# DEB_COMPRESS=none for a quick build (tests); xz by default.
dpkg-deb --root-owner-group -Z"${DEB_COMPRESS:-xz}" --build "$root" "$deb" >/dev/null
log "built $deb"
echo "$deb"
