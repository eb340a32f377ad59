import Synchronization

/// Events appended since the daemon started and how many per second lately, and events
/// received from peers: what `status` reports under `appends`.
///
/// The writer records once per committed group and an ingest once per batch, never per
/// event, so the cost on the append path is one short lock per commit.
package final class AppendCounter: Sendable {
    /// How many seconds the rate looks back.
    package static let window = 60

    package struct Snapshot: Equatable, Sendable {
        /// Events appended by this node's clients (repeats of an idempotency key not counted).
        package var eventsTotal: Int
        /// Append requests that succeeded.
        package var requestsTotal: Int
        /// Events received from peers and stored.
        package var receivedTotal: Int
        /// Events appended per second over the last `window` seconds, or over the time
        /// since the start when that is shorter.
        package var perSecond: Double
    }

    private struct State {
        var eventsTotal = 0
        var requestsTotal = 0
        var receivedTotal = 0
        /// Events appended in each of the last `window` seconds: slot `second % window`
        /// holds the count of `seconds[slot]`, a second since the start.
        var counts = [Int](repeating: 0, count: AppendCounter.window)
        var seconds = [Int](repeating: -1, count: AppendCounter.window)
    }

    /// Protects the totals and the ring of per-second counts.
    private let state = Mutex(State())
    /// Seconds are counted on the monotonic clock, so a wall clock set back or forward
    /// does not bend the rate.
    private let start: ContinuousClock.Instant

    package init(start: ContinuousClock.Instant = .now) {
        self.start = start
    }

    /// The whole seconds from the start to `instant`.
    private func second(_ instant: ContinuousClock.Instant) -> Int {
        max(0, Int((instant - start).components.seconds))
    }

    /// Records a committed group: `events` appended by `requests` successful requests.
    package func recordAppended(events: Int, requests: Int, at instant: ContinuousClock.Instant = .now) {
        let now = second(instant)
        state.withLock { state in
            state.eventsTotal += events
            state.requestsTotal += requests
            let slot = now % AppendCounter.window
            if state.seconds[slot] != now {
                state.seconds[slot] = now
                state.counts[slot] = 0
            }
            state.counts[slot] += events
        }
    }

    /// Records events received from a peer and stored.
    package func recordReceived(events: Int) {
        state.withLock { $0.receivedTotal += events }
    }

    package func snapshot(at instant: ContinuousClock.Instant = .now) -> Snapshot {
        let now = second(instant)
        return state.withLock { state in
            var recent = 0
            for slot in 0..<AppendCounter.window where state.seconds[slot] > now - AppendCounter.window {
                recent += state.counts[slot]
            }
            // The current second counts as a whole one: a daemon up for 0.3 s that
            // appended 30 events reports 30/s, not 100/s.
            let covered = min(AppendCounter.window, now + 1)
            return Snapshot(
                eventsTotal: state.eventsTotal, requestsTotal: state.requestsTotal, receivedTotal: state.receivedTotal,
                perSecond: Double(recent) / Double(covered))
        }
    }
}
