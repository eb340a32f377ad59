import FoundationEssentials
import UnixSocket

#if canImport(Glibc)
    import Glibc
#endif

/// The small part of systemd's protocol a `Type=notify` service speaks: sd_notify(3)
/// messages, the watchdog interval and socket activation (sd_listen_fds(3)). Every call
/// does nothing when the daemon is not run by systemd.
package struct Systemd: Sendable {
    /// NOTIFY_SOCKET: where state changes go.
    package let notifySocket: String?
    /// WATCHDOG_USEC, when it is meant for this process: how often systemd expects a ping.
    package let watchdogInterval: Double?

    package init(environment: [String: String]) {
        notifySocket = environment["NOTIFY_SOCKET"].flatMap { $0.isEmpty ? nil : $0 }
        let pidMatches = environment["WATCHDOG_PID"].map { Int32($0) == getpid() } ?? true
        if pidMatches, let usec = environment["WATCHDOG_USEC"].flatMap(Double.init), usec > 0 {
            watchdogInterval = usec / 1_000_000
        } else {
            watchdogInterval = nil
        }
    }

    /// Sends "READY=1", "STATUS=...", "STOPPING=1", "WATCHDOG=1" or several, one per line.
    package func notify(_ state: String) {
        guard let notifySocket else { return }
        try? sendDatagram(Array(state.utf8), to: notifySocket)
    }

    package func ready(status: String) { notify("READY=1\nSTATUS=\(status)\nMAINPID=\(getpid())") }
    package func status(_ text: String) { notify("STATUS=\(text)") }
    package func stopping(status: String) { notify("STOPPING=1\nSTATUS=\(status)") }
    package func watchdogPing() { notify("WATCHDOG=1") }

    /// The listening descriptors systemd passed (LISTEN_FDS, from descriptor 3), when they
    /// are meant for this process; the variables are removed so children do not see them.
    package static func listenDescriptors(environment: [String: String]) -> [Int32] {
        defer {
            unsetenv("LISTEN_PID")
            unsetenv("LISTEN_FDS")
            unsetenv("LISTEN_FDNAMES")
        }
        guard let pid = environment["LISTEN_PID"].flatMap({ Int32($0) }), pid == getpid(),
            let count = environment["LISTEN_FDS"].flatMap({ Int32($0) }), count > 0
        else { return [] }
        return (0..<count).map { 3 + $0 }
    }
}
