"""Shared pieces of the crash and soak harnesses: a JSON-RPC client for the daemon's Unix
socket, real `evstored` processes in a scratch directory, and cleanup on every exit path.

Python 3 standard library only.
"""
import atexit
import hashlib
import itertools
import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class HarnessFailure(Exception):
    """A check failed: the message says what was expected and what was found."""


class RPCError(Exception):
    def __init__(self, method, error):
        self.method = method
        self.error = error
        self.code = error.get("code")
        self.reason = (error.get("data") or {}).get("reason")
        super().__init__(f"{method}: {error.get('message')} ({self.reason}, {self.code})")


class Client:
    """One connection to a daemon; requests may be pipelined (`send` many, then `receive`).

    Notifications (`watch`) that arrive while waiting for a response are handed to
    `on_notification` when given, else queued in `notifications`."""

    def __init__(self, path, timeout=30.0, on_notification=None):
        self.path = path
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(path)
        self.reader = self.sock.makefile("rb", buffering=1 << 16)
        self.ids = itertools.count(1)
        self.on_notification = on_notification
        self.notifications = []

    def send(self, method, params=None):
        request_id = next(self.ids)
        request = {"jsonrpc": "2.0", "id": request_id, "method": method}
        if params is not None:
            request["params"] = params
        self.sock.sendall(json.dumps(request, separators=(",", ":")).encode() + b"\n")
        return request_id

    def read_message(self):
        line = self.reader.readline()
        if not line:
            raise ConnectionError(f"{self.path}: the daemon closed the connection")
        return json.loads(line)

    def receive(self, method="?"):
        """The next response (skipping notifications): its result, or raises RPCError."""
        while True:
            message = self.read_message()
            if "id" in message:
                break
            if self.on_notification:
                self.on_notification(message)
            else:
                self.notifications.append(message)
        if "error" in message:
            raise RPCError(method, message["error"])
        return message["result"]

    def call(self, method, params=None):
        self.send(method, params)
        return self.receive(method)

    def close(self):
        try:
            self.reader.close()
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class LineSocket:
    """Reads lines from a socket with a timeout per call, without breaking the stream (a
    timed-out buffered file cannot be read again). Takes over what `reader` buffered."""

    def __init__(self, sock, reader=None):
        self.sock = sock
        self.buffer = bytearray(reader.peek(1 << 20) if reader else b"")
        if reader:
            reader.read(len(self.buffer))

    def readline(self, timeout):
        """One line without its newline, or None when nothing complete came in time."""
        deadline = time.monotonic() + timeout
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[:end + 1]
                return line
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([self.sock], [], [], remaining)
            if not ready:
                return None
            chunk = self.sock.recv(1 << 16)
            if not chunk:
                raise ConnectionError("the daemon closed the connection")
            self.buffer += chunk


def all_events(client, **filters):
    """Every stored event of a node, paging through `log`: in seq order (the order the
    node stored them), or in id order with ``order="id"`` (``after`` then an event id)."""
    after = filters.pop("after", None)
    while True:
        params = dict(filters, limit=10000)
        if after is not None:
            params["after"] = after
        page = client.call("log", params)
        yield from page["events"]
        after = page["next"]
        if after is None:
            return


def id_hash(event_id):
    """A 64-bit hash of an id: sums of these fingerprint a set of events, order-free."""
    return int.from_bytes(hashlib.blake2b(event_id.encode(), digest_size=8).digest(), "little")


# --- processes -------------------------------------------------------------------------

_children = set()


def _kill_children():
    for proc in list(_children):
        if proc.poll() is None:
            try:
                proc.kill()
                proc.wait(timeout=5)
            except Exception:
                pass
    _children.clear()


def _on_signal(number, frame):
    _kill_children()
    sys.stderr.write(f"\ninterrupted by signal {number}; daemons stopped\n")
    os._exit(130 if number == signal.SIGINT else 143)


def install_cleanup():
    """Kills every daemon this process started on exit, Ctrl-C or SIGTERM."""
    atexit.register(_kill_children)
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)


def track(proc):
    _children.add(proc)
    return proc


def untrack(proc):
    _children.discard(proc)


def add_run_arguments(parser):
    """The options both harnesses take: where the binaries are, and what to keep."""
    parser.add_argument("--bin", help="directory of evstored (env EVSTORE_BIN_DIR; .build/release, "
                        "or .build/debug with --short)")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the scratch directory even when the run passes")
    parser.add_argument("--tmp", help="parent of the scratch directory")


def bin_dir(explicit, default):
    directory = explicit or os.environ.get("EVSTORE_BIN_DIR") or default
    if not os.path.isabs(directory):
        directory = os.path.join(REPO, directory)
    for name in ("evstored",):
        if not os.access(os.path.join(directory, name), os.X_OK):
            raise SystemExit(f"no {name} in {directory}: build it first (see docs/testing.md)")
    return directory


def scratch_dir(prefix, keep_root=None):
    base = keep_root or os.environ.get("EVSTORE_HARNESS_TMP") or tempfile.gettempdir()
    os.makedirs(base, exist_ok=True)
    return tempfile.mkdtemp(prefix=prefix, dir=base)


