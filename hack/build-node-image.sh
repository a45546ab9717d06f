#!/usr/bin/env bash
# build-node-image.sh [OUT_DIR]: builds the base of the node agent's image,
# deploy/kubernetes/image/Containerfile without its COPY lines, as an OCI image
# archive, without a container engine, and prints the archive's path:
#   - FROM debian:SUITE-slim: a minbase Debian SUITE (mmdebstrap, from the
#     Debian archive apt uses), documentation trimmed as the slim images are;
#   - RUN apt-get install ... PACKAGES: those packages, in the same bootstrap;
#   - ENTRYPOINT: the image's entrypoint.
# The archive is cached as $AIRLOCK_CACHE/airlock-node-base-HASH.tar (default
# cache: /var/cache/airlock), HASH covering the Containerfile, this script
# and the packer's source; with the archive present, the script only prints
# its path. With OUT_DIR, OUT_DIR/node-base-image.path names the archive.
#
# build-node-image.sh --image REF BIN_DIR AGENT_ARCHIVE OUT: the whole image,
# named REF, into OUT: the base (built first if it is missing) and the
# Containerfile's COPY lines as one more layer, their sources taken from
# make's output as the Containerfile's header says (_output/bin/NAME from
# BIN_DIR, _output/image-agent.tar is AGENT_ARCHIVE). Those change with every
# build, so they are not cached; kube/deploytest's TestDaemonSetUnderKubelet
# builds the image so.
#
# A Containerfile this script does not understand (another base, another
# RUN, another instruction) is an error, not a guess.
set -euo pipefail
export LC_ALL=C

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
image_ref=""
if [[ "${1:-}" == --image ]]; then
	[[ $# -eq 5 ]] || {
		echo "usage: build-node-image.sh --image REF BIN_DIR AGENT_ARCHIVE OUT" >&2
		exit 2
	}
	image_ref="$2" image_bin="$3" image_agent="$4" image_out="$5"
	set --
fi
out_dir="${1:-}"
cache="${AIRLOCK_CACHE:-/var/cache/airlock}"
containerfile="$repo/deploy/kubernetes/image/Containerfile"

log() { printf 'build-node-image: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

# The Containerfile, its continuation lines joined.
text="$(sed -e ':a' -e '/\\$/N; s/\\\n//; ta' "$containerfile" | grep -v '^\s*#')"
suite="$(sed -n -E 's/^FROM debian:([a-z]+)-slim\s*$/\1/p' <<<"$text")"
[[ -n "$suite" ]] || die "$containerfile: want FROM debian:SUITE-slim, not $(grep '^FROM' <<<"$text")"
run="$(grep '^RUN ' <<<"$text")"
[[ "$(wc -l <<<"$run")" == 1 ]] || die "$containerfile: want one RUN line"
packages="$(sed -n -E 's/^RUN apt-get update && apt-get install -y --no-install-recommends ([a-z0-9 .+-]+)\s*&& rm -rf \/var\/lib\/apt\/lists\/\*\s*$/\1/p' <<<"$run")"
packages="$(xargs <<<"$packages")"
[[ -n "$packages" ]] || die "$containerfile: want RUN apt-get update && apt-get install -y --no-install-recommends PACKAGES && rm -rf /var/lib/apt/lists/*, not: $run"
entrypoint="$(sed -n -E 's/^ENTRYPOINT (\[.*\])\s*$/\1/p' <<<"$text")"
[[ -n "$entrypoint" ]] || die "$containerfile: want ENTRYPOINT [\"...\"]"
other="$(grep -v -E '^(FROM|RUN|COPY|ENTRYPOINT) |^\s*$' <<<"$text" || true)"
[[ -z "$other" ]] || die "$containerfile: instructions this script does not build: $other"

key_files=("$here/build-node-image.sh" "$here"/ocipack/*.go "$containerfile")
for f in "$repo"/internal/ocipack/*.go; do
	case "${f##*/}" in
	*_test.go | import*.go) ;;
	*) key_files+=("$f") ;;
	esac
done
hash="$(
	for f in "${key_files[@]}"; do
		printf '%s %s\n' "$(sha256sum <"$f" | cut -d' ' -f1)" "${f#"$repo"/}"
	done | sha256sum | cut -c1-16
)"
archive="$cache/airlock-node-base-$hash.tar"
go_bin="$(command -v go || echo /usr/local/go/bin/go)"

