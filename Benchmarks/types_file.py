#!/usr/bin/env python3
"""What a types file costs appends: bulk `evctl append --file` of the field workload into a
fresh evstored without a types file, and into one whose types file gives `job` its field
types, `extra_fields: false` and the status transitions the workload walks, so every event
is checked. Rounds alternate between the two; the medians are reported with their ratio.

Standard library only. Usage:
  python3 Benchmarks/types_file.py --bin .build/release --workload W.ndjson [--repeat 3] [--json OUT]
"""

import argparse
import json
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The rules the field workload keeps (fieldops.py): every field a string, no others, and
# the walk assigned → en_route → on_site → (paused ↔ on_site) → done.
TYPES = {
    "job": {
        "fields": {name: "string" for name in
                   ["customer", "priority", "address", "gate_code", "notes", "scheduled_at", "phone"]},
        "extra_fields": False,
        "status": {"initial": ["assigned"],
                   "transitions": {"assigned": ["en_route", "cancelled"], "en_route": ["on_site"],
                                   "on_site": ["paused", "done"], "paused": ["on_site", "done"]}},
    }
}


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


def bulk_append(binaries, workload, types_file, scratch):
    """Events per second of one `evctl append --file` into a fresh daemon."""
    directory = Path(tempfile.mkdtemp(prefix="evstore-types-", dir=scratch))
    socket_path = directory / "evstored.sock"
    command = [str(binaries / "evstored"), "--data-dir", str(directory / "data"), "--socket", str(socket_path)]
    if types_file:
        command += ["--types-file", str(types_file)]
    with open(directory / "evstored.log", "w") as log:
        daemon = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
        try:
            if not wait_for_socket(socket_path, daemon):
                raise RuntimeError(f"evstored did not start; see {directory / 'evstored.log'}")
            started = time.monotonic()
            result = subprocess.run([str(binaries / "evctl"), "--socket", str(socket_path), "append", "--file",
                                     str(workload)], capture_output=True, text=True)
            elapsed = time.monotonic() - started
            if result.returncode != 0:
                raise RuntimeError(f"evctl append --file failed: {result.stderr.strip()[:400]}")
        finally:
            daemon.terminate()
            daemon.wait()
    shutil.rmtree(directory, ignore_errors=True)
    with open(workload, "rb") as lines:
        return sum(1 for _ in lines) / elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", type=Path, required=True)
    parser.add_argument("--workload", type=Path, required=True)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path)
    options = parser.parse_args()
    scratch = Path(tempfile.mkdtemp(prefix="evstore-types-bench-"))
    try:
        types_file = scratch / "types.json"
        types_file.write_text(json.dumps(TYPES))
        plain, checked = [], []
        for _ in range(options.repeat):
            plain.append(bulk_append(options.bin, options.workload, None, scratch))
            checked.append(bulk_append(options.bin, options.workload, types_file, scratch))
        without, with_rules = statistics.median(plain), statistics.median(checked)
        rows = [
            {"name": "bulk evctl append --file, no types file", "value": round(without), "unit": "events/s",
             "note": f"median of {options.repeat}"},
            {"name": "bulk evctl append --file, types file", "value": round(with_rules), "unit": "events/s",
             "note": "job's field types, extra_fields false, status transitions"},
            {"name": "types file / none", "value": round(with_rules / without, 3), "unit": "×",
             "note": "alternating rounds, the same run"},
        ]
        width = max(len(row["name"]) for row in rows)
        for row in rows:
            print(f"{row['name']:<{width}}  {row['value']:>10} {row['unit']:<9} {row['note']}")
        if options.json:
            options.json.write_text(json.dumps(rows, indent=1))
        return 0
    except RuntimeError as error:
        print(f"types_file.py: {error}", file=sys.stderr)
        return 1
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
