"""The client against a real daemon: one `evstored` for the class, each test on
entities of its own."""
import hashlib
import json
import os
import signal
import threading
import time
import unittest
from typing import Any, Dict, List

import evstore
from evstore import Event

from .support import Daemon, DaemonTestCase

TIMEOUT = 20.0


class ClientTests(DaemonTestCase):
    def setUp(self) -> None:
        self.db = evstore.connect(self.daemon.socket_path, timeout=TIMEOUT)
        self.addCleanup(self.db.close)

    # --- append and get ---

    def test_counters_add_up_and_refuse_overflow(self) -> None:
        job = evstore.new_entity_id("job")
        self.db.append(Event.incr(job, "parts_used", 2), Event.incr(job, "parts_used", 3),
                       Event.incr(job, "returns", -1))
        self.assertEqual(self.db.get(job)["counters"], {"parts_used": 5, "returns": -1})
        self.db.append(Event.incr(job, "big", 2**63 - 1))
        with self.assertRaises(evstore.InvalidEvent) as caught:
            self.db.append(Event.incr(job, "parts_used", 1), Event.incr(job, "big", 1))
        self.assertIn("64-bit", str(caught.exception))
        # The batch is all or nothing.
        self.assertEqual(self.db.get(job)["counters"]["parts_used"], 5)
        with self.assertRaises(TypeError):
            Event.incr(job, "parts_used", 1.5)  # type: ignore[arg-type]

    def test_round_trip_of_every_kind(self) -> None:
        job = evstore.new_entity_id("job")
        result = self.db.append(
            Event.status(job, "assigned", by="ana"),
            Event.edit(job, {"address": "12 Main St", "floor": 3, "phone": "+15550100"}),
            Event.add(job, "parts", "valve-3"),
            Event.add(job, "parts", {"sku": "gasket", "n": 2}),
        )
        self.assertEqual(len(result.ids), 4)
        self.assertEqual(result.appended, 4)
        self.assertEqual(result.id, result.ids[0])
        self.assertEqual(result.versions, {job: result.ids[-1]})

        state = self.db.get(job)
        self.assertEqual(state["entity"], job)
        self.assertEqual(state["version"], result.ids[-1])
        self.assertEqual(state["events"], 4)
        self.assertFalse(state["deleted"])
        self.assertEqual(state["status"]["current"], "assigned")
        self.assertEqual(state["fields"], {"address": "12 Main St", "floor": 3, "phone": "+15550100"})
        self.assertEqual(state["sets"], {"parts": ["valve-3", {"n": 2, "sku": "gasket"}]})

        self.db.append(Event.status(job, "on_site"), Event.edit(job, {"phone": None}),
                       Event.remove(job, "parts", "valve-3"))
        state = self.db.get(job)
        self.assertEqual(state["status"]["current"], "on_site")
        self.assertEqual([h["status"] for h in state["status"]["history"]], ["assigned", "on_site"])
        self.assertNotIn("phone", state["fields"])
        self.assertEqual(state["sets"]["parts"], [{"n": 2, "sku": "gasket"}])

        self.db.append(Event.delete(job))
        self.assertTrue(self.db.get(job)["deleted"])
        with self.assertRaises(evstore.Deleted) as caught:
            self.db.append(Event.status(job, "done"))
        self.assertEqual(caught.exception.reason, "deleted")
        self.assertEqual(caught.exception.code, -32003)

        self.db.append(Event.restore(job))
        state = self.db.get(job)
        self.assertFalse(state["deleted"])
        self.assertEqual(state["fields"]["address"], "12 Main St")

    def test_plain_dicts_and_a_list(self) -> None:
        job = evstore.new_entity_id("job")
        result = self.db.append([{"entity": job, "kind": "status", "status": "new"},
                                 {"entity": job, "kind": "edit", "fields": {"a": 1}}], by="script")
        self.assertEqual(len(result.ids), 2)
        events = list(self.db.log(entity=job))
        self.assertEqual([e["by"] for e in events], ["script", "script"])
        with self.assertRaises(ValueError):
            self.db.append()
        with self.assertRaises(ValueError):
            self.db.append(Event.delete(job), Event.restore(job), key="k")

    def test_if_match_conflict(self) -> None:
        job = evstore.new_entity_id("job")
        first = self.db.append(Event.status(job, "new"))
        version = first.revs[job]
        self.assertEqual(self.db.get(job)["rev"], version)
        second = self.db.append(Event.edit(job, {"a": 1}), if_match=version)
        self.assertEqual(second.revs[job], self.db.get(job)["rev"])
        with self.assertRaises(evstore.Conflict) as caught:
            self.db.append(Event.edit(job, {"a": 2}), if_match=version)
        error = caught.exception
        self.assertEqual((error.code, error.reason, error.index), (-32002, "conflict", 0))
        self.assertTrue(error.message)
        self.assertEqual(self.db.get(job)["version"], second.versions[job])
        self.assertEqual(self.db.get(job)["fields"], {"a": 1})
        # Per event, in the builder.
        with self.assertRaises(evstore.Conflict):
            self.db.append(Event.status(job, "x", if_match=version))
        # A version (an event id, what 0.4 compared with) is refused, saying to pass the rev.
        with self.assertRaises(evstore.InvalidEvent) as refused:
            self.db.append(Event.status(job, "x", if_match=second.versions[job]))
        self.assertIn("rev", refused.exception.message)

    def test_not_found(self) -> None:
        missing = evstore.new_entity_id("job")
        with self.assertRaises(evstore.NotFound) as caught:
            self.db.get(missing)
        self.assertEqual(caught.exception.reason, "not_found")
        self.assertEqual(caught.exception.code, -32001)
        self.assertIn(missing, str(caught.exception))
        self.assertIsInstance(caught.exception, evstore.EvstoreError)

    def test_invalid_event_carries_the_daemons_message_and_index(self) -> None:
        job = evstore.new_entity_id("job")
        with self.assertRaises(evstore.InvalidEvent) as caught:
            self.db.append(Event.status(job, "new"), {"entity": job, "kind": "teleport"})
        error = caught.exception
        self.assertEqual((error.code, error.reason, error.index), (-32005, "invalid_event", 1))
        self.assertEqual(error.message, 'kind "teleport" is not one of edit, status, add, remove, delete, restore, incr')
        with self.assertRaises(evstore.NotFound):  # all or nothing
            self.db.get(job)
        with self.assertRaises(evstore.InvalidEvent) as caught:
            self.db.append({"entity": job, "kind": "status", "status": "x", "colour": "red"})
        self.assertIn("colour", caught.exception.message)

    def test_event_over_max_event_bytes_is_too_large(self) -> None:
        job = evstore.new_entity_id("job")
        with self.assertRaises(evstore.TooLarge) as caught:
            self.db.append(Event.edit(job, {"blob": "x" * 70_000}))
        self.assertEqual(caught.exception.code, -32004)

    def test_idempotency_key_returns_the_original_id(self) -> None:
        job = evstore.new_entity_id("job")
        key = "order-" + evstore.new_ulid()
        first = self.db.append(Event.status(job, "new", key=key))
        again = self.db.append(Event.status(job, "new", key=key))
        self.assertEqual(again.ids, first.ids)
        self.assertEqual(again.appended, 0)
        by_argument = self.db.append(Event.status(job, "new"), key=key)
        self.assertEqual(by_argument.ids, first.ids)
        self.assertEqual(self.db.get(job)["events"], 1)

    # --- pages ---

    def test_list_reads_every_page(self) -> None:
        kind = "pl" + evstore.new_ulid().lower()[-8:]
        entities = [f"{kind}/{n:02d}" for n in range(7)]
        self.db.append([Event.status(e, "open" if n % 2 else "closed") for n, e in enumerate(entities)])
        self.db.append(Event.delete(entities[0]))

        listed = list(self.db.list(type=kind, page_size=2))
        self.assertEqual([e["entity"] for e in listed], entities[1:])
        self.assertEqual(set(listed[0]), {"entity", "version", "rev", "status", "deleted"})
        with_deleted = list(self.db.list(type=kind, include_deleted=True, page_size=3))
        self.assertEqual([e["entity"] for e in with_deleted], entities)
        self.assertTrue(with_deleted[0]["deleted"])
        open_ones = list(self.db.list(type=kind, status="open", page_size=1))
        self.assertEqual([e["entity"] for e in open_ones], entities[1::2])
        self.assertEqual([e["entity"] for e in self.db.list(type=kind, limit=3, page_size=2)], entities[1:4])
        self.assertEqual([e["entity"] for e in self.db.list(type=kind, after=entities[4])], entities[5:])
        self.assertEqual(list(self.db.list(type=kind, limit=0)), [])

    def test_log_reads_every_page(self) -> None:
        job = evstore.new_entity_id("job")
        ids = self.db.append([Event.edit(job, {"n": n}) for n in range(9)]).ids
        events = list(self.db.log(entity=job, page_size=2))
        self.assertEqual([e["id"] for e in events], ids)
        self.assertEqual([e["fields"]["n"] for e in events], list(range(9)))
        self.assertEqual(events[0]["origin"], self.db.status()["node"]["id"])
        seqs = [e["seq"] for e in events]
        self.assertEqual(seqs, sorted(seqs))
        self.assertEqual([e["id"] for e in self.db.log(entity=job, after=seqs[3], page_size=4)], ids[4:])
        self.assertEqual([e["id"] for e in self.db.log(entity=job, limit=5, page_size=2)], ids[:5])
        everything = list(self.db.log(after=evstore.START, page_size=50))
        self.assertEqual([e["seq"] for e in everything], list(range(1, len(everything) + 1)))
        self.assertTrue(set(ids) <= {e["id"] for e in everything})
        with self.assertRaises(TypeError):
            list(self.db.log(after=ids[0]))

    def test_durable_consumer_resumes_after_what_it_acknowledged(self) -> None:
        name = "c" + evstore.new_ulid().lower()[-8:]
        with self.assertRaises(evstore.NotFound):
            list(self.db.log(consumer=name))
        head = self.db.status()["seq"]
        created = self.db.ack(name, head)
        self.assertEqual((created["name"], created["seq"], created["lag"]), (name, head, 0))
        job = evstore.new_entity_id("job")
        ids = self.db.append([Event.edit(job, {"n": n}) for n in range(5)]).ids
        read = list(self.db.log(consumer=name, page_size=2))
        self.assertEqual([e["id"] for e in read], ids)
        self.assertEqual(list(self.db.log(consumer=name, page_size=2))[0]["id"], ids[0])  # nothing acknowledged yet
        self.db.ack(name, read[2]["seq"])
        self.assertEqual([e["id"] for e in self.db.log(consumer=name)], ids[3:])
        listed = {c["name"]: c for c in self.db.consumers()}
        self.assertEqual(listed[name]["seq"], read[2]["seq"])
        self.assertEqual(listed[name]["lag"], self.db.status()["seq"] - read[2]["seq"])
        with self.assertRaises(evstore.Conflict):
            self.db.ack(name, read[1]["seq"])
        with self.assertRaises(evstore.InvalidParams):
            self.db.ack(name, self.db.status()["seq"] + 100)
        with self.assertRaises(ValueError):
            self.db.log(consumer=name, after=1)
        with self.db.watch(consumer=name, timeout=TIMEOUT) as events:
            self.assertEqual([next(events)["id"], next(events)["id"]], ids[3:])
        self.db.remove_consumer(name)
        with self.assertRaises(evstore.NotFound):
            self.db.remove_consumer(name)

    def test_pages_interleave_with_other_calls(self) -> None:
        job = evstore.new_entity_id("job")
        self.db.append([Event.edit(job, {"n": n}) for n in range(4)])
        seen = []
        for event in self.db.log(entity=job, page_size=1):
            seen.append(self.db.get(job)["events"])  # another call between pages
            self.assertEqual(event["entity"], job)
        self.assertEqual(seen, [4, 4, 4, 4])

    # --- watch ---

    def test_watch_receives_events_appended_elsewhere_filtered_by_type(self) -> None:
        kind = "w" + evstore.new_ulid().lower()[-8:]
        with self.db.watch(type=kind, timeout=TIMEOUT) as events:
            with evstore.connect(self.daemon.socket_path, timeout=TIMEOUT) as other:
                other.append(Event.status("other/1", "ignored"))
                first = other.append(Event.status(f"{kind}/1", "new"), Event.add(f"{kind}/2", "s", 1))
                other.append(Event.status("other/1", "still ignored"))
                last = other.append(Event.delete(f"{kind}/1"))
            received = [next(events) for _ in range(3)]
            self.assertEqual([e["id"] for e in received], first.ids + last.ids)
            self.assertEqual([e["kind"] for e in received], ["status", "add", "delete"])
            self.assertEqual(received[0]["status"], "new")
            self.assertEqual(events.last_id, last.ids[0])
            self.assertEqual(events.last_seq, received[-1]["seq"])
        self.assertTrue(events.closed)
        with self.assertRaises(StopIteration):
            next(events)

    def test_watch_by_entity_with_replay(self) -> None:
        job = evstore.new_entity_id("job")
        before = self.db.append(Event.status(job, "a"), Event.status(job, "b")).ids
        watch = self.db.watch(entity=job, after=evstore.START, timeout=TIMEOUT)
        try:
            self.assertEqual([next(watch)["id"], next(watch)["id"]], before)
            self.db.append(Event.status(evstore.new_entity_id("job"), "elsewhere"))
            live = self.db.append(Event.status(job, "c")).id
            self.assertEqual(next(watch)["id"], live)
        finally:
            watch.close()
        watch.close()  # twice is fine

    def test_watch_timeout_keeps_the_watch(self) -> None:
        kind = "t" + evstore.new_ulid().lower()[-8:]
        with self.db.watch(type=kind, timeout=0.2) as events:
            with self.assertRaises(evstore.Timeout) as caught:
                next(events)
            self.assertIsInstance(caught.exception, TimeoutError)
            self.assertFalse(events.closed)
            appended = self.db.append(Event.status(f"{kind}/1", "late")).id
            self.assertEqual(next(events)["id"], appended)

    def test_watch_with_bad_params_raises_at_once(self) -> None:
        with self.assertRaises(evstore.InvalidParams):
            self.db.watch(type="Not A Type")

    def test_call_refuses_watch(self) -> None:
        with self.assertRaises(ValueError):
            self.db.call("watch")

    # --- blobs ---

    def test_blobs_round_trip_by_put_and_by_upload(self) -> None:
        piece = evstore.Client.BLOB_PIECE_BYTES
        # 0 and 1 byte and a whole piece in one blob.put; a piece and one byte in an upload.
        for data in (b"", b"\x00", os.urandom(piece), os.urandom(piece + 1)):
            with self.subTest(size=len(data)):
                expected = "sha256:" + hashlib.sha256(data).hexdigest()
                put = self.db.put_blob(data)
                self.assertEqual((put["hash"], put["size"]), (expected, len(data)))
                self.assertEqual(self.db.get_blob(expected), data)
                self.assertEqual(self.db.blob_stat(expected), {"hash": expected, "state": "present", "size": len(data)})
                again = self.db.put_blob(data, hash=expected)
                self.assertEqual((again["hash"], again["existed"]), (expected, True))
        blobs = self.db.status()["blobs"]
        self.assertGreaterEqual(blobs["count"], 4)
        self.assertGreaterEqual(blobs["bytes"], 2 * piece + 2)
        self.assertEqual(blobs["uploads"], 0)

    def test_get_blob_reads_every_piece(self) -> None:
        data = os.urandom((5 << 20) + 7)
        with evstore.connect(self.daemon.socket_path, timeout=TIMEOUT) as db:
            db.BLOB_PIECE_BYTES = 1 << 20  # an upload of six pieces
            db.BLOB_GET_BYTES = 1 << 20  # and six blob.get to read it back
            put = db.put_blob(bytearray(data))
            self.assertEqual(put["hash"], "sha256:" + hashlib.sha256(data).hexdigest())
            self.assertEqual(db.get_blob(put["hash"]), data)
        self.assertEqual(self.db.get_blob(put["hash"]), data)
        with self.assertRaises(TypeError):
            self.db.put_blob("text")  # type: ignore[arg-type]

    def test_a_blob_whose_bytes_do_not_hash_as_said_is_not_stored(self) -> None:
        wrong = "sha256:" + hashlib.sha256(b"something else").hexdigest()
        for size in (1000, evstore.Client.BLOB_PIECE_BYTES + 1):  # blob.put, an upload
            with self.subTest(size=size):
                data = os.urandom(size)
                with self.assertRaises(evstore.InvalidParams) as caught:
                    self.db.put_blob(data, hash=wrong)
                self.assertIn("nothing was stored", caught.exception.message)
                actual = "sha256:" + hashlib.sha256(data).hexdigest()
                self.assertEqual(self.db.blob_stat(actual), {"hash": actual, "state": "unknown"})
                with self.assertRaises(evstore.NotFound) as missing:
                    self.db.get_blob(actual)
                self.assertIn("holds no blob", missing.exception.message)
        self.assertEqual(self.db.status()["blobs"]["uploads"], 0)
        with self.assertRaises(evstore.InvalidParams):
            self.db.get_blob("sha256:12")

    def test_an_event_names_a_blob_only_once_this_node_holds_it(self) -> None:
        job = evstore.new_entity_id("job")
        data = os.urandom(100)
        absent = {"hash": "sha256:" + hashlib.sha256(data).hexdigest(), "size": 100}
        with self.assertRaises(evstore.InvalidEvent) as caught:
            self.db.append(Event.status(job, "new"),
                           Event.edit(job, {"photo": evstore.blob_reference(absent, "image/jpeg")}))
        error = caught.exception
        self.assertEqual((error.code, error.reason, error.index), (-32005, "invalid_event", 1))
        self.assertIn("which this node does not hold: put the blob first", error.message)
        with self.assertRaises(evstore.NotFound):  # the batch is refused whole
            self.db.get(job)
        with self.assertRaises(evstore.InvalidEvent) as malformed:
            self.db.append(Event.edit(job, {"photo": {"$blob": "sha256:XYZ", "size": 100}}))
        self.assertIn("64 lowercase hex digits", malformed.exception.message)

        put = self.db.put_blob(data)
        self.assertEqual(put["hash"], absent["hash"])
        with self.assertRaises(evstore.InvalidEvent) as sized:
            self.db.append(Event.add(job, "photos", evstore.blob_reference(dict(put, size=99))))
        self.assertIn("is 99 bytes; it is 100", sized.exception.message)
        reference = evstore.blob_reference(put, "image/jpeg")
        self.assertEqual(reference, {"$blob": put["hash"], "size": 100, "type": "image/jpeg"})
        self.db.append(Event.edit(job, {"photo": reference}), Event.add(job, "photos", evstore.blob_reference(put)))
        state = self.db.get(job)
        self.assertEqual(state["fields"]["photo"], reference)
        self.assertEqual(state["sets"]["photos"], [{"$blob": put["hash"], "size": 100}])
        self.assertEqual(state["blobs"], {put["hash"]: "present"})
        # A remove needs no blob; an entity that names none has no "blobs".
        self.db.append(Event.remove(job, "photos", {"$blob": "sha256:" + "1" * 64, "size": 1}))
        other = evstore.new_entity_id("job")
        self.db.append(Event.status(other, "new"))
        self.assertNotIn("blobs", self.db.get(other))

    def test_an_upload_is_its_connections(self) -> None:
        with evstore.connect(self.daemon.socket_path, timeout=TIMEOUT) as db:
            uploads = [db.call("blob.upload", {"size": 10})["upload"] for _ in range(2)]
            with self.assertRaises(evstore.Unavailable) as caught:  # two per connection
                db.put_blob(os.urandom(100))
            self.assertIn("this connection", caught.exception.message)
            with self.assertRaises(evstore.NotFound):  # another connection's
                self.db.call("blob.abort", {"upload": uploads[0]})
            self.assertEqual(self.db.status()["blobs"]["uploads"], 2)
        deadline = time.monotonic() + 10
        while self.db.status()["blobs"]["uploads"] != 0:  # dropped with the connection
            self.assertLess(time.monotonic(), deadline, "the uploads outlived their connection")
            time.sleep(0.05)

    # --- the rest of the API ---

    def test_status_fields(self) -> None:
        self.db.append(Event.status(evstore.new_entity_id("job"), "new"))
        status = self.db.status()
        self.assertEqual(status["node"]["name"], "pytest")
        self.assertEqual(len(status["node"]["id"]), 26)
        for member in ("events", "entities", "bytes"):
            self.assertIsInstance(status[member], int)
        self.assertGreaterEqual(status["events"], 1)
        self.assertIsInstance(status["digest"], str)
        self.assertEqual(set(status["needs_attention"]), {"conflicts", "dead_letters", "divergent", "rule_violations", "rejected_proposals", "failing_peers"})
        self.assertIn("max_skew_ms", status["clock"])
        self.assertEqual(status["peers"], [])

    def test_conflicts_dead_letters_peers_and_sync(self) -> None:
        self.assertEqual(list(self.db.conflicts(page_size=5)), [])
        self.assertEqual(list(self.db.dead_letters()), [])
        self.assertEqual(self.db.peers(), [])
        self.assertEqual(self.db.sync(), [])
        missing = os.path.join(self.daemon.root, "nobody.sock")
        peers = self.db.add_peer("ghost", "unix://" + missing)
        self.assertEqual([(p["name"], p["source"]) for p in peers], [("ghost", "api")])
        sessions = self.db.sync("ghost")
        self.assertEqual(len(sessions), 1)
        self.assertEqual(sessions[0]["name"], "ghost")
        self.assertIsNotNone(sessions[0]["error"])
        self.assertEqual(self.db.remove_peer("ghost"), [])
        with self.assertRaises(evstore.NotFound):
            self.db.remove_peer("ghost")

    def test_call_and_json_rpc_errors(self) -> None:
        self.assertIn("digest_mismatch", self.db.call("rebuild", {"verify": True}))
        with self.assertRaises(evstore.MethodNotFound) as caught:
            self.db.call("no.such.method")
        self.assertEqual((caught.exception.code, caught.exception.reason), (-32601, "method_not_found"))
        with self.assertRaises(evstore.InvalidParams) as caught_params:
            self.db.call("get", {"entity": "job/1", "colour": "red"})
        self.assertEqual(caught_params.exception.code, -32602)
        self.assertEqual(self.db.status()["node"]["name"], "pytest")  # the connection goes on

    def test_a_line_over_the_cap_drops_the_connection_and_the_next_call_reconnects(self) -> None:
        job = evstore.new_entity_id("job")
        self.db.append(Event.edit(job, {"text": "y" * 5000}))
        with evstore.connect(self.daemon.socket_path, timeout=TIMEOUT, max_line_bytes=1000) as small:
            with self.assertRaises(evstore.ProtocolError):
                small.get(job)
            self.assertEqual(small.status()["node"]["name"], "pytest")

    def test_one_client_shared_by_threads(self) -> None:
        job = evstore.new_entity_id("job")
        errors: List[BaseException] = []

        def work(n: int) -> None:
            try:
                for i in range(25):
                    self.db.append(Event.add(job, "seen", f"{n}-{i}"))
                    self.assertEqual(self.db.get(job)["entity"], job)
            except BaseException as error:  # reported below
                errors.append(error)

        threads = [threading.Thread(target=work, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.assertEqual(errors, [])
        self.assertEqual(len(self.db.get(job)["sets"]["seen"]), 100)

    def test_closed_client(self) -> None:
        self.db.close()
        self.assertTrue(self.db.closed)
        with self.assertRaises(ValueError):
            self.db.status()
        self.db.close()

    def test_connect_without_a_path_uses_evstore_socket(self) -> None:
        saved: Dict[str, Any] = {"EVSTORE_SOCKET": os.environ.get("EVSTORE_SOCKET")}
        os.environ["EVSTORE_SOCKET"] = self.daemon.socket_path
        try:
            with evstore.connect(timeout=TIMEOUT) as db:
                self.assertEqual(db.socket_path, self.daemon.socket_path)
                self.assertEqual(db.status()["node"]["name"], "pytest")
        finally:
            if saved["EVSTORE_SOCKET"] is None:
                del os.environ["EVSTORE_SOCKET"]
            else:
                os.environ["EVSTORE_SOCKET"] = saved["EVSTORE_SOCKET"]


class ResolveTests(unittest.TestCase):
    """Two daemons of their own: a conflict made on both, that only a resolution settles."""

    def setUp(self) -> None:
        self.a = Daemon({"node": "a"}).start()
        self.addCleanup(self.a.cleanup)
        self.b = Daemon({"node": "b"}).start()
        self.addCleanup(self.b.cleanup)

    def test_a_plain_edit_joins_a_conflict_and_resolve_settles_it(self) -> None:
        with evstore.connect(self.a.socket_path, timeout=TIMEOUT) as a, \
                evstore.connect(self.b.socket_path, timeout=TIMEOUT) as b:
            peer = "unix://" + self.b.socket_path
            job = evstore.new_entity_id("job")
            a.append(Event.edit(job, {"address": "12 Main St"}))
            a.sync(peer)
            a.append(Event.edit(job, {"address": "13 Main St"}))
            b.append(Event.edit(job, {"address": "14 Main St"}))
            a.sync(peer)

            def heads(db: evstore.Client) -> List[str]:
                return [h["value"] for h in db.get(job)["conflicts"]["fields"].get("address", [])]

            self.assertEqual(len(heads(a)), 2)
            a.append(Event.edit(job, {"address": "15 Main St"}))  # joins the conflict
            a.sync(peer)
            for db in (a, b):
                self.assertEqual(sorted(heads(db)), ["13 Main St", "14 Main St", "15 Main St"])
            self.assertEqual([c["entity"] for c in b.conflicts()], [job])

            result = b.resolve(job, {"address": "16 Main St"}, by="ana")
            self.assertEqual(result.appended, 1)
            self.assertTrue(list(b.log(entity=job))[-1]["base"]["address"])
            a.sync(peer)
            for db in (a, b):
                self.assertEqual(heads(db), [])
                self.assertEqual(db.get(job)["fields"]["address"], "16 Main St")
                self.assertEqual(list(db.conflicts()), [])
            with self.assertRaises(ValueError):
                b.resolve(job)


class DeadLetterTests(unittest.TestCase):
    """Two daemons of their own: events b refuses (under its own origin, too far ahead of
    its clock), retried after a reload that allows them, and dropped."""

    def setUp(self) -> None:
        self.a = Daemon({"node": "a"}).start()
        self.addCleanup(self.a.cleanup)
        self.b = Daemon({"node": "b", "max_clock_skew_s": 60}).start()
        self.addCleanup(self.b.cleanup)

    def test_retry_after_a_reload_and_drop(self) -> None:
        with evstore.connect(self.a.socket_path, timeout=TIMEOUT) as a, \
                evstore.connect(self.b.socket_path, timeout=TIMEOUT) as b:
            node_b = b.status()["node"]["id"]
            ahead = int(time.time() * 1000) + 2 * 3600 * 1000
            ids = [evstore.new_entity_id("job").split("/")[1] for _ in range(2)]
            # ids 2 hours ahead: the timestamp's 10 characters, then the random part.
            alphabet = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
            stamp = "".join(alphabet[(ahead >> (5 * (9 - i))) & 31] for i in range(10))
            ids = sorted(stamp + i[10:] for i in ids)  # an import takes each origin's events in id order
            events = [{"entity": f"job/ahead-{n}", "id": id, "kind": "status", "origin": node_b, "status": "x"}
                      for n, id in enumerate(ids)]
            a.call("import", {"events": events})
            [session] = a.sync("unix://" + self.b.socket_path)
            self.assertEqual(session["sent"], 2, session)
            letters = list(b.dead_letters())
            self.assertEqual(sorted(letter["id"] for letter in letters), sorted(ids))

            early = b.retry_dead_letters([ids[0]])
            self.assertEqual(early["stored"], [])
            self.assertEqual([item["reason"] for item in early["still_invalid"]], ["foreign_own_origin"])

            with open(self.b.config_path, "w") as f:
                json.dump({"node": "b", "log_level": "notice", "max_clock_skew_s": 86400}, f)
            self.b.proc.send_signal(signal.SIGHUP)
            deadline = time.monotonic() + 10
            while b.status()["clock"]["max_skew_ms"] != 86400 * 1000:
                self.assertLess(time.monotonic(), deadline, "the reload did not apply max_clock_skew_s")
                time.sleep(0.05)
            unknown = "01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"
            result = b.retry_dead_letters([ids[0], unknown])
            self.assertEqual(result["stored"], [ids[0]])
            self.assertEqual([(i["id"], i["reason"]) for i in result["still_invalid"]], [(unknown, "not_found")])
            self.assertEqual(b.get("job/ahead-0")["status"]["current"], "x")
            key = next(letter["key"] for letter in b.dead_letters() if letter["id"] == ids[1])
            self.assertEqual(b.drop_dead_letters([key, unknown]), 1)
            self.assertEqual(list(b.dead_letters()), [])
            self.assertEqual(b.status()["needs_attention"]["dead_letters"], 0)
            with self.assertRaises(evstore.InvalidParams):
                b.call("dead_letters.drop", {"ids": ["job/1"]})
            with self.assertRaises(TypeError):
                b.drop_dead_letters(ids[0])


class ItemSyncTests(unittest.TestCase):
    """A field node and its HQ: per-item sync status, what HQ lacks, what needs attention."""

    QUIET = {"sync_interval_s": 3600, "backoff_base_s": 3600, "backoff_cap_s": 3600}

    def setUp(self) -> None:
        self.hq = Daemon({"node": "hq"}).start()
        self.addCleanup(self.hq.cleanup)
        self.field = Daemon(dict(self.QUIET, node="field")).start()
        self.addCleanup(self.field.cleanup)

    def test_get_sync_list_pending_for_and_attention(self) -> None:
        with evstore.connect(self.field.socket_path, timeout=TIMEOUT) as db:
            self.assertEqual(db.attention(), {"conflicts": [], "dead_letters": [], "divergent": [], "rule_violations": [],
                                              "rejected_proposals": [], "peers": []})
            db.add_peer("hq", "unix://" + self.hq.socket_path)
            db.add_peer("down", "unix://" + os.path.join(self.field.root, "nobody.sock"))
            db.append(Event.status("job/1", "assigned"))
            self.assertIsNone(db.sync("hq")[0]["error"])
            self.assertEqual(db.get("job/1", sync=True)["sync"], {"hq": "synced", "down": "pending"})
            self.assertNotIn("sync", db.get("job/1"))

            db.append(*[Event.status("job/%d" % n, "assigned") for n in range(2, 6)])
            self.assertEqual(db.get("job/2", sync=True)["sync"]["hq"], "pending")
            pending = [e["entity"] for e in db.list(pending_for="hq", page_size=2)]
            self.assertEqual(pending, ["job/2", "job/3", "job/4", "job/5"])
            self.assertEqual(db.show_peer("hq")["pending"], 4)
            with self.assertRaises(evstore.NotFound):
                list(db.list(pending_for="nobody"))
            self.assertIsNone(db.sync("hq")[0]["error"])
            self.assertEqual(list(db.list(pending_for="hq")), [])
            self.assertEqual(db.get("job/2", sync=True)["sync"]["hq"], "synced")

            # Edited at HQ and in the field without either seeing the other's edit.
            with evstore.connect(self.hq.socket_path, timeout=TIMEOUT) as hq:
                hq.append(Event.edit("job/1", {"address": "on hq"}))
            db.append(Event.edit("job/1", {"address": "in the field"}))
            self.assertIsNone(db.sync("hq")[0]["error"])
            while db.status()["needs_attention"]["failing_peers"] == 0:
                self.assertIsNotNone(db.sync("down")[0]["error"])
            self.assertEqual(db.get("job/2", sync=True)["sync"], {"hq": "synced", "down": "failed"})
            attention = db.attention(page_size=1)
            counts = db.status()["needs_attention"]
            self.assertEqual(counts, {"conflicts": 1, "dead_letters": 0, "divergent": 0, "rule_violations": 0,
                                      "rejected_proposals": 0, "failing_peers": 1})
            self.assertEqual(attention["conflicts"], [{"entity": "job/1", "fields": ["address"], "status": False}])
            self.assertEqual(len(attention["conflicts"]), counts["conflicts"])
            self.assertEqual(len(attention["dead_letters"]), counts["dead_letters"])
            self.assertEqual([p["name"] for p in attention["peers"]], ["down"])
            self.assertEqual(attention["peers"][0]["state"], "failing")
            self.assertTrue(attention["peers"][0]["since"].endswith("Z"))

            # An event of this node that hq holds with other content: forged there.
            real = db.append(Event.status("job/9", "assigned")).ids[0]
            node = db.status()["node"]["id"]
            with evstore.connect(self.hq.socket_path, timeout=TIMEOUT) as hq:
                forged = {"entity": "job/9", "id": real, "kind": "status", "origin": node, "status": "done"}
                self.assertEqual(hq.call("import", {"events": [forged]})["imported"], 1)
            # The first session finds the window whose digest differs; the next
            # one checks that window event by event and names the event.
            session = db.sync("hq")[0]
            self.assertIsNone(session["error"])
            self.assertEqual(session["divergent"], 0)
            session = db.sync("hq")[0]
            self.assertIsNone(session["error"])
            self.assertEqual(session["divergent"], 1)
            divergent = db.attention()["divergent"]
            self.assertEqual([(d["id"], d["origin"]) for d in divergent], [(real, node)])
            self.assertNotEqual(divergent[0]["here"], divergent[0]["there"])
            self.assertEqual(db.status()["needs_attention"]["divergent"], 1)
            with self.assertRaises(TypeError):
                db.dismiss_divergent(real)
            self.assertEqual(db.dismiss_divergent([real]), 1)
            self.assertEqual(db.attention()["divergent"], [])


class DaemonGoneTests(unittest.TestCase):
    """A daemon of its own: a watcher that falls behind, and a daemon that stops."""

    def setUp(self) -> None:
        self.daemon = Daemon({"watch_queue_events": 20}).start()
        self.addCleanup(self.daemon.cleanup)

    def test_overflow_then_resume_without_a_gap(self) -> None:
        with evstore.connect(self.daemon.socket_path, timeout=TIMEOUT) as db:
            watch = db.watch(type="big", timeout=TIMEOUT)
            self.addCleanup(watch.close)
            ids: List[str] = []
            for batch in range(8):  # enough to fill the socket's buffers and the queue of 20
                ids += db.append([Event.edit(f"big/{batch}", {"n": n, "pad": "p" * 8000})
                                  for n in range(50)]).ids
            received = []
            seqs = []
            with self.assertRaises(evstore.WatchOverflow) as caught:
                for event in watch:
                    received.append(event["id"])
                    seqs.append(event["seq"])
            self.assertEqual(caught.exception.reason, "too_far_behind")
            self.assertTrue(watch.closed)
            resume_after = caught.exception.resume_after
            self.assertIsNotNone(resume_after)
            self.assertEqual(received, ids[:len(received)])
            self.assertEqual(seqs[-1] if seqs else None, resume_after)
            with db.watch(type="big", after=resume_after, timeout=TIMEOUT) as again:
                rest = [next(again)["id"] for _ in range(len(ids) - len(received))]
            self.assertEqual(received + rest, ids)

    def test_a_daemon_that_stops(self) -> None:
        db = evstore.connect(self.daemon.socket_path, timeout=TIMEOUT)
        self.addCleanup(db.close)
        watch = db.watch(timeout=TIMEOUT)
        self.addCleanup(watch.close)
        db.append(Event.status("job/1", "new"))
        self.assertEqual(next(watch)["entity"], "job/1")
        self.daemon.stop()
        with self.assertRaises(evstore.ConnectionLost) as caught:
            next(watch)
        self.assertIsInstance(caught.exception, ConnectionError)
        self.assertTrue(watch.closed)
        with self.assertRaises(evstore.EvstoreConnectionError):
            db.status()  # the connection is gone...
        with self.assertRaises(evstore.Unreachable):
            db.status()  # ...and no daemon answers a new one
        self.daemon.start()
        self.assertEqual(db.get("job/1")["status"]["current"], "new")


class IdleTests(unittest.TestCase):
    def test_a_connection_the_daemon_closed_as_idle_is_replaced_without_an_error(self) -> None:
        daemon = Daemon({"idle_timeout_s": 1}).start()
        self.addCleanup(daemon.cleanup)
        with evstore.connect(daemon.socket_path, timeout=TIMEOUT) as db:
            db.append(Event.status("job/1", "new"))
            time.sleep(3)  # the daemon closes the idle connection after 1 s
            self.assertEqual(db.get("job/1")["status"]["current"], "new")
            self.assertEqual(db.status()["events"], 1)


class UnreachableTests(unittest.TestCase):
    def test_no_daemon(self) -> None:
        with self.assertRaises(evstore.Unreachable) as caught:
            evstore.connect("/nonexistent/evstore/evstored.sock", timeout=2)
        error = caught.exception
        self.assertIsInstance(error, ConnectionError)
        self.assertIsInstance(error, evstore.EvstoreConnectionError)
        self.assertEqual(error.reason, "unreachable")
        self.assertIsNone(error.code)
        self.assertEqual(error.socket_path, "/nonexistent/evstore/evstored.sock")
        self.assertIn("no evstore daemon is listening on /nonexistent/evstore/evstored.sock", str(error))

    def test_a_socket_nobody_listens_on(self) -> None:
        import socket
        import tempfile

        with tempfile.TemporaryDirectory(prefix="evstore-py-") as root:
            path = os.path.join(root, "dead.sock")
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.bind(path)  # bound, never listening: connecting is refused
            try:
                with self.assertRaises(evstore.Unreachable):
                    evstore.connect(path, timeout=2)
            finally:
                sock.close()


if __name__ == "__main__":
    unittest.main()
