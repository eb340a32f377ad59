#!/usr/bin/env python3
"""evstore-nats into a real nats-server with JetStream, against bulk append in the same run.

Measures, on one machine (evstored, evstore-nats and nats-server share its CPUs):
  - bulk `evctl append --file` of the workload into a fresh daemon: the baseline;
  - the bridge started on that store, once the daemon is idle: events/s until every event
    is in the stream (a backlog, as after a long outage), and the time until the bridge
    has acknowledged them all to the daemon (its consumer's lag is 0);
  - the same events, as the daemon's `log` gives them, published by a C program with
    libnats' asynchronous JetStream publish (Benchmarks/baselines/nats_publish.c, the same
    headers, as many unacknowledged) into a stream of its own on the same server: what the
    server allows a publisher here, the bridge's ceiling;
  - the load, the backlog and the C publisher in turn, in three rounds (--rounds), each
    on a fresh server and daemon: the figures are the rounds' medians, and the target's
    ratio the median of the rounds' ratios, each from a back-to-back pair;
  - end-to-end latency under light load: from `append` returning to the message being
    delivered from the stream to a JetStream push consumer (so stored), p50 and p99;
  - the bridge's memory: resident and anonymous after the backlog, and its peak.

Standard library only; speaks the NATS protocol itself. Usage:
  python3 Benchmarks/nats_bridge.py --bin .build/release --workload W.ndjson [--events N] [--json OUT]
"""

import argparse
import json
import os
import resource
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Daemon:
    """JSON-RPC over evstored's socket."""

    def __init__(self, path):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(path)
        self.file = self.sock.makefile("rb")
        self.next_id = 0

    def call(self, method, params=None):
        self.next_id += 1
        line = json.dumps({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}})
        self.sock.sendall(line.encode() + b"\n")
        while True:
            reply = json.loads(self.file.readline())
            if reply.get("id") == self.next_id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply["result"]


class NATS:
    """Just enough of the NATS client protocol: requests and one subscription with headers."""

    def __init__(self, port):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.file = self.sock.makefile("rb")
        self.file.readline()  # INFO
        self.sock.sendall(b'CONNECT {"verbose":false,"pedantic":false,"headers":true,"no_responders":true}\r\n')
        self.sid = 0

    def subscribe(self, subject):
        self.sid += 1
        self.sock.sendall(f"SUB {subject} {self.sid}\r\n".encode())
        return self.sid

    def publish(self, subject, payload, reply=None):
        head = f"PUB {subject} {reply} {len(payload)}" if reply else f"PUB {subject} {len(payload)}"
        self.sock.sendall(head.encode() + b"\r\n" + payload + b"\r\n")

    def next_message(self):
        """(subscription id, subject, headers dict, payload) of the next message; answers
        PINGs. JetStream delivers a push consumer's messages under their own subject, to the
        subscription of the deliver subject: match them by subscription id."""
        while True:
            line = self.file.readline()
            if not line:
                raise RuntimeError("the NATS server closed the connection")
            if line.startswith(b"PING"):
                self.sock.sendall(b"PONG\r\n")
                continue
            parts = line.split()
            if parts[0] == b"MSG":
                size = int(parts[-1])
                data = self.file.read(size + 2)[:-2]
                return int(parts[2]), parts[1].decode(), {}, data
            if parts[0] == b"HMSG":
                header_size, total = int(parts[-2]), int(parts[-1])
                block = self.file.read(total + 2)[:-2]
                headers = {}
                for header in block[:header_size].decode().split("\r\n")[1:]:
                    if ":" in header:
                        name, value = header.split(":", 1)
                        headers[name.strip()] = value.strip()
                return int(parts[2]), parts[1].decode(), headers, block[header_size:]

    def request(self, subject, payload):
        inbox = f"_INBOX.bench{self.sid + 1}"
        sid = self.subscribe(inbox)
        self.publish(subject, payload, reply=inbox)
        while True:
            seen, _, _, data = self.next_message()
            if seen == sid:
                return json.loads(data)


def memory(pid):
    """VmRSS, RssAnon and VmHWM of a process, KiB."""
    values = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "RssAnon", "VmHWM"):
            values[key] = int(rest.split()[0])
    return values


