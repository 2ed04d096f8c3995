"""End-to-end scenarios against a real `ebb serve` process, with the stomp.py client.

Usage: stomp_scenarios.py EBB_BINARY CONFIG_TOML SCENARIO
The config file names the store; the broker listens on a port it picks. Each
scenario starts (and kills) the broker itself, never leaves one running, and exits
non-zero with a message (and the broker's log) on failure.
"""
import atexit
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time

import stomp

from scenario import EBB, CONFIG, LOG, PATIENCE, PROCS, SCENARIO, fail, kill, kill_all, start_serve, stop, wait_until

PORT = 0  # set by start()


def start():
    """Starts `ebb serve` on a free port (it prints the address it bound) and points
    the clients at it."""
    global PORT
    proc, PORT = start_serve("STOMP on ")
    socket.create_connection(("127.0.0.1", PORT), timeout=5).close()
    return proc


class Collector(stomp.ConnectionListener):
    def __init__(self):
        self.messages = []
        self.receipts = set()
        self.errors = []
        self.lock = threading.Lock()

    def on_message(self, frame):
        with self.lock:
            self.messages.append(frame)

    def on_receipt(self, frame):
        with self.lock:
            self.receipts.add(frame.headers["receipt-id"])

    def on_error(self, frame):
        self.errors.append(frame)


def connect(client_id=None, login=None, passcode=None):
    conn = stomp.Connection12([("127.0.0.1", PORT)], heartbeats=(0, 0))
    listener = Collector()
    conn.set_listener("", listener)
    headers = {"client-id": client_id} if client_id else {}
    conn.connect(login, passcode, wait=True, headers=headers)
    return conn, listener


def bye(conn, listener):
    """DISCONNECT and wait for its receipt: the server has then applied every frame
    before it and let go of the connection's subscriptions (stomp.py does not wait)."""
    conn.disconnect(receipt="bye")
    wait_until(lambda: "bye" in listener.receipts) or fail("no receipt for DISCONNECT")


def durable(conn, topic, name, ack="client-individual"):
    conn.subscribe(topic, id=name, ack=ack, headers={"activemq.subscriptionName": name, "receipt": f"sub-{name}"})


def send_until_killed(proc, producer, p, destination, first, most, stop_after):
    """Receipted persistent sends `first`, `first + 1`, ... (at most `most`, header
    `n`) to `destination`, without waiting, until `stop_after` seconds have passed;
    then SIGKILL of `proc`. Returns how many were sent and the numbers receipted."""
    started = time.time()
    sent = 0
    try:
        for n in range(first, first + most):
            producer.send(destination, f"m{n}", headers={"persistent": "true", "receipt": f"r{n}", "n": str(n)})
            sent += 1
            if time.time() - started > stop_after:
                break
    except Exception:
        pass
    kill(proc)
    time.sleep(0.2)
    with p.lock:
        receipted = {int(r[1:]) for r in p.receipts if int(r[1:]) >= first}
    try:
        producer.disconnect()
    except Exception:
        pass
    return sent, receipted


def data_loss():
    """The ActiveMQ JDBC data loss, through the wire, with SIGKILL."""
    proc = start()
    conn, seen = connect("c1")
    durable(conn, "/topic/orders", "s1")
    wait_until(lambda: "sub-s1" in seen.receipts) or fail("no receipt for SUBSCRIBE")
    bye(conn, seen)
    producer, p = connect()
    producer.send("/topic/orders", "A", headers={"persistent": "true", "receipt": "a"})
    expires = int(time.time() * 1000) + 1000
    producer.send("/topic/orders", "B", headers={"persistent": "true", "expires": str(expires), "receipt": "b"})
    wait_until(lambda: {"a", "b"} <= p.receipts) or fail("no receipts for the sends")
    time.sleep(1.0 + 3 * 0.2 + 0.2)  # B expires, then three expiry periods
    bye(producer, p)
    kill(proc)
    proc = start()
    conn, seen = connect("c1")
    durable(conn, "/topic/orders", "s1")
    wait_until(lambda: len(seen.messages) >= 1) or fail("A was not delivered after the restart")
    time.sleep(0.5)
    bodies = [m.body for m in seen.messages]
    if bodies != ["A"]:
        fail(f"expected exactly ['A'], got {bodies}")
    conn.ack(seen.messages[0].headers["ack"])
    bye(conn, seen)
    stop(proc)


