#!/usr/bin/env python3
"""Crash torture: kill -9 evstored at random moments, restart it, check nothing was lost.

Scenarios, rotated (one kill each):
  append     appends pipelined into the main victim V: bulk ones of 50 events from 4
             connections, or, every other time at random, one event a request from 16
             (each commit then adds to the last blocks' tail or merges it into full blocks)
  sync-out   V syncs with its peer P (V initiates), both with a backlog; V is killed
  sync-in    P syncs with V (V answers), both with a backlog; V is killed
  dictionary a fresh copy of a store just below its dictionary training threshold, with
             appends going on; the maintenance thread trains within ~0.1 s of the start
             (WATCHDOG_USEC=200000 makes it tick every 100 ms), the kill lands around it
  map-growth a copy of a store of 8 KiB events (random base64) started with
             map_initial_bytes=64 KiB: LMDB reopens the map at the size of the data, so
             it grows with the first writes, and doubles again as the load goes on

Every input carries an idempotency key. After each kill the victim is restarted and:
  - it must say READY (the store opens);
  - the inputs whose answer never came are sent again with the same keys;
  - the victim's own events since the cycle began (`log origin=V after=...`) must be
    exactly the acknowledged ids, each once, each key once;
  - its event count must be what was acknowledged (plus the peer's events after a sync);
  - 10 old keys sent again must return their original ids and append nothing;
  - sync-out / sync-in: a sync is then completed and V and P must show equal digests and
    event counts equal to every event acknowledged anywhere;
  - dictionary / map-growth: the whole log of the fresh store is read back (every event
    decoded) and must be exactly the acknowledged ids, each key once.
Every --full-every kills and at the end: V and P converge, each one's whole log equals
the set of every acknowledged id, `rebuild --verify` on both. Every --full-every/10
kills of the dictionary and map-growth scenarios (and at the end): `rebuild --verify` on
the fresh store, and a new empty node synced from it must reach the same digest.

  torture.py --kills 1000                 the full run (release binaries)
  torture.py --short                      20 kills, debug binaries, what CI runs
"""
import argparse
import base64
import json
import os
import random
import shutil
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import evharness as h  # noqa: E402

SCENARIOS = ["append", "sync-out", "sync-in", "dictionary", "map-growth"]


class Failure(h.HarnessFailure):
    pass


class Store:
    """What the harness knows of one node's own inputs: key -> acknowledged id."""

    def __init__(self, daemon, prefix, seed, pool, streams=None):
        self.pool = pool
        self.daemon = daemon
        self.prefix = prefix
        self.seed = seed
        self.streams = {} if streams is None else streams  # one workload stream per connection: no entity is shared by two
        self.n = 0
        self.pushed = {}  # stream -> inputs prepared but never sent, sent first next time
        self.acked = {}  # key -> id
        self.ids = set()  # every id acknowledged for this node's inputs
        self.sample = []  # (key, event, id): a reservoir of old inputs to resend
        self.rng = random.Random(seed)
        self.last_own_id = None

    def push_back(self, stream, events):
        self.pushed.setdefault(stream, [])[:0] = events

    def next_inputs(self, count, transform=None, stream=0):
        if stream not in self.streams:
            self.streams[stream] = self.pool.stream(self.seed * 1000 + stream)
        events = []
        pushed = self.pushed.get(stream)
        while pushed and len(events) < count:
            events.append(pushed.pop(0))
        for _ in range(count - len(events)):
            event = next(self.streams[stream])
            if transform:
                event = transform(event, self.n)
            event["key"] = f"{self.prefix}-{self.n}"
            self.n += 1
            events.append(event)
        return events

    def record(self, events, ids):
        for event, event_id in zip(events, ids):
            key = event["key"]
            previous = self.acked.get(key)
            if previous is not None and previous != event_id:
                raise Failure(f"{self.prefix}: key {key} was acknowledged as {previous}, then as {event_id}")
            self.acked[key] = event_id
            self.ids.add(event_id)
            if self.last_own_id is None or event_id > self.last_own_id:
                self.last_own_id = event_id
            if len(self.sample) < 2000:
                self.sample.append((key, event, event_id))
            elif self.rng.random() < 0.05:
                self.sample[self.rng.randrange(len(self.sample))] = (key, event, event_id)


