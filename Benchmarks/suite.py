#!/usr/bin/env python3
"""evstore's benchmark suite: evstore and its baselines, measured in one run.

Builds the C baselines (Benchmarks/baselines) into OUT/baselines, generates the
field workload when missing, runs

  evstore-bench           the storage core, in process
  lmdb_ceiling            bare LMDB + zstd with a dictionary: the physical ceiling
  sqlite_outbox           SQLite WAL, outbox table + JSON projection by UPSERT
  redis_streams           Redis Streams + a projection by Lua, over a Unix socket
  evstore-socket-bench    the daemon over its socket

then prints one table of every figure and one of the targets (each a ratio of figures
from this run), and writes everything to OUT/suite.json.

  python3 Benchmarks/suite.py                         what `make bench` runs
  python3 Benchmarks/suite.py --only baselines --events 20000
  python3 Benchmarks/suite.py --only redis            one baseline alone
"""
import argparse
import datetime
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import statistics
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINES = ROOT / "Benchmarks" / "baselines"
CFLAGS = ["-std=c11", "-O2", "-Wall", "-Wextra"]

# Each C baseline: its source, the headers it needs (and the Debian package holding
# them) and what it links.
PROGRAMS = {
    "sqlite_outbox": (["sqlite3.h"], "libsqlite3-dev", ["-lsqlite3", "-lm"]),
    "lmdb_ceiling": (["lmdb.h", "zstd.h", "zdict.h"], "liblmdb-dev libzstd-dev", ["-llmdb", "-lzstd", "-lm"]),
    "redis_streams": (["hiredis/hiredis.h"], "libhiredis-dev", ["-pthread", "-lhiredis", "-lm"]),
}
PARTS = ["bench", "lmdb", "sqlite", "redis", "socket", "nats", "types", "blobs"]
ALIASES = {"baselines": ["lmdb", "sqlite", "redis"], "evstore": ["bench", "socket", "nats", "types"]}
PART_PROGRAM = {"lmdb": "lmdb_ceiling", "sqlite": "sqlite_outbox", "redis": "redis_streams"}
SOURCES = {
    "bench": "evstore (in process)",
    "socket": "evstore (socket)",
    "sqlite": "SQLite outbox",
    "lmdb": "LMDB ceiling",
    "redis": "Redis Streams",
    "nats": "evstore-nats",
    "types": "evstore (types file)",
    "blobs": "evstore (blobs)",
}


class SuiteError(Exception):
    """A prerequisite is missing or a step failed: the message says which and what to do."""


def say(message):
    print(f"suite: {message}", file=sys.stderr, flush=True)


# MARK: Options


def parse_options():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=100000, help="events in the workload (default 100000)")
    p.add_argument("--single", type=int, default=100000,
                   help="evstore-bench: events appended one per durable transaction (default 100000)")
    p.add_argument("--sqlite-single", type=int, default=10000,
                   help="sqlite_outbox: events appended one per transaction, in each mode (default 10000)")
    p.add_argument("--large", type=int, default=1000000,
                   help="events in the socket benchmark's large store; 0 skips it (default 1000000)")
    p.add_argument("--repeat", type=int, default=3,
                   help="runs of the batched appends compared with each other; medians are reported (default 3)")
    p.add_argument("--out", default=str(ROOT / ".build" / "bench"), help="output directory (default .build/bench)")
    p.add_argument("--bin", default=str(ROOT / ".build" / "release"), help="evstore's release binaries")
    p.add_argument("--fieldops", help="path to fieldops.py (default: ../shared/workload/fieldops.py)")
    p.add_argument("--only", help="comma-separated parts to run: " + ", ".join(PARTS)
                   + "; or 'baselines' (lmdb, sqlite, redis) or 'evstore' (bench, socket)")
    p.add_argument("--skip-evstore", action="store_true", help="run the baselines only")
    options = p.parse_args()
    parts = []
    for name in (options.only.split(",") if options.only else PARTS):
        name = name.strip()
        if name in ALIASES:
            parts += ALIASES[name]
        elif name in PARTS:
            parts.append(name)
        else:
            p.error(f"--only: unknown part '{name}' (known: {', '.join(PARTS + list(ALIASES))})")
    if options.skip_evstore:
        parts = [part for part in parts if part not in ALIASES["evstore"]]
    options.parts = [part for part in PARTS if part in parts]  # always in the suite's order
    for flag in ("events", "repeat"):
        if getattr(options, flag) < 1:
            p.error(f"--{flag} must be at least 1")
    for flag in ("single", "sqlite_single", "large"):
        if getattr(options, flag) < 0:
            p.error(f"--{flag.replace('_', '-')} must not be negative")
    options.out = Path(options.out).resolve()
    options.bin = Path(options.bin).resolve()
    return options


