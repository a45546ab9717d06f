#!/usr/bin/env bash
# build-kube.sh BIN_DIR: builds the control plane the Kubernetes tests start (kube/kubetest),
# and the kubelet one of them runs (kube/deploytest's TestDaemonSetUnderKubelet), at the
# versions pinned in hack/versions.env, from the Go module proxy:
#   - kube-apiserver, from the k8s.io/kubernetes module source (KUBE_VERSION). That module's
#     go.mod points its k8s.io/* staging modules at ./staging/src, which its module zip leaves
#     out: they are taken at the published versions of the same release (v1.34.2 -> v0.34.2)
#     and it is built with GOWORK=off. 6 to 10 minutes on 2 cores the first time
#     (10 while a CI run shared them).
#   - kubelet, from the same module source, the same way (cmd/kubelet).
#   - etcd, from go.etcd.io/etcd/server/v3 (ETCD_VERSION), its ../ replaces dropped for the
#     published etcd modules of the same version its go.mod requires. 25 s to 2 minutes.
# Each is cached under $AIRLOCK_CACHE (default /var/cache/airlock) by version, as
# install-deps.sh caches containerd and runc, and copied into BIN_DIR. A second run takes
# well under a second. It fails, saying why, when a binary cannot be built.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
bin_dir="${1:?usage: build-kube.sh BIN_DIR}"
cache="${AIRLOCK_CACHE:-/var/cache/airlock}"
mkdir -p "$bin_dir" "$cache/bin"

log() { printf 'build-kube: %s\n' "$*" >&2; }
die() {
	log "$*"
	exit 1
}

# module_src MODULE@VERSION DIR: copies the module's source, as the Go module proxy serves it,
# into DIR (writable, for the go.mod edits).
module_src() {
	local json dir
	# Outside any module, so that airlock's go.mod and go.work play no part.
	json="$(cd "$2" && GOWORK=off GOFLAGS= go mod download -json "$1")" ||
		die "cannot download $1 from the Go module proxy: $json"
	dir="$(sed -n 's/^\t"Dir": "\(.*\)",$/\1/p' <<<"$json")"
	[[ -n "$dir" && -f "$dir/go.mod" ]] || die "go mod download $1 named no source directory: $json"
	cp -R "$dir/." "$2/src"
	chmod -R u+w "$2/src"
}

# build_cached DIR NAME BUILD_FN: runs BUILD_FN TMP (which leaves TMP/NAME) unless DIR/.done
# exists, then moves TMP to DIR.
build_cached() {
	local dir="$1" name="$2" fn="$3"
	[[ -f "$dir/.done" && -x "$dir/$name" ]] && return 0
	# Two builds at once (two checkouts' make test) would each take minutes of both
	# cores for the same result: the second waits for the first, then finds it done.
	local lock
	exec {lock}>"$cache/bin/.$name.lock"
	flock "$lock"
	if [[ -f "$dir/.done" && -x "$dir/$name" ]]; then
		exec {lock}>&-
		return 0
	fi
	local tmp start
	tmp="$(mktemp -d "$cache/bin/.build.XXXXXX")"
	# The module's sources are read-only in the module cache; the copies are not.
	trap 'rm -rf "$tmp"' EXIT
	start=$SECONDS
	log "building $name (one-time, cached in $dir)"
	"$fn" "$tmp" || die "building $name failed (the output above says why)"
	[[ -x "$tmp/$name" ]] || die "building $name left no $tmp/$name"
	rm -rf "$tmp/src"
	touch "$tmp/.done"
	rm -rf "$dir"
	mv "$tmp" "$dir"
	trap - EXIT
	exec {lock}>&-
	log "built $name in $((SECONDS - start)) s"
}

# kube_build TMP CMD: builds k8s.io/kubernetes@$KUBE_VERSION's ./cmd/CMD into TMP/CMD.
kube_build() {
	local tmp="$1" cmd="$2"
	module_src "k8s.io/kubernetes@$KUBE_VERSION" "$tmp"
	local staging="v0.${KUBE_VERSION#v1.}" minor="${KUBE_VERSION#v1.}"
	minor="${minor%%.*}"
	# k8s.io/api => ./staging/src/k8s.io/api  becomes  k8s.io/api => k8s.io/api v0.34.2
	sed -i -E "s#^(\s*)(k8s\.io/[a-z0-9-]+) => \./staging/src/k8s\.io/[a-z0-9-]+\s*\$#\1\2 => \2 $staging#" "$tmp/src/go.mod"
	! grep -n '=> \./staging' "$tmp/src/go.mod" || die "k8s.io/kubernetes@$KUBE_VERSION: staging replaces left in go.mod"
	# The module zip has only vendor/OWNERS (vendor/ would switch the build to -mod=vendor)
	# and a go.work naming the staging directories it leaves out.
	rm -rf "$tmp/src/vendor" "$tmp/src/go.work" "$tmp/src/go.work.sum"
	# What /version reports (Kubernetes' own build sets these from git).
	local v=k8s.io/component-base/version
	local ldflags="-s -w -X $v.gitVersion=$KUBE_VERSION -X $v.gitMajor=1 -X $v.gitMinor=$minor -X $v.gitTreeState=clean"
	(cd "$tmp/src" && GOWORK=off GOFLAGS='-mod=mod -buildvcs=false' CGO_ENABLED=0 go build -trimpath \
		-ldflags "$ldflags" -o "$tmp/$cmd" "./cmd/$cmd")
}

build_apiserver() { kube_build "$1" kube-apiserver; }
build_kubelet() { kube_build "$1" kubelet; }

build_etcd() {
	local tmp="$1"
	module_src "go.etcd.io/etcd/server/v3@$ETCD_VERSION" "$tmp"
	# go.etcd.io/etcd/api/v3 => ../api  and the like: the other modules of etcd's repository,
	# which the server's go.mod requires at the same version.
	sed -i -E '/^\s*go\.etcd\.io\/[^ ]+ => \.\.\//d' "$tmp/src/go.mod"
	(cd "$tmp/src" && GOWORK=off GOFLAGS='-mod=mod -buildvcs=false' CGO_ENABLED=0 go build -trimpath \
		-ldflags "-s -w" -o "$tmp/etcd" .)
}

api_dir="$cache/bin/kube-apiserver-$KUBE_VERSION"
etcd_dir="$cache/bin/etcd-$ETCD_VERSION"
kubelet_dir="$cache/bin/kubelet-$KUBE_VERSION"
build_cached "$etcd_dir" etcd build_etcd
build_cached "$api_dir" kube-apiserver build_apiserver
build_cached "$kubelet_dir" kubelet build_kubelet

for f in "$api_dir"/kube-apiserver "$etcd_dir"/etcd "$kubelet_dir"/kubelet; do
	dst="$bin_dir/$(basename "$f")"
	if [[ ! -x "$dst" ]] || ! cmp -s "$f" "$dst"; then
		install -m 0755 "$f" "$dst.tmp" && mv "$dst.tmp" "$dst"
	fi
done
