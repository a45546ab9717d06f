#!/bin/sh
# Exec issuer: hands out a token that another agent keeps fresh in a file (a vault
# agent sink, a CI secret mount). The file's modification time plus
# AIRLOCK_STATIC_TTL seconds (default 900) is reported as the expiry, so airlockd
# re-reads the file before it goes stale.
#
# Environment: AIRLOCK_STATIC_DIR (default /etc/airlock/tokens); the token is read from
# $AIRLOCK_STATIC_DIR/<audience>.
set -eu
dir="${AIRLOCK_STATIC_DIR:-/etc/airlock/tokens}"
req="$(cat)"
aud="$(printf '%s' "$req" | jq -r .audience)"
case "$aud" in
*/* | .* | "") echo "static-file: bad audience $aud" >&2; exit 1 ;;
esac
file="$dir/$aud"
[ -r "$file" ] || { echo "static-file: no token for $aud in $dir" >&2; exit 1; }
mtime="$(stat -c %Y "$file")"
exp="$((mtime + ${AIRLOCK_STATIC_TTL:-900}))"
[ "$exp" -gt "$(date +%s)" ] || { echo "static-file: token for $aud is stale" >&2; exit 1; }
jq -cn --rawfile t "$file" --arg e "$(date -u -d "@$exp" +%Y-%m-%dT%H:%M:%SZ)" \
	'{token: ($t | rtrimstr("\n")), expires_at: $e}'