# MARK: Prerequisites and building


def find_fieldops(options):
    candidates = [options.fieldops] if options.fieldops else [
        os.environ.get("WORKLOAD"), ROOT.parent / "shared" / "workload" / "fieldops.py",
        ROOT / "shared" / "workload" / "fieldops.py"]
    for candidate in candidates:
        if candidate and Path(candidate).is_file():
            return Path(candidate).resolve()
    raise SuiteError("fieldops.py not found: pass --fieldops PATH (make bench: WORKLOAD=path/to/fieldops.py)")


def header_exists(compiler, header):
    result = subprocess.run([compiler, "-E", "-x", "c", "-", "-o", os.devnull], input=f"#include <{header}>\n",
                            capture_output=True, text=True)
    return result.returncode == 0


def check_prerequisites(options):
    compiler = os.environ.get("CC", "cc")
    needs_c = [PART_PROGRAM[part] for part in options.parts if part in PART_PROGRAM]
    missing = []
    if needs_c and not shutil.which(compiler):
        raise SuiteError(f"no C compiler ({compiler}): install gcc or set CC")
    for program in needs_c:
        headers, package, _ = PROGRAMS[program]
        lost = [header for header in headers if not header_exists(compiler, header)]
        if lost:
            missing.append(f"{program} needs {', '.join(lost)} (Debian: {package})")
    if "redis" in options.parts and not shutil.which("redis-server"):
        missing.append("redis_streams needs redis-server (Debian: redis-server)")
    for part, binary in (("bench", "evstore-bench"), ("socket", "evstore-socket-bench")):
        if part in options.parts and not (options.bin / binary).is_file():
            missing.append(f"{options.bin / binary} is missing: swift build -c release --product {binary}")
    if "nats" in options.parts:
        if not (shutil.which("nats-server") or Path("/usr/sbin/nats-server").is_file()):
            missing.append("the bridge's benchmark needs nats-server (Debian: nats-server)")
        if not (options.bin / "evstore-nats").is_file():
            missing.append(f"{options.bin / 'evstore-nats'} is missing: swift build -c release --product evstore-nats")
    if "socket" in options.parts or "nats" in options.parts:
        for binary in ("evstored", "evctl"):
            if not (options.bin / binary).is_file():
                missing.append(f"{options.bin / binary} is missing: swift build -c release --product {binary}")
    if missing:
        raise SuiteError("missing prerequisites (make bench-deps installs the packages):\n  " + "\n  ".join(missing))
    return compiler


def build_baselines(options, compiler):
    """Compiles each selected C baseline when its binary is older than its sources."""
    out = options.out / "baselines"
    out.mkdir(parents=True, exist_ok=True)
    for part in options.parts:
        if part not in PART_PROGRAM:
            continue
        program = PART_PROGRAM[part]
        sources = [BASELINES / f"{program}.c", BASELINES / "common.c", BASELINES / "common.h"]
        binary = out / program
        if binary.exists() and all(binary.stat().st_mtime >= s.stat().st_mtime for s in sources):
            continue
        command = [compiler, *CFLAGS, "-o", str(binary), str(sources[0]), str(sources[1]), *PROGRAMS[program][2]]
        say("building: " + shlex.join(command))
        result = subprocess.run(command, capture_output=True, text=True)
        if result.returncode != 0:
            raise SuiteError(f"building {program} failed:\n{result.stderr}")
        if result.stderr.strip():
            print(result.stderr, file=sys.stderr)


def stamp_of(path):
    """The file beside a generated file that says what it was generated from."""
    return path.with_name(path.name + ".args")


