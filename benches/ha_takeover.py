"""Takeover time of a standby on PostgreSQL: SIGKILL of the active broker -> the
first RECEIPT from the new active one, for several lease lengths.

Usage: python benches/ha_takeover.py EBB_BINARY POSTGRES_URL [LEASE_MS ...]
(default leases 2000 5000 20000, each renewed every lease/5 ms). Needs stomp.py.
Each run gets a schema of its own (dropped by the next `.ci/run`, named
ebb_bench_ha_<pid>_<lease>). Prints one line per lease and a Markdown row.
"""
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

import stomp

EBB, URL = sys.argv[1], sys.argv[2]
LEASES = [int(x) for x in sys.argv[3:]] or [2000, 5000, 20000]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(config, port, says):
    proc = subprocess.Popen(
        [EBB, "serve", "--standby", "--config", config, "--stomp", f"127.0.0.1:{port}"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    threading.Thread(target=lambda: [says.append(l) for l in proc.stdout], daemon=True).start()
    return proc


def receipted(port, n):
    """One receipted persistent SEND on a new connection; True if its RECEIPT came."""
    try:
        conn = stomp.Connection12([("127.0.0.1", port)], heartbeats=(0, 0), reconnect_attempts_max=1)
        got = threading.Event()

        class L(stomp.ConnectionListener):
            def on_receipt(self, frame):
                got.set()

        conn.set_listener("", L())
        conn.connect(wait=True)
        conn.send("/queue/bench.ha", f"m{n}", headers={"persistent": "true", "receipt": "r"})
        ok = got.wait(1)
        conn.disconnect()
        return ok
    except Exception:
        return False


def wait_for(says, text, seconds=60):
    deadline = time.time() + seconds
    while time.time() < deadline:
        if any(text in l for l in says):
            return
        time.sleep(0.01)
    sys.exit(f"`{text}` never printed")


rows = []
for lease in LEASES:
    renew = lease // 5
    config = os.path.join(tempfile.mkdtemp(), "ebb.toml")
    with open(config, "w") as f:
        f.write(f'[store]\nurl = "{URL}"\nschema = "ebb_bench_ha_{os.getpid()}_{lease}"\n'
                f'[ha]\nmode = "shared-store"\nlease_ms = {lease}\nrenew_ms = {renew}\n')
    pa, pb = free_port(), free_port()
    a_says, b_says = [], []
    a = start(config, pa, a_says)
    wait_for(a_says, "STOMP on")
    b = start(config, pb, b_says)
    wait_for(b_says, "standby:")
    for n in range(20):
        receipted(pa, n) or sys.exit("the active broker does not receipt")
    time.sleep(renew / 1000 * 1.5)  # anywhere in a renewal period
    killed = time.time()
    a.send_signal(signal.SIGKILL)
    a.wait()
    n = 0
    while not receipted(pb, 1000 + n):
        n += 1
        time.sleep(0.005)
    took = (time.time() - killed) * 1000
    print(f"lease {lease} ms (renewed every {renew} ms): first RECEIPT from the standby "
          f"{took:.0f} ms after SIGKILL", flush=True)
    rows.append(f"{took:,.0f} ms")
    b.send_signal(signal.SIGTERM)
    b.wait()
print("| " + " / ".join(f"{l:,}" for l in LEASES) + " | " + " / ".join(rows) + " |")