def cpu_seconds(pid):
    """User and system CPU time a process has used, in seconds."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_idle(pid, timeout=60):
    """Waits until the process used less than 2 % of a CPU over 250 ms: what the daemon does
    after a bulk load (training its dictionaries) is done before the backlog is timed, as
    it would be after a long outage."""
    deadline = time.monotonic() + timeout
    last = cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = cpu_seconds(pid)
        if now - last < 0.005:
            return
        last = now
    raise RuntimeError(f"process {pid} was still busy after {timeout} s")


def wait_for(condition, timeout, what, interval=0.02):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(interval)
    raise RuntimeError(f"timed out waiting for {what}")


def start_round(options, scratch):
    """A fresh nats-server and daemon under `scratch`: (processes, port, socket path)."""
    scratch.mkdir(parents=True, exist_ok=True)
    processes = []
    port = free_port()
    server_log = open(scratch / "nats.log", "wb")
    server = subprocess.Popen([options.nats_server, "-a", "127.0.0.1", "-p", str(port), "-js", "-sd",
                               str(scratch / "js")], stdout=subprocess.DEVNULL, stderr=server_log)
    processes.append(server)
    wait_for(lambda: b"Server is ready" in (scratch / "nats.log").read_bytes(), 20, "nats-server")
    sock = str(scratch / "evstored.sock")
    daemon_log = open(scratch / "evstored.log", "wb")
    daemon = subprocess.Popen([options.bin / "evstored", "--data-dir", str(scratch / "data"), "--socket", sock],
                              stdout=subprocess.DEVNULL, stderr=daemon_log)
    processes.append(daemon)
    wait_for(lambda: os.path.exists(sock), 20, "evstored's socket")
    time.sleep(0.2)
    return processes, port, sock


def backlog_round(options, scratch, workload, count, publisher, processes):
    """One round on a fresh server and daemon: the bulk load, the bridge's backlog, then the
    C publisher with the same events into the same server. Returns the figures and what the
    caller may measure more with (the bridge is left running)."""
    started_processes, port, sock = start_round(options, scratch)
    processes.extend(started_processes)
    server, daemon = started_processes

    started = time.monotonic()
    subprocess.run([options.bin / "evctl", "--socket", sock, "append", "--file", str(workload)], check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    bulk = count / (time.monotonic() - started)
    wait_idle(daemon.pid)

    client = Daemon(sock)
    bridge_log = open(scratch / "evstore-nats.log", "wb")
    cpu_before = {"evstored": cpu_seconds(daemon.pid), "nats-server": cpu_seconds(server.pid)}
    started = time.monotonic()
    bridge = subprocess.Popen([options.bin / "evstore-nats", "--socket", sock, "--url", f"nats://127.0.0.1:{port}"],
                              stdout=subprocess.DEVNULL, stderr=bridge_log)
    processes.append(bridge)

    nats = NATS(port)

    def in_stream():
        info = nats.request("$JS.API.STREAM.INFO.EVSTORE", b"")
        return info.get("state", {}).get("messages", 0) if "error" not in info else 0

    def drained():
        consumers = client.call("consumers.list")["consumers"]
        return any(c["name"] == "nats" and c["lag"] == 0 for c in consumers)

    # Timed until the stream holds every event, as the C publisher is timed until its
    # last acknowledgement; the acknowledgement to the daemon follows within the
    # bridge's ack_interval_ms (200 ms), reported apart. The C publisher's clock starts
    # once it is connected, so the bridge's rate against it is taken from the first
    # event seen in the stream (the bridge started, connected to both sides, created
    # the stream); its rate from its start is reported too.
    first_seen = None

    def published():
        nonlocal first_seen
        held = in_stream()
        if held > 0 and first_seen is None:
            first_seen = (time.monotonic(), held)
        return held >= count

    wait_for(published, 600, "the bridge to publish the backlog", interval=0.005)
    finished = time.monotonic()
    elapsed = finished - started
    throughput = count / elapsed
    seen_at, seen = first_seen
    publishing = (count - seen) / (finished - seen_at) if finished > seen_at and count > seen else throughput
    cpu = {"evstore-nats": cpu_seconds(bridge.pid),
           "evstored": cpu_seconds(daemon.pid) - cpu_before["evstored"],
           "nats-server": cpu_seconds(server.pid) - cpu_before["nats-server"]}
    wait_for(drained, 600, "the bridge to acknowledge the backlog to the daemon")
    acknowledged = time.monotonic() - started
    after_backlog = memory(bridge.pid)
    stored = in_stream()

    # The C publisher: the same events as the daemon's log gives them, the same server,
    # a stream of its own with the bridge's settings.
    logged = scratch / "logged.ndjson"
    with open(logged, "w") as out:
        after = 0
        while True:
            page = client.call("log", {"after": after, "limit": 1000})
            for event in page["events"]:
                out.write(json.dumps(event, separators=(",", ":")) + "\n")
            if page["next"] is None:
                break
            after = page["next"]
    created = nats.request("$JS.API.STREAM.CREATE.CBENCH", json.dumps(
        {"name": "CBENCH", "subjects": ["cbench.>"], "storage": "file",
         "duplicate_window": 7 * 86_400 * 1_000_000_000}).encode())
    if "error" in created:
        raise RuntimeError(f"creating the C publisher's stream: {created['error']}")
    children_before = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = cpu_seconds(server.pid)
    result = subprocess.run([str(publisher), "--url", f"nats://127.0.0.1:{port}", "--stream", "CBENCH",
                             "--prefix", "cbench", "--events", str(logged), "--max-pending", "1024"],
                            capture_output=True, text=True)
    if result.returncode != 0:
        raise RuntimeError(f"nats_publish failed: {result.stderr[-400:]}")
    children_after = resource.getrusage(resource.RUSAGE_CHILDREN)
    c_cpu = {"publisher": (children_after.ru_utime + children_after.ru_stime
                           - children_before.ru_utime - children_before.ru_stime),
             "nats-server": cpu_seconds(server.pid) - server_before}
    ceiling = json.loads(result.stdout)["results"][0]["value"]
    in_c = nats.request("$JS.API.STREAM.INFO.CBENCH", b"")["state"]["messages"]
    if in_c != count:
        raise RuntimeError(f"the C publisher's stream holds {in_c} messages, not {count}")
    figures = {"bulk": bulk, "throughput": throughput, "publishing": publishing, "ceiling": ceiling,
               "elapsed": elapsed, "acknowledged": acknowledged, "seen": seen, "stored": stored, "cpu": cpu,
               "c_cpu": c_cpu, "after_backlog": after_backlog}
    live = {"client": client, "nats": nats, "bridge": bridge}
    return figures, live


def stop(processes):
    for process in reversed(processes):
        if process.poll() is None:
            process.kill()
            process.wait()
    processes.clear()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--bin", required=True, type=Path, help="directory of evstored, evctl and evstore-nats")
    parser.add_argument("--workload", required=True, type=Path, help="NDJSON events in the append input form")
    parser.add_argument("--events", type=int, default=0, help="use the first N events (0: all)")
    parser.add_argument("--latency-events", type=int, default=300, help="single appends timed end to end")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the backlog and the C publisher, each on a fresh server and daemon")
    parser.add_argument("--nats-server", default=shutil.which("nats-server") or "/usr/sbin/nats-server")
    parser.add_argument("--json", type=Path, help="write the figures here")
    parser.add_argument("--publisher", type=Path,
                        help="the C publisher (built from Benchmarks/baselines/nats_publish.c when not given)")
    options = parser.parse_args()

    scratch = Path(tempfile.mkdtemp(prefix="evstore-nats-bench-"))
    processes = []
    try:
        lines = options.workload.read_bytes().splitlines(keepends=True)
        if options.events:
            lines = lines[: options.events]
        workload = scratch / "workload.ndjson"
        workload.write_bytes(b"".join(lines))
        count = len(lines)
        publisher = options.publisher
        if publisher is None:
            publisher = scratch / "nats_publish"
            here = Path(__file__).resolve().parent / "baselines"
            subprocess.run(["cc", "-std=c11", "-O2", "-Wall", "-Wextra", "-o", str(publisher),
                            str(here / "nats_publish.c"), str(here / "common.c"), "-lnats", "-lm"], check=True)

        # The bridge and the C publisher in turn, each round on a fresh server and daemon:
        # the machine's other load moves either figure by a quarter from one minute to the
        # next, and the median of the rounds' ratios, each from a back-to-back pair, is what
        # the target takes. The first round also measures latency and memory.
        rounds = []
        for index in range(max(1, options.rounds)):
            figures, live = backlog_round(options, scratch / f"round-{index}", workload, count, publisher,
                                          processes)
            rounds.append(figures)
            if index == 0:
                latencies, at_end = measure_latency(options, live)
            stop(processes)
        first = rounds[0]

        def median(key):
            return statistics.median(r[key] for r in rounds)

        ratios = [r["publishing"] / r["ceiling"] for r in rounds]
        ratio = statistics.median(ratios)
        shown = ", ".join(f"{value:.2f}" for value in ratios)
        bulk, throughput, publishing, ceiling = (median("bulk"), median("throughput"), median("publishing"),
                                                 median("ceiling"))
        cpu = {name: statistics.median(r["cpu"][name] for r in rounds) for name in first["cpu"]}
        c_cpu = {name: statistics.median(r["c_cpu"][name] for r in rounds) for name in first["c_cpu"]}
        after_backlog = first["after_backlog"]
        elapsed, acknowledged, seen, stored = first["elapsed"], first["acknowledged"], first["seen"], first["stored"]

        def percentile(values, fraction):
            return values[min(len(values) - 1, int(len(values) * fraction))]

        rows = [
            {"name": "bulk evctl append --file", "value": round(bulk), "unit": "events/s",
             "note": f"{count} events, median of {len(rounds)}"},
            {"name": "evstore-nats, backlog into JetStream", "value": round(throughput), "unit": "events/s",
             "note": f"median of {len(rounds)}; first round: {count} events in the stream in {elapsed:.2f} s ({stored} there), acknowledged to the daemon at {acknowledged:.2f} s"},
            {"name": "evstore-nats backlog / bulk append", "value": round(throughput / bulk, 2), "unit": "×",
             "note": "the same events, the same run"},
            {"name": "baseline: C publisher, libnats asynchronous JetStream publish", "value": round(ceiling),
             "unit": "events/s", "note": f"the same events and headers, 1024 unacknowledged, a stream of its own; median of {len(rounds)}"},
            {"name": "evstore-nats, backlog while publishing", "value": round(publishing), "unit": "events/s",
             "note": f"from the first event in the stream ({seen} there in the first round), as the C publisher's clock starts once it is connected; median of {len(rounds)}"},
            {"name": "evstore-nats backlog / C publisher", "value": round(ratio, 2), "unit": "×",
             "note": f"goal ≥ 0.8; median of the rounds' {shown}; from the bridge's start {throughput / ceiling:.2f}×"},
            {"name": "append to readable from the stream, p50", "value": round(statistics.median(latencies), 2),
             "unit": "ms", "note": f"{len(latencies)} single appends, about 40/s"},
            {"name": "append to readable from the stream, p99", "value": round(percentile(latencies, 0.99), 2),
             "unit": "ms", "note": ""},
            {"name": "CPU per event during the backlog, evstore-nats", "value": round(cpu["evstore-nats"] / count * 1e6, 1),
             "unit": "µs", "note": f"evstored {cpu['evstored'] / count * 1e6:.1f} µs, nats-server "
                                   f"{cpu['nats-server'] / count * 1e6:.1f} µs; medians"},
            {"name": "CPU per event, C publisher", "value": round(c_cpu["publisher"] / count * 1e6, 1),
             "unit": "µs", "note": f"nats-server {c_cpu['nats-server'] / count * 1e6:.1f} µs; medians"},
            {"name": "evstore-nats RSS after the backlog", "value": round(after_backlog["VmRSS"] / 1024, 1),
             "unit": "MiB", "note": f"RssAnon {after_backlog['RssAnon'] / 1024:.1f} MiB"},
            {"name": "evstore-nats peak RSS", "value": round(at_end["VmHWM"] / 1024, 1), "unit": "MiB",
             "note": f"RssAnon at the end {at_end['RssAnon'] / 1024:.1f} MiB"},
        ]
        width = max(len(row["name"]) for row in rows)
        for row in rows:
            print(f"{row['name']:<{width}}  {row['value']:>10} {row['unit']:<9} {row['note']}")
        for index, r in enumerate(rounds):
            if r["stored"] != count:
                print(f"round {index + 1}: the stream holds {r['stored']} messages, not {count}", file=sys.stderr)
                return 1
        if options.json:
            options.json.write_text(json.dumps(rows, indent=1))
        return 0
    finally:
        stop(processes)
        shutil.rmtree(scratch, ignore_errors=True)


def measure_latency(options, live):
    """End to end under light load, on the first round's bridge: from `append` returning to
    the message being delivered from the stream to a push consumer; then the bridge's
    memory, and the bridge stopped."""
    client, nats, bridge = live["client"], live["nats"], live["bridge"]
    deliver = "bench.deliver"
    delivered = nats.subscribe(deliver)
    created = nats.request("$JS.API.CONSUMER.CREATE.EVSTORE", json.dumps(
        {"stream_name": "EVSTORE", "config": {"deliver_subject": deliver, "deliver_policy": "new",
                                              "ack_policy": "none"}}).encode())
    if "error" in created:
        raise RuntimeError(f"creating the reading consumer: {created['error']}")
    latencies = []
    for index in range(options.latency_events):
        event = {"entity": f"job/latency-{index % 50}", "kind": "status", "status": f"s{index}"}
        result = client.call("append", {"events": [event]})
        appended = time.monotonic()
        wanted = result["ids"][0]
        while True:
            sid, _, headers, _ = nats.next_message()
            if sid == delivered and headers.get("Nats-Msg-Id") == wanted:
                break
        latencies.append((time.monotonic() - appended) * 1000)
        time.sleep(0.02)  # light load: about 40 events a second
    latencies.sort()
    at_end = memory(bridge.pid)
    bridge.terminate()
    bridge.wait(30)
    return latencies, at_end


if __name__ == "__main__":
    sys.exit(main())
