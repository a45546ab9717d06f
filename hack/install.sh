#!/usr/bin/env bash
# install.sh install|uninstall BIN_DIR [--image NAME=FILE]...
#
# Installs airlock from BIN_DIR (make build and make deps fill it) as a
# service, or removes what an install put in place. `make install` and
# `make uninstall` call it. Where things go (override in the environment):
#
#   PREFIX=/usr/local      bin/airlock, sbin/airlockd,
#                          libexec/airlock/ (containerd, containerd-shim-runc-v2,
#                          runc, airlock-init, airlock-logger),
#                          share/airlock/images/NAME.tar, share/doc/airlock/,
#                          shell completions under share/
#   SYSCONFDIR=/etc        airlock/airlockd.hcl, kept when it exists (the new
#                          default goes beside it as airlockd.hcl.default)
#   STATEDIR=/var/lib/airlock, RUNDIR=/run/airlock: named in airlockd.hcl
#   UNITDIR=$PREFIX/lib/systemd/system: airlockd.service
#   DESTDIR=               staged installs (packaging): prefixed to every path
#                          written, not to the paths the files name
#
# Uninstall removes the files the install listed in
# $PREFIX/share/airlock/installed-files, and not airlockd.hcl (PURGE=1
# removes it too) nor the state directory: sessions' data lives there.
set -euo pipefail

mode="${1:?usage: install.sh install|uninstall BIN_DIR [--image NAME=FILE]...}"
bin_dir="${2:?usage: install.sh install|uninstall BIN_DIR [--image NAME=FILE]...}"
shift 2
PREFIX="${PREFIX:-/usr/local}"
SYSCONFDIR="${SYSCONFDIR:-/etc}"
STATEDIR="${STATEDIR:-/var/lib/airlock}"
RUNDIR="${RUNDIR:-/run/airlock}"
UNITDIR="${UNITDIR:-$PREFIX/lib/systemd/system}"
DESTDIR="${DESTDIR:-}"
src="$(cd "$(dirname "$0")/.." && pwd)"
manifest="$PREFIX/share/airlock/installed-files"