def workload_file(options, fieldops, name, events):
    """OUT/NAME.ndjson with `events` fieldops events, generated unless a stamp says it is current."""
    path = options.out / f"{name}.ndjson"
    stamp = stamp_of(path)
    arguments = ["--events", str(events), "--seed", "7"]
    signature = " ".join(arguments) + " " + hashlib.sha256(fieldops.read_bytes()).hexdigest()
    if path.exists() and stamp.exists() and stamp.read_text() == signature:
        return path
    say(f"generating {path.name}: fieldops.py {' '.join(arguments)}")
    partial = path.with_suffix(".ndjson.partial")
    with open(partial, "wb") as output:
        result = subprocess.run([sys.executable, str(fieldops), *arguments], stdout=output)
    if result.returncode != 0:
        raise SuiteError(f"fieldops.py failed with status {result.returncode}")
    partial.replace(path)
    stamp.write_text(signature)
    return path


# MARK: Running


class Runner:
    def __init__(self, options):
        self.options = options
        self.logs = options.out / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.runs = []
        self.failures = []
        pinnable = shutil.which("taskset") and {0, 1} <= os.sched_getaffinity(0)
        self.pin = (lambda cpu: ["taskset", "-c", str(cpu)]) if pinnable else (lambda cpu: [])
        self.pinned = bool(pinnable)

    def run(self, part, command, stdout_path=None):
        """Runs one program, its output in OUT/logs/PART.log (stdout to stdout_path when given).
        Returns True when it succeeded."""
        log = self.logs / f"{part}.log"
        # What the part before left in the page cache is written out first, so no part
        # measures the writeback of another's files (Redis's append-only file, SQLite's WAL).
        os.sync()
        say(f"running {part}: {shlex.join(str(c) for c in command)}")
        start = time.monotonic()
        command = [str(c) for c in command]
        with open(log, "w") as log_file:
            if stdout_path:  # a baseline: its JSON on stdout, its progress on stderr
                with open(stdout_path, "w") as out:
                    result = subprocess.run(command, stdout=out, stderr=log_file)
            else:
                result = subprocess.run(command, stdout=log_file, stderr=subprocess.STDOUT)
        seconds = time.monotonic() - start
        self.runs.append({"part": part, "command": command, "seconds": round(seconds, 3),
                          "status": result.returncode, "log": str(log)})
        if result.returncode != 0:
            tail = log.read_text(errors="replace").splitlines()[-15:]
            self.failures.append(part)
            say(f"{part} failed with status {result.returncode} after {seconds:.1f} s; last lines of {log}:")
            print("\n".join("    " + line for line in tail), file=sys.stderr)
            return False
        say(f"{part} done in {seconds:.1f} s")
        return True


