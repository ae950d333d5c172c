#!/usr/bin/env bash
# `npm run test:stress -- <vitest files>`: runs the files STRESS_RUNS times (default 5) while two CPU hogs
# (stress-ng, installed by scripts/services.sh) keep both cores busy, as a loaded CI machine does. A test
# that reads once what becomes true eventually, or sleeps for a guessed time, fails here first.
set -uo pipefail
cd "$(dirname "$0")/.."

runs=${STRESS_RUNS:-5}
if [ $# -eq 0 ]; then
  echo "usage: npm run test:stress -- <test files> (STRESS_RUNS=$runs runs)" >&2
  exit 2
fi
if ! command -v stress-ng >/dev/null 2>&1; then
  echo "stress: stress-ng is missing; bash scripts/services.sh installs it" >&2
  exit 2
fi

stress-ng --cpu 2 --quiet &
hogs=$!
# The hogs stop however this ends: success, a failed run, Ctrl-C.
trap 'kill -TERM "$hogs" 2>/dev/null; wait "$hogs" 2>/dev/null' EXIT
trap 'exit 130' INT TERM
logs=$(mktemp -d -t oncely-stress-XXXXXX)
echo "stress: $runs runs of $* under stress-ng --cpu 2 (pid $hogs); logs in $logs"

passed=0
failed=0
for i in $(seq 1 "$runs"); do
  log="$logs/run-$i.log"
  started=$SECONDS
  if npx vitest run "$@" >"$log" 2>&1; then
    passed=$((passed + 1))
    verdict=passed
  else
    failed=$((failed + 1))
    verdict=FAILED
  fi
  # vitest's own count, e.g. "Tests  2 failed | 48 passed (50)".
  counts=$(sed -E 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '^ +Tests +[0-9]' | sed -E 's/^ +Tests +//')
  echo "run $i/$runs: $verdict in $((SECONDS - started)) s (tests: ${counts:-none reported})"
  if [ "$verdict" = FAILED ]; then
    sed -E 's/\x1b\[[0-9;]*m//g' "$log" | grep -E '^ FAIL ' | sort -u | sed 's/^ /  /'
    echo "  log: $log"
  fi
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
