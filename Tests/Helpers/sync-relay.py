#!/usr/bin/env python3
"""Relays a sync session between this process's stdin/stdout and a command's (an `exec:`
peer URL runs it), and cuts or damages what the command sends.

usage: sync-relay.py [options] -- COMMAND [ARG...]

  --cut-after N      after N bytes from the command, stop relaying: the command is killed
                     and both directions close, as a link that drops
  --state FILE       with --cut-after: count the runs in FILE, and cut only the first
  --cuts K           K runs (the later ones relay whole)
  --flip-at N        flip the lowest bit of byte N of what the command sends
  --corrupt-chunk    flip a bit in the data of the first chunk frame ("C") and write the
                     frame's CRC-32C again, so that only the chunk's hash can tell
  --forge-manifest   with --corrupt-chunk: also write the SHA-256 of the flipped chunk into
                     the blob's manifest frame ("M"), so that only the blob's hash can tell
  --count FILE       append to FILE the bytes relayed from the command, one line per run
  --rate N           relay at most about N bytes a second from the command

The frames are: kind (1 byte), length (4, big-endian), CRC-32C of the payload (4), payload;
the command's first line is its preamble (docs/sync.md).
"""
import hashlib
import os
import signal
import subprocess
import sys
import threading
import time


def crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


TABLE = crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def main():
    argv = sys.argv[1:]
    if "--" not in argv:
        sys.exit(__doc__)
    split = argv.index("--")
    options, command = argv[:split], argv[split + 1:]
    opts = {}
    index = 0
    while index < len(options):
        name = options[index]
        if name in ("--corrupt-chunk", "--forge-manifest"):
            opts[name] = True
            index += 1
        else:
            opts[name] = options[index + 1]
            index += 2
    cut = int(opts["--cut-after"]) if "--cut-after" in opts else None
    if cut is not None and "--state" in opts:
        path = opts["--state"]
        runs = int(open(path).read() or "0") if os.path.exists(path) else 0
        with open(path, "w") as f:
            f.write(str(runs + 1))
        if runs >= int(opts.get("--cuts", "1")):
            cut = None
    flip = int(opts["--flip-at"]) if "--flip-at" in opts else None
    corrupt = opts.get("--corrupt-chunk", False)
    forge = opts.get("--forge-manifest", False)
    rate = int(opts["--rate"]) if "--rate" in opts else None

    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)

    def upstream():
        try:
            while True:
                data = os.read(0, 65536)
                if not data:
                    break
                child.stdin.write(data)
        except OSError:
            pass
        try:
            child.stdin.close()
        except OSError:
            pass

    threading.Thread(target=upstream, daemon=True).start()

    relayed = 0
    pending = b""
    preamble_done = False
    corrupted = False
    held_manifest = None

    def finish(code):
        if "--count" in opts:
            with open(opts["--count"], "a") as f:
                f.write(f"{relayed}\n")
        sys.stdout.flush()
        os._exit(code)

    def send(data):
        nonlocal relayed
        if cut is not None and relayed + len(data) >= cut:
            os.write(1, data[: cut - relayed])
            relayed = cut
            child.send_signal(signal.SIGKILL)
            finish(0)
        if flip is not None and relayed <= flip < relayed + len(data):
            data = bytearray(data)
            data[flip - relayed] ^= 1
            data = bytes(data)
        os.write(1, data)
        relayed += len(data)
        if rate:
            time.sleep(len(data) / rate)

    while True:
        data = os.read(child.stdout.fileno(), 1 << 20)
        if not data:
            break
        if not corrupt or corrupted:
            if pending:
                data, pending = pending + data, b""
            send(data)
            continue
        # Whole frames, so the first chunk's data can be changed and its CRC written again.
        pending += data
        if not preamble_done:
            newline = pending.find(b"\n")
            if newline < 0:
                continue
            send(pending[: newline + 1])
            pending = pending[newline + 1:]
            preamble_done = True
        while len(pending) >= 9:
            length = int.from_bytes(pending[1:5], "big")
            if len(pending) < 9 + length:
                break
            frame, pending = bytearray(pending[: 9 + length]), pending[9 + length:]
            if forge and frame[0] == ord("M") and held_manifest is None:
                # Held until the chunk it must agree with is flipped.
                held_manifest = frame
                continue
            if not corrupted and frame[0] == ord("C") and length > 40:
                frame[9 + 40 + (length - 40) // 2] ^= 0x10
                frame[5:9] = crc32c(bytes(frame[9:])).to_bytes(4, "big")
                corrupted = True
                if held_manifest is not None:
                    chunk_bytes = int.from_bytes(held_manifest[9 + 40:9 + 44], "big")
                    index = int.from_bytes(frame[9 + 32:9 + 40], "big") // chunk_bytes
                    at = 9 + 44 + 32 * index
                    held_manifest[at:at + 32] = hashlib.sha256(bytes(frame[9 + 40:])).digest()
                    held_manifest[5:9] = crc32c(bytes(held_manifest[9:])).to_bytes(4, "big")
                    send(bytes(held_manifest))
            send(bytes(frame))
    if pending:
        send(pending)
    child.wait()
    finish(0)


main()
