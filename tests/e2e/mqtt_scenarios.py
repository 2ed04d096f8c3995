"""End-to-end MQTT scenarios against a real `ebb serve` process, with the paho-mqtt
client (2.x).

Usage: mqtt_scenarios.py EBB_BINARY CONFIG_TOML SCENARIO
The config file names the store and turns the MQTT listener on at port 0; the
broker prints the port it bound. Each scenario starts (and kills) the broker itself,
never leaves one running, and exits non-zero with a message (and the broker's log)
on failure.
"""
import threading
import time

import paho.mqtt.client as mqtt

from scenario import PATIENCE, SCENARIO, fail, kill, start_serve, stop, wait_until

PORT = 0  # set by start()


def start():
    """Starts `ebb serve`; its MQTT listener's port is what the clients use."""
    global PORT
    proc, PORT = start_serve("MQTT on ")
    return proc


class Client:
    """A paho client on its own network thread, recording what it receives."""

    def __init__(self, client_id, clean=True, v5=False):
        protocol = mqtt.MQTTv5 if v5 else mqtt.MQTTv311
        kwargs = {} if v5 else {"clean_session": clean}
        self.c = mqtt.Client(mqtt.CallbackAPIVersion.VERSION2, client_id=client_id, protocol=protocol, **kwargs)
        self.c.max_inflight_messages_set(100)
        self.c.max_queued_messages_set(0)
        self.messages = []
        self.lock = threading.Lock()
        self.connected = threading.Event()
        self.session_present = None
        self.acked = set()
        self.c.on_message = self._message
        self.c.on_connect = self._connect
        self.c.on_publish = self._publish
        self.v5, self.clean = v5, clean

    def _message(self, client, userdata, msg):
        with self.lock:
            self.messages.append((msg.topic, bytes(msg.payload), msg.qos, msg.retain))

    def _connect(self, client, userdata, flags, reason_code, properties):
        if reason_code.is_failure:
            fail(f"CONNECT refused: {reason_code}")
        self.session_present = flags.session_present
        self.connected.set()

    def _publish(self, client, userdata, mid, reason_code, properties):
        with self.lock:
            self.acked.add(mid)

    def connect(self):
        if self.v5:
            props = mqtt.Properties(mqtt.PacketTypes.CONNECT)
            if not self.clean:
                props.SessionExpiryInterval = 3600
            self.c.connect("127.0.0.1", PORT, keepalive=30, clean_start=self.clean, properties=props)
        else:
            self.c.connect("127.0.0.1", PORT, keepalive=30)
        self.c.loop_start()
        self.connected.wait(PATIENCE) or fail("no CONNACK")
        return self

    def subscribe(self, topic, qos):
        done = threading.Event()
        self.c.on_subscribe = lambda *a: done.set()
        self.c.subscribe(topic, qos)
        done.wait(PATIENCE) or fail(f"no SUBACK for {topic}")

    def close(self):
        self.c.disconnect()
        self.c.loop_stop()

    def payloads(self):
        with self.lock:
            return [m[1] for m in self.messages]


def qos_round_trips():
    """QoS 0, 1 and 2 from a 3.1.1 publisher to a 5.0 subscriber of a wildcard at
    QoS 2, and a retained message to a later subscriber."""
    proc = start()
    sub = Client("paho-sub", v5=True).connect()
    sub.subscribe("e2e/#", 2)
    pub = Client("paho-pub").connect()
    for q in (0, 1, 2):
        pub.c.publish(f"e2e/q{q}", f"qos {q}".encode(), qos=q).wait_for_publish(PATIENCE)
    wait_until(lambda: len(sub.messages) == 3) or fail(f"got {sub.messages}")
    got = sorted((t, p, q) for t, p, q, _ in sub.messages)
    want = [("e2e/q0", b"qos 0", 0), ("e2e/q1", b"qos 1", 1), ("e2e/q2", b"qos 2", 2)]
    if got != want:
        fail(f"got {got}, want {want}")
    pub.c.publish("e2e/state", b"ready", qos=1, retain=True).wait_for_publish(PATIENCE)
    late = Client("paho-late").connect()
    late.subscribe("e2e/state", 1)
    wait_until(lambda: len(late.messages) == 1) or fail(f"no retained message: {late.messages}")
    if late.messages[0] != ("e2e/state", b"ready", 1, True):
        fail(f"retained: {late.messages[0]}")
    for c in (sub, pub, late):
        c.close()
    stop(proc)
    print("ok qos_round_trips", flush=True)