class Load:
    """Pipelined appends from several connections until the daemon dies or every prepared
    batch was sent. The batches are prepared before the clock starts; each connection has
    its own workload stream, so no entity is written by two connections. Tracks what was
    acknowledged and what was sent without an answer."""

    def __init__(self, store, connections=4, batch=50, depth=4, limit=2000, transform=None, span=0.0):
        self.store = store
        self.span = span  # the batches of a connection are sent evenly over this many seconds
        self.lock = threading.Lock()
        per_connection = max(1, limit // connections // batch)
        self.queues = [[store.next_inputs(batch, transform, i) for _ in range(per_connection)]
                       for i in range(connections)]
        self.unacked = []  # inputs sent whose answer never came, per connection in order
        self.acked_now = []  # (events, ids) acknowledged during this load
        self.errors = []
        self.sent = 0
        self.depth = depth
        self.threads = [threading.Thread(target=self.run, args=(i,), daemon=True) for i in range(connections)]

    def start(self):
        for thread in self.threads:
            thread.start()

    def join(self):
        for thread in self.threads:
            thread.join(60)
        # Batches never sent go back to their stream, keys and all, for the next load.
        for index, queue in enumerate(self.queues):
            self.store.push_back(index, [event for events in queue for event in events])

    def run(self, index):
        """Sends the connection's batches, paced over `span` (or as fast as `depth` allows),
        while a second thread reads the answers in order."""
        queue = self.queues[index]
        try:
            client = self.store.daemon.client(timeout=60)
        except OSError as error:
            self.errors.append(f"connect: {error}")
            return
        pending = []  # events of the requests sent and not answered, in order
        window = threading.Semaphore(self.depth if not self.span else 1 << 20)
        done_sending = threading.Event()

        def receive():
            try:
                while True:
                    with self.lock:
                        if not pending and done_sending.is_set():
                            return
                        waiting = bool(pending)
                    if not waiting:
                        time.sleep(0.001)
                        continue
                    result = client.receive("append")
                    with self.lock:
                        events = pending.pop(0)
                        self.acked_now.append((events, result["ids"]))
                    window.release()
            except h.RPCError as error:
                self.errors.append(str(error))
            except (OSError, ConnectionError, ValueError):
                pass  # the kill

        receiver = threading.Thread(target=receive, daemon=True)
        receiver.start()
        interval = self.span / max(1, len(queue)) if self.span else 0
        started = time.monotonic()
        try:
            for number in range(len(queue)):
                if interval:
                    delay = started + number * interval - time.monotonic()
                    if delay > 0:
                        time.sleep(delay)
                while not window.acquire(timeout=0.05):
                    if not receiver.is_alive():
                        raise ConnectionError("the receiver ended")
                events = queue.pop(0)
                with self.lock:
                    pending.append(events)
                client.send("append", {"events": events})
                with self.lock:
                    self.sent += len(events)
        except (OSError, ConnectionError, ValueError):
            pass  # the kill
        finally:
            done_sending.set()
            receiver.join(60)
            with self.lock:
                self.unacked.extend(pending)
                pending.clear()
            client.close()


def random_payload(rng, size):
    return base64.b64encode(rng.randbytes(size)).decode()


class Torture:
    def __init__(self, args, bindir, root):
        self.args = args
        self.bindir = bindir
        self.root = root
        self.rng = random.Random(args.seed)
        self.kill_rng = random.Random()  # kill timing is not reproducible anyway
        self.kills = {s: 0 for s in SCENARIOS}
        self.mid = {s: 0 for s in SCENARIOS}  # kills that landed with the work in progress
        self.checks = {}
        self.kill_number = 0
        self.events_acked = 0
        self.sync_ms_per_event = None
        self.map_growths = 0
        self.dictionary_committed_before_kill = 0
        self.restart_seconds = []
        self.fresh_count = 0
        self.pool = h.WorkloadPool(args.seed, args.pool)
        common = {"durability": "full", "backoff_base_s": 60, "sync_interval_s": 86400}
        self.v = h.Daemon(bindir, os.path.join(root, "v"), "v", dict(common, map_initial_bytes=1 << 20))
        self.p = h.Daemon(bindir, os.path.join(root, "p"), "p", common)
        self.v.start()
        self.p.start()
        self.vs = Store(self.v, "v", 1, self.pool)
        self.ps = Store(self.p, "p", 2, self.pool)
        self.v_node = self.v.call("status")["node"]["id"]
        self.v_expected_events = 0  # events V must hold (its own + the peer's it received)
        self.template = None
        self.map_template = None
        self.fresh_streams = {}  # the fresh stores are independent: they share workload streams
        self.seconds = {s: 0.0 for s in SCENARIOS}
        self.seconds["full-check"] = 0.0
        self.training_seconds = None

    def check(self, name, ok, message):
        self.checks[name] = self.checks.get(name, 0) + 1
        if not ok:
            raise Failure(f"{name}: {message}")

    # --- helpers ---------------------------------------------------------------------------

    def append_all(self, store, events, batch=500):
        with store.daemon.client(timeout=120) as client:
            for i in range(0, len(events), batch):
                part = events[i:i + batch]
                result = client.call("append", {"events": part})
                store.record(part, result["ids"])
        self.events_acked = len(self.vs.ids) + len(self.ps.ids)

    def restart(self, daemon):
        daemon.kill9()
        try:
            seconds = daemon.start()
        except h.HarnessFailure as error:
            raise Failure(f"restart: {error}")
        self.restart_seconds.append(seconds)
        self.check("restart", True, "")

    def recover_load(self, store, load):
        """After the restart: record what was acknowledged, send the rest again."""
        for events, ids in load.acked_now:
            store.record(events, ids)
        resent = 0
        with store.daemon.client(timeout=120) as client:
            # Per connection, in the order sent (each connection has its own entities).
            for events in load.unacked:
                result = client.call("append", {"events": events})
                store.record(events, result["ids"])
                resent += len(events)
        self.check("resend-unacknowledged", True, "")
        return resent

    def own_events_since(self, store, node_id, marker):
        # The marker is an event id: this node's own events after it, in id order.
        params = {"origin": node_id, "order": "id"}
        if marker:
            params["after"] = marker
        with store.daemon.client(timeout=300) as client:
            return list(h.all_events(client, **params))

    def check_exactly_once(self, store, node_id, marker, expected_ids, label):
        events = self.own_events_since(store, node_id, marker)
        ids = [e["id"] for e in events]
        keys = [e.get("key") for e in events]
        self.check("exactly-once", len(ids) == len(set(ids)) and set(ids) == set(expected_ids)
                   and len(keys) == len(set(keys)),
                   f"{label}: expected the {len(set(expected_ids))} acknowledged ids since {marker}, each once; found "
                   f"{len(ids)} events ({len(set(ids))} distinct ids, {len(set(keys))} distinct keys); missing "
                   f"{sorted(set(expected_ids) - set(ids))[:5]}, unexpected {sorted(set(ids) - set(expected_ids))[:5]}")

    def check_old_keys(self, store, count=10):
        if not store.sample:
            return
        picks = [store.sample[self.rng.randrange(len(store.sample))] for _ in range(count)]
        result = store.daemon.call("append", {"events": [event for _, event, _ in picks]})
        want = [event_id for _, _, event_id in picks]
        self.check("old-keys", result["ids"] == want and result["appended"] == 0,
                   f"{store.prefix}: old keys sent again should return {want[:3]}..., appended 0; got "
                   f"{result['ids'][:3]}..., appended {result['appended']}")

    def check_count(self, daemon, expected, label):
        status = daemon.call("status")
        self.check("event-count", status["events"] == expected,
                   f"{label}: expected {expected} events, status says {status['events']}")
        return status

    def converge(self, label):
        """Sync V with P to completion; equal digests and every acknowledged event on both."""
        started = time.monotonic()
        report = self.v.call("sync", {"peer": self.p.url}, timeout=600)
        entry = report["peers"][0]
        self.check("sync-completes", entry["error"] is None, f"{label}: the recovery sync failed: {entry['error']}")
        moved = entry["sent"] + entry["received"]
        if moved > 200:
            per_event = (time.monotonic() - started) * 1000 / moved
            self.sync_ms_per_event = per_event if self.sync_ms_per_event is None else (
                0.7 * self.sync_ms_per_event + 0.3 * per_event)
        total = len(self.vs.ids) + len(self.ps.ids)
        sv, sp = self.v.call("status"), self.p.call("status")
        self.check("convergence", sv["digest"] == sp["digest"] and sv["events"] == sp["events"] == total,
                   f"{label}: after a complete sync V has {sv['events']} events (digest {sv['digest']}), P has "
                   f"{sp['events']} ({sp['digest']}); {total} were acknowledged in all")
        self.v_expected_events = total

    def full_check(self, label):
        self.converge(label)
        expected = self.vs.ids | self.ps.ids
        for daemon in (self.v, self.p):
            with daemon.client(timeout=600) as client:
                ids = [e["id"] for e in h.all_events(client)]
            self.check("full-log", len(ids) == len(set(ids)) == len(expected) and set(ids) == expected,
                       f"{label}: {daemon.name} should hold exactly the {len(expected)} acknowledged events; it "
                       f"holds {len(ids)} ({len(set(ids))} distinct), missing {sorted(expected - set(ids))[:5]}, "
                       f"unexpected {sorted(set(ids) - expected)[:5]}")
            verify = daemon.call("rebuild", {"verify": True}, timeout=600)
            self.check("rebuild-verify", not verify["mismatched"] and not verify["digest_mismatch"],
                       f"{label}: rebuild --verify on {daemon.name}: {json.dumps(verify)[:500]}")

    # --- scenarios -------------------------------------------------------------------------

    def kill_after(self, seconds, daemon):
        time.sleep(max(0.0, seconds))
        os.kill(daemon.proc.pid, 9)

    def scenario_append(self):
        marker = self.vs.last_own_id
        before = len(self.vs.ids)
        batch = self.kill_rng.choice([1, 50])
        load = Load(self.vs, connections=16 if batch == 1 else 4, batch=batch, depth=4, limit=self.args.append_limit,
                    span=self.args.max_delay)
        load.start()
        self.kill_after(self.kill_rng.uniform(0, self.args.max_delay), self.v)
        load.join()
        if load.unacked:
            self.mid["append"] += 1
        self.restart(self.v)
        self.recover_load(self.vs, load)
        new_ids = self.vs.ids - self._ids_snapshot
        self.check_exactly_once(self.vs, self.v_node, marker, new_ids, "append")
        self.v_expected_events += len(self.vs.ids) - before
        self.check_count(self.v, self.v_expected_events, "append")
        self.check_old_keys(self.vs)

    def backlog(self):
        vn, pn = self.args.backlog // 3, self.args.backlog - self.args.backlog // 3
        self.append_all(self.vs, self.vs.next_inputs(vn))
        self.append_all(self.ps, self.ps.next_inputs(pn))
        self.v_expected_events += vn
        return vn + pn

    def sync_delay(self, moved):
        per_event = self.sync_ms_per_event or 0.05
        return self.kill_rng.uniform(0, min(3.0, per_event * moved * 1.3 / 1000 + 0.005))

    def scenario_sync(self, outgoing):
        name = "sync-out" if outgoing else "sync-in"
        marker = self.vs.last_own_id
        own_before = len(self.vs.ids)
        moved = self.backlog()
        result = {}

        def run():
            try:
                if outgoing:
                    result["report"] = self.v.call("sync", {"peer": self.p.url}, timeout=120)
                else:
                    result["report"] = self.p.call("sync", {"peer": self.v.url}, timeout=120)
            except Exception as error:  # the kill cuts V's answer
                result["error"] = error

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.kill_after(self.sync_delay(moved), self.v)
        done_before = "report" in result
        thread.join(120)
        if not done_before:
            self.mid[name] += 1
        self.restart(self.v)
        # V's own events: exactly those acknowledged, nothing lost by the cut session.
        self.check_exactly_once(self.vs, self.v_node, marker, self.vs.ids - self._ids_snapshot, name)
        status = self.v.call("status")
        self.check("event-count", own_before <= status["events"] <= len(self.vs.ids) + len(self.ps.ids),
                   f"{name}: V holds {status['events']} events after the restart")
        self.converge(name)
        self.check_old_keys(self.vs)

    def fresh_daemon(self, kind, settings, env=None):
        self.fresh_count += 1
        root = os.path.join(self.root, f"{kind}-{self.fresh_count}")
        daemon = h.Daemon(self.bindir, root, f"{kind}-{self.fresh_count}",
                          dict({"durability": "full"}, **settings))
        return daemon

    def make_template(self):
        """A store of `threshold` events without a dictionary, stopped cleanly: copied for
        each dictionary kill."""
        threshold = self.args.dictionary_events
        daemon = h.Daemon(self.bindir, os.path.join(self.root, "dictionary-template"), "template",
                          {"dictionary_training_events": 1_000_000_000})
        daemon.start()
        store = Store(daemon, "d", 3, self.pool)
        self.append_all(store, store.next_inputs(threshold))
        self.check("template", daemon.call("status")["dictionary_version"] == 0, "the template has a dictionary")
        daemon.stop()
        self.template = (daemon.data_dir, dict(store.acked), set(store.ids), store)
        # How long training takes after the start, uninterrupted: the kill window.
        probe = self.fresh_daemon("calibration", {"dictionary_training_events": threshold})
        shutil.copytree(daemon.data_dir, probe.data_dir)
        self.start_with_env(probe, {"WATCHDOG_USEC": "200000"})
        started = time.monotonic()
        while probe.call("status")["dictionary_version"] == 0:
            if time.monotonic() - started > 60:
                raise Failure("the dictionary was not trained within 60 s of the start")
            time.sleep(0.01)
        self.training_seconds = time.monotonic() - started
        probe.kill9()
        h.remove_tree(probe.root)

    def make_map_template(self):
        """A store of some large events, stopped cleanly: copied for each map-growth kill.
        LMDB reopens a map at the size of its data when that is larger than the configured
        one (64 KiB), so the copy's map is full at the start and grows with the first writes."""
        daemon = h.Daemon(self.bindir, os.path.join(self.root, "map-template"), "map-template",
                          {"map_initial_bytes": 64 << 10})
        daemon.start()
        store = Store(daemon, "mt", 6, self.pool)
        rng = random.Random(self.args.seed * 31)
        while daemon.call("status")["bytes"] < 400 << 10:
            events = store.next_inputs(10, lambda event, n: {
                "entity": event["entity"], "kind": "edit", "fields": {"photo": random_payload(rng, 6000), "n": n}})
            self.append_all(store, events)
        daemon.stop()
        self.map_template = (daemon.data_dir, dict(store.acked), set(store.ids))

    def start_with_env(self, daemon, env):
        saved = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            daemon.start()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v

    def scenario_fresh(self, kind):
        if kind == "dictionary":
            if self.template is None:
                self.make_template()
            data_dir, acked, template_ids, template_store = self.template
            daemon = self.fresh_daemon(kind, {"dictionary_training_events": self.args.dictionary_events})
            shutil.copytree(data_dir, daemon.data_dir)
            store = Store(daemon, f"d{self.fresh_count}", 4, self.pool, self.fresh_streams)
            store.acked = dict(acked)
            store.ids = set(template_ids)
            env = {"WATCHDOG_USEC": "200000"}  # the maintenance thread ticks every 100 ms
            transform = None
            batch, limit = 50, self.args.append_limit
        else:
            if self.map_template is None:
                self.make_map_template()
            data_dir, acked, template_ids = self.map_template
            daemon = self.fresh_daemon(kind, {"map_initial_bytes": 64 << 10})
            shutil.copytree(data_dir, daemon.data_dir)
            store = Store(daemon, f"m{self.fresh_count}", 5, self.pool, self.fresh_streams)
            store.acked = dict(acked)
            store.ids = set(template_ids)
            env = {}
            payload_rng = random.Random(self.args.seed * 7919 + self.fresh_count)

            def transform(event, n):
                return {"entity": event["entity"], "kind": "edit",
                        "fields": {"photo": random_payload(payload_rng, 6000), "n": n}}
            # A debug build takes about 50 ms per such event: smaller batches there.
            batch, limit = (4, 80) if self.args.short else (20, 600)
        self.start_with_env(daemon, env)
        map_before = daemon.call("status")["map_bytes"]
        window = self.training_seconds * 1.3 if kind == "dictionary" else self.args.max_delay
        load = Load(store, connections=2, batch=batch, depth=4, limit=limit, transform=transform, span=window)
        load.start()
        self.kill_after(self.kill_rng.uniform(0, window), daemon)
        load.join()
        if os.environ.get("TORTURE_DEBUG"):
            print(f"  {kind}: sent {load.sent}, acknowledged {sum(len(e) for e, _ in load.acked_now)}, "
                  f"unacknowledged {sum(len(e) for e in load.unacked)}, errors {load.errors[:2]}", flush=True)
        if load.unacked:
            self.mid[kind] += 1
        daemon.kill9()
        # Restarted without the fast maintenance tick: the checks are done before it would
        # train again (a training in the background only slows them down).
        daemon.start()
        self.restart_seconds.append(daemon.ready_seconds)
        self.check("restart", True, "")
        status = daemon.call("status")
        if kind == "dictionary" and status["dictionary_version"] > 0:
            self.dictionary_committed_before_kill += 1
        if kind == "map-growth":
            # The map is reopened at its configured size (or the data's); the data committed
            # before the kill tells how many times it had to double, at least (growth
            # happens when 80 % is used).
            size = map_before
            while size * 4 // 5 < status["bytes"]:
                size *= 2
                self.map_growths += 1
        self.recover_load(store, load)
        with daemon.client(timeout=300) as client:
            events = list(h.all_events(client))
        ids = [e["id"] for e in events]
        keys = [e.get("key") for e in events]
        self.check("exactly-once", len(ids) == len(set(ids)) == len(store.ids) and set(ids) == store.ids
                   and len(set(keys)) == len(keys),
                   f"{kind}: the store should hold exactly the {len(store.ids)} acknowledged events; it holds "
                   f"{len(ids)} ({len(set(ids))} distinct ids, {len(set(keys))} distinct keys), missing "
                   f"{sorted(store.ids - set(ids))[:5]}, unexpected {sorted(set(ids) - store.ids)[:5]}")
        self.check_count(daemon, len(store.ids), kind)
        self.check_old_keys(store)
        self.events_acked_fresh = getattr(self, "events_acked_fresh", 0) + len(store.ids) - len(template_ids)
        every = max(1, self.args.full_every // 10)
        if self.kills[kind] % every == 0 or self.final_cycle:
            verify = daemon.call("rebuild", {"verify": True}, timeout=600)
            self.check("rebuild-verify", not verify["mismatched"] and not verify["digest_mismatch"],
                       f"{kind}: rebuild --verify: {json.dumps(verify)[:500]}")
            peer = self.fresh_daemon("peer", {})
            peer.start()
            report = peer.call("sync", {"peer": daemon.url}, timeout=600)["peers"][0]
            a, b = daemon.call("status"), peer.call("status")
            self.check("convergence", report["error"] is None and a["digest"] == b["digest"]
                       and a["events"] == b["events"],
                       f"{kind}: a new node synced from the store: {report['error']}, {a['events']} vs "
                       f"{b['events']} events, digests {a['digest']} vs {b['digest']}")
            peer.kill9()
            h.remove_tree(peer.root)
        daemon.kill9()  # a scratch store; a clean stop would wait for a training in progress
        h.remove_tree(daemon.root)

    # --- the loop --------------------------------------------------------------------------

    def run(self):
        started = time.monotonic()
        self.final_cycle = False
        # A first backlog so that the sync scenarios have an estimate of their length.
        self.backlog()
        self.converge("start")
        self._ids_snapshot = set(self.vs.ids)
        last_print = started
        for number in range(1, self.args.kills + 1):
            self.kill_number = number
            self.final_cycle = number == self.args.kills
            scenario = SCENARIOS[(number - 1) % len(SCENARIOS)] if not self.args.only else self.args.only
            self.current = scenario
            self._ids_snapshot = set(self.vs.ids)
            cycle_started = time.monotonic()
            if scenario == "append":
                self.scenario_append()
            elif scenario == "sync-out":
                self.scenario_sync(True)
            elif scenario == "sync-in":
                self.scenario_sync(False)
            else:
                self.scenario_fresh(scenario)
            self.kills[scenario] += 1
            self.seconds[scenario] += time.monotonic() - cycle_started
            if number % self.args.full_every == 0 or self.final_cycle:
                check_started = time.monotonic()
                self.full_check(f"full check after kill {number}")
                self.seconds["full-check"] += time.monotonic() - check_started
            now = time.monotonic()
            if now - last_print > 30:
                last_print = now
                print(f"  {number} kills in {now - started:.0f} s; V holds {self.v_expected_events} events",
                      flush=True)
        self.v.stop()
        self.p.stop()
        return time.monotonic() - started


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--kills", type=int, default=1000, help="kills in the run (1000)")
    parser.add_argument("--short", action="store_true", help="CI mode: 20 kills, debug binaries")
    parser.add_argument("--seed", type=int, default=None, help="seed of the inputs (random when omitted; printed)")
    parser.add_argument("--only", choices=SCENARIOS, help="run one scenario only")
    parser.add_argument("--max-delay", type=float, default=None, help="kill at most this long after the load starts, "
                        "s (0.3; 1.0 with --short: debug builds append large events about 30 times slower)")
    parser.add_argument("--append-limit", type=int, default=None, help="inputs sent at most per append kill (1600; "
                        "500 with --short)")
    parser.add_argument("--backlog", type=int, default=None, help="events appended before each sync kill (1200; "
                        "300 with --short)")
    parser.add_argument("--dictionary-events", type=int, default=1000, help="training threshold of the "
                        "dictionary scenario (1000)")
    parser.add_argument("--full-every", type=int, default=None, help="full checks every this many kills (200; 10 "
                        "with --short)")
    parser.add_argument("--pool", type=int, default=None, help="field workload events generated once and replayed "
                        "with fresh entity ids (6000; 2000 with --short)")
    h.add_run_arguments(parser)
    args = parser.parse_args()
    if args.short:
        args.kills = min(args.kills, 20)
    defaults = (("pool", 6000, 2000), ("max_delay", 0.3, 1.0), ("append_limit", 1600, 500), ("backlog", 1200, 300),
                ("full_every", 200, 10))
    for name, full, short in defaults:
        if getattr(args, name) is None:
            setattr(args, name, short if args.short else full)
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 1 << 31)
    bindir = h.bin_dir(args.bin, ".build/debug" if args.short else ".build/release")
    h.install_cleanup()
    root = h.scratch_dir("evstore-torture-", args.tmp)
    print(f"torture: {args.kills} kills, seed {args.seed}, binaries {bindir}, dir {root}", flush=True)
    started = time.monotonic()
    torture = None
    failure = None
    try:
        torture = Torture(args, bindir, root)
        torture.run()
    except h.HarnessFailure as error:
        failure = str(error)
    except Exception as error:
        import traceback
        traceback.print_exc()
        failure = f"harness error: {error!r}"
    wall = time.monotonic() - started
    figures = {"seed": args.seed, "kills_planned": args.kills, "bin": bindir, "dir": root, "wall_s": round(wall, 1),
               "passed": failure is None, "failure": failure}
    if torture:
        figures.update({
            "kills": torture.kills, "kills_total": sum(torture.kills.values()),
            "kills_with_work_in_flight": torture.mid, "checks": torture.checks,
            "events_acknowledged": len(torture.vs.ids) + len(torture.ps.ids) + getattr(torture, "events_acked_fresh", 0),
            "main_store_events": torture.v_expected_events,
            "map_growths_before_kills": torture.map_growths,
            "dictionary_committed_before_kill": torture.dictionary_committed_before_kill,
            "restart_s_median": sorted(torture.restart_seconds)[len(torture.restart_seconds) // 2]
            if torture.restart_seconds else None,
            "restart_s_max": max(torture.restart_seconds) if torture.restart_seconds else None,
            "sync_ms_per_event": torture.sync_ms_per_event,
            "dictionary_training_s": torture.training_seconds,
            "seconds": {k: round(v, 1) for k, v in torture.seconds.items()},
        })
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    if torture:
        print()
        rows = [[s, torture.kills[s], torture.mid[s], f"{torture.seconds[s]:.0f}"] for s in SCENARIOS]
        rows.append(["full checks", "", "", f"{torture.seconds['full-check']:.0f}"])
        h.print_table(rows, ["scenario", "kills survived", "of them with work in flight", "seconds"])
        print()
        h.print_table(sorted(torture.checks.items()), ["check", "times"])
        print(f"\nevents acknowledged: {figures['events_acknowledged']} (main store V: {torture.v_expected_events}); "
              f"map growths in the kill windows: {torture.map_growths}; dictionary committed before the kill: "
              f"{torture.dictionary_committed_before_kill} of {torture.kills['dictionary']}; restart to READY: "
              f"median {figures['restart_s_median'] or 0:.3f} s, max {figures['restart_s_max'] or 0:.3f} s; "
              f"wall {wall:.0f} s")
    if failure:
        print(f"\nTORTURE FAILED at kill {torture.kill_number if torture else 0} "
              f"({getattr(torture, 'current', '?')}), seed {args.seed}; data kept in {root}")
        print("  " + failure)
        return 1
    print(f"\ntorture passed: {sum(torture.kills.values())} kills survived")
    if not args.keep:
        h.remove_tree(root)
    return 0


if __name__ == "__main__":
    sys.exit(main())
