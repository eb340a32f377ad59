import FoundationEssentials
import Synchronization

/// What has gone wrong with the daemon's own storage while it runs: writes that failed
/// where no client was waiting for the answer (an fsync of a relaxed store, a peer's sync
/// state, the range fingerprints). `status` shows each under `health`, and while any is
/// raised the watchdog hears nothing, so systemd restarts a daemon whose store cannot
/// write.
///
/// A problem is raised where the failure happens and lowered by the next success of the
/// same kind, except `fsync`: after a failed fsync the kernel may have dropped the dirty
/// pages it could not write, so no later fsync proves they are on disk; it stays until the
/// daemon restarts (and LMDB reads its last committed state again).
package final class Health: Sendable {
    package enum Problem: String, Sendable, CaseIterable {
        /// `durability = "relaxed"`: the periodic fsync of the store failed.
        case fsync
        /// A peer's sync state (its vector, schedule, last error) could not be stored or read.
        case peerState = "peer_state"
        /// The range fingerprints sessions compare could not be refreshed after a sync.
        case fingerprints

        /// Whether a later success lowers it.
        package var clears: Bool { self != .fsync }
    }

    package struct Report: Sendable, Equatable {
        package var problem: Problem
        /// The last failure's error, as the log line gave it.
        package var message: String
        /// Milliseconds since the epoch of the first failure since it was last lowered.
        package var since: UInt64
        /// Failures since it was last lowered.
        package var count: Int
    }

    private let raised = Mutex<[Problem: Report]>([:])

    package init() {}

    /// Records a failure of kind `problem`.
    package func raise(_ problem: Problem, _ message: String, at now: UInt64 = Health.wallClock()) {
        raised.withLock { raised in
            var report = raised[problem] ?? Report(problem: problem, message: message, since: now, count: 0)
            report.message = message
            report.count += 1
            raised[problem] = report
        }
    }

    /// Records a success of kind `problem`: lowers it unless it is sticky.
    package func lower(_ problem: Problem) {
        guard problem.clears else { return }
        raised.withLock { _ = $0.removeValue(forKey: problem) }
    }

    /// The problems raised, in the order of `Problem`.
    package var reports: [Report] {
        raised.withLock { raised in Problem.allCases.compactMap { raised[$0] } }
    }

    package var isHealthy: Bool { raised.withLock { $0.isEmpty } }

    package static func wallClock() -> UInt64 { UInt64(max(0, Date().timeIntervalSince1970 * 1000)) }
}
