#!/usr/bin/env bash
# fetch-agents.sh: fetches the coding agents' native binaries from their published npm
# packages, with the ordinary npm client, at pinned versions whose tarballs are checked against
# pinned sha512 integrities, and extracts each once under $AIRLOCK_CACHE/npm/NAME-VERSION
# (default /var/cache/airlock). Prints one line per agent, NAME=PATH of its binary:
#   claude=.../anthropic-ai-claude-code-linux-x64-2.1.328/claude       (glibc, no Node needed)
#   codex=.../openai-codex-0.169.0-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex (static)
# A second run with everything cached takes no network and well under a second.
# Versions: CLAUDE_CODE_VERSION and CODEX_VERSION from hack/versions.env when it sets them;
# a version other than the pinned one needs its integrity in *_INTEGRITY too.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
# shellcheck source=versions.env
. "$here/versions.env"
: "${CLAUDE_CODE_VERSION:=2.1.328}"
: "${CODEX_VERSION:=0.169.0}"
if [[ $CLAUDE_CODE_VERSION == 2.1.328 ]]; then
	: "${CLAUDE_CODE_INTEGRITY:=sha512-KuzL+dBHgDCFTHJxwW+xuBJdVKfBsesGx2BBcTOG9sYDGoAD7b1hUV8rsTS4xjoJsB2SmeGraGjBiFuhrYuC9w==}"
fi
if [[ $CODEX_VERSION == 0.169.0 ]]; then
	: "${CODEX_INTEGRITY:=sha512-o05NyAOCDygSPRo1yinzxvkRSdmsZyBD9E7mbpmjRanSfM8lypqWtQgEo4XfNkwhuCR2aFu8mlGOsQGFXVbVww==}"
fi
cache="${AIRLOCK_CACHE:-/var/cache/airlock}/npm"

log() { printf 'fetch-agents: %s\n' "$*" >&2; }

# fetch SPEC DIRNAME INTEGRITY: npm pack SPEC, check its integrity, extract it as
# $cache/DIRNAME unless that is there already.
fetch() {
	local spec="$1" dir="$cache/$2" want="$3"
	[[ -f "$dir/.done" ]] && return 0
	if [[ -z $want ]]; then
		log "$spec: no pinned integrity (set the version's *_INTEGRITY)"
		return 1
	fi
	command -v npm >/dev/null || { log "npm is not installed"; return 1; }
	mkdir -p "$cache"
	local tmp
	tmp="$(mktemp -d "$cache/.tmp.XXXXXX")"
	# shellcheck disable=SC2064
	trap "rm -rf '$tmp'" RETURN
	log "fetching $spec"
	(cd "$tmp" && npm pack --silent --no-audit --no-fund "$spec" >/dev/null)
	local tgz got
	tgz="$(echo "$tmp"/*.tgz)"
	got="sha512-$(openssl dgst -sha512 -binary "$tgz" | base64 -w0)"
	if [[ $got != "$want" ]]; then
		log "$spec: integrity $got, want $want"
		return 1
	fi
	mkdir "$tmp/x"
	tar -xzf "$tgz" -C "$tmp/x" --no-same-owner
	touch "$tmp/x/package/.done"
	rm -rf "$dir"
	mv "$tmp/x/package" "$dir"
}

fetch "@anthropic-ai/claude-code-linux-x64@$CLAUDE_CODE_VERSION" \
	"anthropic-ai-claude-code-linux-x64-$CLAUDE_CODE_VERSION" "${CLAUDE_CODE_INTEGRITY:-}"
fetch "@openai/codex@$CODEX_VERSION-linux-x64" \
	"openai-codex-$CODEX_VERSION-linux-x64" "${CODEX_INTEGRITY:-}"
echo "claude=$cache/anthropic-ai-claude-code-linux-x64-$CLAUDE_CODE_VERSION/claude"
echo "codex=$cache/openai-codex-$CODEX_VERSION-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex"
