#!/usr/bin/env bash
# build-image.sh [--recipe NAME] [OUT_DIR]: builds an image from its recipe
# images/NAME as an OCI image archive and prints the archive's path. NAME is
# agent (the default: the base image, described here), or an agent image
# recipe (images/claude-code, images/codex: a package.json beside the
# recipe), which hack/build-agent-image.sh builds on top of the base.
#
# The archive is cached as $AIRLOCK_CACHE/airlock-agent-HASH.tar (default
# cache: /var/cache/airlock), where HASH covers the recipe directory, this
# script and the packer's source (hack/ocipack; internal/ocipack without its
# import side). When the archive exists, the script only prints its path
# (well under a second); otherwise it bootstraps a Debian root filesystem with
# mmdebstrap (installing mmdebstrap first if it is missing), packs it with
# hack/ocipack and moves the archive into the cache atomically; archives of
# other recipes older than a week are then removed. Concurrent runs wait for
# each other. With OUT_DIR, OUT_DIR/airlock-agent.tar is also made a symlink
# to the archive.
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
recipe=agent
if [[ "${1:-}" == --recipe ]]; then
	recipe="${2:?usage: build-image.sh [--recipe NAME] [OUT_DIR]}"
	shift 2
fi
if [[ ! "$recipe" =~ ^[a-z0-9][a-z0-9-]*$ || ! -f "$repo/images/$recipe/recipe.env" ]]; then
	printf 'build-image: no image recipe %q (want a directory under images/ with a recipe.env)\n' "$recipe" >&2
	exit 2
fi
if [[ "$recipe" != agent ]]; then
	exec bash "$here/build-agent-image.sh" "$recipe" "$@"
fi
recipe_dir="$repo/images/agent"
out_dir="${1:-}"
cache="${AIRLOCK_CACHE:-/var/cache/airlock}"

log() { printf 'build-image: %s\n' "$*" >&2; }

key_files=("$here/build-image.sh" "$here"/ocipack/*.go "$recipe_dir"/*)
for f in "$repo"/internal/ocipack/*.go; do
	case "${f##*/}" in
	*_test.go | import*.go) ;; # tests; importing into containerd
	*) key_files+=("$f") ;;
	esac
done
hash="$(
	for f in "${key_files[@]}"; do
		printf '%s %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "${f#"$repo"/}"
	done | sha256sum | cut -c1-16
)"
archive="$cache/airlock-agent-$hash.tar"

finish() {
	if [[ -n "$out_dir" ]]; then
		mkdir -p "$out_dir"
		ln -sfn "$archive" "$out_dir/.airlock-agent.tar.tmp"
		mv -T "$out_dir/.airlock-agent.tar.tmp" "$out_dir/airlock-agent.tar"
	fi
	printf '%s\n' "$archive"
	exit 0
}

[[ -f "$archive" ]] && finish

mkdir -p "$cache"
exec 9>"$cache/.airlock-agent.lock"
flock 9
[[ -f "$archive" ]] && finish

if ! command -v mmdebstrap >/dev/null; then
	if [[ $(id -u) -ne 0 ]]; then
		log "mmdebstrap is missing (run as root to install it)"
		exit 1
	fi
	log "installing mmdebstrap"
	export DEBIAN_FRONTEND=noninteractive
	if ! apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null 2>&1; then
		apt-get update -qq >/dev/null
		apt-get install -y -qq --no-install-recommends mmdebstrap >/dev/null
	fi
fi
go_bin="$(command -v go || echo /usr/local/go/bin/go)"

# Build directories left by interrupted runs; only a lock holder makes them.
rm -rf "$cache"/.airlock-agent.??????
tmp="$(mktemp -d "$cache/.airlock-agent.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

(cd "$repo" && GOFLAGS=-buildvcs=false "$go_bin" build -trimpath -o "$tmp/ocipack" ./hack/ocipack)

# The recipe's variables are exported: customize.sh reads the AGENT_* ones,
# mmdebstrap, useradd and ocipack honour SOURCE_DATE_EPOCH.
set -a
# shellcheck source=../images/agent/recipe.env
. "$recipe_dir/recipe.env"
set +a

pack_args=(
	-ref "$IMAGE_REF"
	-user "$IMAGE_USER"
	-workdir "$IMAGE_WORKDIR"
	-cmd "$IMAGE_CMD"
	-label "dev.airlock.image.recipe=$hash"
	-created-by "mmdebstrap --variant=$VARIANT --include=${PACKAGES// /,} $SUITE"
	-tmpdir "$tmp"
	-o "$tmp/image.tar"
)
read -ra image_env <<<"$IMAGE_ENV"
for e in "${image_env[@]}"; do
	pack_args+=(-env "$e")
done

log "building $IMAGE_REF (recipe $hash); this takes a few minutes once"
start=$SECONDS
# mmdebstrap writes the root filesystem tar to stdout and keeps its own
# temporary chroot (with /proc and /sys mounted) out of $tmp.
mmdebstrap \
	--variant="$VARIANT" \
	--include="$PACKAGES" \
	--dpkgopt="$recipe_dir/dpkg.cfg" \
	--aptopt='Acquire::Languages "none"' \
	--customize-hook="\"$recipe_dir/customize.sh\" \"\$1\"" \
	"$SUITE" - "$recipe_dir/sources.list" |
	"$tmp/ocipack" "${pack_args[@]}" -

mv "$tmp/image.tar" "$archive"
find "$cache" -maxdepth 1 -name 'airlock-agent-*.tar' ! -name "${archive##*/}" -mtime +7 -delete
log "built $archive ($(du -h "$archive" | cut -f1)) in $((SECONDS - start))s"
finish
