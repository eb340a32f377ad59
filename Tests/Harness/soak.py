#!/usr/bin/env python3
"""Soak: three evstored nodes for a long time under 32 clients while they sync.

Node A is under load; B and C are its peers. A syncs with B and C and B with C in the
background (config `peers`, `sync_interval_s`); B and C also take a small load of their
own, so events flow every way. 32 client processes:

  appenders  the shared field workload (fieldops.py), batches with idempotency keys;
             every acknowledged id is written to a file
  readers    get / list / log / status in a mix
  watchers   `watch` from the start of the log (after = 0...0), with and without a type
             filter; each keeps a count and an order-free hash of the ids it was sent

Every few seconds each daemon's VmRSS, RssAnon and open descriptors are sampled. At the
end the load stops, the nodes are synced until their digests are equal, and the run
fails (exit 1) on: an error response; a lost, extra or duplicated event on any node
(every node's log must be exactly the set of acknowledged ids); a watcher that did not
see exactly the events of its filter; a failed sync session; an anonymous-memory slope
over the second half of the steady state above --max-slope-kib-min; descriptors that
stay open after the clients left.

  soak.py --minutes 30                   the full run (release binaries)
  soak.py --short                        75 s of load, debug binaries, what CI runs
"""
import argparse
import json
import multiprocessing as mp
import os
import random
import re
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import evharness as h  # noqa: E402

START = 0  # a seq: watch and log from the first event


# --- clients (each in its own process) ---------------------------------------------------


def reconnect(socket_path, client):
    """A fresh connection after the daemon dropped one; the old client while it is not back."""
    time.sleep(0.5)
    try:
        return h.Client(socket_path, timeout=120)
    except OSError:
        return client


def appender(index, socket_path, node, seed, rate, batch, retype, stop, out_dir, counters, slot):
    """Appends batches of the field workload with keys; writes acknowledged ids to a file."""
    rng = random.Random(seed)
    stream = h.fieldops_stream(seed)
    errors = []
    acked = 0
    ack_file = open(os.path.join(out_dir, f"acks-{index}.txt"), "w")
    client = h.Client(socket_path, timeout=120)
    interval = batch / rate if rate > 0 else 0
    next_at = time.monotonic()
    n = 0
    while not stop.is_set():
        events = []
        for _ in range(batch):
            event = next(stream)
            if retype:
                event["entity"] = retype + event["entity"][event["entity"].index("/"):]
            event["key"] = f"soak-{node}-{index}-{n}"
            n += 1
            events.append(event)
        try:
            result = client.call("append", {"events": events})
            for event_id in result["ids"]:
                ack_file.write(event_id + "\n")
            acked += len(result["ids"])
            counters[slot] = acked
        except h.RPCError as error:
            errors.append(f"append: {error}")
        except (OSError, ConnectionError) as error:
            errors.append(f"append connection: {error}")
            client = reconnect(socket_path, client)
        next_at += interval * rng.uniform(0.5, 1.5)
        delay = next_at - time.monotonic()
        if delay > 0:
            stop.wait(delay)
        elif delay < -5:
            next_at = time.monotonic()
    ack_file.close()
    client.close()
    return {"role": "appender", "node": node, "index": index, "acked": acked, "errors": errors}


