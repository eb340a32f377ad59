#!/usr/bin/env python3
"""A slow, lossy link between two network namespaces, in user space.

What `tc qdisc add dev X root netem delay D loss L rate R` does on both ends of a veth
pair, for kernels built without sch_netem: a tun device in each namespace, and this
process between them moving IP packets each way, after a one-way delay, through a
queue drained at the rate, dropping each packet with the loss probability. TCP on top
sees what it would see on a 3G link: retransmissions, a long round trip, a narrow pipe.

  lossy-link.py NS_A IFACE_A NS_B IFACE_B [--delay S] [--loss P] [--rate BITS] [--seed N]

Makes the two tun devices (down, without addresses: configure them with `ip -n NS`),
prints "ready" and forwards until killed. SIGUSR1 cuts the link: what is in flight is
lost and nothing passes until SIGUSR2 mends it (taking a device down alone would still
deliver what this process holds). On SIGTERM it prints the packets it moved and dropped
per direction. Root only.
"""

import argparse
import ctypes
import fcntl
import heapq
import os
import random
import select
import signal
import struct
import time

CLONE_NEWNET = 0x40000000
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000
QUEUE_LIMIT = 1000  # packets per direction, netem's default limit

libc = ctypes.CDLL(None, use_errno=True)


def enter(namespace_fd):
    if libc.setns(namespace_fd, CLONE_NEWNET) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))


def tun_in(namespace, name):
    """A tun device named `name` made in the named network namespace; its descriptor."""
    with open(f"/run/netns/{namespace}") as handle:
        enter(handle.fileno())
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    return fd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("ns_a")
    parser.add_argument("iface_a")
    parser.add_argument("ns_b")
    parser.add_argument("iface_b")
    parser.add_argument("--delay", type=float, default=0.3, help="one-way delay, seconds")
    parser.add_argument("--loss", type=float, default=0.05, help="probability a packet is dropped")
    parser.add_argument("--rate", type=float, default=1_000_000, help="bits per second each way")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    random.seed(args.seed)
    home = os.open("/proc/self/ns/net", os.O_RDONLY)
    a = tun_in(args.ns_a, args.iface_a)
    b = tun_in(args.ns_b, args.iface_b)
    enter(home)

    # Per direction: packets waiting (deliver at, order, bytes), when the link is free
    # again, and counts.
    class Direction:
        def __init__(self, name, out):
            self.name, self.out = name, out
            self.queue, self.free_at = [], 0.0
            self.moved = self.dropped = self.bytes = 0

    a_to_b, b_to_a = Direction("a->b", b), Direction("b->a", a)
    incoming = {a: a_to_b, b: b_to_a}
    order = 0

    def report(*_):
        try:
            for d in (a_to_b, b_to_a):
                print(f"{d.name}: moved {d.moved} packets ({d.bytes} bytes), dropped {d.dropped}", flush=True)
        finally:
            os._exit(0)

    cut = [False]

    def cut_link(*_):
        cut[0] = True
        for d in (a_to_b, b_to_a):
            d.dropped += len(d.queue)
            d.queue.clear()
            d.free_at = 0.0

    def mend_link(*_):
        cut[0] = False

    signal.signal(signal.SIGTERM, report)
    signal.signal(signal.SIGUSR1, cut_link)
    signal.signal(signal.SIGUSR2, mend_link)
    # A parent that blocks signals in its threads hands the mask down to its children.
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGTERM, signal.SIGUSR1, signal.SIGUSR2})
    print("ready", flush=True)
    while True:
        now = time.monotonic()
        next_due = min((d.queue[0][0] for d in (a_to_b, b_to_a) if d.queue), default=None)
        timeout = None if next_due is None else max(0.0, next_due - now)
        readable, _, _ = select.select([a, b], [], [], timeout)
        now = time.monotonic()
        for fd in readable:
            direction = incoming[fd]
            while True:
                try:
                    packet = os.read(fd, 65536)
                except BlockingIOError:
                    break
                except OSError:
                    break
                if cut[0] or random.random() < args.loss or len(direction.queue) >= QUEUE_LIMIT:
                    direction.dropped += 1
                    continue
                start = max(now, direction.free_at)
                direction.free_at = start + len(packet) * 8 / args.rate
                order += 1
                heapq.heappush(direction.queue, (direction.free_at + args.delay, order, packet))
        for direction in (a_to_b, b_to_a):
            while direction.queue and direction.queue[0][0] <= now:
                _, _, packet = heapq.heappop(direction.queue)
                try:
                    os.write(direction.out, packet)
                    direction.moved += 1
                    direction.bytes += len(packet)
                except OSError:
                    # The device is down: the packet is lost, as on a cut link.
                    direction.dropped += 1


if __name__ == "__main__":
    main()
