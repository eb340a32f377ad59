#!/usr/bin/env python3
"""Full sync against bulk append on storage whose flushes are slow (an SD card's or an
eMMC's take milliseconds): every fdatasync of the daemons takes --sync-ms longer, through
slow_sync.c preloaded (LD_PRELOAD). Each round loads the workload into a source daemon,
syncs it into an empty target (`evctl sync`, timed), and bulk-loads it into another empty
daemon (`evctl append --file`, timed), each daemon on a CPU of its own as in
`evstore-socket-bench --only sync`; with --baseline-bin the rounds alternate between the
two builds' daemons. Reports the median seconds and events/s of each, and sync / bulk.

Standard library, a C compiler and taskset. Usage:
  python3 Benchmarks/slow_disk/slow_disk.py --bin .build/release --workload W.ndjson
      [--baseline-bin DIR] [--sync-ms 5] [--rounds 3] [--json OUT]
"""

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def wait_for_socket(path, process, timeout=30.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with socket.socket(socket.AF_UNIX) as probe:
                probe.connect(str(path))
                return True
        except OSError:
            time.sleep(0.02)
    return False


class Daemon:
    def __init__(self, bin_dir, root, cpu, preload, sync_us):
        self.socket = root / "evstored.sock"
        environment = dict(os.environ, LD_PRELOAD=str(preload), SLOW_SYNC_US=str(sync_us))
        self.log = open(root / "evstored.log", "wb")
        self.process = subprocess.Popen(
            ["taskset", "-c", str(cpu), str(bin_dir / "evstored"),
             "--data-dir", str(root / "data"), "--socket", str(self.socket)],
            env=environment, stdout=self.log, stderr=subprocess.STDOUT)
        if not wait_for_socket(self.socket, self.process):
            self.stop()
            sys.exit(f"evstored did not start; see {root / 'evstored.log'}")

    def stop(self):
        self.process.terminate()
        self.process.wait(timeout=60)
        self.log.close()


def evctl(bin_dir, socket_path, *arguments):
    """Runs evctl; its wall time in seconds."""
    started = time.monotonic()
    subprocess.run([str(bin_dir / "evctl"), "--socket", str(socket_path), *arguments],
                   check=True, stdout=subprocess.DEVNULL)
    return time.monotonic() - started


def round_of(bin_dir, workload, preload, sync_us, scratch):
    """One round with the daemons of bin_dir: (sync seconds, bulk seconds)."""
    root = Path(tempfile.mkdtemp(dir=scratch))
    try:
        for name in ("source", "target", "bulk"):
            (root / name).mkdir()
        source = Daemon(bin_dir, root / "source", 0, preload, sync_us)
        target = Daemon(bin_dir, root / "target", 1, preload, sync_us)
        evctl(bin_dir, source.socket, "append", "--file", str(workload))
        sync = evctl(bin_dir, source.socket, "sync", f"unix://{target.socket}")
        source.stop()
        target.stop()
        bulk_daemon = Daemon(bin_dir, root / "bulk", 1, preload, sync_us)
        bulk = evctl(bin_dir, bulk_daemon.socket, "append", "--file", str(workload))
        bulk_daemon.stop()
        return sync, bulk
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bin", required=True, type=Path)
    parser.add_argument("--baseline-bin", type=Path)
    parser.add_argument("--workload", required=True, type=Path)
    parser.add_argument("--sync-ms", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path)
    arguments = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="evstore-slow-disk-"))
    preload = scratch / "slow_sync.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(preload), str(HERE / "slow_sync.c"), "-ldl"],
                   check=True)
    events = sum(1 for line in open(arguments.workload, "rb") if line.strip())
    builds = [("build", arguments.bin)]
    if arguments.baseline_bin:
        builds.append(("baseline", arguments.baseline_bin))
    times = {name: {"sync": [], "bulk": []} for name, _ in builds}
    sync_us = int(arguments.sync_ms * 1000)
    try:
        for _ in range(arguments.rounds):
            for name, bin_dir in builds:
                sync, bulk = round_of(bin_dir, arguments.workload, preload, sync_us, scratch)
                times[name]["sync"].append(sync)
                times[name]["bulk"].append(bulk)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    report = {"events": events, "sync_ms_added": arguments.sync_ms, "rounds": arguments.rounds}
    print(f"{events} events, every fdatasync {arguments.sync_ms:g} ms longer, median of {arguments.rounds} rounds")
    for name, _ in builds:
        sync = statistics.median(times[name]["sync"])
        bulk = statistics.median(times[name]["bulk"])
        report[name] = {"sync_s": times[name]["sync"], "bulk_s": times[name]["bulk"],
                        "sync_events_per_s": events / sync, "bulk_events_per_s": events / bulk,
                        "sync_over_bulk": bulk / sync}
        print(f"{name:9} full sync {events / sync:10.0f} events/s ({sync:.3f} s)   "
              f"bulk append {events / bulk:10.0f} events/s ({bulk:.3f} s)   sync / bulk {bulk / sync:.2f}x")
    if arguments.baseline_bin:
        ratio = statistics.median(times["baseline"]["sync"]) / statistics.median(times["build"]["sync"])
        report["sync_build_over_baseline"] = ratio
        print(f"full sync, build / baseline: {ratio:.2f}x")
    if arguments.json:
        arguments.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
