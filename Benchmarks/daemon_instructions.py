#!/usr/bin/env python3
"""Instructions a daemon executes to take in the same events two ways, counted with
valgrind's callgrind: the receiving evstored through a full sync from a loaded peer, and an
evstored through a bulk `evctl append --file`. Counts do not move with the machine's other
load as times do, so two builds compare to a fraction of a percent.

For each build given (a directory holding evstored and evctl), in turn and --rounds times:
a source daemon takes the workload with `evctl append --file`; a receiver started under
callgrind takes it by `evctl sync` from the source; a third daemon, under callgrind, takes
the same workload by `evctl append --file`. Each counted daemon is stopped with SIGTERM and
its whole process's count printed (start, first dictionary training and stop included).

    python3 Benchmarks/daemon_instructions.py --bin .build/release --bin OLD_BUILD_DIR \\
        --workload W20k.ndjson

A workload of 20,000 events takes about ten seconds a daemon under callgrind.
"""
import argparse
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def wait_for_socket(path, process, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists():
            return True
        if process.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def start(binary, root, name, counted):
    socket_path = root / f"{name}.sock"
    command = [str(binary / "evstored"), "--data-dir", str(root / name), "--socket", str(socket_path)]
    out = root / f"{name}.callgrind"
    if counted:
        command = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}"] + command
    log = open(root / f"{name}.log", "w")
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT)
    if not wait_for_socket(socket_path, process):
        sys.exit(f"evstored ({name}) did not open {socket_path}; see {root / (name + '.log')}")
    return process, socket_path, out


def stop(process):
    process.send_signal(signal.SIGTERM)
    process.wait(timeout=120)


def total(callgrind_out):
    text = subprocess.run(["callgrind_annotate", str(callgrind_out)], capture_output=True, text=True).stdout
    match = re.search(r"^\s*([\d,]+) \(100\.0%\)\s+PROGRAM TOTALS", text, re.MULTILINE)
    return int(match.group(1).replace(",", "")) if match else None


def run(binary, workload):
    root = Path(tempfile.mkdtemp(prefix="evstore-instructions-"))
    try:
        evctl = str(binary / "evctl")
        source, source_socket, _ = start(binary, root, "source", counted=False)
        receiver, receiver_socket, receiver_out = start(binary, root, "receiver", counted=True)
        loader, loader_socket, loader_out = start(binary, root, "loader", counted=True)
        subprocess.run([evctl, "--socket", str(source_socket), "append", "--file", workload],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([evctl, "--socket", str(source_socket), "sync", f"unix://{receiver_socket}"],
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([evctl, "--socket", str(loader_socket), "append", "--file", workload],
                       check=True, stdout=subprocess.DEVNULL)
        for process in (source, receiver, loader):
            stop(process)
        return total(receiver_out), total(loader_out)
    finally:
        shutil.rmtree(root, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", action="append", required=True, type=Path,
                        help="a directory holding evstored and evctl; give two or more to compare")
    parser.add_argument("--workload", required=True, help="NDJSON append inputs (fieldops.py output)")
    parser.add_argument("--rounds", type=int, default=2)
    options = parser.parse_args()
    for tool in ("valgrind", "callgrind_annotate"):
        if not shutil.which(tool):
            sys.exit(f"{tool} is not installed (apt-get install valgrind)")
    events = sum(1 for line in open(options.workload) if line.strip())
    print(f"{'build':40} {'round':>5} {'full sync, receiver':>22} {'bulk append':>16}")
    for round_number in range(1, options.rounds + 1):
        for binary in options.bin:
            receiver, loader = run(binary, options.workload)
            shown = [f"{count:,} ({count / events:,.0f}/ev)" if count else "?" for count in (receiver, loader)]
            print(f"{str(binary):40} {round_number:>5} {shown[0]:>22} {shown[1]:>16}", flush=True)


if __name__ == "__main__":
    main()
