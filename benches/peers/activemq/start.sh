#!/usr/bin/env bash
# Starts ActiveMQ Classic from Debian's package (`apt-get install activemq`; 5.17 on
# Debian 12) as a benchmark peer: activemq.xml beside this script (KahaDB, STOMP on
# 127.0.0.1:61643), a fresh data directory under $EBB_PEER_DIR (/var/tmp/ebb-activemq),
# a 1 GiB heap. Waits until STOMP accepts connections; stop it with stop.sh.
# EBB_PEER_SCHEDULER=1 turns its job scheduler on (schedulerSupport="true", its
# scheduler store under the data directory): the peer of benches/peers/scheduled.py.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
DIR=${EBB_PEER_DIR:-/var/tmp/ebb-activemq}
HOME_DIR=${AMQ_HOME:-/usr/share/activemq}
[[ -f "$HOME_DIR/bin/activemq.jar" ]] || { echo "no ActiveMQ at $HOME_DIR: apt-get install activemq" >&2; exit 1; }
if [[ -f "$DIR/pid" ]] && kill -0 "$(cat "$DIR/pid")" 2>/dev/null; then
  echo "already running, pid $(cat "$DIR/pid")"; exit 0
fi
rm -rf "$DIR/data"; mkdir -p "$DIR/data" "$DIR/tmp" "$DIR/conf"
CONFIG="$HERE/activemq.xml"
if [[ "${EBB_PEER_SCHEDULER:-0}" == 1 ]]; then
  CONFIG="$DIR/conf/activemq-scheduler.xml"
  sed 's/schedulerSupport="false"/schedulerSupport="true"/' "$HERE/activemq.xml" > "$CONFIG"
  grep -q 'schedulerSupport="true"' "$CONFIG" || { echo "cannot turn the scheduler on in $CONFIG" >&2; exit 1; }
fi
# The launcher reads log4j's configuration from activemq.conf: console only.
printf 'log4j.rootLogger=WARN, out\nlog4j.appender.out=org.apache.log4j.ConsoleAppender\nlog4j.appender.out.layout=org.apache.log4j.PatternLayout\nlog4j.appender.out.layout.ConversionPattern=%%d %%-5p %%m%%n\n' > "$DIR/conf/log4j.properties"
cd "$DIR"
nohup java -Xms1g -Xmx1g \
  --add-opens java.base/java.lang=ALL-UNNAMED --add-opens java.base/java.util=ALL-UNNAMED \
  --add-opens java.base/java.util.concurrent=ALL-UNNAMED --add-opens java.base/java.net=ALL-UNNAMED \
  --add-opens java.base/java.security=ALL-UNNAMED --add-opens java.naming/javax.naming.spi=ALL-UNNAMED \
  --add-opens java.rmi/sun.rmi.transport.tcp=ALL-UNNAMED --add-reads=java.xml=java.logging \
  -Dlog4j.configuration="file:$DIR/conf/log4j.properties" \
  -Djava.io.tmpdir="$DIR/tmp" -Dactivemq.home="$HOME_DIR" -Dactivemq.base="$DIR" \
  -Dactivemq.conf="$DIR/conf" -Dactivemq.data="$DIR/data" \
  -jar "$HOME_DIR/bin/activemq.jar" start "xbean:file:$CONFIG?validate=false" \
  > "$DIR/activemq.log" 2>&1 < /dev/null &
echo $! > "$DIR/pid"
for _ in $(seq 1 180); do
  kill -0 "$(cat "$DIR/pid")" 2>/dev/null || { echo "ActiveMQ exited; see $DIR/activemq.log" >&2; tail -20 "$DIR/activemq.log" >&2; exit 1; }
  (exec 3<>/dev/tcp/127.0.0.1/61643) 2>/dev/null && { echo "ActiveMQ up, STOMP 127.0.0.1:61643 (pid $(cat "$DIR/pid"))"; exit 0; }
  sleep 0.5
done
echo "ActiveMQ did not listen on 61643 within 90 s; see $DIR/activemq.log" >&2; exit 1
