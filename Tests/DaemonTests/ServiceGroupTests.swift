@testable import Daemon
@testable import Lifecycle
@testable import Server
import Synchronization
import Testing
@testable import Writer

/// The daemon's services start in order and stop in reverse; a failed start stops those
/// started before it, and only those.
@Suite("Service group")
struct ServiceGroupTests {
    final class Record: Sendable {
        let entries = Mutex<[String]>([])
        func append(_ entry: String) { entries.withLock { $0.append(entry) } }
        var all: [String] { entries.withLock { $0 } }
    }

    struct Refused: Error, CustomStringConvertible {
        var description: String { "the socket is in use" }
    }

    /// Services that record their starts and stops; the one named `failing` refuses to start.
    func services(_ names: [String], failing: String? = nil, record: Record) -> [Service] {
        names.map { name in
            Service(
                name,
                start: {
                    if name == failing { throw Refused() }
                    record.append("start \(name)")
                },
                stop: { record.append("stop \(name)") })
        }
    }

    @Test("started in order, stopped in reverse, once")
    func order() throws {
        let record = Record()
        let group = ServiceGroup(services(["writer", "server", "sync"], record: record))
        try group.start()
        group.stop()
        group.stop()
        #expect(
            record.all == [
                "start writer", "start server", "start sync", "stop sync", "stop server", "stop writer",
            ])
    }

    @Test("a failed start stops the services started before it, in reverse, and names the one that failed")
    func failedStart() throws {
        let record = Record()
        let group = ServiceGroup(
            services(["writer", "maintenance", "server", "sync"], failing: "server", record: record))
        #expect {
            try group.start()
        } throws: { error in
            "\(error)" == "cannot start the server: the socket is in use"
        }
        #expect(record.all == ["start writer", "start maintenance", "stop maintenance", "stop writer"])
        // Nothing is left to stop.
        group.stop()
        #expect(record.all.count == 4)
    }
}