def crash_safety():
    """Up to 50,000 persistent sends with receipts, written without waiting (the
    broker pipelines up to its window of 1,000 frames per connection), SIGKILL at a
    random point, restart: every receipted message is delivered exactly once to the
    durable subscription, in order."""
    proc = start()
    conn, seen = connect("c2")
    durable(conn, "/topic/crash", "d1")
    wait_until(lambda: "sub-d1" in seen.receipts) or fail("no receipt for SUBSCRIBE")
    bye(conn, seen)
    producer, p = connect()
    sent, receipted = send_until_killed(proc, producer, p, "/topic/crash", 0, 50000, random.uniform(0.3, 1.5))
    proc = start()
    conn, seen = connect("c2")
    durable(conn, "/topic/crash", "d1", ack="auto")
    wait_until(lambda: len(seen.messages) >= len(receipted))
    time.sleep(0.5)
    delivered = [int(m.headers["n"]) for m in seen.messages]
    duplicates = len(delivered) - len(set(delivered))
    missing = receipted - set(delivered)
    print(f"crash_safety: sent {sent}, receipted {len(receipted)}, delivered {len(delivered)}", flush=True)
    if missing:
        fail(f"{len(missing)} receipted messages lost, e.g. {sorted(missing)[:5]}")
    if duplicates:
        fail(f"{duplicates} messages delivered twice")
    if delivered != sorted(delivered):
        fail("messages delivered out of order")
    bye(conn, seen)
    stop(proc)


def receipted_nack_crash():
    """200 persistent messages on a queue with a redelivery back-off of 2 s and
    `maximum_redeliveries = 2`, each NACKed with a receipt; every receipt read, then
    SIGKILL. After the restart every message comes back marked redelivered (its
    failure was counted in the store before the RECEIPT), and after two more NACKs
    each, every one is in the dead-letter queue: none is lost, none comes back
    uncounted."""
    count = 200
    proc = start()
    producer, p = connect()
    for n in range(count):
        producer.send("/queue/nacked", f"m{n}", headers={"persistent": "true", "receipt": f"s{n}", "n": str(n)})
    wait_until(lambda: len(p.receipts) == count) or fail("not every SEND was receipted")
    bye(producer, p)
    conn, seen = connect()
    conn.subscribe("/queue/nacked", id="c", ack="client-individual", headers={"activemq.prefetchSize": str(count)})
    wait_until(lambda: len(seen.messages) == count) or fail(f"{len(seen.messages)} of {count} delivered")
    for i, m in enumerate(list(seen.messages)):
        conn.nack(m.headers["ack"], receipt=f"n{i}")
    wait_until(lambda: len(seen.receipts) == count) or fail("not every NACK was receipted")
    kill(proc)
    proc = start()
    conn, seen = connect()
    conn.subscribe("/queue/nacked", id="c", ack="client-individual", headers={"activemq.prefetchSize": str(count)})
    failures = {}
    nacked = 0
    # Each comes back twice more (the 1st and 2nd redelivery), NACKed each time; the
    # third failure moves it to DLQ.nacked.
    while nacked < 2 * count:
        wait_until(lambda: len(seen.messages) > nacked) or fail(f"only {nacked} of {2 * count} redeliveries came")
        with seen.lock:
            m = seen.messages[nacked]
        n = int(m.headers["n"])
        if m.headers.get("redelivered") != "true":
            fail(f"m{n} came back after the restart without redelivered:true: its receipted NACK was lost")
        failures[n] = failures.get(n, 0) + 1
        if failures[n] > 2:
            fail(f"m{n} came back {failures[n]} times: its failures were not all counted")
        conn.nack(m.headers["ack"])
        nacked += 1
    bye(conn, seen)
    conn, seen = connect()
    conn.subscribe("/queue/DLQ.nacked", id="d", ack="auto")
    wait_until(lambda: len(seen.messages) >= count) or fail(f"{len(seen.messages)} of {count} dead-lettered")
    dead = sorted(int(m.headers["n"]) for m in seen.messages)
    if dead != list(range(count)):
        fail(f"the dead-letter queue holds {len(dead)} messages, not each of the {count} once")
    print(f"receipted_nack_crash: {count} NACKs receipted before SIGKILL, {nacked} redeliveries after, {len(dead)} dead-lettered", flush=True)
    bye(conn, seen)
    stop(proc)