class Daemon:
    """A real `evstored` in `root`: its data, socket, config file and stderr log live there.

    `start()` returns once the daemon said READY=1 through NOTIFY_SOCKET (sd_notify)."""

    def __init__(self, bindir, root, name, settings=None, peers=None):
        self.bindir = bindir
        self.root = root
        self.name = name
        os.makedirs(root, exist_ok=True)
        self.data_dir = os.path.join(root, "data")
        self.socket_path = os.path.join(root, "evstored.sock")
        self.config_path = os.path.join(root, "evstored.json")
        self.log_path = os.path.join(root, "stderr.log")
        self.notify_path = os.path.join(root, "notify.sock")
        self.settings = dict(settings or {})
        self.peers = list(peers or [])
        self.proc = None
        self.starts = 0
        self.node_id = None
        self.write_config()

    @property
    def url(self):
        return "unix://" + self.socket_path

    def write_config(self):
        config = {"node": self.name, "log_level": "notice"}
        config.update(self.settings)
        if self.peers:
            config["peers"] = self.peers
        with open(self.config_path, "w") as f:
            json.dump(config, f)

    def start(self, timeout=30.0):
        assert self.proc is None or self.proc.poll() is not None
        if os.path.exists(self.notify_path):
            os.unlink(self.notify_path)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(self.notify_path)
        env = {k: v for k, v in os.environ.items() if not k.startswith("EVSTORE_")}
        env["NOTIFY_SOCKET"] = self.notify_path
        env.pop("LISTEN_FDS", None)
        env.pop("WATCHDOG_USEC", None)
        log = open(self.log_path, "ab")
        log.write(f"--- start {self.starts + 1} at {time.strftime('%H:%M:%S')}\n".encode())
        log.flush()
        started = time.monotonic()
        self.proc = track(subprocess.Popen(
            [os.path.join(self.bindir, "evstored"), "--config", self.config_path,
             "--data-dir", self.data_dir, "--socket", self.socket_path],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env,
            start_new_session=True))
        log.close()
        self.starts += 1
        try:
            deadline = started + timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise HarnessFailure(f"{self.name}: no READY=1 within {timeout} s; see {self.log_path}")
                notify.settimeout(min(remaining, 0.2))
                try:
                    message = notify.recv(4096).decode(errors="replace")
                except socket.timeout:
                    if self.proc.poll() is not None:
                        raise HarnessFailure(
                            f"{self.name}: evstored exited with {self.proc.returncode} before READY; "
                            f"last log lines:\n{self.log_tail()}")
                    continue
                if "READY=1" in message.split("\n"):
                    break
        finally:
            notify.close()
        self.ready_seconds = time.monotonic() - started
        return self.ready_seconds

    def kill9(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        if self.proc:
            untrack(self.proc)

    def stop(self, timeout=30.0):
        """SIGTERM and wait; the exit status."""
        if not self.proc or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else None
        self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
            raise HarnessFailure(f"{self.name}: did not stop within {timeout} s after SIGTERM")
        untrack(self.proc)
        return code

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def client(self, timeout=60.0, on_notification=None):
        return Client(self.socket_path, timeout=timeout, on_notification=on_notification)

    def call(self, method, params=None, timeout=120.0):
        with self.client(timeout=timeout) as c:
            return c.call(method, params)

    def rss_kib(self):
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def fds(self):
        return len(os.listdir(f"/proc/{self.proc.pid}/fd"))

    def log_tail(self, lines=15):
        try:
            with open(self.log_path, "rb") as f:
                return b"".join(f.readlines()[-lines:]).decode(errors="replace")
        except OSError:
            return ""


def workload_path():
    for candidate in (os.environ.get("WORKLOAD"), os.path.join(REPO, "..", "shared", "workload", "fieldops.py"),
                      os.path.join(REPO, "shared", "workload", "fieldops.py"), "/work/shared/workload/fieldops.py"):
        if candidate and os.path.exists(candidate):
            return os.path.abspath(candidate)
    return None


def fieldops_stream(seed, events=10_000_000):
    """Lines of the shared field workload, generated lazily (a child process), or a small
    built-in generator of the same shape when the workload script is not there."""
    path = workload_path()
    if path:
        proc = track(subprocess.Popen([sys.executable, path, "--events", str(events), "--seed", str(seed)],
                                      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, bufsize=1 << 16))
        try:
            for line in proc.stdout:
                yield json.loads(line)
        finally:
            proc.kill()
            proc.wait()
            untrack(proc)
    else:
        import random
        rng = random.Random(seed)
        for n in itertools.count():
            entity = f"job/s{seed}-{n // 8}"
            if n % 8 == 0:
                yield {"entity": entity, "kind": "edit", "fields": {"address": f"{rng.randrange(999)} Main St"}}
            else:
                yield {"entity": entity, "kind": "status", "status": rng.choice(["assigned", "en_route", "on_site"])}


class WorkloadPool:
    """The field workload generated once (fieldops.py is slow: a few thousand events a
    second) and replayed: each stream walks the pool again and again, with a suffix on
    every entity id per stream and pass, so every pass writes jobs of its own in the same
    realistic order."""

    def __init__(self, seed, size=6000):
        self.events = []
        stream = fieldops_stream(seed, events=size)
        for _ in range(size):
            self.events.append(next(stream))
        stream.close()

    def stream(self, index):
        for round_number in itertools.count():
            suffix = f"-s{index}r{round_number}"
            for event in self.events:
                copy = dict(event)
                copy["entity"] = event["entity"] + suffix
                yield copy


def least_squares_slope(points):
    """Slope of y over x by least squares (None with fewer than 2 points)."""
    n = len(points)
    if n < 2:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    return sum((x - mx) * (y - my) for x, y in points) / sxx


def remove_tree(path):
    shutil.rmtree(path, ignore_errors=True)


def print_table(rows, headers):
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    print("  ".join(str(h).ljust(w) for h, w in zip(headers, widths)))
    for row in rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
