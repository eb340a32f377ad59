import Synchronization

/// A part of the daemon that runs on threads of its own from its start to its stop: the
/// writer, the server, the sync scheduler, the network watch, the maintenance thread.
struct Service: Sendable {
    let name: String
    /// Returns once it runs; throws, with nothing of it left running, when it cannot.
    let start: @Sendable () throws -> Void
    /// Returns once it has stopped.
    let stop: @Sendable () -> Void

    init(_ name: String, start: @escaping @Sendable () throws -> Void, stop: @escaping @Sendable () -> Void) {
        self.name = name
        self.start = start
        self.stop = stop
    }
}

/// The daemon's services, started in order and stopped in reverse, in the manner of
/// swift-service-lifecycle's ServiceGroup: a service may use those before it while it runs
/// and while it stops, and a start that fails stops those started before it.
final class ServiceGroup: Sendable {
    struct StartFailure: Error, CustomStringConvertible {
        var service: String
        var error: any Error
        var description: String { "cannot start the \(service): \(error)" }
    }

    private let services: [Service]
    /// How many of `services`, from the first, are running.
    private let running = Mutex<Int>(0)

    init(_ services: [Service]) {
        self.services = services
    }

    /// Starts each service in order. When one fails, stops those started, in reverse, and
    /// throws its error.
    func start() throws(StartFailure) {
        for service in services {
            do {
                try service.start()
            } catch {
                stop()
                throw StartFailure(service: service.name, error: error)
            }
            running.withLock { $0 += 1 }
        }
    }

    /// Stops the services started, the last started first. Once only.
    func stop() {
        let count = running.withLock { count in
            defer { count = 0 }
            return count
        }
        for service in services.prefix(count).reversed() { service.stop() }
    }
}
