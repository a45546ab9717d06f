#!/bin/sh
# customize.sh ROOT: mmdebstrap customize hook for the agent image. Reads the
# AGENT_* and IMAGE_WORKDIR variables of recipe.env from the environment.
set -eu
root="${1:?usage: customize.sh ROOT}"
: "${AGENT_USER:?}" "${AGENT_UID:?}" "${AGENT_GID:?}" "${AGENT_HOME:?}" "${IMAGE_WORKDIR:?}"

chroot "$root" groupadd --gid "$AGENT_GID" "$AGENT_USER"
chroot "$root" useradd --uid "$AGENT_UID" --gid "$AGENT_GID" --home-dir "$AGENT_HOME" \
	--create-home --shell /bin/bash --no-log-init "$AGENT_USER"
# useradd leaves the password locked ("!"): the account runs processes only.

for db in passwd group; do
	entry="$(chroot "$root" getent "$db" 65534)" || {
		echo "customize.sh: no $db entry for id 65534 in the image" >&2
		exit 1
	}
	echo "customize.sh: $db 65534: $entry" >&2
done

mkdir -p "$root$IMAGE_WORKDIR"
chown "$AGENT_UID:$AGENT_GID" "$root$IMAGE_WORKDIR"

# mmdebstrap copies these from the build host; the runtime supplies its own
# resolver configuration and hostname.
: >"$root/etc/resolv.conf"
echo localhost >"$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
chmod 0644 "$root/etc/resolv.conf" "$root/etc/hostname" "$root/etc/hosts"

rm -f "$root"/var/cache/debconf/*-old "$root"/var/lib/dpkg/*-old