def reader(index, socket_path, node, seed, rate, stop, counters, slot):
    rng = random.Random(seed)
    client = h.Client(socket_path, timeout=120)
    errors = []
    reads = 0
    known_entities = []
    known_ids = []
    next_at = time.monotonic()
    while not stop.is_set():
        op = rng.random()
        try:
            if op < 0.35 and known_entities:
                state = client.call("get", {"entity": rng.choice(known_entities)})
                if "version" not in state:
                    errors.append(f"get: no version in {str(state)[:200]}")
            elif op < 0.6:
                params = {"type": rng.choice(["job", "site"]), "limit": 50}
                if known_entities and rng.random() < 0.5:
                    params["after"] = rng.choice(known_entities)
                page = client.call("list", params)
                for item in page["entities"][:5]:
                    known_entities.append(item["entity"])
            elif op < 0.9:
                params = {"limit": 100}
                if known_ids and rng.random() < 0.7:
                    params["after"] = rng.choice(known_ids)  # seqs seen
                page = client.call("log", params)
                if page["events"]:
                    known_ids.append(page["events"][-1]["seq"])
                    known_entities.append(page["events"][0]["entity"])
            else:
                client.call("status")
            reads += 1
            counters[slot] = reads
            del known_entities[:-500]
            del known_ids[:-500]
        except h.RPCError as error:
            errors.append(f"read: {error}")
        except (OSError, ConnectionError) as error:
            errors.append(f"read connection: {error}")
            client = reconnect(socket_path, client)
        next_at += (1 / rate) * rng.uniform(0.5, 1.5)
        delay = next_at - time.monotonic()
        if delay > 0:
            stop.wait(delay)
        elif delay < -5:
            next_at = time.monotonic()
    client.close()
    return {"role": "reader", "node": node, "index": index, "reads": reads, "errors": errors}


def watcher(index, socket_path, node, type_filter, stop, counters, slot):
    """Watches from the start of the log; on watch.overflow, resumes where it was told."""
    count = 0
    hash_sum = 0
    overflows = 0
    errors = []
    after = START
    while not stop.is_set():
        try:
            client = h.Client(socket_path, timeout=120)
            params = {"after": after}
            if type_filter:
                params["type"] = type_filter
            client.call("watch", params)
            lines = h.LineSocket(client.sock, client.reader)
            while not stop.is_set():
                line = lines.readline(timeout=1.0)
                if line is None:
                    continue
                message = json.loads(line)
                method = message.get("method")
                if method == "event":
                    event = message["params"]["event"]
                    if type_filter and not event["entity"].startswith(type_filter + "/"):
                        errors.append(f"watch {type_filter}: got {event['entity']}")
                    count += 1
                    hash_sum = (hash_sum + h.id_hash(event["id"])) % (1 << 64)
                    after = event["seq"]
                    counters[slot] = count
                elif method == "watch.overflow":
                    overflows += 1
                    after = message["params"]["resume_after"]
                    break
                elif "error" in message:
                    errors.append(f"watch: {message['error']}")
            client.close()
        except (OSError, ConnectionError, ValueError) as error:
            errors.append(f"watch connection: {error}")
            time.sleep(0.5)
    return {"role": "watcher", "node": node, "index": index, "filter": type_filter, "count": count,
            "hash": hash_sum, "overflows": overflows, "errors": errors}


def run_client(kind, args, results):
    try:
        results.put(kind(*args))
    except Exception as error:  # a crash of the client is an error of the run
        results.put({"role": kind.__name__, "index": args[0], "errors": [f"client crashed: {error!r}"]})


# --- the run -----------------------------------------------------------------------------

