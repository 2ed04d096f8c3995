#!/usr/bin/env bash
# Scheduled delivery beside ActiveMQ 5.17 in one run (issue 32): starts ActiveMQ with
# its scheduler (activemq/start.sh, EBB_PEER_SCHEDULER=1) and `ebb serve` (release
# build, a fresh SQLite store, STOMP on 127.0.0.1:61633), runs scheduled.py against
# both at once, and stops both. Arguments: messages (1,000,000), window in s (600),
# and the lead in s before the first due time (120: time to schedule them all).
#
#     cargo build --release && benches/peers/scheduled.sh 1000000 600 120
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
ROOT="$(cd "$HERE/../.." && pwd)"
MESSAGES=${1:-1000000}
WINDOW=${2:-600}
LEAD=${3:-120}
EBB="$ROOT/target/release/ebb"
[[ -x "$EBB" ]] || { echo "no $EBB: cargo build --release first" >&2; exit 1; }
DIR=$(mktemp -d /var/tmp/ebb-scheduled.XXXXXX)
EBB_PEER_SCHEDULER=1 "$HERE/activemq/start.sh"
"$EBB" serve --stomp 127.0.0.1:61633 --store "sqlite://$DIR/ebb.db" > "$DIR/ebb.log" 2>&1 &
EBB_PID=$!
cleanup() {
  kill -TERM "$EBB_PID" 2>/dev/null || true
  wait "$EBB_PID" 2>/dev/null || true
  "$HERE/activemq/stop.sh" || true
  rm -rf "$DIR"
}
trap cleanup EXIT
for _ in $(seq 1 100); do
  (exec 3<>/dev/tcp/127.0.0.1/61633) 2>/dev/null && break
  kill -0 "$EBB_PID" 2>/dev/null || { echo "ebb serve exited:" >&2; cat "$DIR/ebb.log" >&2; exit 1; }
  sleep 0.1
done
python3 "$HERE/scheduled.py" --messages "$MESSAGES" --window "$WINDOW" --lead "$LEAD" \
  "ebb=127.0.0.1:61633:$EBB_PID" \
  "activemq=127.0.0.1:61643:$(cat "${EBB_PEER_DIR:-/var/tmp/ebb-activemq}/pid")"
