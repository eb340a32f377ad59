"""What the client does without a daemon: the socket rule, the error classes, the event
builder, ids, and the type check."""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest
from typing import Any, Callable, List, Optional

import evstore
from evstore import Event

from .support import CLIENT_DIR


class SocketResolutionTests(unittest.TestCase):
    """The rule of evctl (Sources/ctl/Client/SocketLocation.swift)."""

    def test_argument_beats_the_environment(self) -> None:
        env = {"EVSTORE_SOCKET": "/from/env.sock", "XDG_RUNTIME_DIR": "/xdg"}
        self.assertEqual(evstore.resolve_socket("/given.sock", env), "/given.sock")

    def test_evstore_socket_beats_the_defaults(self) -> None:
        with tempfile.TemporaryDirectory() as runtime:
            os.makedirs(os.path.join(runtime, "evstore"))
            open(os.path.join(runtime, "evstore", "evstored.sock"), "w").close()
            env = {"EVSTORE_SOCKET": "/from/env.sock", "XDG_RUNTIME_DIR": runtime}
            self.assertEqual(evstore.resolve_socket(None, env), "/from/env.sock")
            self.assertEqual(evstore.resolve_socket("", env), "/from/env.sock")

    def test_the_process_environment_is_the_default(self) -> None:
        saved = os.environ.get("EVSTORE_SOCKET")
        os.environ["EVSTORE_SOCKET"] = "/from/process/env.sock"
        try:
            self.assertEqual(evstore.resolve_socket(), "/from/process/env.sock")
        finally:
            if saved is None:
                del os.environ["EVSTORE_SOCKET"]
            else:
                os.environ["EVSTORE_SOCKET"] = saved

    def test_first_default_that_exists(self) -> None:
        with tempfile.TemporaryDirectory() as runtime:
            env = {"EVSTORE_SOCKET": "", "XDG_RUNTIME_DIR": runtime}
            candidates = evstore.default_socket_candidates(env)
            self.assertEqual(candidates, [runtime + "/evstore/evstored.sock", "/run/evstore/evstored.sock",
                                          "./.evstore/evstored.sock"])
            existing = [c for c in candidates if os.path.exists(c)]
            # None of them exists: the first, for the error message.
            expected = existing[0] if existing else candidates[0]
            self.assertEqual(evstore.resolve_socket(None, env), expected)
            os.makedirs(os.path.join(runtime, "evstore"))
            open(candidates[0], "w").close()
            self.assertEqual(evstore.resolve_socket(None, env), candidates[0])

    def test_without_xdg_runtime_dir(self) -> None:
        self.assertEqual(evstore.default_socket_candidates({"XDG_RUNTIME_DIR": ""}),
                         ["/run/evstore/evstored.sock", "./.evstore/evstored.sock"])
        with tempfile.TemporaryDirectory() as cwd:
            old = os.getcwd()
            os.chdir(cwd)
            try:
                os.makedirs(".evstore")
                open(".evstore/evstored.sock", "w").close()
                found = evstore.resolve_socket(None, {})
                if not os.path.exists("/run/evstore/evstored.sock"):
                    self.assertEqual(found, "./.evstore/evstored.sock")
            finally:
                os.chdir(old)


