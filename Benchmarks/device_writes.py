#!/usr/bin/env python3
"""What reaches the device when evstored stores events: write amplification, counted at the
block device rather than by the daemon's write_bytes.

For each build given (a directory holding evstored and evctl), in turn and --rounds times:
  - a bulk load of the workload with `evctl append --file` into a fresh store: bytes the
    device took per byte of NDJSON;
  - --commits durable one-event appends (one client, each an `edit` of a job the store does
    not hold yet) into a fresh store and into the store of the bulk load: 4 KiB blocks and
    write requests the device took per commit.

The counters are /proc/diskstats' for the device holding --dir: every writer of that device
counts, so run it with nothing else writing. write_bytes (/proc/PID/io) is printed beside
them: it counts each page-cache folio a write dirties whole, which on file systems with
large folios (ext4 from Linux 6.16) is several times what reaches the device.

    python3 Benchmarks/device_writes.py --bin .build/release --bin OLD_BUILD_DIR \\
        --workload W.ndjson --dir /var/tmp/evstore-device-writes
"""
import argparse
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def device_counters(path):
    """(bytes written, write requests) of the block device holding path; None if none."""
    device = os.stat(path).st_dev
    with open("/proc/diskstats") as table:
        for line in table:
            fields = line.split()
            if int(fields[0]) == os.major(device) and int(fields[1]) == os.minor(device):
                return int(fields[9]) * 512, int(fields[7])
    return None


def write_bytes(pid):
    with open(f"/proc/{pid}/io") as io:
        return int(re.search(r"write_bytes: (\d+)", io.read())[1])


class Daemon:
    def __init__(self, bin_dir, root):
        self.root = root
        self.socket = os.path.join(root, "evstored.sock")
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        pin = ["taskset", "-c", "0"] if shutil.which("taskset") and os.cpu_count() >= 2 else []
        environment = {k: v for k, v in os.environ.items() if not k.startswith("EVSTORE_")}
        self.process = subprocess.Popen(
            pin + [os.path.join(bin_dir, "evstored"), "--data-dir", os.path.join(root, "data"),
                   "--socket", self.socket],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=environment)
        deadline = time.monotonic() + 60
        while True:
            try:
                probe = socket.socket(socket.AF_UNIX)
                probe.connect(self.socket)
                probe.close()
                break
            except OSError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise SystemExit(f"evstored of {bin_dir} did not start")
                time.sleep(0.05)

    def stop(self):
        self.process.terminate()
        self.process.wait()


def one_event_commits(daemon, edits, count):
    """Device blocks, device requests and write_bytes pages per durable one-event append."""
    client = socket.socket(socket.AF_UNIX)
    client.connect(daemon.socket)
    answers = client.makefile("rb")
    bytes_before, requests_before = device_counters(daemon.root)
    written_before = write_bytes(daemon.process.pid)
    for index in range(count):
        line = edits[(index * 7919) % len(edits)]
        client.sendall(('{"jsonrpc":"2.0","id":1,"method":"append","params":{"events":[%s]}}\n'
                        % line).encode())
        answer = answers.readline()
        if b'"result"' not in answer:
            raise SystemExit(f"an append was refused: {answer[:200]!r}")
    bytes_after, requests_after = device_counters(daemon.root)
    written_after = write_bytes(daemon.process.pid)
    client.close()
    return {"device blocks": (bytes_after - bytes_before) / 4096 / count,
            "device requests": (requests_after - requests_before) / count,
            "write_bytes pages": (written_after - written_before) / 4096 / count}


def measure(bin_dir, workload, edits, directory, commits):
    root = os.path.join(directory, "store")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    result = {"bin": bin_dir}
    daemon = Daemon(bin_dir, root)
    result["one-event commit, empty store"] = one_event_commits(daemon, edits, commits)
    daemon.stop()
    shutil.rmtree(os.path.join(root, "data"))
    daemon = Daemon(bin_dir, root)
    size = os.path.getsize(workload)
    bytes_before, requests_before = device_counters(root)
    written_before = write_bytes(daemon.process.pid)
    pin = ["taskset", "-c", "1"] if shutil.which("taskset") and os.cpu_count() >= 2 else []
    subprocess.run(pin + [os.path.join(bin_dir, "evctl"), "--socket", daemon.socket, "append", "--file",
                          workload], check=True, stdout=subprocess.DEVNULL)
    bytes_after, requests_after = device_counters(root)
    result["bulk load"] = {"device bytes per input byte": (bytes_after - bytes_before) / size,
                           "device requests": requests_after - requests_before,
                           "write_bytes per input byte": (write_bytes(daemon.process.pid) - written_before) / size}
    result["one-event commit, after the bulk load"] = one_event_commits(daemon, edits, commits)
    daemon.stop()
    shutil.rmtree(root, ignore_errors=True)
    return result


def rounded(value):
    if isinstance(value, float):
        return round(value, 3)
    if isinstance(value, dict):
        return {key: rounded(item) for key, item in value.items()}
    return value


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", action="append", required=True, help="a directory with evstored and evctl")
    parser.add_argument("--workload", help="NDJSON to bulk load (default: 100,000 fieldops events, seed 7)")
    parser.add_argument("--dir", default="/var/tmp/evstore-device-writes", help="work directory (on the device measured)")
    parser.add_argument("--commits", type=int, default=2000, help="one-event appends per store (2000)")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--fieldops", help="path to fieldops.py (default: ../shared/workload/fieldops.py)")
    options = parser.parse_args()
    os.makedirs(options.dir, exist_ok=True)
    if device_counters(options.dir) is None:
        raise SystemExit(f"{options.dir} is not on a block device /proc/diskstats lists (tmpfs, overlay?)")
    candidates = [options.fieldops, os.environ.get("WORKLOAD"), ROOT.parent / "shared" / "workload" / "fieldops.py",
                  ROOT / "shared" / "workload" / "fieldops.py"]
    generator = next((Path(c) for c in candidates if c and Path(c).exists()), None)
    if generator is None:
        raise SystemExit("fieldops.py not found: give --fieldops")
    workload = options.workload
    if workload is None:
        workload = os.path.join(options.dir, "workload.ndjson")
        with open(workload, "w") as out:
            subprocess.run([sys.executable, generator, "--events", "100000", "--seed", "7"], check=True, stdout=out)
    # Edits of jobs of another seed: each creates or changes a job the loaded store lacks.
    other = subprocess.run([sys.executable, generator, "--events", "100000", "--seed", "8"], check=True,
                           capture_output=True, text=True).stdout.splitlines()
    edits = [line for line in other if '"kind":"edit"' in line]
    for round_index in range(options.rounds):
        for bin_dir in options.bin:
            result = measure(bin_dir, workload, edits, options.dir, options.commits)
            result["round"] = round_index + 1
            print(json.dumps(rounded(result)), flush=True)


if __name__ == "__main__":
    main()
