import Dispatch
import Logging
import Synchronization
import UnixSocket

/// Tells replication when the network may have come back: a thread of its own reads route
/// netlink (links up, addresses and routes added) and, once the messages have stopped for
/// `debounce` seconds (5 s after the first at the latest), calls
/// `SyncService.networkChanged()`, which syncs the peers that are retrying or failing now,
/// their backoff started over.
///
/// Debounced because one cable plugged in or one Wi-Fi association is a burst of messages
/// (the link, its addresses, their routes, IPv6 autoconfiguration a moment later), and
/// because a session started before the address and route are both there would fail
/// again. Where the socket cannot be opened (a sandbox without netlink) the daemon says so
/// once and goes on; peers then retry on their backoff alone.
package final class NetworkWatch: Sendable {
    /// Seconds after the last message before the peers are synced.
    package static let debounceSeconds = 1.0
    /// The longest messages that never stop (a flapping link) put the sync off.
    package static let longestDelaySeconds = 5.0
    /// The longest one wait for a message lasts, so a stop is noticed within it.
    package static let pollSeconds = 0.25

    private let sync: SyncService
    private let logger: Logger
    private let debounce: Double
    private let stopping = Atomic<Bool>(false)
    private let running = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)

    package init(sync: SyncService, logger: Logger, debounce: Double = NetworkWatch.debounceSeconds) {
        self.sync = sync
        self.logger = logger
        self.debounce = debounce
    }

    package func start() {
        let monitor: RouteMonitor
        do {
            monitor = try RouteMonitor()
        } catch {
            logger.notice(
                "cannot watch the network for changes (\(error)); peers that fail retry on their backoff alone")
            return
        }
        running.store(true, ordering: .relaxed)
        let failed = startThread(name: "evstored-netlink") { [self] in
            watch(monitor)
            monitor.close()
            finished.signal()
        }
        if let failed {
            running.store(false, ordering: .relaxed)
            monitor.close()
            logger.notice(
                "cannot watch the network for changes (\(failed)); peers that fail retry on their backoff alone")
        }
    }

    package func stop() {
        stopping.store(true, ordering: .relaxed)
        guard running.load(ordering: .relaxed) else { return }
        finished.wait()
    }

    private func watch(_ monitor: RouteMonitor) {
        logger.debug("watching the network for changes (route netlink)")
        let clock = ContinuousClock()
        var due: ContinuousClock.Instant?
        var first: ContinuousClock.Instant?
        while !stopping.load(ordering: .relaxed) {
            var wait = NetworkWatch.pollSeconds
            if let due {
                let left = clock.now.duration(to: due)
                wait = min(wait, max(0, Double(left.components.seconds) + Double(left.components.attoseconds) / 1e18))
            }
            do {
                if let changes = try monitor.receive(timeout: wait), !changes.isEmpty {
                    let now = clock.now
                    if first == nil { first = now }
                    due = min(
                        now.advanced(by: .milliseconds(Int(debounce * 1000))),
                        first!.advanced(by: .milliseconds(Int(NetworkWatch.longestDelaySeconds * 1000))))
                }
            } catch {
                logger.warning(
                    "stopped watching the network for changes (\(error)); peers that fail retry on their backoff alone")
                return
            }
            if let moment = due, clock.now >= moment {
                due = nil
                first = nil
                sync.networkChanged()
            }
        }
    }
}