def acks_and_transactions():
    """Client-individual acks out of order, a transaction that commits one send and
    aborts another, and cumulative client acks."""
    proc = start()
    conn, seen = connect("c3")
    durable(conn, "/topic/tx", "t1")
    wait_until(lambda: "sub-t1" in seen.receipts) or fail("no receipt for SUBSCRIBE")
    for n in range(1, 4):
        conn.send("/topic/tx", f"m{n}", headers={"persistent": "true"})
    wait_until(lambda: len(seen.messages) == 3) or fail("three messages were not delivered")
    m1, m2, m3 = seen.messages
    conn.ack(m3.headers["ack"])
    conn.ack(m2.headers["ack"])
    bye(conn, seen)
    conn, seen = connect("c3")
    durable(conn, "/topic/tx", "t1")
    wait_until(lambda: len(seen.messages) >= 1) or fail("m1 was not redelivered")
    time.sleep(0.3)
    if [m.body for m in seen.messages] != ["m1"]:
        fail(f"only m1 must come back, got {[m.body for m in seen.messages]}")
    conn.ack(seen.messages[0].headers["ack"])
    tx = conn.begin()
    conn.send("/topic/tx", "committed", headers={"persistent": "true"}, transaction=tx)
    if not wait_until(lambda: len(seen.messages) == 1, 0.3) or len(seen.messages) != 1:
        fail("a transactional send was delivered before COMMIT")
    conn.commit(tx)
    wait_until(lambda: len(seen.messages) == 2) or fail("the committed send was not delivered")
    tx2 = conn.begin()
    conn.send("/topic/tx", "aborted", headers={"persistent": "true"}, transaction=tx2)
    conn.abort(tx2)
    time.sleep(0.3)
    bodies = [m.body for m in seen.messages]
    if bodies != ["m1", "committed"]:
        fail(f"expected ['m1', 'committed'], got {bodies}")
    if seen.errors:
        fail(f"unexpected ERROR frames: {[e.headers for e in seen.errors]}")
    bye(conn, seen)

    # ack:client is cumulative: acking the third message acks the first two as well.
    conn, seen = connect("c4")
    durable(conn, "/topic/cumulative", "k1", ack="client")
    wait_until(lambda: "sub-k1" in seen.receipts) or fail("no receipt for SUBSCRIBE")
    for n in range(1, 5):
        conn.send("/topic/cumulative", f"k{n}", headers={"persistent": "true"})
    wait_until(lambda: len(seen.messages) == 4) or fail("four messages were not delivered")
    conn.ack(seen.messages[2].headers["ack"])
    bye(conn, seen)
    conn, seen = connect("c4")
    durable(conn, "/topic/cumulative", "k1", ack="client")
    wait_until(lambda: len(seen.messages) >= 1) or fail("k4 was not redelivered")
    time.sleep(0.3)
    if [m.body for m in seen.messages] != ["k4"]:
        fail(f"a cumulative ack of k3 must leave only k4, got {[m.body for m in seen.messages]}")
    bye(conn, seen)
    stop(proc)


def auth():
    """With users configured: a wrong passcode is refused with an ERROR; the right one
    (with a colon in it) connects, sends and receives."""
    proc = start()
    refused = stomp.Connection12([("127.0.0.1", PORT)], heartbeats=(0, 0))
    errors = Collector()
    refused.set_listener("", errors)
    try:
        refused.connect("alice", "wrong", wait=True)
        fail("a wrong passcode was accepted")
    except stomp.exception.ConnectFailedException:
        pass
    if not errors.errors or "authentication failed" not in errors.errors[0].headers.get("message", ""):
        fail(f"expected an ERROR saying authentication failed, got {[e.headers for e in errors.errors]}")
    conn, seen = connect(login="alice", passcode="pa:ss")
    conn.subscribe("/topic/secure", id="1", ack="auto", headers={"receipt": "s"})
    wait_until(lambda: "s" in seen.receipts) or fail("no receipt for SUBSCRIBE")
    conn.send("/topic/secure", "hello")
    wait_until(lambda: [m.body for m in seen.messages] == ["hello"]) or fail("the message did not arrive")
    bye(conn, seen)
    stop(proc)


