import FoundationEssentials
import Synchronization
import UnixSocket

/// Writes one line per event to stderr (the log of evstored and of evstore-nats), in the
/// shape of swift-log's `Logger` without the package: a level, a label, a message.
///
/// Under systemd (JOURNAL_STREAM set) each line starts with the syslog priority in angle
/// brackets instead of a timestamp, so the journal files it at the right level.
public final class Logger: Sendable {
    public enum Level: Int, Comparable, Sendable, CaseIterable {
        case debug = 7
        case info = 6
        case notice = 5
        case warning = 4
        case error = 3

        public static func < (lhs: Level, rhs: Level) -> Bool { lhs.rawValue > rhs.rawValue }

        public var name: String {
            switch self {
            case .debug: "debug"
            case .info: "info"
            case .notice: "notice"
            case .warning: "warning"
            case .error: "error"
            }
        }

        public init?(name: String) {
            guard let level = Level.allCases.first(where: { $0.name == name }) else { return nil }
            self = level
        }
    }

    public let label: String
    /// The least severe level written; a config reload may change it.
    private let threshold: Mutex<Level>
    private let journal: Bool
    /// One line at a time, so lines from threads never interleave.
    private let output = Mutex(())

    public init(
        label: String, level: Level = .info,
        journal: Bool = ProcessInfo.processInfo.environment["JOURNAL_STREAM"] != nil
    ) {
        self.label = label
        self.threshold = Mutex(level)
        self.journal = journal
    }

    public var level: Level {
        get { threshold.withLock { $0 } }
        set { threshold.withLock { $0 = newValue } }
    }

    public func debug(_ message: @autoclosure () -> String) { log(.debug, message()) }
    public func info(_ message: @autoclosure () -> String) { log(.info, message()) }
    public func notice(_ message: @autoclosure () -> String) { log(.notice, message()) }
    public func warning(_ message: @autoclosure () -> String) { log(.warning, message()) }
    public func error(_ message: @autoclosure () -> String) { log(.error, message()) }

    public func log(_ level: Level, _ message: @autoclosure () -> String) {
        guard level >= self.level else { return }
        let line: String
        if journal {
            line = "<\(level.rawValue)>\(message())\n"
        } else {
            let time = Date().formatted(.iso8601.year().month().day().time(includingFractionalSeconds: true))
            line = "\(time) \(level.name) \(label): \(message())\n"
        }
        // A failed write (a full disk under a redirected stderr) costs the line, never
        // the daemon.
        output.withLock { _ in try? FileDescriptor.write(line, to: FileDescriptor.standardError) }
    }
}
