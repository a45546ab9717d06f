#!/usr/bin/env bash
# bench.sh: starts a private airlockd (with its embedded containerd) under a
# temporary root, imports the agent image, runs examples/hello.hcl, and
# measures cold session start: `airlock run --rm -f examples/hello.hcl -- true`
# against `ctr run --rm` of the same image on the same containerd, N runs each
# (default 20), printing medians. Everything it starts is stopped at the end.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
BIN="$PWD/_output/bin"
N="${BENCH_RUNS:-20}"
image_archive="$(cat _output/agent-image.path)"
root="$(mktemp -d /tmp/airlock-bench.XXXXXX)"
sock="$root/airlock.sock"
daemon_pid=""

cleanup() {
	if [[ -n "$daemon_pid" ]] && kill -0 "$daemon_pid" 2>/dev/null; then
		"$BIN/airlock" --socket "$sock" ps -a -q 2>/dev/null | xargs -r "$BIN/airlock" --socket "$sock" rm -f >/dev/null 2>&1 || true
		kill -TERM "$daemon_pid"
		wait "$daemon_pid" || true
	fi
	rm -rf "$root"
}
trap cleanup EXIT

"$BIN/airlockd" --root "$root" --socket "$sock" --stop-containerd --log-level warn 2>"$root/airlockd.log" &
daemon_pid=$!
for _ in $(seq 500); do
	[[ -S "$sock" ]] && break
	kill -0 "$daemon_pid" 2>/dev/null || { cat "$root/airlockd.log"; exit 1; }
	sleep 0.02
done
airlock() { "$BIN/airlock" --socket "$sock" "$@"; }
airlock image import "$image_archive" >/dev/null
echo "== airlock run --rm -f examples/hello.hcl"
airlock run --rm -f examples/hello.hcl

ctr() { "$BIN/ctr" -a "$root/containerd/containerd.sock" -n airlock "$@"; }
ref="$(ctr images ls -q 2>/dev/null | grep 'airlock/agent:bookworm' | head -1)"

ms() { echo $(( $(date +%s%N) / 1000000 )); }
median() { sort -n | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

# One warm-up each, so both measure a cold session, not a cold page cache.
airlock run --rm -f examples/hello.hcl -- true
ctr run --rm --runc-binary "$BIN/runc" "$ref" warmup true 2>/dev/null
a_times=() c_times=()
for i in $(seq "$N"); do
	t0=$(ms); airlock run --rm -f examples/hello.hcl -- true; t1=$(ms)
	a_times+=($((t1 - t0)))
	t0=$(ms); ctr run --rm --runc-binary "$BIN/runc" "$ref" "bench-$i" true 2>/dev/null; t1=$(ms)
	c_times+=($((t1 - t0)))
done
a_med=$(printf '%s\n' "${a_times[@]}" | median)
c_med=$(printf '%s\n' "${c_times[@]}" | median)
echo
echo "== cold session start to exit, median of $N runs (ms)"
printf '%-52s %8s\n' "airlock run --rm -f examples/hello.hcl -- true" "$a_med"
printf '%-52s %8s\n' "ctr run --rm (same image, same containerd) true" "$c_med"
awk -v a="$a_med" -v c="$c_med" 'BEGIN {printf "%-52s %8.2f\n", "ratio airlock/ctr", a / c}'
echo "reproduce: make bench (BENCH_RUNS=$N)"
