import Synchronization

/// The bytes every connection together may make the daemon hold for it: partial request
/// lines, requests read and not yet answered, and answers and notifications waiting to be
/// sent (`max_buffered_bytes`).
///
/// Each connection charges what it holds as it changes (`Charge`); the budget only counts.
/// It never refuses memory already held (a line read is charged after the read): what it
/// decides is whether a connection may take more. Past the limit a connection that holds
/// more than `floor` reads no more, runs no more requests, and has its watches cut, until
/// the total is under the limit again; a connection within its floor is still served, so a
/// client with a small request is answered however much the others hold. The total is thus
/// bounded by the limit, plus a floor per connection (`max_connections` × 64 KiB), plus one
/// read or one answer in progress per connection.
package final class BufferBudget: Sendable {
    /// What a connection may hold whatever the others hold.
    package static let floor = 64 << 10

    private let limitBytes: Atomic<Int>
    private let used = Atomic<Int>(0)

    package init(limit: Int) {
        limitBytes = Atomic(limit)
    }

    /// `max_buffered_bytes`; a reload changes it.
    package var limit: Int {
        get { limitBytes.load(ordering: .relaxed) }
        set { limitBytes.store(newValue, ordering: .relaxed) }
    }

    /// The bytes charged now, over all connections.
    package var bytes: Int { used.load(ordering: .relaxed) }

    /// Whether the connections together hold the limit or more.
    package var isExhausted: Bool { bytes >= limit }

    /// Whether a connection that holds `held` bytes may take more now.
    package func allows(holding held: Int) -> Bool {
        held <= BufferBudget.floor || !isExhausted
    }

    /// Moves the charge by `delta` bytes (negative: given back).
    fileprivate func adjust(_ delta: Int) {
        guard delta != 0 else { return }
        used.add(delta, ordering: .relaxed)
    }

    /// What one holder (a connection's reader, its queue of requests, its outbox) has
    /// charged; setting it moves the budget by the difference, and what is still charged
    /// is given back when it goes. Not thread-safe: its owner guards it.
    package final class Charge {
        package let budget: BufferBudget
        private(set) var bytes = 0

        package init(_ budget: BufferBudget) {
            self.budget = budget
        }

        /// Charges `held` bytes in all, in place of what was charged before.
        package func set(_ held: Int) {
            let held = max(0, held)
            budget.adjust(held - bytes)
            bytes = held
        }

        deinit { budget.adjust(-bytes) }
    }
}
