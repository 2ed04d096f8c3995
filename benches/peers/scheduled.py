#!/usr/bin/env python3
"""Scheduled delivery side by side (issue 32): N persistent 1 KiB messages sent with
ActiveMQ's `AMQ_SCHEDULED_DELAY`, due times spread evenly over the next --window
seconds, to one queue per broker; one consumer per broker (auto ack) receives them.

For each broker given (NAME=HOST:PORT:PID; PID is the broker's process, whose
resident memory is sampled every second from /proc), at the same time on separate
threads: the producer sends with a receipt every 500 messages (each awaited), the
consumer records each message's lateness (received minus the due time the producer
put in its `due-ms` header). Prints per broker: the scheduling rate, peak resident
memory while scheduling and while releasing, lateness p50/p99/max, how many came,
and whether it kept up (all delivered by the end of the window plus --grace s); a
broker that stops delivering for --stall s before the end is reported as stalled.

Standard library only (the STOMP client of sel10.py).

    python3 benches/peers/scheduled.py --messages 1000000 --window 600 \
        ebb=127.0.0.1:61633:$(pgrep -f 'ebb serve') \
        activemq=127.0.0.1:61643:$(cat /var/tmp/ebb-activemq/pid)
"""
import argparse
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sel10 import Stomp  # noqa: E402


def rss_mib(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


class Run:
    def __init__(self, name, host, port, pid, args):
        self.name, self.host, self.port, self.pid, self.args = name, host, int(port), int(pid), args
        self.queue = f"/queue/scheduled.{name}.{int(time.time())}"
        self.sent = 0
        self.sending_s = None
        self.error = None
        self.lateness = []
        self.last_delivery = None
        self.peak_sending = 0.0
        self.peak_releasing = 0.0
        self.done = threading.Event()

    def produce(self, start_ms):
        try:
            producer = Stomp(self.host, self.port)
            body = b"x" * 1024
            n, window_ms = self.args.messages, self.args.window * 1000
            t0 = time.monotonic()
            for i in range(n):
                due = start_ms + self.args.lead * 1000 + i * window_ms // n
                delay = max(0, due - int(time.time() * 1000))
                headers = {"destination": self.queue, "persistent": "true",
                           "AMQ_SCHEDULED_DELAY": str(delay), "due-ms": str(due)}
                if i % 500 == 499 or i == n - 1:
                    headers["receipt"] = f"r{i}"
                producer.send_frame("SEND", headers, body)
                if "receipt" in headers:
                    producer.receipt(headers["receipt"], timeout=300)
                    self.sent = i + 1
            self.sending_s = time.monotonic() - t0
            producer.send_frame("DISCONNECT", {})
        except Exception as e:  # noqa: BLE001 - reported as the broker's failure
            self.error = f"producer: {e}"

    def consume(self, deadline):
        try:
            consumer = Stomp(self.host, self.port)
            consumer.send_frame("SUBSCRIBE", {"destination": self.queue, "id": "1", "ack": "auto",
                                              "activemq.prefetchSize": "1000"})
            while len(self.lateness) < self.args.messages and time.monotonic() < deadline:
                frame = consumer.read_frame(1.0)
                if frame is None:
                    continue
                command, headers, _ = frame
                if command == "ERROR":
                    raise RuntimeError(headers.get("message"))
                if command == "MESSAGE":
                    now = int(time.time() * 1000)
                    self.lateness.append(now - int(headers.get("due-ms", now)))
                    self.last_delivery = time.monotonic()
        except Exception as e:  # noqa: BLE001
            self.error = self.error or f"consumer: {e}"
        finally:
            self.done.set()

    def sample(self):
        while not self.done.is_set():
            rss = rss_mib(self.pid) or 0.0
            if self.sending_s is None:
                self.peak_sending = max(self.peak_sending, rss)
            else:
                self.peak_releasing = max(self.peak_releasing, rss)
            time.sleep(1)


def pct(values, p):
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--messages", type=int, default=1_000_000)
    ap.add_argument("--window", type=int, default=600, help="due times spread over this many s")
    ap.add_argument("--lead", type=int, default=5, help="s before the first due time")
    ap.add_argument("--grace", type=int, default=60, help="s after the window to deliver the rest")
    ap.add_argument("--stall", type=int, default=60, help="s without a delivery that count as stalled")
    ap.add_argument("brokers", nargs="+", help="NAME=HOST:PORT:PID")
    args = ap.parse_args()
    runs = []
    for spec in args.brokers:
        name, _, rest = spec.partition("=")
        host, port, pid = rest.split(":")
        runs.append(Run(name, host, port, pid, args))
    start_ms = int(time.time() * 1000)
    deadline = time.monotonic() + args.lead + args.window + args.grace
    threads = []
    for r in runs:
        for target, a in ((r.produce, (start_ms,)), (r.consume, (deadline,)), (r.sample, ())):
            t = threading.Thread(target=target, args=a, daemon=True)
            t.start()
            threads.append(t)
    for r in runs:
        r.done.wait()
    print(f"{args.messages:,} x 1 KiB scheduled over {args.window} s, one queue each, at the same time")
    for r in runs:
        n = len(r.lateness)
        rate = f"{r.sent / r.sending_s:,.0f} msg/s" if r.sending_s else f"did not finish ({r.sent:,} receipted)"
        late = "none delivered"
        if n:
            late = (f"lateness p50 {pct(r.lateness, 0.5) / 1000:.3f} s, p99 {pct(r.lateness, 0.99) / 1000:.3f} s, "
                    f"max {max(r.lateness) / 1000:.3f} s")
        kept_up = n == args.messages
        stalled = (r.last_delivery is None or time.monotonic() - r.last_delivery > args.stall) and not kept_up
        verdict = "kept up" if kept_up else ("STALLED" if stalled else "fell behind")
        print(f"{r.name:>10}: scheduling {rate}; peak RSS {r.peak_sending:.1f} MiB while scheduling, "
              f"{r.peak_releasing:.1f} MiB while releasing; delivered {n:,} of {args.messages:,}; "
              f"{late}; {verdict}" + (f"; {r.error}" if r.error else ""))


if __name__ == "__main__":
    main()
