import FoundationEssentials
import UnixSocket

/// The sync sessions this node starts, in progress: at most `max_outgoing_sessions` run at
/// once, a target (`PeerURL.target`: a socket file, an ssh host and path, a command) has
/// at most one, and a stop can cut every one of them.
///
/// Sessions run on threads of their own, so one silent peer (a hung gateway, a captive
/// portal that accepts and says nothing) holds a slot for `sync_timeout_s` and nothing else:
/// the other peers go on in the other slots. A caller that finds its target's session
/// running joins it and gets its outcome; one that finds every slot taken waits for a slot
/// until its deadline, then gives up (`timedOut`) rather than wait on.
package final class OutgoingSessions: @unchecked Sendable {
    /// One session, which later callers for the same target join instead of starting their own.
    package final class Attempt: @unchecked Sendable {
        /// Set once, under the condition's lock, when the session is over (or gave up
        /// waiting for a slot, when it is nil in `outcome(of:)`'s answer).
        fileprivate var outcome: SyncService.Outcome?
        fileprivate var gaveUp = false
    }

    package enum Claim {
        /// The caller runs the session (a slot is held) and ends it with `finish`.
        case owner(Attempt)
        /// The target's session is already running or waiting for a slot: `outcome(of:)`
        /// waits for its end.
        case joined(Attempt)
        /// Not waiting (the background schedule): no slot is free, or the target has a
        /// session; try again when one ends.
        case busy
        /// Every slot stayed taken until the deadline.
        case timedOut
    }

    /// Guards everything below, and is signalled whenever a session ends or the limit
    /// changes. (`Mutex` has no condition to wait on; an `NSCondition` does.)
    private let condition = Condition()
    private var limit: Int
    /// Sessions holding a slot.
    private var running = 0
    /// Per peer key, its session, from the claim (before it has a slot) to its end.
    private var attempts: [String: Attempt] = [:]
    /// The connections of the sessions in progress, so a stop can cut them.
    private var connections: [ObjectIdentifier: UnixConnection] = [:]
    private var stopping = false

    package init(limit: Int) {
        self.limit = max(1, limit)
    }

    /// A reloaded `max_outgoing_sessions`: sessions past a lowered limit finish, new ones
    /// wait until they are under it.
    package func setLimit(_ value: Int) {
        condition.lock()
        limit = max(1, value)
        condition.broadcast()
        condition.unlock()
    }

    /// Claims the session of `key` (a target). With a `deadline`, blocks until a slot is
    /// free, at most until then, unless the target's session is claimed already (then joins
    /// it); without one, answers `busy` at once rather than wait.
    package func claim(_ key: String, until deadline: ContinuousClock.Instant?) -> Claim {
        condition.lock()
        defer { condition.unlock() }
        if let attempt = attempts[key] { return deadline == nil ? .busy : .joined(attempt) }
        guard let deadline else {
            if running >= limit { return .busy }
            let attempt = Attempt()
            attempts[key] = attempt
            running += 1
            return .owner(attempt)
        }
        let attempt = Attempt()
        attempts[key] = attempt
        while running >= limit, !stopping {
            if !condition.wait(until: deadline), running >= limit, !stopping {
                // Those who joined give up with it.
                attempt.gaveUp = true
                attempts.removeValue(forKey: key)
                condition.broadcast()
                return .timedOut
            }
        }
        running += 1
        return .owner(attempt)
    }

    /// Ends the session `claim` gave the caller: frees its slot and answers those who joined.
    package func finish(_ key: String, _ attempt: Attempt, with outcome: SyncService.Outcome) {
        condition.lock()
        running -= 1
        attempt.outcome = outcome
        if attempts[key] === attempt { attempts.removeValue(forKey: key) }
        condition.broadcast()
        condition.unlock()
    }

    /// Waits for the end of a session that was joined; nil when it never got a slot.
    package func outcome(of attempt: Attempt) -> SyncService.Outcome? {
        condition.lock()
        defer { condition.unlock() }
        while attempt.outcome == nil, !attempt.gaveUp { condition.wait() }
        return attempt.outcome
    }

    /// The slots: `max_outgoing_sessions`.
    package var slots: Int {
        condition.lock()
        defer { condition.unlock() }
        return limit
    }

    /// Whether `key` has a session claimed or running.
    package func isActive(_ key: String) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        return attempts[key] != nil
    }

    /// Registers a session's connection until `forget`; once stopping, cuts it at once.
    package func hold(_ connection: UnixConnection) {
        condition.lock()
        connections[ObjectIdentifier(connection)] = connection
        let cut = stopping
        condition.unlock()
        if cut { connection.shutdown() }
    }

    package func forget(_ connection: UnixConnection) {
        condition.lock()
        connections.removeValue(forKey: ObjectIdentifier(connection))
        condition.unlock()
    }

    /// Cuts every session in progress (each ends with `closed`, keeping what was
    /// acknowledged) and lets those waiting for a slot through, to find the daemon stopping.
    package func stopAll() {
        condition.lock()
        stopping = true
        let cut = Array(connections.values)
        condition.broadcast()
        condition.unlock()
        for connection in cut { connection.shutdown() }
    }

    /// Waits until no session is claimed or running, at most `timeout` seconds; whether
    /// they all ended.
    package func waitUntilIdle(timeout: Double) -> Bool {
        let deadline = ContinuousClock.now + .seconds(timeout)
        condition.lock()
        defer { condition.unlock() }
        while !attempts.isEmpty || running > 0 {
            if !condition.wait(until: deadline) { return attempts.isEmpty && running == 0 }
        }
        return true
    }
}
