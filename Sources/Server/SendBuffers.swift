import Synchronization

/// Buffers that outboxes make a write's notifications into, kept for the next write
/// instead of freed. A watcher's stream is made into a quarter-mebibyte buffer a write; one
/// freshly allocated each time costs a page fault per 4 KiB touched (the allocator gives such
/// blocks back to the system when freed), a fifth of the sender's time in a bulk load.
///
/// Each buffer has room for `smallest` bytes at least, so that one kept serves the next
/// write, whose size varies; at most `keep` buffers of at most `largest` bytes each are kept,
/// whatever the number of connections: what the daemon holds for this is bounded in total by
/// `keep × largest`.
package final class SendBuffers: Sendable {
    package static let shared = SendBuffers(keep: 2, smallest: 2 * Outbox.writeBytes, largest: 8 * Outbox.writeBytes)

    /// The size of a write from which a buffer is taken from here: below it, one of the
    /// write's own size costs less than one of `smallest` bytes made when none is kept.
    package static let pooledFrom = 16 << 10

    private let kept: Mutex<[[UInt8]]>
    private let keep: Int
    private let smallest: Int
    private let largest: Int

    package init(keep: Int, smallest: Int, largest: Int) {
        self.kept = Mutex([])
        self.keep = keep
        self.smallest = smallest
        self.largest = largest
    }

    /// An empty buffer with room for `capacity` bytes (and `smallest` at least): a kept one
    /// when there is one.
    package func take(capacity: Int) -> [UInt8] {
        var buffer = kept.withLock { $0.popLast() } ?? []
        buffer.reserveCapacity(Swift.max(capacity, smallest))
        return buffer
    }

    /// Keeps `buffer` for a later `take` when there is room for it, or lets it go. The caller
    /// passes its last reference (`consume`): a buffer shared with another would be copied
    /// before it is emptied.
    package func giveBack(_ buffer: consuming [UInt8]) {
        guard buffer.capacity <= largest else { return }
        buffer.removeAll(keepingCapacity: true)
        // Moved, not copied, into the list: the next `take` finds it unshared.
        var spare = Optional(consume buffer)
        kept.withLock { kept in
            if kept.count < keep, let buffer = spare.take() { kept.append(buffer) }
        }
    }

    /// How many buffers are kept now.
    package var count: Int { kept.withLock { $0.count } }
}
