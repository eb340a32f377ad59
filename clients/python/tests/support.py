"""Real `evstored` processes for the client's tests, each in a scratch directory.

The binaries come from $EVSTORE_BIN_DIR, else the repository's .build/debug. A daemon is
ready when it says READY=1 through NOTIFY_SOCKET (sd_notify), as Tests/Harness/evharness.py
waits for it.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import unittest
from typing import Any, Dict, Optional

CLIENT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
REPO = os.path.dirname(os.path.dirname(CLIENT_DIR))


def bin_dir() -> str:
    """The directory of evstored: $EVSTORE_BIN_DIR, else <repo>/.build/debug."""
    directory = os.environ.get("EVSTORE_BIN_DIR") or os.path.join(REPO, ".build", "debug")
    return os.path.abspath(directory)


def evstored_path() -> str:
    path = os.path.join(bin_dir(), "evstored")
    if not os.access(path, os.X_OK):
        raise RuntimeError(f"no evstored in {bin_dir()}: build it (swift build) or set EVSTORE_BIN_DIR")
    return path


class Daemon:
    """An `evstored` whose data, socket, config file and log live in a fresh temporary
    directory (removed by `cleanup`)."""

    def __init__(self, settings: Optional[Dict[str, Any]] = None) -> None:
        self.root = tempfile.mkdtemp(prefix="evstore-py-")
        self.data_dir = os.path.join(self.root, "data")
        self.socket_path = os.path.join(self.root, "evstored.sock")
        self.config_path = os.path.join(self.root, "evstored.json")
        self.log_path = os.path.join(self.root, "stderr.log")
        self.notify_path = os.path.join(self.root, "notify.sock")
        config: Dict[str, Any] = {"node": "pytest", "log_level": "notice"}
        config.update(settings or {})
        with open(self.config_path, "w") as f:
            json.dump(config, f)
        self.proc: Optional["subprocess.Popen[bytes]"] = None

    def start(self, timeout: float = 30.0) -> "Daemon":
        if os.path.exists(self.notify_path):
            os.unlink(self.notify_path)
        notify = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        notify.bind(self.notify_path)
        env = {k: v for k, v in os.environ.items() if not k.startswith("EVSTORE_")}
        env["NOTIFY_SOCKET"] = self.notify_path
        for name in ("LISTEN_FDS", "LISTEN_PID", "WATCHDOG_USEC"):
            env.pop(name, None)
        try:
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [evstored_path(), "--config", self.config_path, "--data-dir", self.data_dir,
                     "--socket", self.socket_path],
                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log, env=env,
                    start_new_session=True)
            deadline = time.monotonic() + timeout
            while True:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise RuntimeError(f"evstored: no READY=1 within {timeout} s; see {self.log_path}")
                notify.settimeout(min(remaining, 0.2))
                try:
                    message = notify.recv(4096).decode(errors="replace")
                except socket.timeout:
                    if self.proc.poll() is not None:
                        raise RuntimeError(f"evstored exited with {self.proc.returncode} before READY:\n{self.log()}")
                    continue
                if "READY=1" in message.split("\n"):
                    return self
        except BaseException:
            self.stop()
            raise
        finally:
            notify.close()

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM, and SIGKILL when it does not stop in time."""
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.root, ignore_errors=True)

    def log(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return f.read()[-4000:].decode(errors="replace")
        except OSError:
            return ""


class DaemonTestCase(unittest.TestCase):
    """A test class with one `evstored` of its own, started before its first test and
    stopped (its files removed) after its last."""

    daemon: Daemon

    @classmethod
    def setUpClass(cls) -> None:
        cls.daemon = Daemon().start()

    @classmethod
    def tearDownClass(cls) -> None:
        cls.daemon.cleanup()
