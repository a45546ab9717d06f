#!/usr/bin/env bash
# bench.sh [airlock bench flags]: runs the permission benchmark (bench/SPEC.md)
# against real sandboxes: all four AmPermBench families in every mode, with the
# allow-all gate (the headline) and the example rules gate beside it, and the
# five contrast-pair families (docs/authgatebench.md) in gate-only and the
# perimeter under the allow-all gate, and the revised requests' default subset
# (docs/revised-requests.md: the world families' S0 prompts revised midway). It builds
# the static bench client, then `airlock bench` builds (or reuses from
# $AIRLOCK_CACHE) the bench image on top of the agent image, starts the world
# and a private airlockd wired to it, runs, stops everything, and prints the
# headline table and the wall time. Results: _output/bench (BENCH_OUT).
# Needs `make build deps image` first (`make bench` does that).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN="$PWD/_output/bin"
OUT="${BENCH_OUT:-$PWD/_output/bench}"
GO="${GO:-go}"

if [[ ! -s _output/agent-image.path ]]; then
	echo "bench.sh: no agent image; run 'make image' first" >&2
	exit 1
fi
CGO_ENABLED=0 "$GO" build -trimpath -o "$BIN/airlock-bench-cli" ./bench/clients/cmd/airlock-bench-cli

rm -rf "$OUT"
start=$SECONDS
"$BIN/airlock" bench \
	--bin-dir "$BIN" \
	--agent-image "$(cat _output/agent-image.path)" \
	--bench-cli "$BIN/airlock-bench-cli" \
	--gate allow-all \
	--gate rules:bench/runner/rules/example.rules \
	--revised default \
	--out "$OUT" \
	"$@"
echo "make bench: $((SECONDS - start))s in total; report: $OUT/report.md"
