#!/usr/bin/env bash
# fetch-agents.sh: fetches the coding agents' native binaries from their published npm
# platform packages, with the ordinary npm client (npm pack), checks each tarball against its
# pinned sha512 integrity, and extracts it once under $AIRLOCK_CACHE/agents/NAME-VERSION (default
# /var/cache/airlock; npm's own cache is $AIRLOCK_CACHE/npm, shared with the agent images'
# build). Prints one line per agent, NAME=PATH of its binary:
#   claude=.../anthropic-ai-claude-code-linux-x64-2.1.328/claude   (glibc, no Node.js needed)
#   codex=.../openai-codex-0.169.0-linux-x64/vendor/x86_64-unknown-linux-musl/bin/codex (static)
# A second run with everything cached uses no network and takes well under a second.
# Pins: the platform package's version and integrity in images/AGENT/package-lock.json (the
# agent images' recipe) when that file is there, else the ones below.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(dirname "$here")"
cache="${AIRLOCK_CACHE:-/var/cache/airlock}/agents"
npm_cache="${AIRLOCK_CACHE:-/var/cache/airlock}/npm"

log() { printf 'fetch-agents: %s\n' "$*" >&2; }

# pin AGENT LOCKKEY DEFAULT: prints "VERSION INTEGRITY" of LOCKKEY in the agent image's
# package-lock.json, or DEFAULT.
pin() {
	local lock="$root/images/$1/package-lock.json" got=""
	if [[ -f $lock ]]; then
		command -v jq >/dev/null || { log "jq is needed to read $lock"; return 1; }
		got="$(jq -r --arg k "$2" '.packages[$k] // empty | "\(.version) \(.integrity)"' "$lock")"
		[[ -n $got ]] || { log "$lock has no $2"; return 1; }
	fi
	echo "${got:-$3}"
}

# fetch SPEC DIR INTEGRITY: npm pack SPEC, check its integrity, extract it as DIR unless DIR is
# there already.
fetch() {
	local spec="$1" dir="$2" want="$3"
	[[ -f "$dir/.done" ]] && return 0
	command -v npm >/dev/null || { log "npm is not installed"; return 1; }
	mkdir -p "$cache"
	local tmp
	tmp="$(mktemp -d "$cache/.tmp.XXXXXX")"
	# shellcheck disable=SC2064
	trap "rm -rf '$tmp'" RETURN
	log "fetching $spec"
	(cd "$tmp" && npm pack --silent --cache "$npm_cache" --prefer-offline "$spec" >/dev/null)
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

read -r cc_version cc_integrity < <(pin claude-code node_modules/@anthropic-ai/claude-code-linux-x64 \
	"2.1.328 sha512-KuzL+dBHgDCFTHJxwW+xuBJdVKfBsesGx2BBcTOG9sYDGoAD7b1hUV8rsTS4xjoJsB2SmeGraGjBiFuhrYuC9w==")
read -r cx_version cx_integrity < <(pin codex node_modules/@openai/codex-linux-x64 \
	"0.169.0-linux-x64 sha512-o05NyAOCDygSPRo1yinzxvkRSdmsZyBD9E7mbpmjRanSfM8lypqWtQgEo4XfNkwhuCR2aFu8mlGOsQGFXVbVww==")
[[ -n ${cc_integrity:-} && -n ${cx_integrity:-} ]] || { log "no pins"; exit 1; }

cc_dir="$cache/anthropic-ai-claude-code-linux-x64-$cc_version"
cx_dir="$cache/openai-codex-$cx_version"
fetch "@anthropic-ai/claude-code-linux-x64@$cc_version" "$cc_dir" "$cc_integrity"
fetch "@openai/codex@$cx_version" "$cx_dir" "$cx_integrity"
echo "claude=$cc_dir/claude"
echo "codex=$cx_dir/vendor/x86_64-unknown-linux-musl/bin/codex"
