#!/usr/bin/env python3
"""SEL-10 side by side: a selector consumer on a queue whose matching messages sit
behind a backlog of messages it does not match.

For each broker given (NAME=HOST:PORT), on a fresh queue: send --backlog persistent
messages with `kind:video` (a receipt every 200, each awaited), then 3 with
`kind:image`; then SUBSCRIBE with `selector:kind = 'image'`, ack client-individual,
prefetch 5, and wait at most --timeout seconds for the three. Prints, per broker, the
time from SUBSCRIBE to each match and whether any non-matching message was delivered,
then the ratio of the times to the third match. Nothing is consumed but the three.

Standard library only (TCP_NODELAY set: without it every receipted batch waits for
Nagle's algorithm).

    python3 benches/peers/sel10.py --backlog 10000 ebb=127.0.0.1:61633 activemq=127.0.0.1:61643
"""
import argparse
import socket
import sys
import time


class Stomp:
    def __init__(self, host, port, login=None, passcode=None):
        self.sock = socket.create_connection((host, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
        headers = {"accept-version": "1.2", "host": "/", "heart-beat": "0,0"}
        if login:
            headers.update(login=login, passcode=passcode)
        self.send_frame("CONNECT", headers)
        frame = self.read_frame(30)
        if frame is None or frame[0] != "CONNECTED":
            raise RuntimeError(f"CONNECT refused: {frame}")

    def send_frame(self, command, headers, body=b""):
        lines = [command] + [f"{k}:{v}" for k, v in headers.items()]
        self.sock.sendall(("\n".join(lines) + "\n\n").encode() + body + b"\0")

    def read_frame(self, timeout):
        """(command, headers, body), or None after `timeout` s of silence."""
        deadline = time.monotonic() + timeout
        while True:
            while self.buf.startswith(b"\n") or self.buf.startswith(b"\r\n"):
                self.buf = self.buf.lstrip(b"\r\n")
            end = self.buf.find(b"\0")
            if end >= 0:
                raw, self.buf = self.buf[:end], self.buf[end + 1:]
                head, _, body = raw.partition(b"\n\n")
                lines = head.decode().split("\n")
                headers = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers.setdefault(k, v)
                return lines[0], headers, body
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return None
            if not chunk:
                raise RuntimeError("connection closed")
            self.buf += chunk

    def receipt(self, rid, timeout=60):
        while True:
            frame = self.read_frame(timeout)
            if frame is None:
                raise RuntimeError(f"no RECEIPT {rid} in {timeout} s")
            if frame[0] == "ERROR":
                raise RuntimeError(f"ERROR: {frame[1].get('message')}")
            if frame[0] == "RECEIPT" and frame[1].get("receipt-id") == rid:
                return


def run(name, host, port, backlog, timeout, queue, login, passcode):
    producer = Stomp(host, port, login, passcode)
    body = b"x" * 1024
    started = time.monotonic()
    for i in range(backlog):
        headers = {"destination": queue, "persistent": "true", "kind": "video"}
        last = i == backlog - 1
        if i % 200 == 199 or last:
            headers["receipt"] = f"v{i}"
        producer.send_frame("SEND", headers, body)
        if "receipt" in headers:
            producer.receipt(headers["receipt"])
    for i in range(3):
        producer.send_frame("SEND", {"destination": queue, "persistent": "true",
                                     "kind": "image", "receipt": f"i{i}"}, f"img{i + 1}".encode())
        producer.receipt(f"i{i}")
    filled = time.monotonic() - started
    consumer = Stomp(host, port, login, passcode)
    t0 = time.monotonic()
    consumer.send_frame("SUBSCRIBE", {"destination": queue, "id": "1", "ack": "client-individual",
                                      "activemq.prefetchSize": "5", "selector": "kind = 'image'",
                                      "receipt": "s1"})
    times, wrong = [], 0
    deadline = t0 + timeout
    while len(times) < 3:
        frame = consumer.read_frame(max(0.0, deadline - time.monotonic()))
        if frame is None:
            break
        command, headers, _ = frame
        if command == "ERROR":
            raise RuntimeError(f"{name}: ERROR {headers.get('message')}")
        if command != "MESSAGE":
            continue
        if headers.get("kind") == "image":
            times.append(time.monotonic() - t0)
        else:
            wrong += 1
        consumer.send_frame("ACK", {"id": headers.get("ack", "")})
    consumer.send_frame("DISCONNECT", {"receipt": "bye"})
    producer.send_frame("DISCONNECT", {"receipt": "bye"})
    shown = ", ".join(f"{t:.2f} s" for t in times) or "none"
    print(f"{name:>10}: backlog {backlog} filled in {filled:.1f} s; matches received: "
          f"{len(times)} of 3 ({shown}) within {timeout:.0f} s; non-matching delivered: {wrong}",
          flush=True)
    return times[-1] if len(times) == 3 else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("brokers", nargs="+", help="NAME=HOST:PORT, in the order to run them")
    ap.add_argument("--backlog", type=int, default=10000, help="non-matching messages ahead (10000)")
    ap.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the matches (60)")
    ap.add_argument("--login")
    ap.add_argument("--passcode")
    args = ap.parse_args()
    queue = f"/queue/SEL10-{int(time.time())}"
    results = {}
    for spec in args.brokers:
        name, _, addr = spec.partition("=")
        host, _, port = addr.rpartition(":")
        results[name] = run(name, host, int(port), args.backlog, args.timeout, queue,
                            args.login, args.passcode)
    names = list(results)
    if len(names) >= 2:
        a, b = results[names[0]], results[names[1]]
        if a is not None and b is not None:
            print(f"time to the third match, {names[1]} / {names[0]}: {b / a:.1f}x")
        else:
            for n in names:
                if results[n] is None:
                    print(f"{n} did not deliver the three matches within {args.timeout:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