def wait_for_redis(path, process, timeout=10.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            return False
        try:
            with socket.socket(socket.AF_UNIX) as connection:
                connection.settimeout(1)
                connection.connect(str(path))
                connection.sendall(b"PING\r\n")
                if connection.recv(64).startswith(b"+PONG"):
                    return True
        except OSError:
            pass
        time.sleep(0.05)
    return False


def run_redis(runner, options, binary, workload, json_path):
    """Starts a scratch redis-server on CPU 0, runs the client on CPU 1, stops the server."""
    directory = Path(tempfile.mkdtemp(prefix="evstore-redis-"))  # short: socket paths are limited
    path = directory / "redis.sock"
    server_log = runner.logs / "redis-server.log"
    server = [*runner.pin(0), "redis-server", "--port", "0", "--unixsocket", str(path), "--unixsocketperm", "700",
              "--dir", str(directory), "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
              "--daemonize", "no", "--logfile", str(server_log)]
    say("starting " + shlex.join(server))
    process = subprocess.Popen(server, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        if not wait_for_redis(path, process):
            runner.failures.append("redis")
            say(f"redis-server did not answer on {path}; see {server_log}")
            return False
        return runner.run("redis", [*runner.pin(1), binary, "--workload", workload, "--socket", path], json_path)
    finally:
        stop(process)
        shutil.rmtree(directory, ignore_errors=True)


def stop(process):
    """SIGTERM, then SIGKILL after 30 s; reaps the process either way."""
    process.terminate()
    try:
        process.wait(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def wait_for_socket(path, process, timeout=15.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if path.exists():
            return True
        time.sleep(0.05)
    return False


def canonical_from_daemon(options, runner, workload, path):
    """Appends the workload to a scratch evstored and writes its log as the daemon holds it
    (`evctl --json log`: each stored event's canonical JSON). Returns True on success."""
    directory = Path(tempfile.mkdtemp(prefix="evstore-canonical-"))
    socket_path = directory / "evstored.sock"
    log = runner.logs / "canonical.log"
    say(f"writing {path.name}: the workload appended to a scratch evstored, read back with evctl --json log")
    with open(log, "w") as log_file:
        daemon = subprocess.Popen([str(options.bin / "evstored"), "--data-dir", str(directory / "data"),
                                   "--socket", str(socket_path)], stdout=log_file, stderr=subprocess.STDOUT)
        try:
            if not wait_for_socket(socket_path, daemon):
                say(f"evstored did not open {socket_path}; see {log}")
                return False
            evctl = [str(options.bin / "evctl"), "--socket", str(socket_path)]
            if subprocess.run(evctl + ["append", "--file", str(workload)], stdout=log_file,
                              stderr=subprocess.STDOUT).returncode != 0:
                say(f"evctl append --file failed; see {log}")
                return False
            partial = path.with_name(path.name + ".partial")
            with open(partial, "wb") as output:
                # The stored form in id order, without this node's seq: what export writes.
                if subprocess.run(evctl + ["export"], stdout=output, stderr=log_file).returncode != 0:
                    say(f"evctl export failed; see {log}")
                    return False
            with open(partial, "rb") as lines, open(workload, "rb") as inputs:
                if sum(1 for _ in lines) != sum(1 for _ in inputs):
                    say(f"evctl export wrote another number of events than the workload holds; see {log}")
                    return False
            partial.replace(path)
            return True
        finally:
            stop(daemon)
            shutil.rmtree(directory, ignore_errors=True)


def canonical_file(options, runner, workload, written_by_bench):
    """The workload's events as evstore stores them (canonical JSON, one a line), for the
    C ceiling; None when it cannot be had (the ceiling then compresses the workload)."""
    path = options.out / "canonical.ndjson"
    signature = stamp_of(workload).read_text()
    if written_by_bench:
        stamp_of(path).write_text(signature)
        return path, "evstore-bench --canonical-out"
    if path.exists() and stamp_of(path).exists() and stamp_of(path).read_text() == signature:
        return path, "a previous run (same workload)"
    stamp_of(path).unlink(missing_ok=True)
    if (options.bin / "evstored").is_file() and (options.bin / "evctl").is_file():
        if canonical_from_daemon(options, runner, workload, path):
            stamp_of(path).write_text(signature)
            return path, "evctl --json log of a scratch evstored that appended the workload"
    return None, "none: the workload's append inputs stand in"


def alternate_with_ceiling(options, runner, workload, canonical):
    """evstore's batched append and the C ceiling in alternating processes, at least five
    rounds of one each: a row with the median of the rounds' own ratios, or None.

    The two parts above run minutes apart, and this machine's speed swings that far: the C
    ceiling has run at 393,000 and 583,000 events/s in two runs of one sitting. A round's
    two processes run seconds apart, so their ratio leaves most of that swing out, and the
    median of five or more rounds the rest of it; a round costs a few seconds."""
    directory = options.out / "alternating"
    bench, ceiling = options.bin / "evstore-bench", options.out / "baselines" / "lmdb_ceiling"
    rounds = []
    for number in range(1, max(options.repeat, 5) + 1):
        shutil.rmtree(directory, ignore_errors=True)
        directory.mkdir(parents=True)
        part = f"alternating-{number}"
        if not runner.run(f"{part}-evstore", [bench, "--workload", workload, "--dir", directory / "evstore",
                                              "--profile-append"]):
            return None
        found = re.search(r"^append (\d+) events/s", (runner.logs / f"{part}-evstore.log").read_text(), re.M)
        answer = directory / "ceiling.json"
        if not found or not runner.run(f"{part}-ceiling", [ceiling, "--canonical", canonical, "--dir",
                                                          directory / "lmdb", "--repeat", 1], answer):
            return None
        rates = [row["value"] for row in rows_of(json.loads(answer.read_text()))
                 if row["name"].startswith("ceiling:")]
        if not rates:
            return None
        rounds.append((float(found[1]), rates[0]))
    shutil.rmtree(directory, ignore_errors=True)
    value = statistics.median(append / limit * 100 for append, limit in rounds)
    listed = ", ".join(f"{append:,.0f} / {limit:,.0f}" for append, limit in rounds)
    return {"name": "append / C ceiling, alternating processes", "value": value, "unit": "%",
            "note": f"median of {len(rounds)} rounds' ratios; evstore / C events/s: {listed}"}


def run_parts(options, runner, workload, large):
    """Runs the selected parts; returns {part: parsed JSON} for those that succeeded."""
    out, results = options.out, {}
    baselines = out / "baselines"
    canonical = out / "canonical.ndjson"

    def load(part, path):
        try:
            results[part] = json.loads(Path(path).read_text())
        except (OSError, ValueError) as error:
            runner.failures.append(part)
            say(f"cannot read {path}: {error}")

    written_by_bench = False
    if "bench" in options.parts:
        command = [options.bin / "evstore-bench", "--workload", workload, "--single", options.single,
                   "--repeat", options.repeat, "--dir", out / "stores", "--json", out / "results.json"]
        # The C ceiling compresses exactly what this run's evstore stored.
        canonical.unlink(missing_ok=True)
        command += ["--canonical-out", canonical]
        if runner.run("bench", command):
            load("bench", out / "results.json")
            written_by_bench = canonical.exists()
    if "lmdb" in options.parts:
        path, source = canonical_file(options, runner, workload, written_by_bench)
        options.canonical_source = source
        command = [baselines / "lmdb_ceiling", "--workload", workload, "--dir", baselines / "stores" / "lmdb",
                   "--repeat", options.repeat, *(["--canonical", path] if path else [])]
        if runner.run("lmdb", command, baselines / "lmdb_ceiling.json"):
            load("lmdb", baselines / "lmdb_ceiling.json")
        if "bench" in results and path:
            row = alternate_with_ceiling(options, runner, workload, path)
            if row:
                results["bench"].setdefault("results", []).append(row)
    if "sqlite" in options.parts:
        command = [baselines / "sqlite_outbox", "--workload", workload, "--dir", baselines / "stores" / "sqlite",
                   "--single", min(options.sqlite_single, options.events), "--repeat", options.repeat]
        if runner.run("sqlite", command, baselines / "sqlite_outbox.json"):
            load("sqlite", baselines / "sqlite_outbox.json")
    if "redis" in options.parts:
        if run_redis(runner, options, baselines / "redis_streams", workload, baselines / "redis_streams.json"):
            load("redis", baselines / "redis_streams.json")
    if "socket" in options.parts:
        command = [*runner.pin(1), options.bin / "evstore-socket-bench", "--bin", options.bin, "--workload", workload,
                   *(["--large", large] if large else []), "--dir", out / "daemons", "--json", out / "socket-results.json"]
        if runner.run("socket", command):
            load("socket", out / "socket-results.json")
    if "nats" in options.parts:
        # The bridge, the daemon and nats-server share the machine's CPUs, as on a gateway.
        command = [sys.executable, ROOT / "Benchmarks" / "nats_bridge.py", "--bin", options.bin, "--workload", workload,
                   "--json", out / "nats-results.json"]
        if runner.run("nats", command):
            load("nats", out / "nats-results.json")
    if "types" in options.parts:
        # What checking every append against a types file costs, in alternating rounds.
        command = [sys.executable, ROOT / "Benchmarks" / "types_file.py", "--bin", options.bin, "--workload", workload,
                   "--repeat", options.repeat, "--json", out / "types-results.json"]
        if runner.run("types", command):
            load("types", out / "types-results.json")
    if "blobs" in options.parts:
        # Blob put and get over the socket against cp of the same file on the same disk.
        command = [sys.executable, ROOT / "Benchmarks" / "blobs.py", "--bin", options.bin, "--repeat", options.repeat,
                   "--json", out / "blobs-results.json"]
        if runner.run("blobs", command):
            load("blobs", out / "blobs-results.json")
    return results


# MARK: Figures and targets


def rows_of(document):
    """The figure rows of a program's JSON: a list (evstore-socket-bench) or {"results": [...]}."""
    rows = document if isinstance(document, list) else document.get("results", [])
    return [row for row in rows if isinstance(row, dict) and "name" in row]


class Figures:
    def __init__(self, results):
        self.rows = []
        for part in PARTS:
            for row in rows_of(results.get(part, [])):
                value = row.get("value")
                self.rows.append({"source": SOURCES[part], "part": part, "name": row["name"],
                                  "value": value if isinstance(value, (int, float)) else None,
                                  "unit": row.get("unit", ""), "note": row.get("note", "")})

    def find(self, part, name):
        """The row of `part` named exactly `name`, else the first whose name matches it as
        a regular expression from the start; None when missing."""
        rows = [row for row in self.rows if row["part"] == part]
        for row in rows:
            if row["name"] == name:
                return row
        for row in rows:
            if re.match(name, row["name"]):
                return row
        return None

    def value(self, part, name):
        row = self.find(part, name)
        return row["value"] if row else None


def ratio_target(figures, title, numerator, denominator, goal, compare, scale=1.0, unit="×", note=""):
    top, bottom = figures.find(*numerator), figures.find(*denominator)
    value = None
    if top and bottom and top["value"] is not None and bottom["value"]:
        value = top["value"] / bottom["value"] * scale
    inputs = [{"source": SOURCES[part], "name": row["name"] if row else name, "value": row["value"] if row else None,
               "unit": row["unit"] if row else None} for (part, name), row in ((numerator, top), (denominator, bottom))]
    return {"target": title, "value": value, "unit": unit, "goal": goal, "met": None if value is None else compare(value),
            "inputs": inputs, "note": note}


def value_target(figures, title, figure, goal, compare, note=""):
    row = figures.find(*figure)
    value = row["value"] if row else None
    return {"target": title, "value": value, "unit": row["unit"] if row else "", "goal": goal,
            "met": None if value is None else compare(value),
            "inputs": [{"source": SOURCES[figure[0]], "name": row["name"] if row else figure[1], "value": value,
                        "unit": row["unit"] if row else ""}], "note": note}


def targets(figures, results):
    ceiling_input = results.get("lmdb", {}).get("info", {}).get("input", "") if isinstance(results.get("lmdb"), dict) else ""
    ceiling_note = "" if not ceiling_input or ceiling_input.startswith("canonical") else \
        "the ceiling compressed the workload's append inputs, not canonical JSON"
    append = ("bench", "append, 1000 per txn, decoded input")
    return [
        ratio_target(figures, "in-process batched append / SQLite WAL NORMAL, 1000 per txn", append,
                     ("sqlite", "append, 1000 per txn, synchronous=NORMAL"), "≥ 1.0×", lambda v: v >= 1.0),
        ratio_target(figures, "in-process batched append / bare-LMDB ceiling", append,
                     ("lmdb", "ceiling: bare LMDB \\+ zstd dictionary"), "≥ 60 %", lambda v: v >= 60,
                     scale=100, unit="%", note=ceiling_note),
        value_target(figures, "in-process batched append / bare-LMDB ceiling, alternating processes",
                     ("bench", "append / C ceiling, alternating processes"), "≥ 60 %", lambda v: v >= 60,
                     note="the two programs in turn, seconds apart, median of the rounds' ratios"),
        value_target(figures, "in-process batched append / evstore-bench's own ceiling",
                     ("bench", "append / ceiling"), "≥ 50 %", lambda v: v >= 50,
                     note="measured in alternating rounds in one process"),
        ratio_target(figures, "bulk evctl append --file / Redis Streams pipelined",
                     ("socket", "bulk evctl append --file"), ("redis", "append via EVALSHA"), "≥ 1.5×",
                     lambda v: v >= 1.5),
        value_target(figures, "bulk append with a watcher attached / without",
                     ("socket", "bulk append with a watcher / without"), "≥ 0.9×", lambda v: v >= 0.9,
                     note="alternating rounds, a fresh daemon each"),
        ratio_target(figures, "16 durable single-event clients / 1 client",
                     ("socket", "durable single-event appends, 16 clients"),
                     ("socket", "durable single-event appends, 1 client"), "≥ 8×", lambda v: v >= 8),
        ratio_target(figures, "get p99 over the socket / Redis get p99, 1 client",
                     ("socket", "get p99, 1 client\\(s\\)"), ("redis", "get p99, 1 client\\(s\\)"), "≤ 1.0×",
                     lambda v: v <= 1.0),
        ratio_target(figures, "get p99 over the socket / Redis get p99, 8 clients",
                     ("socket", "get p99, 8 client\\(s\\)"), ("redis", "get p99, 8 client\\(s\\)"), "≤ 1.0×",
                     lambda v: v <= 1.0),
        value_target(figures, "get p99 with 1,000 idle connections open / without, 1 client",
                     ("socket", "get p99 with 1,000 idle connections / without, 1 client\\(s\\)"), "≤ 1.2×",
                     lambda v: v <= 1.2),
        value_target(figures, "get p99 with 1,000 idle connections open / without, 8 clients",
                     ("socket", "get p99 with 1,000 idle connections / without, 8 client\\(s\\)"), "≤ 1.2×",
                     lambda v: v <= 1.2),
        ratio_target(figures, "event values / their canonical JSON",
                     ("bench", "event value per event, with dictionary"), ("bench", "canonical JSON per event"),
                     "≤ 50 %", lambda v: v <= 50, scale=100, unit="%"),
        ratio_target(figures, "bytes on disk per event / SQLite's",
                     ("bench", "bytes on disk per event \\(data.mdb\\)"),
                     ("sqlite", "bytes on disk per event \\(1000 per txn, NORMAL\\)"), "≤ 0.6×", lambda v: v <= 0.6),
        ratio_target(figures, "the daemon's store bytes per event / SQLite's",
                     ("socket", "baseline: store bytes per event \\(whole store\\)"),
                     ("sqlite", "bytes on disk per event \\(1000 per txn, NORMAL\\)"), "≤ 0.6×", lambda v: v <= 0.6,
                     note="data.mdb after a bulk load through the socket"),
        ratio_target(figures, "full sync / bulk append", ("socket", "full sync between two daemons"),
                     ("socket", "baseline: bulk evctl append --file, same events"), "≥ 1.2×", lambda v: v >= 1.2),
        value_target(figures, "no-op sync wall time", ("socket", "no-op sync wall time"), "< 20 ms", lambda v: v < 20),
        value_target(figures, "no-op sync bytes on the wire", ("socket", "no-op sync bytes on the wire"), "< 2048 B",
                     lambda v: v < 2048),
        value_target(figures, "start to READY, 1M-event store", ("socket", "start to READY, \\d+-event store"),
                     "< 200 ms", lambda v: v < 200),
        value_target(figures, "idle daemon's anonymous memory, 1M-event store",
                     ("socket", "idle daemon RssAnon, large store"), "≤ 30 MiB", lambda v: v <= 30),
        value_target(figures, "evstore-nats backlog / C publisher into the same server",
                     ("nats", "evstore-nats backlog / C publisher"), "≥ 0.8×", lambda v: v >= 0.8),
        value_target(figures, "bulk append with a types file / without", ("types", "types file / none"), "≥ 0.9×",
                     lambda v: v >= 0.9),
        value_target(figures, "blob put of 100 MiB / cp + fsync", ("blobs", "blob put / cp \\+ fsync"), "≥ 0.5×",
                     lambda v: v >= 0.5),
        value_target(figures, "blob get of 100 MiB / cp", ("blobs", "blob get / cp"), "≥ 0.5×", lambda v: v >= 0.5),
        value_target(figures, "blob sync of 100 MiB between two daemons / cp + fsync",
                     ("blobs", "blob sync between two daemons / cp \\+ fsync"), "≥ 0.5×", lambda v: v >= 0.5),
    ]


# MARK: Output


def number(value):
    if value is None:
        return "—"
    magnitude = abs(value)
    if magnitude >= 1000:
        return f"{value:,.0f}"
    if magnitude >= 100:
        return f"{value:.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.2f}"


def print_table(headers, rows):
    widths = [max(len(str(row[i])) for row in [headers, *rows]) for i in range(len(headers))]
    line = lambda cells: "  ".join(str(cell).ljust(width) for cell, width in zip(cells, widths)).rstrip()
    print(line(headers))
    print(line(["-" * width for width in widths]))
    for row in rows:
        print(line(row))


def machine_info(options, results):
    cpu = "unknown"
    try:
        for entry in Path("/proc/cpuinfo").read_text().splitlines():
            if entry.startswith("model name"):
                cpu = entry.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    memory = None
    try:
        for entry in Path("/proc/meminfo").read_text().splitlines():
            if entry.startswith("MemTotal:"):
                memory = int(entry.split()[1]) * 1024
    except OSError:
        pass

    def first_line(command):
        try:
            result = subprocess.run(command, capture_output=True, text=True, timeout=60)
            return (result.stdout or result.stderr).strip().splitlines()[0]
        except (OSError, IndexError, subprocess.TimeoutExpired):
            return None

    versions = {"python": platform.python_version(), "cc": first_line([os.environ.get("CC", "cc"), "--version"]),
                "swift": first_line(["swift", "--version"]) if shutil.which("swift") else None,
                "redis-server": first_line(["redis-server", "--version"]) if shutil.which("redis-server") else None}
    # The libraries the baselines actually linked report their own versions.
    for part, keys in (("sqlite", ["sqlite"]), ("lmdb", ["lmdb", "zstd"]), ("redis", ["hiredis"])):
        info = results.get(part, {}).get("info", {}) if isinstance(results.get(part), dict) else {}
        versions.update({key: info[key] for key in keys if key in info})
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu, "nproc": os.cpu_count(), "cpus_usable": len(os.sched_getaffinity(0)),
        "memory_bytes": memory, "kernel": platform.release(), "system": platform.system(),
        "pinned": "redis-server and clients on CPU 0 and 1 (taskset)" if shutil.which("taskset")
        and {0, 1} <= os.sched_getaffinity(0) else "no pinning (taskset missing or fewer than 2 CPUs)",
    }, versions


def main():
    options = parse_options()
    try:
        fieldops = find_fieldops(options)
        compiler = check_prerequisites(options)
        options.out.mkdir(parents=True, exist_ok=True)
        build_baselines(options, compiler)
        workload = workload_file(options, fieldops, "workload", options.events)
        large = workload_file(options, fieldops, "large", options.large) \
            if options.large and "socket" in options.parts else None
    except SuiteError as error:
        say(str(error))
        return 1

    runner = Runner(options)
    started = time.monotonic()
    results = run_parts(options, runner, workload, large)
    figures = Figures(results)
    goals = targets(figures, results)
    machine, versions = machine_info(options, results)

    print()
    print(f"evstore benchmark suite, {machine['date']}: {options.events:,} events; {machine['cpu']}, "
          f"{machine['nproc']} CPUs, Linux {machine['kernel']}; {machine['pinned']}")
    print()
    print_table(["source", "figure", "value", "unit", "note"],
                [[row["source"], row["name"], number(row["value"]), row["unit"], row["note"]] for row in figures.rows])
    print()
    target_rows = []
    for goal in goals:
        inputs = " / ".join(f"{number(i['value'])} {i['unit'] or ''}".strip() for i in goal["inputs"])
        measured = "—" if goal["value"] is None else f"{number(goal['value'])}{' ' if goal['unit'] != '×' else ''}{goal['unit']}"
        result = "—" if goal["met"] is None else ("met" if goal["met"] else "NOT met")
        target_rows.append([goal["target"], measured, goal["goal"], result, inputs + (f"  ({goal['note']})" if goal["note"] else "")])
    print_table(["target", "measured", "goal", "result", "from"], target_rows)

    document = {
        "machine": machine, "versions": versions,
        "options": {"events": options.events, "single": options.single, "sqlite_single": options.sqlite_single,
                    "large": options.large, "repeat": options.repeat, "parts": options.parts,
                    "workload": str(workload), "large_workload": str(large) if large else None,
                    "canonical_json_for_the_ceiling": getattr(options, "canonical_source", None)},
        "figures": [{key: row[key] for key in ("source", "name", "value", "unit", "note")} for row in figures.rows],
        "targets": goals,
        "baselines": {SOURCES[part]: {"info": results[part].get("info", {})} for part in ("lmdb", "sqlite", "redis")
                      if isinstance(results.get(part), dict)},
        "runs": runner.runs, "failed": runner.failures,
        "seconds": round(time.monotonic() - started, 1),
    }
    path = options.out / "suite.json"
    path.write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    print()
    print(f"written to {path}" + (f"; FAILED: {', '.join(runner.failures)} (logs in {runner.logs})" if runner.failures else ""))
    return 1 if runner.failures else 0


if __name__ == "__main__":
    sys.exit(main())