def persistent_session():
    """A 3.1.1 persistent session keeps its backlog while away, across a graceful
    restart; it resumes without subscribing again."""
    proc = start()
    dev = Client("paho-device", clean=False).connect()
    dev.subscribe("cmd/paho-device/#", 1)
    dev.close()
    pub = Client("paho-cmd").connect()
    for n in range(100):
        pub.c.publish("cmd/paho-device/set", str(n).encode(), qos=1)
    wait_until(lambda: len(pub.acked) == 100) or fail(f"{len(pub.acked)} of 100 PUBACKed")
    pub.close()
    stop(proc)
    proc = start()
    dev = Client("paho-device", clean=False).connect()
    if not dev.session_present:
        fail("no session present after the restart")
    wait_until(lambda: len(dev.messages) >= 100) or fail(f"{len(dev.messages)} of 100 after the restart")
    if sorted(int(p) for p in dev.payloads()) != list(range(100)):
        fail(f"the backlog: {sorted(dev.payloads())[:10]}...")
    dev.close()
    stop(proc)
    print("ok persistent_session", flush=True)


def sigkill(qos):
    """Publishes at `qos` as fast as the broker acknowledges, to an offline persistent
    session, then SIGKILL: after a restart the session gets every message that was
    acknowledged (PUBACK, or PUBCOMP at QoS 2) before the kill; at QoS 2 none twice."""
    proc = start()
    sub = Client(f"paho-kill-sub-{qos}", clean=False).connect()
    sub.subscribe(f"kill/{qos}/#", qos)
    sub.close()
    pub = Client(f"paho-kill-pub-{qos}").connect()
    mids = {}
    started = time.time()
    n = 0
    while time.time() - started < 3:
        info = pub.c.publish(f"kill/{qos}/m", str(n).encode(), qos=qos)
        mids[info.mid] = n
        n += 1
        if len(mids) - len(pub.acked) > 90:
            time.sleep(0.002)
    with pub.lock:
        acked = {mids[m] for m in pub.acked if m in mids}
    kill(proc)
    pub.c.loop_stop()
    if len(acked) < 100:
        fail(f"only {len(acked)} acknowledged before the kill: the broker is too slow to test")
    proc = start()
    sub = Client(f"paho-kill-sub-{qos}", clean=False).connect()
    last = [len(sub.messages), time.time()]

    def quiet():
        if len(sub.messages) != last[0]:
            last[0], last[1] = len(sub.messages), time.time()
        return time.time() - last[1] > 3

    wait_until(quiet, 120) or fail("the backlog never ended")
    got = [int(p) for p in sub.payloads()]
    missing = sorted(acked - set(got))
    if missing:
        fail(f"{len(missing)} acknowledged messages lost, first {missing[:10]}")
    if qos == 2 and len(got) != len(set(got)):
        fail(f"{len(got) - len(set(got))} delivered twice at QoS 2")
    sub.close()
    stop(proc)
    print(f"{SCENARIO}: {n} published, {len(acked)} acknowledged before SIGKILL, {len(got)} delivered after", flush=True)
    print(f"ok {SCENARIO}", flush=True)


def shared_subscription():
    """5.0 shared subscription: three workers in group `workers` on `jobs/+` get each
    of 300 QoS 1 jobs once between them, with the topic it was published to; a plain
    wildcard subscriber gets all 300."""
    proc = start()
    workers = [Client(f"paho-worker-{k}", v5=True).connect() for k in range(3)]
    for w in workers:
        w.subscribe("$share/workers/jobs/+", 1)
    watcher = Client("paho-watcher").connect()
    watcher.subscribe("jobs/#", 1)
    pub = Client("paho-jobs").connect()
    for n in range(300):
        pub.c.publish(f"jobs/{'ab'[n % 2]}", str(n).encode(), qos=1)
    wait_until(lambda: len(pub.acked) == 300) or fail(f"{len(pub.acked)} of 300 PUBACKed")
    total = lambda: sum(len(w.messages) for w in workers)
    wait_until(lambda: total() >= 300) or fail(f"the workers got {total()} of 300")
    time.sleep(0.5)
    got = sorted(int(p) for w in workers for p in w.payloads())
    if got != list(range(300)):
        fail(f"each job once between the workers: {len(got)} got, {len(set(got))} distinct")
    for w in workers:
        for topic, payload, _, _ in w.messages:
            if topic != f"jobs/{'ab'[int(payload) % 2]}":
                fail(f"job {payload} came on {topic}")
    if sum(1 for w in workers if w.messages) < 2:
        fail(f"one worker got every job: {[len(w.messages) for w in workers]}")
    wait_until(lambda: len(watcher.messages) >= 300) or fail(f"the watcher got {len(watcher.messages)} of 300")
    for c in workers + [watcher, pub]:
        c.close()
    stop(proc)
    print(f"ok shared_subscription: {[len(w.messages) for w in workers]} jobs per worker", flush=True)