def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=30.0, help="length of the load (30)")
    parser.add_argument("--short", action="store_true", help="CI mode: 75 s, debug binaries, loose memory bound")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--rate", type=float, default=500.0, help="events/s appended in total (500)")
    parser.add_argument("--read-rate", type=float, default=40.0, help="reads/s per reader (40)")
    parser.add_argument("--sync-interval", type=int, default=3, help="sync_interval_s of the peers (3)")
    parser.add_argument("--sample-interval", type=float, default=5.0, help="seconds between RSS samples (5)")
    parser.add_argument("--warmup", type=float, default=None, help="seconds before the steady state (10%% of the run)")
    parser.add_argument("--max-slope-kib-min", type=float, default=None,
                        help="fail above this RssAnon slope over the second half, KiB/min (512; 32768 with --short)")
    parser.add_argument("--durability", default="full", choices=["full", "relaxed"])
    parser.add_argument("--dictionary-events", type=int, default=None,
                        help="dictionary_training_events of the nodes (the daemon's 10000; 2000 with --short, so "
                        "that the first training, a step in memory, falls in the warmup)")
    h.add_run_arguments(parser)
    args = parser.parse_args()
    if args.short:
        args.minutes = min(args.minutes, 1.25)
        if args.max_slope_kib_min is None:
            args.max_slope_kib_min = 32768.0
        if args.dictionary_events is None:
            args.dictionary_events = 2000
        if args.warmup is None:
            args.warmup = 20.0
    if args.max_slope_kib_min is None:
        args.max_slope_kib_min = 512.0
    bindir = h.bin_dir(args.bin, ".build/debug" if args.short else ".build/release")
    if args.warmup is None:
        args.warmup = max(10.0, args.minutes * 60 * 0.1)
    h.install_cleanup()
    root = h.scratch_dir("evstore-soak-", args.tmp)
    print(f"soak: {args.minutes:g} min, {args.clients} clients, seed {args.seed}, binaries {bindir}, dir {root}",
          flush=True)
    started = time.monotonic()
    figures = {"seed": args.seed, "minutes": args.minutes, "clients": args.clients, "bin": bindir, "dir": root,
               "durability": args.durability}
    failures = []
    try:
        run(args, bindir, root, figures, failures)
    except h.HarnessFailure as error:
        failures.append(str(error))
    except Exception as error:
        failures.append(f"harness error: {error!r}")
        import traceback
        traceback.print_exc()
    figures["wall_s"] = round(time.monotonic() - started, 1)
    figures["failures"] = failures
    figures["passed"] = not failures
    if args.json:
        with open(args.json, "w") as f:
            json.dump(figures, f, indent=2)
    if failures:
        print("\nSOAK FAILED (seed %d); data kept in %s" % (args.seed, root))
        for failure in failures[:30]:
            print("  - " + failure)
        return 1
    print(f"\nsoak passed in {figures['wall_s']} s")
    if not args.keep:
        h.remove_tree(root)
    return 0


