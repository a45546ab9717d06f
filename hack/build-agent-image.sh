#!/usr/bin/env bash
# build-agent-image.sh NAME [OUT_DIR]: builds the agent image of recipe
# images/NAME (claude-code, codex) as an OCI image archive and prints the
# archive's path. hack/build-image.sh --recipe NAME runs it.
#
# An agent image is the base image (images/agent, built first by
# build-image.sh) plus one layer holding the agent's published npm package,
# installed by the ordinary npm client from the recipe's package.json and
# package-lock.json (`npm ci`: every tarball checked against the lockfile's
# integrity hash) under /opt/NAME, and a symlink /usr/local/bin/COMMAND to
# the package's native binary. Install scripts do not run (--ignore-scripts):
# nothing of the package executes on the build host, and the image needs no
# Node.js, since the binary is native.
#
# The archive is cached as $AIRLOCK_CACHE/airlock-NAME-HASH.tar, where HASH
# covers the base archive's name (so its own recipe hash), the recipe
# directory, this script and the packer's source; with the archive present,
# the script only prints its path. With OUT_DIR, OUT_DIR/airlock-NAME.tar is
# also made a symlink to the archive.
set -euo pipefail
export LC_ALL=C
umask 022

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
name="${1:?usage: build-agent-image.sh NAME [OUT_DIR]}"
recipe_dir="$repo/images/$name"
out_dir="${2:-}"
cache="${AIRLOCK_CACHE:-/var/cache/airlock}"

log() { printf 'build-image: %s\n' "$*" >&2; }
die() {
	log "$name: $*"
	exit 1
}

for f in recipe.env package.json package-lock.json; do
	[[ -f "$recipe_dir/$f" ]] || die "images/$name/$f is missing"
done
arch="$(uname -m)"
[[ "$arch" == x86_64 ]] || die "agent images are built for x86_64 (linux-x64 npm packages), not $arch"

base="$(bash "$here/build-image.sh" "$out_dir")"

key_files=("$here/build-agent-image.sh" "$here"/ocipack/*.go "$recipe_dir"/*)
for f in "$repo"/internal/ocipack/*.go; do
	case "${f##*/}" in
	*_test.go | import*.go) ;; # tests; importing into containerd
	*) key_files+=("$f") ;;
	esac
done
hash="$(
	{
		printf 'base %s\n' "${base##*/}"
		for f in "${key_files[@]}"; do
			[[ -f "$f" ]] || continue # a node_modules left by a manual npm install is not used
			printf '%s %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "${f#"$repo"/}"
		done
	} | sha256sum | cut -c1-16
)"
archive="$cache/airlock-$name-$hash.tar"

finish() {
	if [[ -n "$out_dir" ]]; then
		mkdir -p "$out_dir"
		ln -sfn "$archive" "$out_dir/.airlock-$name.tar.tmp"
		mv -T "$out_dir/.airlock-$name.tar.tmp" "$out_dir/airlock-$name.tar"
	fi
	printf '%s\n' "$archive"
	exit 0
}

[[ -f "$archive" ]] && finish

mkdir -p "$cache"
exec 9>"$cache/.airlock-$name.lock"
flock 9
[[ -f "$archive" ]] && finish

command -v npm >/dev/null || die "npm is missing (Debian: apt-get install npm)"
command -v node >/dev/null || die "node is missing (Debian: apt-get install nodejs)"
go_bin="$(command -v go || echo /usr/local/go/bin/go)"

rm -rf "$cache/.airlock-$name".??????
tmp="$(mktemp -d "$cache/.airlock-$name.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

(cd "$repo" && GOFLAGS=-buildvcs=false "$go_bin" build -trimpath -o "$tmp/ocipack" ./hack/ocipack)