def will_and_takeover():
    """A second CONNECT with the same client id takes the session over; the first
    connection's will is published to a watcher of its wildcard topic."""
    proc = start()
    watcher = Client("paho-status").connect()
    watcher.subscribe("status/+", 1)
    first = Client("paho-dev")
    first.c.will_set("status/paho-dev", b"gone", qos=1)
    first.connect()
    second = Client("paho-dev").connect()
    wait_until(lambda: len(watcher.messages) == 1) or fail(f"no will: {watcher.messages}")
    if watcher.messages[0][:3] != ("status/paho-dev", b"gone", 1):
        fail(f"the will: {watcher.messages[0]}")
    wait_until(lambda: not first.c.is_connected()) or fail("the first connection was not closed")
    if not second.c.is_connected():
        fail("the second connection did not keep the session")
    for c in (watcher, second):
        c.close()
    first.c.loop_stop()
    stop(proc)
    print("ok will_and_takeover", flush=True)


def sigkill_qos2_resend():
    """A persistent QoS 2 publisher across SIGKILL: the same paho client connects to
    the restarted broker and resends what was in flight (PUBLISH with DUP where no
    PUBREC came, PUBREL where one did), as its session says; the broker held each
    PUBREC'd message in the store under its packet id, so every message reaches the
    persistent subscriber exactly once."""
    global PORT
    proc = start()
    sub = Client("paho-xo-sub", clean=False).connect()
    sub.subscribe("xo/#", 2)
    sub.close()
    pub = Client("paho-xo-pub", clean=False).connect()
    n, started = 0, time.time()
    while time.time() - started < 3:
        pub.c.publish("xo/m", str(n).encode(), qos=2)
        n += 1
        if n - len(pub.acked) > 90:
            time.sleep(0.002)
    kill(proc)
    pub.c.loop_stop()
    done_before = len(pub.acked)
    proc = start()
    pub.connected.clear()
    pub.c.connect("127.0.0.1", PORT, keepalive=30)
    pub.c.loop_start()
    pub.connected.wait(PATIENCE) or fail("the publisher did not reconnect")
    wait_until(lambda: len(pub.acked) == n, 120) or fail(f"{len(pub.acked)} of {n} completed after the restart")
    sub = Client("paho-xo-sub", clean=False).connect()
    wait_until(lambda: len(sub.messages) >= n, 120) or fail(f"the subscriber got {len(sub.messages)} of {n}")
    time.sleep(1)
    got = [int(p) for p in sub.payloads()]
    if sorted(set(got)) != list(range(n)):
        fail(f"missing: {sorted(set(range(n)) - set(got))[:10]}")
    if len(got) != n:
        fail(f"{len(got) - n} delivered twice")
    pub.close()
    sub.close()
    stop(proc)
    print(f"{SCENARIO}: {n} published, {done_before} completed before SIGKILL, all {n} delivered once after", flush=True)
    print(f"ok {SCENARIO}", flush=True)


SCENARIOS = {
    "sigkill_qos2_resend": sigkill_qos2_resend,
    "shared_subscription": shared_subscription,
    "will_and_takeover": will_and_takeover,
    "qos_round_trips": qos_round_trips,
    "persistent_session": persistent_session,
    "sigkill_qos1": lambda: sigkill(1),
    "sigkill_qos2": lambda: sigkill(2),
}

SCENARIOS[SCENARIO]()