def run(args, bindir, root, figures, failures):
    settings = {"sync_interval_s": args.sync_interval, "durability": args.durability, "log_level": "info",
                "backoff_base_s": 1, "backoff_cap_s": 5}
    if args.dictionary_events:
        settings["dictionary_training_events"] = args.dictionary_events
    a = h.Daemon(bindir, os.path.join(root, "a"), "a", settings)
    b = h.Daemon(bindir, os.path.join(root, "b"), "b", settings)
    c = h.Daemon(bindir, os.path.join(root, "c"), "c", settings)
    a.peers = [{"name": "b", "url": b.url}, {"name": "c", "url": c.url}]
    b.peers = [{"name": "c", "url": c.url}]
    nodes = [a, b, c]
    for node in (c, b, a):  # peers first, so the first background syncs find them
        node.write_config()
        node.start()
    baseline_fds = {n.name: n.fds() for n in nodes}

    # 32 clients: 2 appenders and 2 watchers on B and C each (sync carries their events
    # to A), the rest on A: 3 of 8 appending, 3 of 8 reading, 2 of 8 watching.
    plan = []
    for node in (b, c):
        plan += [("appender", node), ("watcher", node)]
    rest = args.clients - len(plan)
    n_append = max(1, rest * 3 // 8)
    n_watch = max(1, rest * 2 // 8)
    n_read = max(0, rest - n_append - n_watch)
    plan += [("appender", a)] * n_append + [("reader", a)] * n_read + [("watcher", a)] * n_watch
    appenders = [p for p in plan if p[0] == "appender"]
    # B's and C's appenders take a tenth of the rate each.
    rate_of = {"a": args.rate * 0.8 / max(1, sum(1 for p in appenders if p[1] is a)), "b": args.rate * 0.1,
               "c": args.rate * 0.1}

    ctx = mp.get_context("fork")
    stop = ctx.Event()  # appenders and readers
    stop_watch = ctx.Event()  # watchers: after the nodes converged and they caught up
    results = ctx.Queue()
    counters = ctx.Array("q", len(plan), lock=False)
    acks_dir = os.path.join(root, "acks")
    os.makedirs(acks_dir)
    procs = []
    watch_filters = [None, "job", "site", None]
    watchers_info = []
    for slot, (kind, node) in enumerate(plan):
        seed = args.seed * 1000 + slot
        if kind == "appender":
            target = appender
            retype = "site" if slot % 3 == 2 else None
            call_args = (slot, node.socket_path, node.name, seed, rate_of[node.name], 10, retype, stop, acks_dir,
                         counters, slot)
        elif kind == "reader":
            target = reader
            call_args = (slot, node.socket_path, node.name, seed, args.read_rate, stop, counters, slot)
        else:
            target = watcher
            type_filter = watch_filters[len(watchers_info) % len(watch_filters)] if node is a else None
            watchers_info.append((slot, node, type_filter))
            call_args = (slot, node.socket_path, node.name, type_filter, stop_watch, counters, slot)
        proc = ctx.Process(target=run_client, args=(target, call_args, results), daemon=True)
        proc.start()
        procs.append(proc)
    print(f"clients: {len(plan)} ({sum(1 for p in plan if p[0] == 'appender')} appenders, "
          f"{sum(1 for p in plan if p[0] == 'reader')} readers, {sum(1 for p in plan if p[0] == 'watcher')} watchers)",
          flush=True)

    samples = {n.name: [] for n in nodes}
    load_started = time.monotonic()
    duration = args.minutes * 60
    next_print = load_started + 30
    try:
        while True:
            now = time.monotonic()
            t = now - load_started
            for node in nodes:
                if not node.alive():
                    raise h.HarnessFailure(f"{node.name}: evstored exited with {node.proc.returncode} during the "
                                           f"load; log:\n{node.log_tail()}")
                anon = 0
                with open(f"/proc/{node.proc.pid}/status") as f:
                    for line in f:
                        if line.startswith("RssAnon:"):
                            anon = int(line.split()[1])
                samples[node.name].append({"t": round(t, 1), "rss_kib": node.rss_kib(), "anon_kib": anon,
                                           "fds": node.fds()})
            if now >= next_print:
                appended = sum(counters[i] for i, p in enumerate(plan) if p[0] == "appender")
                print(f"  {t / 60:5.1f} min: {appended} events appended; RSS " + ", ".join(
                    f"{n.name} {samples[n.name][-1]['rss_kib'] // 1024} MiB" for n in nodes), flush=True)
                next_print = now + 60
            if t >= duration:
                break
            time.sleep(min(args.sample_interval, max(0.1, duration - t)))
    finally:
        load_seconds = time.monotonic() - load_started
        # Stop appenders and readers; watchers keep watching until the nodes converged.
        figures["load_s"] = round(load_seconds, 1)

    appended_total = sum(counters[i] for i, p in enumerate(plan) if p[0] == "appender")
    reads_total = sum(counters[i] for i, p in enumerate(plan) if p[0] == "reader")
    stop.set()
    client_results = []
    for _ in range(len(plan) - len(watchers_info)):
        client_results.append(results.get(timeout=300))
    appended_total = sum(r.get("acked", 0) for r in client_results)
    reads_total = sum(r.get("reads", 0) for r in client_results)

    converge_started = time.monotonic()
    sync_rounds = 0
    for attempt in range(30):
        sync_rounds += 1
        for node, peer in ((a, None), (b, "c"), (a, None)):
            report = node.call("sync", {"peer": peer} if peer else {})
            for entry in report["peers"]:
                if entry["error"]:
                    failures.append(f"final sync {node.name} -> {entry['name']}: {entry['error']}")
        statuses = [n.call("status") for n in nodes]
        if len({s["digest"] for s in statuses}) == 1 and len({s["events"] for s in statuses}) == 1:
            break
        time.sleep(1)
    else:
        failures.append("the nodes did not converge after 30 rounds of syncs: " + ", ".join(
            f"{n.name}: {s['events']} events, digest {s['digest']}" for n, s in zip(nodes, statuses)))
    figures["converge_s"] = round(time.monotonic() - converge_started, 1)

    # Every acknowledged id on every node, nothing else, nothing twice.
    acked = set()
    acked_lines = 0
    for name in os.listdir(acks_dir):
        with open(os.path.join(acks_dir, name)) as f:
            for line in f:
                acked.add(line.strip())
                acked_lines += 1
    if acked_lines != len(acked):
        failures.append(f"{acked_lines - len(acked)} acknowledged ids were returned for two different inputs")
    expected_watch = {}
    for node in nodes:
        with node.client(timeout=300) as client:
            seen = 0
            missing = set(acked)
            extra = 0
            per_type = {None: [0, 0], "job": [0, 0], "site": [0, 0]}
            for event in h.all_events(client):
                seen += 1
                if event["id"] in missing:
                    missing.discard(event["id"])
                else:
                    extra += 1
                hv = h.id_hash(event["id"])
                for key in (None, event["entity"].split("/", 1)[0]):
                    if key in per_type:
                        per_type[key][0] += 1
                        per_type[key][1] = (per_type[key][1] + hv) % (1 << 64)
            expected_watch[node.name] = per_type
            if missing or extra or seen != len(acked):
                failures.append(f"{node.name}: expected exactly the {len(acked)} acknowledged events, found {seen} "
                                f"({len(missing)} acknowledged missing, e.g. {sorted(missing)[:3]}; {extra} "
                                f"not acknowledged or repeated)")
        status = node.call("status")
        verify = node.call("rebuild", {"verify": True}, timeout=600)
        if verify.get("mismatched") or verify.get("digest_mismatch"):
            failures.append(f"{node.name}: rebuild --verify found {verify}")
        figures.setdefault("nodes", {})[node.name] = {"events": status["events"], "digest": status["digest"]}

    # Watchers: each must be sent exactly the events of its filter that its node holds.
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        if all(counters[slot] >= expected_watch[node.name][f][0] for slot, node, f in watchers_info):
            break
        time.sleep(0.5)
    time.sleep(1)  # a repeat sent late would still be counted
    stop_watch.set()
    for _ in watchers_info:
        client_results.append(results.get(timeout=60))
    for proc in procs:
        proc.join(timeout=30)
    watch_total = 0
    figures["watchers"] = []
    for r in client_results:
        for error in r.get("errors", [])[:5]:
            failures.append(f"{r['role']} {r.get('index')} on {r.get('node')}: {error}")
        if len(r.get("errors", [])) > 5:
            failures.append(f"{r['role']} {r.get('index')}: {len(r['errors'])} errors in all")
        if r["role"] != "watcher" or "count" not in r:
            continue
        watch_total += r["count"]
        want_count, want_hash = expected_watch[r["node"]][r["filter"]]
        figures["watchers"].append({"node": r["node"], "filter": r["filter"], "count": r["count"],
                                    "expected": want_count, "overflows": r["overflows"]})
        if r["count"] != want_count or r["hash"] != want_hash:
            failures.append(f"watcher {r['index']} on {r['node']} ({r['filter'] or 'all'}): sent {r['count']} "
                            f"events, the node holds {want_count} of its filter; id fingerprints "
                            f"{'equal' if r['hash'] == want_hash else 'differ'}")
    figures["watch_notifications"] = watch_total

    # Syncs and sync failures, from the daemons' logs.
    syncs = 0
    sync_failures = []
    for node in nodes:
        with open(node.log_path, errors="replace") as f:
            for line in f:
                if re.search(r"sync with \S+: sent", line):
                    syncs += 1
                elif "sync with" in line and "failed" in line or "sync from" in line and "failed" in line:
                    sync_failures.append(f"{node.name}: {line.strip()}")
    figures["syncs"] = syncs
    figures["sync_failures"] = len(sync_failures)
    for line in sync_failures[:10]:
        failures.append("sync failed: " + line)

    # Descriptors after the clients left, against the baseline before they came.
    time.sleep(1)
    for node in nodes:
        end_fds = node.fds()
        figures["nodes"][node.name].update({"fds_baseline": baseline_fds[node.name], "fds_end": end_fds})
        if end_fds > baseline_fds[node.name] + 4:
            failures.append(f"{node.name}: {end_fds} descriptors open after the clients left, "
                            f"{baseline_fds[node.name]} before they came")

    # Memory: steady state from the end of the warmup; slope over its second half.
    for node in nodes:
        series = samples[node.name]
        steady = [s for s in series if s["t"] >= args.warmup] or series
        half = steady[len(steady) // 2:]
        slope_rss = h.least_squares_slope([(s["t"] / 60, s["rss_kib"]) for s in half])
        slope_anon = h.least_squares_slope([(s["t"] / 60, s["anon_kib"]) for s in half])
        fig = figures["nodes"][node.name]
        fig.update({
            "rss_start_kib": steady[0]["rss_kib"], "rss_end_kib": series[-1]["rss_kib"],
            "rss_max_kib": max(s["rss_kib"] for s in series),
            "anon_start_kib": steady[0]["anon_kib"], "anon_end_kib": series[-1]["anon_kib"],
            "anon_max_kib": max(s["anon_kib"] for s in series),
            "rss_slope_kib_min": round(slope_rss, 1) if slope_rss is not None else None,
            "anon_slope_kib_min": round(slope_anon, 1) if slope_anon is not None else None,
            "fds_start": steady[0]["fds"], "fds_max": max(s["fds"] for s in series),
            "samples": len(series), "series": series,
        })
        if slope_anon is not None and slope_anon > args.max_slope_kib_min:
            failures.append(f"{node.name}: anonymous memory grows {slope_anon:.0f} KiB/min over the second half of "
                            f"the steady state (limit {args.max_slope_kib_min:g})")

    for node in nodes:
        code = node.stop()
        if code != 0:
            failures.append(f"{node.name}: exit status {code} after SIGTERM")

    appended_total = sum(r.get("acked", 0) for r in client_results)
    reads_total = sum(r.get("reads", 0) for r in client_results)
    figures.update({
        "events_appended": appended_total, "distinct_events": len(acked),
        "appends_per_s": round(appended_total / figures["load_s"], 1),
        "reads": reads_total, "reads_per_s": round(reads_total / figures["load_s"], 1),
        "errors": sum(len(r.get("errors", [])) for r in client_results),
        "sync_rounds_to_converge": sync_rounds,
    })
    print()
    print(f"load {figures['load_s']} s: {appended_total} events appended ({figures['appends_per_s']}/s), "
          f"{reads_total} reads ({figures['reads_per_s']}/s), {watch_total} watch notifications, "
          f"{syncs} background syncs ({len(sync_failures)} failed), {figures['errors']} client errors; "
          f"converged in {figures['converge_s']} s")
    rows = []
    for node in nodes:
        f = figures["nodes"][node.name]
        rows.append([node.name, f["events"], f"{f['rss_start_kib'] // 1024}", f"{f['rss_end_kib'] // 1024}",
                     f"{f['rss_max_kib'] // 1024}", f["rss_slope_kib_min"], f"{f['anon_start_kib'] // 1024}",
                     f"{f['anon_end_kib'] // 1024}", f["anon_slope_kib_min"],
                     f"{f['fds_start']}/{f['fds_max']}/{f['fds_end']}"])
    h.print_table(rows, ["node", "events", "RSS start MiB", "end", "max", "slope KiB/min", "anon start MiB",
                         "end", "slope KiB/min", "fds start/max/after"])


if __name__ == "__main__":
    sys.exit(main())
