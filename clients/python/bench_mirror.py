"""A Python mirror beside raw pyzmq on the same daemon and the same writes.

Usage: python3 bench_mirror.py BIN_DIR [--writes N] [--samples N]

Starts a beacond from BIN_DIR on temporary directories and prints, in one run:
- updates/s into one mirror of a prefix while `beacon pub` writes N changes under it, beside a
  raw pyzmq SUB counting the same publications (the ceiling: it decodes nothing and keeps no
  state);
- write → callback latency p50/p99 (one write at a time), beside write → raw SUB arrival.
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import zmq

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from beacon_signals import Client, Mirror  # noqa: E402

def write(bin_dir, runtime_dir, writes):
    """N changes under bench. by `beacon pub` (pipelined: faster than either reader)."""
    lines = "".join(f"bench.k{index % 1000} {index}\n" for index in range(writes))
    subprocess.run([os.path.join(bin_dir, "beacon"), "pub", "--runtime-dir", runtime_dir], input=lines.encode(),
                   check=True, stdout=subprocess.DEVNULL)


def percentile(samples, fraction):
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def start_daemon(bin_dir, directory):
    process = subprocess.Popen([os.path.join(bin_dir, "beacond"), "--runtime-dir", directory + "/run",
                                "--state-dir", directory + "/state"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    client = Client(directory + "/run", timeout=0.5)
    deadline = time.monotonic() + 30
    while True:
        try:
            client.ping()
            return process, client
        except Exception:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def raw_subscriber(runtime_dir, prefix, count, ready):
    """Counts publications under `prefix` with a bare SUB; returns (first, last) arrival times."""
    context = zmq.Context.instance()
    socket = context.socket(zmq.SUB)
    socket.setsockopt(zmq.RCVHWM, 0)
    socket.setsockopt(zmq.SUBSCRIBE, prefix.encode())
    socket.connect(f"ipc://{runtime_dir}/beacon.pub")
    ready.set()
    received, first = 0, None
    while received < count:
        socket.recv_multipart()
        received += 1
        if first is None:
            first = time.perf_counter()
    socket.close()
    return first, time.perf_counter()


def throughput(bin_dir, directory, client, writes):
    runtime_dir = directory + "/run"
    # The ceiling: a raw SUB of the same prefix, the same writes.
    ready = threading.Event()
    result = {}
    reader = threading.Thread(target=lambda: result.update(raw=raw_subscriber(runtime_dir, "bench.", writes, ready)))
    reader.start()
    ready.wait()
    time.sleep(0.5)  # the subscription reaches the daemon (the raw SUB has no way to know)
    write(bin_dir, runtime_dir, writes)
    reader.join()
    first, last = result["raw"]
    raw_rate = writes / (last - first)
    # The mirror: from the first update after the writer starts to the revision of the last write.
    head = client.ping().head_revision
    arrivals = []
    mirror = Mirror(client, ["bench."], on_change=lambda update: arrivals.append(time.perf_counter()))
    mirror.wait_synced(30)
    arrivals.clear()
    write(bin_dir, runtime_dir, writes)
    mirror.wait_until(head + writes, 120)
    done = time.perf_counter()
    counters = dict(mirror.counters)
    mirror.close()
    mirror_rate = writes / (done - arrivals[0])
    return raw_rate, mirror_rate, counters


def latency(client, runtime_dir, samples):
    arrived = threading.Event()
    mirror = Mirror(client, ["lat."], on_change=lambda update: arrived.set())
    mirror.wait_synced(30)
    arrived.clear()
    socket = zmq.Context.instance().socket(zmq.SUB)
    socket.setsockopt(zmq.SUBSCRIBE, b"lat.")
    socket.connect(f"ipc://{runtime_dir}/beacon.pub")
    time.sleep(0.5)
    to_callback, to_raw = [], []
    for index in range(samples):
        started = time.perf_counter()
        client.set("lat.k", index)
        socket.recv_multipart()
        to_raw.append(time.perf_counter() - started)
        arrived.wait(10)
        to_callback.append(time.perf_counter() - started)
        arrived.clear()
    mirror.close()
    socket.close()
    return to_raw, to_callback


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("bin_dir")
    parser.add_argument("--writes", type=int, default=50_000)
    parser.add_argument("--samples", type=int, default=2000)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="beacon-pybench-") as directory:
        process, client = start_daemon(options.bin_dir, directory)
        try:
            client.timeout = 30
            raw_rate, mirror_rate, counters = throughput(options.bin_dir, directory, client, options.writes)
            to_raw, to_callback = latency(client, directory + "/run", options.samples)
        finally:
            process.terminate()
            process.wait()
    micro = 1e6
    print(f"beacon-signals mirror vs raw pyzmq, {options.writes} writes over 1000 keys by `beacon pub`, "
          f"{options.samples} latency samples, Python {sys.version.split()[0]}, pyzmq {zmq.__version__}")
    print("| figure | raw pyzmq SUB | Python mirror | mirror ÷ raw |")
    print("| --- | --- | --- | --- |")
    print(f"| updates/s into one subscriber | {raw_rate:,.0f} | {mirror_rate:,.0f} | {mirror_rate / raw_rate:.2f} |")
    for name, fraction in (("p50", 0.5), ("p99", 0.99)):
        raw, mirrored = percentile(to_raw, fraction) * micro, percentile(to_callback, fraction) * micro
        print(f"| write → arrival ({name}) | {raw:,.0f} µs | {mirrored:,.0f} µs (callback) | {mirrored / raw:.2f} |")
    print(f"mirror's repairs during the throughput run: {counters['repairs']} ({counters['deltas']} deltas, "
          f"{counters['snapshots']} snapshots; 1 snapshot is the first sync)")
    print(f"median write round trip: {statistics.median(to_raw) * micro:,.0f} µs")


if __name__ == "__main__":
    main()
