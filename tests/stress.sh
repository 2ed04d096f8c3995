#!/usr/bin/env bash
# Runs Ebb's whole test suite N times in a row while both cores are kept busy, and
# prints "N passed, M failed" runs: the proof that the suite passes every time, on a
# busy machine too (issue 37). Usage, from anywhere in the repository:
#
#   tests/stress.sh [N] [--no-load]        # N defaults to 5
#
# Each run is what CI tests: `cargo test --workspace` (the README's command) and the
# STOMP tests again over WebSocket, with every service and client `.ci/setup` checks or
# installs (PostgreSQL, stomp.py, Chromium, stomp.js; root for the disk-full test). The
# background load is stress-ng (Debian's package, installed if missing): one CPU burner
# per core, started after the build and stopped when the script ends, however it ends.
# A failed run's output is kept in target/stress/run-K.log; the script exits 1 if any
# run failed. It never retries a test: a run fails if one test fails.
set -euo pipefail
cd "$(dirname "$0")/.."

runs=5
load=1
for arg in "$@"; do
  case "$arg" in
    --no-load) load=0 ;;
    ''|*[!0-9]*) echo "usage: tests/stress.sh [N] [--no-load]" >&2; exit 2 ;;
    *) runs="$arg" ;;
  esac
done

source .ci/setup

say "building the tests once, before the load starts"
cargo test --workspace --no-run --quiet || fail "the tests do not build"

burner=""
stop_load() { [ -n "$burner" ] && kill "$burner" 2>/dev/null; wait 2>/dev/null || true; }
trap stop_load EXIT
if [ "$load" = 1 ]; then
  if ! command -v stress-ng >/dev/null; then
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq stress-ng >/dev/null \
      || fail "cannot install Debian's stress-ng (the CPU load)"
  fi
  cores="$(nproc)"
  stress-ng --cpu "$cores" --cpu-method matrixprod --quiet &
  burner=$!
  say "load: stress-ng burning $cores cores (pid $burner)"
fi

mkdir -p target/stress
passed=0
failed=0
for k in $(seq 1 "$runs"); do
  log="target/stress/run-$k.log"
  start=$(date +%s)
  if { cargo test --workspace \
        && EBB_TEST_TRANSPORT=ws cargo test --test it -- "${ws_modules[@]}"; } >"$log" 2>&1; then
    passed=$((passed + 1))
    verdict="passed"
    rm -f "$log"
  else
    failed=$((failed + 1))
    verdict="FAILED ($(grep -E '^test .* FAILED$|^    [a-z_:0-9]+$' "$log" | tr -s ' ' | head -n 5 | tr '\n' ' ')see $log)"
  fi
  printf 'run %d of %d: %s in %d s\n' "$k" "$runs" "$verdict" "$(( $(date +%s) - start ))"
done

echo
echo "$passed passed, $failed failed"
[ "$failed" = 0 ]