log() { echo "install: $*" >&2; }
for v in PREFIX SYSCONFDIR STATEDIR RUNDIR UNITDIR; do
	case "${!v}" in
	*[\|\"\\]*) log "$v=${!v}: a path with | \" or \\ is not supported"; exit 2 ;;
	/*) ;;
	*) log "$v=${!v}: want an absolute path"; exit 2 ;;
	esac
done

if [[ "$mode" == uninstall ]]; then
	if [[ -f "$DESTDIR$manifest" ]]; then
		while IFS= read -r f; do
			rm -f "$DESTDIR$f"
		done < "$DESTDIR$manifest"
		rm -f "$DESTDIR$manifest"
	else
		log "no $DESTDIR$manifest: no installed files to remove"
	fi
	if [[ "${PURGE:-}" == 1 ]]; then
		rm -f "$DESTDIR$SYSCONFDIR/airlock/airlockd.hcl" "$DESTDIR$SYSCONFDIR/airlock/airlockd.hcl.default"
	fi
	# Directories the install made, where empty now.
	for d in "$PREFIX/share/airlock/images" "$PREFIX/share/airlock" "$PREFIX/libexec/airlock" \
		"$PREFIX/share/doc/airlock/examples/airlockd" "$PREFIX/share/doc/airlock/examples/issuers" \
		"$PREFIX/share/doc/airlock/examples" "$PREFIX/share/doc/airlock/docs" "$PREFIX/share/doc/airlock" \
		"$SYSCONFDIR/airlock"; do
		rmdir "$DESTDIR$d" 2>/dev/null || true
	done
	log "removed airlock from $PREFIX (kept: $SYSCONFDIR/airlock/airlockd.hcl unless PURGE=1, and $STATEDIR)"
	exit 0
fi
[[ "$mode" == install ]] || { log "unknown mode $mode: want install or uninstall"; exit 2; }

images=()
while (($#)); do
	case "$1" in
	--image)
		[[ "${2:-}" == *=* ]] || { log "--image wants NAME=FILE"; exit 2; }
		images+=("$2")
		shift 2
		;;
	*) log "unknown argument $1"; exit 2 ;;
	esac
done

# Everything is checked before anything is written.
for b in airlock airlockd containerd containerd-shim-runc-v2 runc airlock-init airlock-logger; do
	[[ -x "$bin_dir/$b" ]] || { log "$bin_dir/$b is missing: run make build deps first"; exit 1; }
done
for spec in "${images[@]}"; do
	name="${spec%%=*}" file="${spec#*=}"
	[[ "$name" =~ ^[a-z0-9][a-z0-9-]*$ ]] || { log "image name $name: want lower-case letters, digits and -"; exit 2; }
	[[ -f "$file" ]] || { log "image archive $file is missing: run make images first"; exit 1; }
done

# The configuration names this install's paths and images.
config="$(mktemp)"
trap 'rm -f "$config"' EXIT
image_list=()
for spec in "${images[@]}"; do
	image_list+=("\"$PREFIX/share/airlock/images/${spec%%=*}.tar\"")
done
images_line="image = [$(IFS=,; echo "${image_list[*]}" | sed 's/,/, /g')]"
if ((${#image_list[@]} == 0)); then
	images_line="# image = [] (no image archive was installed: airlock image import FILE)"
fi
sed -e "s|^root = \"/var/lib/airlock\"|root = \"$STATEDIR\"|" \
	-e "s|^socket = \"/run/airlock/airlock.sock\"|socket = \"$RUNDIR/airlock.sock\"|" \
	-e "s|^bin_dir = \"/usr/local/libexec/airlock\"|bin_dir = \"$PREFIX/libexec/airlock\"|" \
	-e "s|^image = .*|$images_line|" \
	-e "s|^#   airlockd --config /etc/airlock/airlockd.hcl|#   airlockd --config $SYSCONFDIR/airlock/airlockd.hcl|" \
	"$src/examples/airlockd/airlockd.hcl" > "$config"
# Check the file before it is put in place: airlockd would refuse it.
"$bin_dir/airlockd" --config "$config" --check-config >/dev/null

installed=()
# put MODE SRC DST: install SRC as DST atomically (a running binary keeps
# its old file) and list it.
put() {
	local dst="$DESTDIR$3"
	mkdir -p "$(dirname "$dst")"
	install -m "$1" "$2" "$dst.tmp.$$"
	mv -f "$dst.tmp.$$" "$dst"
	installed+=("$3")
}
# put_text MODE DST: install stdin as DST.
put_text() {
	local tmp
	tmp="$(mktemp)"
	cat > "$tmp"
	[[ -s "$tmp" ]] || { log "nothing to write to $2"; rm -f "$tmp"; exit 1; }
	put "$1" "$tmp" "$2"
	rm -f "$tmp"
}

put 0755 "$bin_dir/airlock" "$PREFIX/bin/airlock"
put 0755 "$bin_dir/airlockd" "$PREFIX/sbin/airlockd"
for b in containerd containerd-shim-runc-v2 runc airlock-init airlock-logger; do
	put 0755 "$bin_dir/$b" "$PREFIX/libexec/airlock/$b"
done

for spec in "${images[@]}"; do
	put 0644 "${spec#*=}" "$PREFIX/share/airlock/images/${spec%%=*}.tar"
done

# Documentation and examples.
for f in "$src"/README.md "$src"/docs/*.md "$src"/examples/*.hcl "$src"/examples/airlockd/* "$src"/examples/issuers/*; do
	m=0644
	[[ -x "$f" ]] && m=0755
	put "$m" "$f" "$PREFIX/share/doc/airlock/${f#"$src"/}"
done

# Shell completions, from the CLI's own generator.
# (put_text reads a process substitution, not a pipe: a pipe would run it in
# a subshell, and the file would be missing from the list uninstall reads.)
put_text 0644 "$PREFIX/share/bash-completion/completions/airlock" < <("$bin_dir/airlock" completion bash)
put_text 0644 "$PREFIX/share/zsh/vendor-completions/_airlock" < <("$bin_dir/airlock" completion zsh)
put_text 0644 "$PREFIX/share/fish/vendor_completions.d/airlock.fish" < <("$bin_dir/airlock" completion fish)

# The unit names this install's paths.
put_text 0644 "$UNITDIR/airlockd.service" < <(sed -e "s|/usr/local/sbin/airlockd|$PREFIX/sbin/airlockd|" \
	-e "s|/etc/airlock/airlockd.hcl|$SYSCONFDIR/airlock/airlockd.hcl|" \
	-e "s|/usr/local/share/doc/airlock|$PREFIX/share/doc/airlock|" \
	"$src/packaging/systemd/airlockd.service")

conf="$SYSCONFDIR/airlock/airlockd.hcl"
mkdir -p "$DESTDIR$SYSCONFDIR/airlock"
chmod 0755 "$DESTDIR$SYSCONFDIR/airlock"
if [[ -e "$DESTDIR$conf" ]]; then
	install -m 0644 "$config" "$DESTDIR$conf.default"
	log "kept $conf; this install's default is $conf.default"
else
	install -m 0644 "$config" "$DESTDIR$conf"
fi

mkdir -p "$DESTDIR$(dirname "$manifest")"
printf '%s\n' "${installed[@]}" > "$DESTDIR$manifest"
log "installed airlock in $PREFIX; unit $UNITDIR/airlockd.service, configuration $conf"
if [[ -z "$DESTDIR" ]]; then
	log "next: systemctl daemon-reload && systemctl enable --now airlockd; airlock doctor --config $SYSCONFDIR/airlock/airlockd.hcl"
fi
