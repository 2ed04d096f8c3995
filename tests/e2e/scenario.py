"""What every end-to-end scenario script shares: its arguments, failing with the
broker's log, starting `ebb serve` and reading the port of the listener it bound,
killing and stopping it, and waiting for a condition.

A script is run as `SCRIPT EBB_BINARY CONFIG_TOML SCENARIO`; the broker's output goes
to `ebb.log` beside the configuration file.
"""
import atexit
import os
import signal
import subprocess
import sys
import threading
import time

EBB, CONFIG, SCENARIO = sys.argv[1], sys.argv[2], sys.argv[3]
LOG = os.path.join(os.path.dirname(CONFIG), "ebb.log")
PROCS = []

# How long a scenario waits for something that must happen before it calls it a hang:
# a guard, not a measure (no passing run comes near it, also on a loaded machine).
# Retry loops that give up on one attempt and try again keep their own short limits.
PATIENCE = 60


def fail(message):
    print(f"FAIL {SCENARIO}: {message}", flush=True)
    try:
        print("--- ebb's log ---\n" + open(LOG).read()[-4000:], flush=True)
    except OSError:
        pass
    sys.exit(1)


def start_serve(marker):
    """Starts `ebb serve --config CONFIG --stomp 127.0.0.1:0` and reads what it prints
    until the line with `marker` (`STOMP on`, `MQTT on`), whose address follows it:
    returns the process and that port. The rest of its output goes to the log."""
    log = open(LOG, "a")
    proc = subprocess.Popen(
        [EBB, "serve", "--config", CONFIG, "--stomp", "127.0.0.1:0"],
        stdout=subprocess.PIPE,
        stderr=log,
        text=True,
    )
    PROCS.append(proc)
    while True:
        line = proc.stdout.readline()  # "ebb: STOMP on 127.0.0.1:PORT, store ..."
        if not line:
            fail(f"ebb serve did not start (exit {proc.poll()}): no line with {marker!r}")
        log.write(line)
        if marker in line:
            address = line.split(marker, 1)[1].split(",")[0].split()[0]
            port = int(address.rsplit(":", 1)[1])
            break
    threading.Thread(target=lambda: [log.write(l) for l in proc.stdout], daemon=True).start()
    return proc, port


def kill_all():
    for proc in PROCS:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


atexit.register(kill_all)


def kill(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait()


def stop(proc, seconds=20):
    proc.send_signal(signal.SIGINT)
    if proc.wait(timeout=seconds) != 0:
        fail(f"ebb serve exited with {proc.returncode} after SIGINT")


def wait_until(predicate, seconds=PATIENCE):
    """Polls `predicate` until it holds; the limit only keeps a broken build from hanging."""
    deadline = time.time() + seconds
    while time.time() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False