# AGENT_* and IMAGE_* come from the recipe; the image's times come from the
# base recipe's SOURCE_DATE_EPOCH.
set -a
SOURCE_DATE_EPOCH="$(. "$repo/images/agent/recipe.env" && echo "$SOURCE_DATE_EPOCH")"
IMAGE_ENV=""
# shellcheck source=../images/claude-code/recipe.env
. "$recipe_dir/recipe.env"
set +a
: "${IMAGE_REF:?}" "${AGENT_PACKAGE:?}" "${AGENT_COMMAND:?}" "${AGENT_BINARY:?}" "${NPM_PLATFORM:?}"

# The pin: an exact version in package.json, which the lockfile must match
# (npm ci refuses a lockfile out of step with package.json).
want="$(node -p '(require(process.argv[1]).dependencies || {})[process.argv[2]] ?? ""' "$recipe_dir/package.json" "$AGENT_PACKAGE")"
[[ "$want" =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]] ||
	die "package.json must pin $AGENT_PACKAGE to an exact version, not \"$want\""

log "building $IMAGE_REF ($AGENT_PACKAGE $want, recipe $hash)"
start=$SECONDS
prefix="opt/$name"
stage="$tmp/layer"
mkdir -p "$stage/$prefix" "$stage/usr/local/bin"
cp "$recipe_dir/package.json" "$recipe_dir/package-lock.json" "$stage/$prefix/"
read -ra platform <<<"$NPM_PLATFORM"
# npm's own cache (content-addressed, checked against the lockfile) lives
# beside the archives, so a rebuild downloads nothing it has.
(cd "$stage/$prefix" && npm ci --ignore-scripts --omit=dev --no-audit --no-fund --no-update-notifier \
	--loglevel=error "${platform[@]}" --cache "$cache/npm" >&2)

got="$(node -p 'require(process.argv[1]).version' "$stage/$prefix/node_modules/$AGENT_PACKAGE/package.json")"
[[ "$got" == "$want" ]] || die "npm installed $AGENT_PACKAGE $got, the recipe pins $want"
bin="$stage/$prefix/$AGENT_BINARY"
# npm skips an optional dependency it cannot install, a platform package
# whose tarball does not match the lockfile's integrity hash included, and
# still succeeds: the binary's absence is what makes that an error here.
[[ -f "$bin" && -x "$bin" ]] ||
	die "no executable $AGENT_BINARY after npm ci: npm skipped the platform package (a tarball that does not match package-lock.json's integrity hash, or another platform)"
[[ "$(head -c4 "$bin" | od -An -tx1 | tr -d ' ')" == 7f454c46 ]] ||
	die "$AGENT_BINARY is not a native (ELF) binary; the image has no Node.js to run it"
ln -s "/$prefix/$AGENT_BINARY" "$stage/usr/local/bin/$AGENT_COMMAND"

pack_args=(
	-base "$base"
	-ref "$IMAGE_REF"
	-label "dev.airlock.image.recipe=$hash"
	-label "dev.airlock.agent.name=$name"
	-label "dev.airlock.agent.package=$AGENT_PACKAGE"
	-label "dev.airlock.agent.version=$got"
	-created-by "npm ci $AGENT_PACKAGE@$got (images/$name) into /$prefix"
	-tmpdir "$tmp"
	-o "$tmp/image.tar"
)
read -ra image_env <<<"$IMAGE_ENV"
for e in "${image_env[@]}"; do
	pack_args+=(-env "$e")
done
# Owners, order and times are fixed here and by ocipack (times clamped to
# SOURCE_DATE_EPOCH), so equal packages give an equal layer.
tar -C "$stage" --sort=name --numeric-owner --owner=0 --group=0 --format=gnu -cf - opt usr |
	"$tmp/ocipack" "${pack_args[@]}" -

mv "$tmp/image.tar" "$archive"
find "$cache" -maxdepth 1 -name "airlock-$name-*.tar" ! -name "${archive##*/}" -mtime +7 -delete
log "built $archive ($(du -h "$archive" | cut -f1)) in $((SECONDS - start))s"
finish