class ErrorTests(unittest.TestCase):
    def test_every_reason_has_its_class_and_code(self) -> None:
        table = [
            (-32700, "parse_error", evstore.ParseError),
            (-32600, "invalid_request", evstore.InvalidRequest),
            (-32600, "too_large", evstore.TooLarge),
            (-32601, "method_not_found", evstore.MethodNotFound),
            (-32602, "invalid_params", evstore.InvalidParams),
            (-32603, "internal", evstore.InternalError),
            (-32001, "not_found", evstore.NotFound),
            (-32002, "conflict", evstore.Conflict),
            (-32003, "deleted", evstore.Deleted),
            (-32004, "too_large", evstore.TooLarge),
            (-32005, "invalid_event", evstore.InvalidEvent),
            (-32006, "storage_full", evstore.StorageFull),
            (-32007, "unavailable", evstore.Unavailable),
            (-32008, "forbidden", evstore.Forbidden),
            (-32009, "corrupt", evstore.Corrupt),
        ]
        for code, reason, cls in table:
            error = evstore.error_from_response(
                {"code": code, "message": f"m {reason}", "data": {"reason": reason, "index": 2}})
            self.assertIs(type(error), cls, reason)
            self.assertEqual((error.code, error.reason, error.message, error.index), (code, reason, f"m {reason}", 2))
            self.assertEqual(str(error), f"m {reason}")
            # Without data, the code decides (-32600 is invalid_request then).
            bare = evstore.error_from_response({"code": code, "message": "m"})
            self.assertEqual(bare.reason, "invalid_request" if code == -32600 else reason)

    def test_unknown_reason_or_code(self) -> None:
        error = evstore.error_from_response({"code": -32050, "message": "new", "data": {"reason": "brand_new"}})
        self.assertIs(type(error), evstore.EvstoreError)
        self.assertEqual((error.code, error.reason), (-32050, "brand_new"))
        self.assertIsNone(evstore.error_from_response({"code": 1, "message": "x"}).reason)

    def test_connection_errors_are_connection_errors(self) -> None:
        for cls in (evstore.Unreachable, evstore.ConnectionLost, evstore.Timeout):
            error = cls("gone", socket_path="/s")
            self.assertIsInstance(error, ConnectionError)
            self.assertIsInstance(error, evstore.EvstoreError)
            self.assertEqual((str(error), error.socket_path, error.code), ("gone", "/s", None))
        self.assertIsInstance(evstore.Timeout("t", socket_path="/s"), TimeoutError)

    def test_watch_overflow(self) -> None:
        error = evstore.WatchOverflow("behind", resume_after=4711)
        self.assertEqual((error.reason, error.resume_after), ("too_far_behind", 4711))


class EventTests(unittest.TestCase):
    def test_builders(self) -> None:
        self.assertEqual(Event.status("job/1", "new", by="ana", key="k", at="2026-01-01T00:00:00Z", if_match=7),
                         {"entity": "job/1", "kind": "status", "status": "new", "by": "ana", "key": "k",
                          "at": "2026-01-01T00:00:00Z", "if_match": 7})
        self.assertEqual(Event.edit("job/1", {"a": None}), {"entity": "job/1", "kind": "edit", "fields": {"a": None}})
        self.assertEqual(Event.edit("job/1", {"a": 1}, resolve=True),
                         {"entity": "job/1", "kind": "edit", "fields": {"a": 1}, "resolve": True})
        self.assertEqual(Event.add("job/1", "parts", [1]), {"entity": "job/1", "kind": "add", "set": "parts",
                                                            "element": [1]})
        self.assertEqual(Event.remove("job/1", "parts", "x")["kind"], "remove")
        self.assertEqual(Event.delete("job/1"), {"entity": "job/1", "kind": "delete"})
        self.assertEqual(Event.restore("job/1"), {"entity": "job/1", "kind": "restore"})
        self.assertIsInstance(Event.delete("job/1"), dict)

    def test_blob_reference(self) -> None:
        put = {"hash": "sha256:" + "ab" * 32, "size": 48213, "existed": False}
        self.assertEqual(evstore.blob_reference(put, "image/jpeg"),
                         {"$blob": put["hash"], "size": 48213, "type": "image/jpeg"})
        self.assertEqual(evstore.blob_reference(put), {"$blob": put["hash"], "size": 48213})
        for bad in ({"hash": put["hash"]}, {"hash": put["hash"], "size": True}, {"size": 1}):
            with self.assertRaises(ValueError):
                evstore.blob_reference(bad)
        with self.assertRaises(TypeError):
            evstore.blob_reference(put, 3)  # type: ignore[arg-type]

    def test_ids(self) -> None:
        first = evstore.new_ulid()
        time.sleep(0.002)
        second = evstore.new_ulid()
        for ulid in (first, second):
            self.assertRegex(ulid, r"^[0-7][0-9A-HJKMNP-TV-Z]{25}$")
        self.assertLess(first[:10], second[:10])  # the time part grows
        self.assertTrue(re.match(r"^job/[0-9A-Z]{26}$", evstore.new_entity_id("job")))
        alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
        stamp = 0
        for char in second[:10]:
            stamp = stamp * 32 + alphabet.index(char)
        self.assertLess(abs(stamp - time.time() * 1000), 60_000)


