#!/usr/bin/env bash
# Makes RabbitMQ on this machine speak STOMP on 127.0.0.1:61623 (not 61613, Ebb's
# default), for the RabbitMQ rows of `cargo bench --bench queues` and `--bench wire`.
# Idempotent: run it as often as you like; it says what it checks and what it changes.
# (The node's open-files limit is left as it is: `wire`'s 10,000 idle connections need
# one above about 11,200, and the bench skips that row, saying so, when it is lower.)
#
# What it does, in order:
#   1. checks that a RabbitMQ node answers (`rabbitmqctl status`); starts it with
#      `service rabbitmq-server start` if it does not;
#   2. if the STOMP plugin is not running on 127.0.0.1:61623: tells the running node to
#      listen there (application env of rabbitmq_stomp, kept across the plugin's load),
#      then enables the plugin (`rabbitmq-plugins enable rabbitmq_stomp`, which also
#      records it in /etc/rabbitmq/enabled_plugins); a plugin already running on
#      another port is stopped and started again on this one;
#   3. writes `stomp.listeners.tcp.1 = 127.0.0.1:61623` into the configuration file
#      (/etc/rabbitmq/rabbitmq.conf, or $RABBITMQ_CONFIG_FILE) so a restarted node
#      listens there too. The line goes in only once the plugin is enabled: a node
#      refuses to boot on a stomp.* key whose plugin is off (disable the plugin and you
#      must remove the line);
#   4. checks that 127.0.0.1:61623 accepts a STOMP CONNECT as guest/guest.
# It needs root (it writes /etc/rabbitmq and runs rabbitmqctl); it re-runs itself under
# sudo when started as another user. Nothing else is changed: no user, vhost or queue.
set -euo pipefail

HOST=127.0.0.1
PORT=${EBB_RABBITMQ_STOMP_PORT:-61623}
CONF=${RABBITMQ_CONFIG_FILE:-/etc/rabbitmq/rabbitmq.conf}
LINE="stomp.listeners.tcp.1 = $HOST:$PORT"

say() { echo "rabbitmq-stomp: $*"; }

if [ "$(id -u)" -ne 0 ]; then
    say "not root: running again under sudo"
    exec sudo -E "$0" "$@"
fi

listening() { ss -Hltn "sport = :$PORT" | grep -q "$HOST:$PORT"; }

# 1. A running node.
if ! rabbitmqctl -q status >/dev/null 2>&1; then
    say "no RabbitMQ node answers: starting it (service rabbitmq-server start)"
    service rabbitmq-server start
    rabbitmqctl -q wait --timeout 120 /var/run/rabbitmq/pid >/dev/null 2>&1 || true
    rabbitmqctl -q await_startup >/dev/null
fi
say "RabbitMQ $(rabbitmqctl -q version) is running"

# 2. The plugin, listening on $HOST:$PORT in the running node.
ENV="[{\"$HOST\", $PORT}]"
if listening; then
    say "STOMP already listens on $HOST:$PORT: nothing to change in the running node"
else
    running=$(rabbitmqctl -q eval 'lists:keymember(rabbitmq_stomp, 1, application:which_applications()).')
    say "telling the node to listen for STOMP on $HOST:$PORT"
    if [ "$running" = "true" ]; then
        say "the STOMP plugin runs on another port: restarting it on $HOST:$PORT"
        rabbitmqctl -q eval "ok = application:stop(rabbitmq_stomp), ok = application:set_env(rabbitmq_stomp, tcp_listeners, $ENV, [{persistent, true}]), ok = application:start(rabbitmq_stomp)." >/dev/null
    else
        rabbitmqctl -q eval "application:set_env(rabbitmq_stomp, tcp_listeners, $ENV, [{persistent, true}])." >/dev/null
        say "enabling the plugin (rabbitmq-plugins enable rabbitmq_stomp)"
        rabbitmq-plugins -q enable rabbitmq_stomp
    fi
fi

# 3. The configuration file, for the next boot.
if grep -qE '^[[:space:]]*stomp\.listeners\.tcp\.1[[:space:]]*=' "$CONF" 2>/dev/null; then
    if grep -qxF "$LINE" "$CONF"; then
        say "$CONF already has: $LINE"
    else
        say "$CONF: replacing the stomp.listeners.tcp.1 line with: $LINE"
        sed -i -E "s|^[[:space:]]*stomp\.listeners\.tcp\.1[[:space:]]*=.*|$LINE|" "$CONF"
    fi
else
    say "$CONF: adding: $LINE"
    printf '%s\n' "$LINE" >>"$CONF"
fi

# 4. A STOMP CONNECT answered with CONNECTED.
for _ in $(seq 1 50); do
    listening && break
    sleep 0.2
done
exec 3<>"/dev/tcp/$HOST/$PORT"
printf 'CONNECT\naccept-version:1.2\nhost:/\nlogin:guest\npasscode:guest\n\n\0' >&3
if timeout 5 head -c 9 <&3 | grep -q CONNECTED; then
    say "OK: STOMP on $HOST:$PORT answers CONNECTED (login guest/guest)"
else
    say "FAILED: $HOST:$PORT did not answer CONNECT with CONNECTED"
    exit 1
fi
exec 3<&-
