#!/usr/bin/env python3
"""Writes the JSON seed corpora of the fuzzers: Corpus/request and Corpus/event.

Events come from the shared field workload (fieldops.py), the requests are the socket API's
methods with valid and a few near-valid parameters. Same script, same files:

  python3 Fuzz/seeds.py [--workload path/to/fieldops.py]

The binary corpora (stored-value, sync-stream) are written by a test; docs/fuzzing.md says how.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ID = "01JD3Q8R5N8X6ZK2W7Y4V9B3TQ"
ORIGIN = "01JD3Q8R5N8X6ZK2W7Y4V9B3AA"


def compact(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def write(directory, name, data):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, name), "wb") as f:
        f.write(data)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workload", default=os.path.join(HERE, "..", "..", "shared", "workload", "fieldops.py"))
    a = p.parse_args()
    lines = subprocess.run([sys.executable, a.workload, "--events", "40", "--seed", "11"],
                           check=True, capture_output=True, text=True).stdout.splitlines()
    events = [json.loads(line) for line in lines]
    by_kind = {}
    for event in events:
        by_kind.setdefault(event["kind"], event)
    entity = events[0]["entity"]

    # Corpus/event: a selector byte (0 input form, 1 stored form with id, 3 stored form under a key).
    out = os.path.join(HERE, "Corpus", "event")
    samples = list(by_kind.values()) + [
        {"entity": entity, "kind": "delete", "key": "k-1", "at": "2026-11-02T08:00:00Z"},
        {"entity": entity, "kind": "restore", "by": "tech-0"},
        {"entity": entity, "kind": "edit", "fields": {"phone": None, "floor": 3, "tags": ["a", {"b": 1.5e3}]},
         "if_match": 1042},
        {"entity": "site/a/b/\u00e9", "kind": "add", "set": "parts", "element": {"sku": "valve-3", "n": 2}},
        {"entity": entity, "kind": "edit", "fields": {"address": "12 Main St"}, "resolve": True, "by": "ana"},
    ]
    for index, sample in enumerate(samples):
        write(out, f"input-{index:02d}.json", b"\x00" + compact(sample).encode())
    stored = [
        {"entity": entity, "id": ID, "origin": ORIGIN, "kind": "status", "status": "on_site",
         "base": ["01JD3Q8R5N8X6ZK2W7Y4V9B300"], "by": "tech-0"},
        {"entity": entity, "id": ID, "origin": ORIGIN, "kind": "edit", "fields": {"notes": "dog", "x": None},
         "base": {"notes": ["01JD3Q8R5N8X6ZK2W7Y4V9B300"]}},
        {"entity": entity, "id": ID, "origin": ORIGIN, "kind": "remove", "set": "parts", "element": "valve-3",
         "observed": ["01JD3Q8R5N8X6ZK2W7Y4V9B301", "01JD3Q8R5N8X6ZK2W7Y4V9B302"]},
        {"entity": entity, "id": ID, "origin": ORIGIN, "kind": "restore", "base": ["01JD3Q8R5N8X6ZK2W7Y4V9B303"]},
    ]
    for index, sample in enumerate(stored):
        write(out, f"stored-{index:02d}.json", b"\x01" + compact(sample).encode())
        keyed = {k: v for k, v in sample.items() if k != "id"}
        write(out, f"keyed-{index:02d}.json", b"\x03" + compact(keyed).encode())
    write(out, "invalid-00.json", b'\x00{"entity":"Job/1","kind":"status","status":"x"}')
    write(out, "invalid-01.json", b'\x00{"entity":"job/\\u0001","kind":"edit","fields":{}}')
    write(out, "invalid-02.json", b'\x01[1,2.5e-3,"\\ud83d\\ude00",true,null,{"a":{}}]')

    # Corpus/request: one line each.
    out = os.path.join(HERE, "Corpus", "request")
    requests = []

    def rpc(method, params=None, id_=1):
        request = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            request["params"] = params
        if id_ is not None:
            request["id"] = id_
        return request

    for start in range(0, 24, 6):
        requests.append(rpc("append", {"events": events[start:start + 6]}, start))
    requests.append(rpc("append", {"events": [events[0]]}, None))
    requests.append(rpc("append", {"events": [dict(by_kind["status"], key="once", if_match=1)]}, "s"))
    requests += [
        rpc("get", {"entity": entity}), rpc("get", {"entity": "job/none"}, "x"),
        rpc("list", {"type": "job", "status": "on_site", "limit": 2}),
        rpc("list", {"include_deleted": True, "after": entity}),
        rpc("log", {"limit": 5}), rpc("log", {"entity": entity, "after": ID}), rpc("log", {"origin": ORIGIN}),
        rpc("status"), rpc("conflicts", {"type": "job", "limit": 3}), rpc("dead_letters", {"limit": 1}),
        rpc("rebuild", {"verify": True}), rpc("watch", {"entity": entity}), rpc("peers.list", {}),
        rpc("peers.add", {"name": "gw-1", "url": "unix:///run/evstore/peer.sock"}),
        rpc("peers.remove", {"name": "gw-1"}), rpc("sync", {"peer": "gw-1"}),
        rpc("backup", {"path": "/nonexistent/backup"}), rpc("nope", None, 7),
        {"jsonrpc": "2.0", "method": "get", "params": [entity], "id": 2},
        {"jsonrpc": "1.0", "method": "status", "id": None},
        {"jsonrpc": "2.0", "method": "status", "id": {"a": 1}},
    ]
    lines = [compact(r).encode() for r in requests]
    lines.append(("[" + ",".join(compact(r) for r in [
        rpc("append", {"events": events[24:27]}, 100), rpc("get", {"entity": entity}, 101),
        rpc("status", None, None), 5]) + "]").encode())
    lines.append(b"[]")
    lines.append(b'{"jsonrpc":"2.0","method":"get","params":{"entity":"job/1"')
    lines.append(b'{"params":{"events":[{"entity":"job/9","kind":"delete"}]},"method":"append","jsonrpc":"2.0","id":-1.5e2}')
    for index, line in enumerate(lines):
        write(out, f"request-{index:02d}.json", line)


if __name__ == "__main__":
    main()