class FakeDaemon:
    """A Unix socket server that answers each request line with what `answer` returns
    for it (None: no answer at all)."""

    def __init__(self, answer: Callable[[Any], Optional[bytes]]) -> None:
        self.answer = answer
        self.root = tempfile.TemporaryDirectory(prefix="evstore-py-")
        self.path = os.path.join(self.root.name, "fake.sock")
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.server.bind(self.path)
        self.server.listen()
        self.connections: List[socket.socket] = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.connections.append(conn)
            threading.Thread(target=self.handle, args=(conn,), daemon=True).start()

    def handle(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as lines:
            for line in lines:
                reply = self.answer(json.loads(line))
                if reply is not None:
                    conn.sendall(reply)

    def close(self) -> None:
        self.server.close()
        for conn in self.connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self.root.cleanup()


def reply(request: Any, result: Any) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": request["id"], "result": result}).encode() + b"\n"


class ConnectionFailureTests(unittest.TestCase):
    """What the client does with a daemon that misbehaves: each failure is raised, and the
    next call works on a new connection, in step."""

    def fake(self, answer: Callable[[Any], Optional[bytes]]) -> FakeDaemon:
        fake = FakeDaemon(answer)
        self.addCleanup(fake.close)
        return fake

    def test_timeout_then_a_new_connection(self) -> None:
        silent = {"status"}
        fake = self.fake(lambda r: None if r["method"] in silent else reply(r, {"method": r["method"]}))
        with evstore.connect(fake.path, timeout=0.2) as db:
            with self.assertRaises(evstore.Timeout) as caught:
                db.status()
            self.assertIsInstance(caught.exception, TimeoutError)
            silent.clear()  # the late answer to status never comes on the new connection
            self.assertEqual(db.call("peers.list"), {"method": "peers.list"})
            self.assertEqual(len(fake.connections), 2)

    def test_garbage_and_answers_out_of_step(self) -> None:
        answers = [b"<html>captive portal</html>\n", b'{"jsonrpc":"2.0","id":999,"result":{}}\n']
        fake = self.fake(lambda r: answers.pop(0) if answers else reply(r, "fine"))
        with evstore.connect(fake.path, timeout=5) as db:
            with self.assertRaises(evstore.ProtocolError):
                db.status()
            with self.assertRaises(evstore.ProtocolError):
                db.status()
            self.assertEqual(db.status(), "fine")
            self.assertEqual(len(fake.connections), 3)

    def test_notifications_are_skipped_and_an_error_with_a_null_id_is_raised(self) -> None:
        def answer(request: Any) -> bytes:
            if request["method"] == "get":
                return (b'{"jsonrpc":"2.0","method":"event","params":{"event":{}}}\n' + reply(request, {"ok": 1}))
            return (b'{"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"the line is too long",'
                    b'"data":{"reason":"too_large"}}}\n')

        fake = self.fake(answer)
        with evstore.connect(fake.path, timeout=5) as db:
            self.assertEqual(db.get("job/1"), {"ok": 1})
            with self.assertRaises(evstore.TooLarge) as caught:
                db.status()
            self.assertEqual(caught.exception.code, -32600)
            self.assertEqual(db.get("job/1"), {"ok": 1})
            self.assertEqual(len(fake.connections), 1)  # daemon errors keep the connection

    def test_json_cannot_carry_nan(self) -> None:
        fake = self.fake(lambda r: reply(r, {"ids": ["A"], "versions": {}, "appended": 1}))
        with evstore.connect(fake.path, timeout=5) as db:
            with self.assertRaises(ValueError):
                db.append(Event.edit("job/1", {"x": float("nan")}))
            self.assertEqual(db.append(Event.delete("job/1")).ids, ["A"])
            self.assertEqual(len(fake.connections), 1)


class TypeCheckTests(unittest.TestCase):
    def test_mypy_strict(self) -> None:
        try:
            import mypy  # noqa: F401
        except ImportError:
            self.skipTest("mypy is not installed (pip install mypy) - the type check is skipped")
        result = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "evstore"],
                                cwd=CLIENT_DIR, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                timeout=300)
        self.assertEqual(result.returncode, 0, result.stdout)


if __name__ == "__main__":
    unittest.main()