# full_image: the base at $archive plus the COPY lines' layer, into $image_out.
full_image() {
	local tmp stage line srcs dst src from
	tmp="$(mktemp -d)"
	trap 'rm -rf "$tmp"' EXIT
	stage="$tmp/layer"
	mkdir -p "$stage"
	while read -r line; do
		read -ra srcs <<<"${line#COPY }"
		dst="${srcs[-1]}"
		unset 'srcs[-1]'
		[[ "$dst" == /* ]] || die "$containerfile: COPY to a relative path: $line"
		if [[ "$dst" == */ ]]; then
			mkdir -p "$stage$dst"
		else
			mkdir -p "$(dirname "$stage$dst")"
			[[ ${#srcs[@]} -eq 1 ]] || die "$containerfile: COPY of several files to a file: $line"
		fi
		for src in "${srcs[@]}"; do
			case "$src" in
			_output/bin/*) from="$image_bin/${src#_output/bin/}" ;;
			_output/image-agent.tar) from="$image_agent" ;;
			*) die "$containerfile: COPY of $src, not make's output (_output/bin/NAME, _output/image-agent.tar)" ;;
			esac
			[[ -f "$from" ]] || die "$from (the Containerfile's $src) is missing: run make build images"
			# -L: the agent archive is make's link into the cache.
			cp -L "$from" "$stage$dst"
		done
	done < <(grep '^COPY ' <<<"$text")
	chmod -R u=rwX,go=rX "$stage"
	(cd "$repo" && GOFLAGS=-buildvcs=false "$go_bin" build -trimpath -o "$tmp/ocipack" ./hack/ocipack)
	# shellcheck disable=SC2046 # the stage's top-level names (usr), as words
	tar -C "$stage" --sort=name --numeric-owner --owner=0 --group=0 --format=gnu -cf - $(cd "$stage" && ls -A) |
		"$tmp/ocipack" -base "$archive" -ref "$image_ref" -created-by "COPY (deploy/kubernetes/image/Containerfile)" \
			-tmpdir "$tmp" -o "$image_out.tmp" -
	mv "$image_out.tmp" "$image_out"
	rm -rf "$tmp"
	trap - EXIT
	printf '%s\n' "$image_out"
	exit 0
}

finish() {
	[[ -n "$image_ref" ]] && full_image
	if [[ -n "$out_dir" ]]; then
		mkdir -p "$out_dir"
		printf '%s\n' "$archive" >"$out_dir/.node-base-image.path.tmp"
		mv "$out_dir/.node-base-image.path.tmp" "$out_dir/node-base-image.path"
	fi
	printf '%s\n' "$archive"
	exit 0
}

[[ -f "$archive" ]] && finish

mkdir -p "$cache"
exec 9>"$cache/.airlock-node-base.lock"
flock 9
[[ -f "$archive" ]] && finish

command -v mmdebstrap >/dev/null || die "mmdebstrap is missing (make deps installs it)"

rm -rf "$cache"/.airlock-node-base.??????
tmp="$(mktemp -d "$cache/.airlock-node-base.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT

(cd "$repo" && GOFLAGS=-buildvcs=false "$go_bin" build -trimpath -o "$tmp/ocipack" ./hack/ocipack)

cat >"$tmp/sources.list" <<EOF
deb http://deb.debian.org/debian $suite main
deb http://deb.debian.org/debian $suite-updates main
deb http://deb.debian.org/debian-security $suite-security main
EOF
# As the slim images: no documentation but the copyright files, no manuals,
# no translations.
cat >"$tmp/dpkg.cfg" <<'EOF'
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
EOF

# The agent image's recipe's date: the same mirror content, the same archive.
export SOURCE_DATE_EPOCH="$(. "$repo/images/agent/recipe.env" && echo "$SOURCE_DATE_EPOCH")"
log "building the node image's base (debian $suite, $packages; recipe $hash); this takes a few minutes once"
start=$SECONDS
mmdebstrap \
	--variant=minbase \
	--include="${packages// /,}" \
	--dpkgopt="$tmp/dpkg.cfg" \
	--aptopt='Acquire::Languages "none"' \
	"$suite" - "$tmp/sources.list" |
	"$tmp/ocipack" \
		-ref "airlock/airlockd-kube-base:$suite" \
		-entrypoint "$entrypoint" \
		-env "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
		-label "dev.airlock.image.recipe=$hash" \
		-created-by "mmdebstrap --variant=minbase --include=${packages// /,} $suite (deploy/kubernetes/image/Containerfile)" \
		-tmpdir "$tmp" \
		-o "$tmp/image.tar" -

mv "$tmp/image.tar" "$archive"
find "$cache" -maxdepth 1 -name 'airlock-node-base-*.tar' ! -name "${archive##*/}" -mtime +7 -delete
log "built $archive ($(du -h "$archive" | cut -f1)) in $((SECONDS - start))s"
rm -rf "$tmp"
trap - EXIT
finish
