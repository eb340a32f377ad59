#!/usr/bin/env python3
"""Blobs over the socket against `cp` on the same disk: a file of --mib MiB (random bytes)
put and got with evctl, the open file passed to the daemon (the default) and in base64
pieces (--base64 for put, a pipe for get), in alternating rounds with `cp` of the same file
to the same directory, plain and followed by fsync (a put returns once the blob is on the
disk). The daemon's peak resident memory while it takes a blob of --large-mib MiB in
base64 pieces is reported beside its resident memory before.

Sync: a second daemon fetches each round's blob from the first (`evctl sync` with the
first's socket, the blob named by an event there), against `cp` + fsync of the same file
(the receiver syncs what it keeps); the bytes that crossed the link per blob byte; and
both daemons' peak resident memory while a --large-mib MiB blob moves between them.

Standard library only. Usage:
  python3 Benchmarks/blobs.py --bin .build/release [--mib 100] [--large-mib 256] [--repeat 3] [--json OUT]
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


def wait_for_socket(path, process, timeout=15.0):
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


def timed(command, **options):
    started = time.monotonic()
    result = subprocess.run(command, capture_output=True, **options)
    elapsed = time.monotonic() - started
    if result.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, command))} failed: {result.stderr.decode()[:400]}")
    return elapsed, result.stdout


def copy_synced(source, target):
    with open(source, "rb") as reading, open(target, "wb") as writing:
        shutil.copyfileobj(reading, writing, 1 << 20)
        writing.flush()
        os.fsync(writing.fileno())


def memory(pid, field):
    """A field of /proc/PID/status, in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return 0.0


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", type=Path, required=True)
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--large-mib", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="evstore-blobs-bench-"))
    evctl = str(options.bin / "evctl")
    daemon = None
    try:
        socket_path = scratch / "evstored.sock"
        log = open(scratch / "evstored.log", "w")
        daemon = subprocess.Popen([str(options.bin / "evstored"), "--data-dir", str(scratch / "data"), "--socket",
                                   str(socket_path), "--max-blob-bytes", str((options.large_mib + 1) << 20)],
                                  stdout=log, stderr=subprocess.STDOUT)
        if not wait_for_socket(socket_path, daemon):
            raise RuntimeError(f"evstored did not start; see {scratch / 'evstored.log'}")
        client = [evctl, "--socket", str(socket_path)]
        receiver_socket = scratch / "receiver.sock"
        receiver_log = open(scratch / "receiver.log", "w")
        receiver = subprocess.Popen([str(options.bin / "evstored"), "--data-dir", str(scratch / "receiver"), "--socket",
                                     str(receiver_socket), "--max-blob-bytes", str((options.large_mib + 1) << 20),
                                     "--sync-interval-s", "86400"],
                                    stdout=receiver_log, stderr=subprocess.STDOUT)
        if not wait_for_socket(receiver_socket, receiver):
            raise RuntimeError(f"the receiving evstored did not start; see {scratch / 'receiver.log'}")
        receiving = [evctl, "--socket", str(receiver_socket)]
        size = options.mib << 20
        times = {name: [] for name in ["put", "put base64", "get", "get base64", "cp", "cp + fsync", "sync"]}
        wire = []

        def synced(digest, blob_size, entity):
            """Names the blob in an event on the first daemon, then has the second sync: the
            seconds it took and the bytes it received."""
            reference = json.dumps({"$blob": digest, "size": blob_size})
            timed([*client, "append", entity, "set", f"file:={reference}"])
            elapsed, output = timed([*receiving, "--json", "sync", f"unix://{socket_path}"])
            peer = json.loads(output)["peers"][0]
            if peer["error"] is not None or peer["blobs"]["received"] != 1:
                raise RuntimeError(f"the blob did not sync: {peer}")
            return elapsed, peer["bytes_received"]
        for turn in range(options.repeat):
            # New bytes each round, so each put stores a new blob.
            source = scratch / f"in-{turn}"
            source.write_bytes(os.urandom(size))
            elapsed, output = timed([*client, "blob", "put", str(source)])
            times["put"].append(elapsed)
            digest = json.loads(output)["$blob"]
            other = scratch / f"other-{turn}"
            other.write_bytes(os.urandom(size))
            elapsed, _ = timed([*client, "blob", "put", "--base64", str(other)])
            times["put base64"].append(elapsed)
            other.unlink()
            target = scratch / f"out-{turn}"
            elapsed, _ = timed([*client, "blob", "get", digest, str(target)])
            times["get"].append(elapsed)
            target.unlink()
            started = time.monotonic()
            subprocess.run([*client, "blob", "get", digest], stdout=subprocess.PIPE, check=True)
            times["get base64"].append(time.monotonic() - started)
            elapsed, received = synced(digest, size, f"job/bench-{turn}")
            times["sync"].append(elapsed)
            wire.append(received / size)
            elapsed, _ = timed(["cp", str(source), str(target)])
            times["cp"].append(elapsed)
            target.unlink()
            started = time.monotonic()
            copy_synced(source, target)
            times["cp + fsync"].append(time.monotonic() - started)
            target.unlink()
            source.unlink()

        large = scratch / "large"
        large.write_bytes(os.urandom(options.large_mib << 20))
        before = memory(daemon.pid, "VmRSS")
        _, output = timed([*client, "blob", "put", "--base64", str(large)])
        peak = memory(daemon.pid, "VmHWM")
        receiver_before = memory(receiver.pid, "VmRSS")
        synced(json.loads(output)["$blob"], options.large_mib << 20, "job/bench-large")
        receiver_peak = memory(receiver.pid, "VmHWM")
        sender_peak = memory(daemon.pid, "VmHWM")

        median = {name: statistics.median(values) for name, values in times.items()}
        mib_per_s = {name: options.mib / value for name, value in median.items()}
        rows = [{"name": f"blob {name}, {options.mib} MiB", "value": round(mib_per_s[name]), "unit": "MiB/s",
                 "note": f"median of {options.repeat}"} for name in median]
        rows += [
            {"name": "blob put / cp", "value": round(mib_per_s["put"] / mib_per_s["cp"], 3), "unit": "×",
             "note": "the open file passed; the put is synced, cp is not"},
            {"name": "blob put / cp + fsync", "value": round(mib_per_s["put"] / mib_per_s["cp + fsync"], 3),
             "unit": "×", "note": "both on the disk when they end"},
            {"name": "blob get / cp", "value": round(mib_per_s["get"] / mib_per_s["cp"], 3), "unit": "×",
             "note": "the file to write passed; neither synced"},
            {"name": "blob sync between two daemons / cp + fsync",
             "value": round(mib_per_s["sync"] / mib_per_s["cp + fsync"], 3), "unit": "×",
             "note": "one blob per session, over a Unix socket; the receiver syncs it"},
            {"name": "blob sync: bytes on the link per blob byte", "value": round(statistics.median(wire), 5),
             "unit": "B/B", "note": "the whole session, events and frames included"},
            {"name": f"receiving daemon resident memory before a {options.large_mib} MiB blob syncs",
             "value": round(receiver_before, 1), "unit": "MiB", "note": ""},
            {"name": f"receiving daemon peak resident memory, {options.large_mib} MiB blob synced",
             "value": round(receiver_peak, 1), "unit": "MiB", "note": "VmHWM: bounded by chunks, not by the blob"},
            {"name": f"sending daemon peak resident memory, after the {options.large_mib} MiB sync",
             "value": round(sender_peak, 1), "unit": "MiB", "note": "VmHWM, its base64 put included"},
            {"name": "blob put base64 / cp + fsync",
             "value": round(mib_per_s["put base64"] / mib_per_s["cp + fsync"], 3), "unit": "×",
             "note": "3 MiB pieces"},
            {"name": f"daemon resident memory before a {options.large_mib} MiB put", "value": round(before, 1),
             "unit": "MiB", "note": ""},
            {"name": f"daemon peak resident memory, {options.large_mib} MiB put in base64 pieces",
             "value": round(peak, 1), "unit": "MiB", "note": "VmHWM: bounded by pieces, not by the blob"},
        ]
        width = max(len(row["name"]) for row in rows)
        for row in rows:
            print(f"{row['name']:<{width}}  {row['value']:>10} {row['unit']:<6} {row['note']}")
        if options.json:
            options.json.write_text(json.dumps(rows, indent=1))
        return 0
    except RuntimeError as error:
        print(f"blobs.py: {error}", file=sys.stderr)
        return 1
    finally:
        for process in [daemon, locals().get("receiver")]:
            if process:
                process.terminate()
                process.wait()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
