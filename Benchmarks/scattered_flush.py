#!/usr/bin/env python3
"""What a flush costs the process that asks for it, by how the pages it writes lie in the
file: N pages of 4 KiB written with one pwrite each at random places in a file (as LMDB
writes the pages it reuses from its free list), or as one run (as it writes pages added at
the file's end), then fdatasync. Prints the wall time of each round and the CPU time the
process spent (user and system, from getrusage), the median of --rounds.

On a virtual machine each write request the flush sends costs the calling CPU an exit to
the hypervisor; on real flash it costs the device a program operation. Either way, the
figure says what one more scattered page in a commit costs here.

    python3 Benchmarks/scattered_flush.py --dir /var/lib/evstore-scratch [--pages 1,16,64]

The file (256 MiB) is made in --dir, which should be on the disk the store uses, and
removed at the end. Standard library only.
"""
import argparse
import os
import random
import resource
import statistics
import tempfile
import time

PAGE = 4096


def measure(fd, pages, scattered, rounds, file_pages, rng):
    block = os.urandom(PAGE)
    walls, cpus, systems = [], [], []
    for _ in range(rounds):
        before = resource.getrusage(resource.RUSAGE_SELF)
        start = time.monotonic()
        if scattered:
            # Every other page, so no two of a round are neighbours the kernel could merge.
            for page in rng.sample(range(0, file_pages, 2), pages):
                os.pwrite(fd, block, page * PAGE)
        else:
            os.pwrite(fd, block * pages, rng.randrange(0, file_pages - pages) * PAGE)
        os.fdatasync(fd)
        walls.append(time.monotonic() - start)
        after = resource.getrusage(resource.RUSAGE_SELF)
        systems.append(after.ru_stime - before.ru_stime)
        cpus.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    return statistics.median(walls), statistics.mean(cpus), statistics.mean(systems)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dir", default=".", help="where to make the scratch file (the store's disk)")
    parser.add_argument("--pages", default="1,16,64", help="pages a flush, comma-separated")
    parser.add_argument("--rounds", type=int, default=200)
    parser.add_argument("--megabytes", type=int, default=256)
    options = parser.parse_args()
    rng = random.Random(7)
    file_pages = options.megabytes * 1024 * 1024 // PAGE
    handle, path = tempfile.mkstemp(prefix="scattered-flush-", dir=options.dir)
    try:
        # Written whole and flushed first, so no round allocates blocks or changes the size.
        chunk = os.urandom(1 << 20)
        for offset in range(0, file_pages * PAGE, len(chunk)):
            os.pwrite(handle, chunk, offset)
        os.fsync(handle)
        print(f"{'pages':>5} {'placed':>10} {'wall µs':>9} {'CPU µs':>8} {'of it system':>13} {'CPU µs a page':>14}")
        for pages in (int(p) for p in options.pages.split(",")):
            for scattered in (True, False):
                wall, cpu, system = measure(handle, pages, scattered, options.rounds, file_pages, rng)
                print(f"{pages:>5} {'scattered' if scattered else 'one run':>10} {wall * 1e6:>9.0f} {cpu * 1e6:>8.0f} "
                      f"{system * 1e6:>13.0f} {cpu * 1e6 / pages:>14.1f}", flush=True)
    finally:
        os.close(handle)
        os.unlink(path)


if __name__ == "__main__":
    main()
