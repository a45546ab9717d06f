#!/usr/bin/env bash
# perf.sh: measures airlock side by side with its baselines and writes
# perf/report.md, perf/report.json, perf/bench.txt, perf/density.png and
# perf/profiles/. It builds airlock-perf and the static load generator
# perfload into _output/perf, installs what the comparisons need when it is
# missing (bubblewrap, socat and ripgrep from apt, Anthropic's
# sandbox-runtime from npm into perf/.srt, linux-perf for profiles), then
# runs airlock-perf with the arguments given (see `airlock-perf -h`), e.g.
#
#   hack/perf.sh                       # everything (make perf)
#   hack/perf.sh -only dns,tcp         # some sections
#   hack/perf.sh -only warmstart -runs 20
#   hack/perf.sh -density 1,10,50,100,200
#   hack/perf.sh -only l7 -l7-download 256MiB
#                                      # the L7 gateway beside the L3 path; needs
#                                      # no airlockd, containerd or image
#   hack/perf.sh -only agentstart -agent-runs 10 -agents claude-code
#                                      # airlock run of examples/claude-code.hcl to the
#                                      # agent's first model request, beside the bare
#                                      # binary (needs `make images`; fetches the
#                                      # agents' binaries with hack/fetch-agents.sh)
#   hack/perf.sh -only coldstart -daemon-log-level debug -daemon-log /tmp/airlockd.log
#                                      # keeps airlockd's per-step prepare/teardown timings
#
# airlock-perf starts a private airlockd and containerd under a temporary
# root with a test world namespace as uplink, and removes all of it (and
# every session) before it exits, also on SIGINT/SIGTERM.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="/usr/local/go/bin:$PATH"
SRT_VERSION=0.0.83

mkdir -p _output/perf
go build -trimpath -o _output/perf/airlock-perf ./perf/cmd/airlock-perf
CGO_ENABLED=0 go build -trimpath -o _output/perf/perfload ./perf/cmd/perfload
CGO_ENABLED=0 go build -trimpath -o _output/perf/ocilabel ./perf/cmd/ocilabel

missing=()
for pair in bwrap:bubblewrap socat:socat rg:ripgrep perf:linux-perf nsenter:util-linux; do
	command -v "${pair%%:*}" >/dev/null 2>&1 || missing+=("${pair#*:}")
done
if ((${#missing[@]})); then
	echo "perf.sh: installing ${missing[*]}" >&2
	{ apt-get install -y -qq "${missing[@]}" || { apt-get update -qq && apt-get install -y -qq "${missing[@]}"; }; } >/dev/null 2>&1 ||
		echo "perf.sh: could not install ${missing[*]}; the report says what is missing" >&2
fi
if [[ ! -x perf/.srt/node_modules/.bin/srt ]]; then
	if command -v npm >/dev/null 2>&1; then
		echo "perf.sh: installing @anthropic-ai/sandbox-runtime@$SRT_VERSION into perf/.srt" >&2
		timeout 180 npm install --prefix perf/.srt --no-audit --no-fund --loglevel=error \
			"@anthropic-ai/sandbox-runtime@$SRT_VERSION" >&2 ||
			echo "perf.sh: sandbox-runtime could not be installed; the report says why srt is missing" >&2
	else
		echo "perf.sh: npm is not installed; srt is left out of the comparison" >&2
	fi
fi

# A hard stop past airlock-perf's own budget (-budget, 12m30s by default:
# no section starts in its last minute), so that a section that hangs
# cannot hold the machine; SIGTERM lets airlock-perf remove what it
# started. It stopped a full run at 9 minutes, mid-section, once the L7
# section measured one more path. A -budget given in minutes (make
# perf-load's 40m) moves the stop to 90 s past it.
stop=840
prev=
for a in "$@"; do
	if [[ $prev == -budget || $prev == --budget ]] && [[ $a =~ ^([0-9]+)m$ ]]; then
		stop=$(( BASH_REMATCH[1] * 60 + 90 ))
	fi
	prev=$a
done
exec timeout --signal=TERM --kill-after=60 "$stop" _output/perf/airlock-perf "$@"
