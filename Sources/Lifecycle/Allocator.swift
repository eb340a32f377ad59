#if canImport(Glibc)
    import Glibc
#endif

/// How the daemon asks glibc's allocator to give memory back.
package enum Allocator {
    /// Has buffers of `bytes` or more (a long request line, a large response) mapped
    /// apart, so freeing one returns its memory to the system. By default glibc raises
    /// that threshold to the largest buffer freed so far (up to 32 MiB) and serves later
    /// ones from its heaps, which keep the memory: thirty connections that had each sent
    /// one over-long line kept 300 MB resident after the lines were dropped. Setting the
    /// threshold fixes it. The corresponding C function is `mallopt`.
    package static func returnLargeBuffers(from bytes: Int32 = 1 << 20) {
        // M_MMAP_THRESHOLD from <malloc.h>, which Swift's Glibc module does not import.
        let mmapThreshold: Int32 = -3
        guard let symbol = dlsym(nil, "mallopt") else { return }
        let mallopt = unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32) -> Int32).self)
        _ = mallopt(mmapThreshold, bytes)
    }

    /// Keeps glibc to `count` heaps (arenas). By default it makes up to eight per CPU, one
    /// for each thread that allocates while the others' are busy, and each keeps what was
    /// freed in it: the event loops, the request and catch-up threads and the writer
    /// spread a steady load over a dozen heaps that each grow to their own high-water
    /// mark. One heap per CPU is as many as can allocate at once. `mallopt(M_ARENA_MAX)`.
    package static func limitHeaps(to count: Int32) {
        // M_ARENA_MAX from <malloc.h>.
        let arenaMax: Int32 = -8
        guard let symbol = dlsym(nil, "mallopt") else { return }
        let mallopt = unsafeBitCast(symbol, to: (@convention(c) (Int32, Int32) -> Int32).self)
        _ = mallopt(arenaMax, max(1, count))
    }
}
