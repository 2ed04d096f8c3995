#!/usr/bin/env bash
# Stops the ActiveMQ that start.sh started (its pid only): SIGTERM, SIGKILL after 30 s.
set -uo pipefail
DIR=${EBB_PEER_DIR:-/var/tmp/ebb-activemq}
[[ -f "$DIR/pid" ]] || { echo "not running"; exit 0; }
PID=$(cat "$DIR/pid")
kill -TERM "$PID" 2>/dev/null
for _ in $(seq 1 60); do kill -0 "$PID" 2>/dev/null || { rm -f "$DIR/pid"; echo "stopped"; exit 0; }; sleep 0.5; done
kill -KILL "$PID"; rm -f "$DIR/pid"; echo "killed"