def tls():
    """STOMP over TLS (`--stomp-ssl`): stomp.py trusting the test CA connects, sends
    and receives; one trusting another CA is refused in the handshake."""
    log = open(LOG, "a")
    proc = subprocess.Popen(
        [EBB, "serve", "--config", CONFIG, "--stomp", "127.0.0.1:0", "--stomp-ssl", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    PROCS.append(proc)
    port = None
    for line in proc.stdout:
        if "STOMP over TLS on" in line:
            port = int(line.rsplit(":", 1)[1])
            break
    if port is None:
        fail(f"ebb serve printed no TLS address (exit {proc.poll()})")
    threading.Thread(target=lambda: [log.write(l) for l in proc.stdout], daemon=True).start()

    def over_tls(ca):
        conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0))
        conn.set_ssl(for_hosts=[("127.0.0.1", port)], ca_certs=ca)
        listener = Collector()
        conn.set_listener("", listener)
        conn.connect(wait=True)
        return conn, listener

    conn, seen = over_tls(os.environ["EBB_TEST_TLS_CA"])
    conn.subscribe("/queue/tls.jobs", id="1", ack="auto", headers={"receipt": "s"})
    wait_until(lambda: "s" in seen.receipts) or fail("no receipt for SUBSCRIBE over TLS")
    conn.send("/queue/tls.jobs", "sealed", headers={"persistent": "true"})
    wait_until(lambda: [m.body for m in seen.messages] == ["sealed"]) or fail("the message did not arrive over TLS")
    bye(conn, seen)
    try:
        wrong, _ = over_tls(os.environ["EBB_TEST_TLS_OTHER_CA"])
        fail("a client trusting another CA connected")
    except Exception as e:  # stomp.py raises its own or ssl's error, by version
        if "CERTIFICATE_VERIFY_FAILED" not in repr(e) and "ConnectFailed" not in type(e).__name__:
            fail(f"the wrong CA failed, but not in the handshake: {e!r}")
    stop(proc)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_on(port):
    """Starts `ebb serve --standby` on STOMP port `port` without waiting for it to be
    active; returns the process and a list its output lines are added to."""
    log = open(LOG, "a")
    proc = subprocess.Popen(
        [EBB, "serve", "--standby", "--config", CONFIG, "--stomp", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    PROCS.append(proc)
    lines = []

    def read():
        for line in proc.stdout:
            lines.append(line)
            log.write(line)

    threading.Thread(target=read, daemon=True).start()
    return proc, lines


def failover():
    """Client-side failover, as with ActiveMQ: stomp.py with both brokers in its host
    list. The active broker dies (SIGKILL) with messages waiting; the client
    reconnects (stomp.py tries the hosts in turn), lands on the standby once it has
    taken over, subscribes again and receives every message it had not acked, and
    none it had."""
    port_a, port_b = free_port(), free_port()
    a, a_says = start_on(port_a)
    wait_until(lambda: any("STOMP on" in l for l in a_says)) or fail("the first broker did not start")
    b, b_says = start_on(port_b)
    wait_until(lambda: any("standby:" in l for l in b_says)) or fail("the second broker is not a standby")
    hosts = [("127.0.0.1", port_a), ("127.0.0.1", port_b)]

    producer = stomp.Connection12(hosts, heartbeats=(0, 0))
    p = Collector()
    producer.set_listener("", p)
    producer.connect(wait=True)
    for n in range(100):
        producer.send("/queue/fo.jobs", f"m{n}", headers={"persistent": "true", "receipt": f"r{n}"})
    wait_until(lambda: len(p.receipts) == 100) or fail("not every send was receipted")

    conn = stomp.Connection12(
        hosts,
        heartbeats=(0, 0),
        reconnect_sleep_initial=0.1,
        reconnect_sleep_increase=0.5,
        reconnect_sleep_max=0.5,
        reconnect_attempts_max=100,
    )
    seen = Collector()
    conn.set_listener("", seen)
    conn.connect(wait=True)
    conn.subscribe("/queue/fo.jobs", id="1", ack="client-individual", headers={"activemq.prefetchSize": "10"})
    wait_until(lambda: len(seen.messages) >= 10) or fail("no messages before the failover")
    with seen.lock:
        first = list(seen.messages[:10])
    for m in first:
        conn.ack(m.headers["ack"], receipt=f"ack-{m.body}")
    wait_until(lambda: {f"ack-{m.body}" for m in first} <= seen.receipts) or fail("acks not receipted")
    acked = {m.body for m in first}

    kill(a)
    wait_until(lambda: not conn.is_connected()) or fail("the client did not see the broker die")
    with seen.lock:
        seen.messages.clear()
    # What an application does in its on_disconnected: connect again (stomp.py walks
    # the host list until one answers) and subscribe again. A new connection object:
    # the old one's transport may still be winding down its socket (reusing it can
    # fail with a closed descriptor).
    conn = connect_any(hosts, seen)
    conn.subscribe("/queue/fo.jobs", id="1", ack="client-individual")
    expected = {f"m{n}" for n in range(100)} - acked
    wait_until(lambda: {m.body for m in seen.messages} >= expected)
    got = {m.body for m in seen.messages}
    if got != expected:
        fail(f"after the failover: missing {sorted(expected - got)[:5]}, unexpected {sorted(got - expected)[:5]}")
    if not any("taking over" in l for l in b_says):
        fail("the standby did not say it took over")
    print(f"failover: {len(acked)} acked on the first broker, {len(got)} received from the second", flush=True)
    bye(conn, seen)
    stop(b)


def connect_any(hosts, listener, headers=None, seconds=PATIENCE):
    """A connection to whichever broker of `hosts` is active, tried again until one
    takes it (stomp.py walks the list; its transport may still be winding down the
    last connection)."""
    deadline = time.time() + seconds
    while True:
        conn = stomp.Connection12(hosts, heartbeats=(0, 0), reconnect_attempts_max=1)
        conn.set_listener("", listener)
        try:
            # Not `wait=True`, which waits with no limit: a broker killed between
            # accepting the socket and its CONNECTED can leave it waiting.
            conn.connect(wait=False, headers=headers or {})
            if wait_until(conn.is_connected, 10):
                return conn
            e = "no CONNECTED within 10 s"
        except (stomp.exception.StompException, OSError) as err:
            e = repr(err)
        try:
            conn.disconnect()
        except Exception:
            pass
        if time.time() > deadline:
            fail(f"no broker took the client: {e}")
        time.sleep(0.05)


class Acker(Collector):
    """A consumer that acks every message with a receipt, recording under `lock` each
    delivery `(body, time)` in `delivered` and the time each ack was receipted in
    `acked` (body -> time); `lost` once its connection dropped."""

    def __init__(self, lock, delivered, acked):
        super().__init__()
        self.conn, self.lost = None, False
        self.guard, self.delivered, self.acked = lock, delivered, acked

    def on_message(self, frame):
        with self.guard:
            self.delivered.append((frame.body, time.time()))
        try:
            self.conn.ack(frame.headers["ack"], receipt=f"ack-{frame.body}")
        except (stomp.exception.StompException, OSError):
            # The broker went away under this connection (its socket may be closed
            # already): the message comes again on the next one.
            pass

    def on_receipt(self, frame):
        super().on_receipt(frame)
        rid = frame.headers["receipt-id"]
        if rid.startswith("ack-"):
            with self.guard:
                self.acked.setdefault(rid[4:], time.time())

    def on_disconnected(self):
        self.lost = True


def failover_during_sends():
    """SIGKILL of the active broker in the middle of receipted sends to a topic with
    two durable subscriptions, the clients failing over with a host list:
    - "late" acked the first 10 messages and went offline before the sends;
    - "live" stays subscribed, acks each message with a receipt, and fails over.
    The producer sends each message again until it is receipted, as a client with
    failover does. After the takeover "late" comes back at its mark: it receives
    every message after it, each receipted-first-time one exactly once, and none of
    the 10 it had acked; "live" misses none and gets none again after its ack was
    receipted. It prints the time from the kill to the first RECEIPT from the
    standby (benches/ha_takeover.py measures it by lease length)."""
    ports = [free_port(), free_port()]
    hosts = [("127.0.0.1", p) for p in ports]
    a, a_says = start_on(ports[0])
    wait_until(lambda: any("STOMP on" in l for l in a_says)) or fail("the first broker did not start")
    b, b_says = start_on(ports[1])
    wait_until(lambda: any("standby:" in l for l in b_says)) or fail("the second broker is not a standby")
    topic = "/topic/fo.events"

    # "late": a durable subscription that acks m0..m9 and goes offline.
    late = Collector()
    conn = connect_any(hosts, late, {"client-id": "fo-late"})
    durable(conn, topic, "late", ack="client")
    wait_until(lambda: "sub-late" in late.receipts) or fail("no receipt for the late SUBSCRIBE")
    first = Collector()
    sender = connect_any(hosts, first)
    for n in range(10):
        sender.send(topic, f"m{n}", headers={"persistent": "true", "receipt": f"m{n}"})
    wait_until(lambda: len(late.messages) == 10) or fail(f"late got {len(late.messages)} of m0..m9")
    conn.ack(late.messages[-1].headers["ack"], receipt="late-acked")  # "client": acks m0..m9
    wait_until(lambda: "late-acked" in late.receipts) or fail("no receipt for late's ACK")
    bye(conn, late)
    bye(sender, first)

    lock = threading.Lock()
    receipts = {}  # body -> (attempts, time of its receipt, port that gave it)
    live_got = []  # (body, time)
    live_acked = {}  # body -> time its ack was receipted
    produced = threading.Event()
    subscribed = threading.Event()  # "live" exists (its SUBSCRIBE was receipted)

    def produce():
        p, port = Collector(), None
        conn = connect_any(hosts, p)
        for n in range(10, 410):
            body, attempts = f"m{n}", 0
            while True:
                attempts += 1
                rid = f"{body}.{attempts}"
                try:
                    port = conn.transport.current_host_and_port[1]
                    conn.send(topic, body, headers={"persistent": "true", "receipt": rid})
                    if wait_until(lambda: rid in p.receipts, 2):
                        with lock:
                            receipts[body] = (attempts, time.time(), port)
                        break
                except (stomp.exception.StompException, OSError):
                    # The broker died under this connection: its socket may be closed
                    # already ("Bad file descriptor"). Send again on a new one.
                    pass
                try:
                    conn.disconnect()
                except Exception:
                    pass
                p = Collector()
                conn = connect_any(hosts, p)
        bye(conn, p)
        produced.set()

    def live():
        def missing():
            with lock:
                return set(receipts) - {body for body, _ in live_got}

        while True:
            a = Acker(lock, live_got, live_acked)
            a.conn = connect_any(hosts, a, {"client-id": "fo-live"})
            try:
                durable(a.conn, topic, "live")
            except (stomp.exception.StompException, OSError):
                continue  # the broker died under it: connect again
            if wait_until(lambda: "sub-live" in a.receipts, 10):
                subscribed.set()
            while not a.lost and (not produced.is_set() or missing()):
                time.sleep(0.05)
            if not a.lost:
                bye(a.conn, a)
                return

    # "live" subscribes before the sends: it is a durable subscription from here on.
    threads = [threading.Thread(target=live, daemon=True)]
    threads[0].start()
    wait_until(subscribed.is_set) or fail("the live durable subscription was not receipted")
    threads.append(threading.Thread(target=produce, daemon=True))
    threads[1].start()
    wait_until(lambda: len(receipts) >= 100) or fail(f"only {len(receipts)} sends receipted before the kill")
    killed_at = time.time()
    kill(a)
    wait_until(lambda: any("taking over" in l for l in b_says)) or fail("the standby did not take over")
    threads[1].join(120)
    produced.is_set() or fail(f"the producer did not finish: {len(receipts)} of 400 receipted")
    threads[0].join(60)

    with lock:
        after = sorted(t for _, t, port in receipts.values() if port == ports[1])
        retried = {body for body, (attempts, _, _) in receipts.items() if attempts > 1}
        live_bodies = [body for body, _ in live_got]
        # A send tried again may be stored twice (its first try was stored and the
        # broker died before the RECEIPT): its second copy is another message.
        live_again = [body for body, at in live_got
                      if body in live_acked and at > live_acked[body] and body not in retried]
    after or fail("no RECEIPT came from the standby")
    lost_live = set(receipts) - set(live_bodies)
    lost_live and fail(f"live: {len(lost_live)} receipted messages never delivered, e.g. {sorted(lost_live)[:5]}")
    live_again and fail(f"live: {len(live_again)} delivered again after their ack was receipted, e.g. {live_again[:5]}")

    # "late" comes back: m10.. exactly once (a retried send at least once), none of m0..m9.
    late = Collector()
    conn = connect_any(hosts, late, {"client-id": "fo-late"})
    # A prefetch over the backlog, so it all comes without acks (durable default 100).
    conn.subscribe(topic, id="late", ack="client-individual",
                   headers={"activemq.subscriptionName": "late", "activemq.prefetchSize": "1000"})
    wait_until(lambda: set(receipts) <= {m.body for m in late.messages})
    time.sleep(0.5)  # anything more would come now
    with late.lock:
        bodies = [m.body for m in late.messages]
    counts = {body: bodies.count(body) for body in set(bodies)}
    early = sorted(body for body in counts if int(body[1:]) < 10)
    early and fail(f"late: got {early[:5]} again, behind its mark")
    missed = set(receipts) - set(counts)
    missed and fail(f"late: {len(missed)} receipted messages missing, e.g. {sorted(missed)[:5]}")
    twice = sorted(body for body, c in counts.items() if c > 1 and body not in retried)
    twice and fail(f"late: {len(twice)} messages receipted at the first try came twice, e.g. {twice[:5]}")
    unknown = set(counts) - set(receipts)
    unknown and fail(f"late: got messages never sent: {sorted(unknown)[:5]}")
    print(
        f"failover_during_sends: {len(receipts)} receipted ({len(retried)} sent again), "
        f"first RECEIPT from the standby {1000 * (after[0] - killed_at):.0f} ms after the kill; "
        f"late got {len(bodies)} after its mark, live {len(live_bodies)} deliveries",
        flush=True,
    )
    bye(conn, late)
    stop(b)


PER_CYCLE = 5  # receipts each broker gives before it is killed


def failover_cycles():
    """Twenty takeovers under load: the active broker is killed (SIGKILL), the
    standby takes over, the dead one comes back as a standby, twenty times, while a
    producer sends receipted persistent messages and a consumer acks what it gets,
    both failing over with a host list. No receipted message may be lost, and no
    message may be delivered again after its ack was receipted."""
    ports = [free_port(), free_port()]
    hosts = [("127.0.0.1", p) for p in ports]
    procs = [start_on(ports[0])]
    wait_until(lambda: any("STOMP on" in l for l in procs[0][1])) or fail("the first broker did not start")
    procs.append(start_on(ports[1]))
    wait_until(lambda: any("standby:" in l for l in procs[1][1])) or fail("the second is not a standby")
    active = 0
    running = True
    receipted, unreceipted = set(), 0
    delivered = []  # (body, time)
    acked = {}  # body -> time its ack was receipted
    lock = threading.Lock()
    produced = threading.Event()  # the producer has stopped: `receipted` is final
    errors = []  # what the producer's sends raised, for a failure message

    def produce():
        nonlocal unreceipted
        p = Collector()
        conn = connect_any(hosts, p)
        n = 0
        while running:
            n += 1
            body = f"c{n}"
            try:
                conn.send("/queue/cycles", body, headers={"persistent": "true", "receipt": body})
                if wait_until(lambda: body in p.receipts, 2):
                    with lock:
                        receipted.add(body)
                    continue
            except Exception as e:  # the socket of a killed broker: try the other
                errors.append(repr(e))
            unreceipted += 1
            try:
                conn.disconnect()
            except Exception:
                pass
            p = Collector()
            conn = connect_any(hosts, p)
        produced.set()

    def consume():
        while not produced.is_set() or len(receipted - {b for b, _ in delivered}) > 0:
            a = Acker(lock, delivered, acked)
            a.conn = connect_any(hosts, a)
            try:
                a.conn.subscribe("/queue/cycles", id="1", ack="client-individual")
            except (stomp.exception.StompException, OSError):
                continue  # the broker died under it: connect again
            while not a.lost and (not produced.is_set() or len(receipted - {b for b, _ in delivered}) > 0):
                time.sleep(0.05)
            if not a.lost:
                bye(a.conn, a)
                return

    threads = [threading.Thread(target=produce, daemon=True), threading.Thread(target=consume, daemon=True)]
    for t in threads:
        t.start()
    for cycle in range(20):
        # Every kill lands under load: the broker about to die has receipted
        # messages of its own first (a slow machine gets the time it needs).
        mark = len(receipted)
        wait_until(lambda: len(receipted) >= mark + PER_CYCLE) or fail(
            f"cycle {cycle}: the active broker receipted {len(receipted) - mark} messages in 30 s "
            f"(producer alive: {threads[0].is_alive()}, its last error: {errors[-1:]})")
        time.sleep(0.2)
        proc, says = procs[active]
        kill(proc)
        other = 1 - active
        took = time.time()
        wait_until(lambda: any("taking over" in l for l in procs[other][1])) or fail(f"cycle {cycle}: no takeover")
        # The dead one comes back as the standby.
        procs[active] = start_on(ports[active])
        wait_until(lambda: any("standby:" in l for l in procs[active][1])) or fail(f"cycle {cycle}: not a standby")
        active = other
    time.sleep(0.4)
    running = False
    threads[0].join(30)
    threads[1].join(60)
    with lock:
        got = {b for b, _ in delivered}
        lost = receipted - got
        again = [b for b, at in delivered if b in acked and at > acked[b]]
    print(f"failover_cycles: 20 takeovers, {len(receipted)} receipted, {unreceipted} not receipted, "
          f"{len(delivered)} deliveries of {len(got)} messages, {len(acked)} acks receipted", flush=True)
    if lost:
        fail(f"{len(lost)} receipted messages lost, e.g. {sorted(lost)[:5]}")
    if again:
        fail(f"{len(again)} messages delivered again after their ack was receipted, e.g. {again[:5]}")
    if len(receipted) < 20 * PER_CYCLE:
        fail(f"only {len(receipted)} messages were receipted: the load did not run")
    for proc, _ in procs:
        if proc.poll() is None:
            kill(proc)


def request_reply():
    """Request/reply with temporary queues (issue 33): 10 requesters, each subscribed
    to its own `/temp-queue/replies`, send 100 requests each (persistent, `reply-to:
    /temp-queue/replies`, a `correlation-id`) through one worker queue; the worker
    SENDs each reply to the request's `reply-to` as it came. Every requester gets
    exactly its own 100 replies (none lost, none misrouted), and every `reply-to` the
    worker saw names a requester's own queue (`/remote-temp-queue/...`). After the
    requesters disconnect, a SEND to one of their reply queues gets an ERROR. The
    broker then stops gracefully; the Rust test checks the store keeps no row of a
    temporary queue."""
    proc = start()
    REQUESTERS, PER = 10, 100
    worker, worker_listener = connect()
    seen_reply_to = set()

    class Worker(stomp.ConnectionListener):
        def on_message(self, frame):
            to = frame.headers["reply-to"]
            seen_reply_to.add(to)
            worker.send(to, "re:" + frame.body, headers={
                "correlation-id": frame.headers["correlation-id"], "persistent": "true"})

    worker.set_listener("worker", Worker())
    worker.subscribe("/queue/rr.work", id="w", ack="auto", headers={"receipt": "w"})
    wait_until(lambda: "w" in worker_listener.receipts) or fail("no receipt for the worker")
    requesters = []
    for r in range(REQUESTERS):
        conn, listener = connect()
        conn.subscribe("/temp-queue/replies", id="r", ack="auto", headers={"receipt": "r"})
        wait_until(lambda: "r" in listener.receipts) or fail("no receipt for a requester")
        requesters.append((conn, listener))
    for n in range(PER):
        for r, (conn, _) in enumerate(requesters):
            conn.send("/queue/rr.work", f"{r}-{n}", headers={
                "reply-to": "/temp-queue/replies", "correlation-id": f"{r}-{n}", "persistent": "true"})
    for r, (conn, listener) in enumerate(requesters):
        wait_until(lambda: len(listener.messages) >= PER) or fail(
            f"requester {r} got {len(listener.messages)} of {PER} replies")
        got = sorted(m.headers["correlation-id"] for m in listener.messages)
        want = sorted(f"{r}-{n}" for n in range(PER))
        if got != want:
            fail(f"requester {r} got replies {got[:5]}..., not its own {want[:5]}...")
        if any(m.body != "re:" + m.headers["correlation-id"] for m in listener.messages):
            fail(f"requester {r} got a reply with the wrong body")
    if len(seen_reply_to) != REQUESTERS or not all(
            t.startswith("/remote-temp-queue/") and t.endswith(".replies") for t in seen_reply_to):
        fail(f"reply-to as the worker saw it: {sorted(seen_reply_to)}")
    for conn, listener in requesters:
        bye(conn, listener)
    worker.remove_listener("worker")
    # The requesters are gone: a send to one of their queues is refused.
    gone = sorted(seen_reply_to)[0]
    worker.send(gone, "late", headers={"receipt": "late"})
    wait_until(lambda: worker_listener.errors) or fail(f"no ERROR for a send to {gone}")
    error = worker_listener.errors[0]
    if error.headers.get("error-code") != "invalid-destination":
        fail(f"the ERROR for a send to {gone}: {error.headers}")
    print(f"request_reply: {REQUESTERS * PER} requests, every reply to its requester", flush=True)
    stop(proc)


def virtual_topic():
    """Virtual topic (issue 33): three consumer groups of `/topic/VirtualTopic.Orders`
    (`/queue/Consumer.<G>.VirtualTopic.Orders`), two consumers each. 10,000
    persistent receipted sends; group C is offline for the first half (created by its
    first subscription, then disconnected) and gets its backlog when it comes back.
    Each group gets every message exactly once, over both its consumers. Then SIGKILL
    during more receipted sends with every group offline, and a restart: each group
    gets every receipted message, none twice."""
    TOPIC = "/topic/VirtualTopic.Orders"
    N = 10000

    def queue(g):
        return f"/queue/Consumer.{g}.VirtualTopic.Orders"

    def join(g, i, ack="auto"):
        conn, listener = connect()
        conn.subscribe(queue(g), id=f"{g}{i}", ack=ack,
                       headers={"receipt": f"sub-{g}{i}", "activemq.prefetchSize": "50"})
        wait_until(lambda: f"sub-{g}{i}" in listener.receipts) or fail(f"no receipt for {g}{i}")
        return conn, listener

    proc = start()
    groups = {g: [join(g, i) for i in range(2)] for g in "AB"}
    for conn, listener in [join("C", i) for i in range(2)]:
        bye(conn, listener)
    producer, p = connect()
    for n in range(N):
        if n == N // 2:
            groups["C"] = [join("C", i) for i in range(2)]
        producer.send(TOPIC, f"m{n}", headers={"persistent": "true", "receipt": f"r{n}", "n": str(n)})
    wait_until(lambda: len(p.receipts) >= N) or fail(f"{len(p.receipts)} of {N} sends receipted")
    for g, members in groups.items():
        def total():
            return sum(len(listener.messages) for _, listener in members)
        wait_until(lambda: total() >= N) or fail(f"group {g} got {total()} of {N}")
        time.sleep(0.3)
        got = [int(m.headers["n"]) for _, listener in members for m in listener.messages]
        if sorted(got) != list(range(N)):
            fail(f"group {g}: {len(got)} deliveries, {len(set(got))} distinct of {N}")
        spread = [len(listener.messages) for _, listener in members]
        if min(spread) == 0:
            fail(f"group {g}: one consumer got nothing ({spread})")
        print(f"virtual_topic: group {g} got {N} once each, spread {spread}", flush=True)
        for conn, listener in members:
            bye(conn, listener)
    # SIGKILL during sends, every group offline.
    sent, receipted = send_until_killed(proc, producer, p, TOPIC, N, 5000, random.uniform(0.3, 1.0))
    proc = start()
    after = {}
    for g in "ABC":
        conn, listener = join(g, 0)
        wait_until(lambda: len(listener.messages) >= len(receipted))
        time.sleep(0.5)
        after[g] = [int(m.headers["n"]) for m in listener.messages]
        missing = receipted - set(after[g])
        if missing:
            fail(f"group {g}: {len(missing)} receipted messages lost after SIGKILL, e.g. {sorted(missing)[:5]}")
        if len(after[g]) != len(set(after[g])):
            fail(f"group {g}: a message delivered twice after the restart")
        bye(conn, listener)
    # Beyond the receipted ones, a group may hold a message another lacks: the
    # copies are separate sends unless `transacted_send` (the Rust tests prove that).
    counts = {g: len(got) for g, got in after.items()}
    print(f"virtual_topic: SIGKILL after {sent} sends, {len(receipted)} receipted, the groups got {counts}", flush=True)
    stop(proc)


{
    "virtual_topic": virtual_topic,
    "request_reply": request_reply,
    "failover_cycles": failover_cycles,
    "failover_during_sends": failover_during_sends,
    "failover": failover,
    "tls": tls,
    "data_loss": data_loss,
    "crash_safety": crash_safety,
    "receipted_nack_crash": receipted_nack_crash,
    "acks_and_transactions": acks_and_transactions,
    "auth": auth,
}[SCENARIO]()
print(f"ok {SCENARIO}", flush=True)
