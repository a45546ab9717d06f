#!/usr/bin/env bash
# fuzz.sh N: runs every Fuzz* target in the module for N executions (e.g. 3000x).
set -euo pipefail
fuzztime="${1:-3000x}"
cd "$(dirname "${BASH_SOURCE[0]}")/.."
status=0
while IFS= read -r file; do
	pkg="./$(dirname "$file")"
	for target in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
		echo "fuzz: $pkg $target ($fuzztime)"
		if ! go test -run='^$' -fuzz="^${target}\$" -fuzztime="$fuzztime" "$pkg" >/tmp/airlock-fuzz.log 2>&1; then
			cat /tmp/airlock-fuzz.log
			status=1
		fi
	done
done < <(grep -rlE '^func Fuzz' --include='*_test.go' . | sort)
exit $status
