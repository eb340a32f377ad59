// Lifecycle: the daemon's threads, services, health and systemd notices, and the data
// directory's lock; it knows nothing of events, the socket or peers.

import Synchronization

/// A part of the daemon that runs on threads of its own from its start to its stop: the
/// writer, the server, the sync scheduler, the network watch, the maintenance thread.
package struct Service: Sendable {
    package let name: String
    /// Returns once it runs; throws, with nothing of it left running, when it cannot.
    package let start: @Sendable () throws -> Void
    /// Returns once it has stopped.
    package let stop: @Sendable () -> Void

    package init(_ name: String, start: @escaping @Sendable () throws -> Void, stop: @escaping @Sendable () -> Void) {
        self.name = name
        self.start = start
        self.stop = stop
    }
}

/// The daemon's services, started in order and stopped in reverse, in the manner of
/// swift-service-lifecycle's ServiceGroup: a service may use those before it while it runs
/// and while it stops, and a start that fails stops those started before it.
package final class ServiceGroup: Sendable {
    package struct StartFailure: Error, CustomStringConvertible {
        package var service: String
        package var error: any Error
        package var description: String { "cannot start the \(service): \(error)" }
    }

    private let services: [Service]
    /// How many of `services`, from the first, are running.
    private let running = Mutex<Int>(0)

    package init(_ services: [Service]) {
        self.services = services
    }

    /// Starts each service in order. When one fails, stops those started, in reverse, and
    /// throws its error.
    package func start() throws(StartFailure) {
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
    package func stop() {
        let count = running.withLock { count in
            defer { count = 0 }
            return count
        }
        for service in services.prefix(count).reversed() { service.stop() }
    }
}
