import Dispatch
import Synchronization
import UnixSocket

#if canImport(Glibc)
    import Glibc
#endif

/// One event-loop thread: it owns the connections given to it, waits on their sockets
/// with epoll, reads their requests, writes their answers without blocking, and keeps
/// their deadlines. Nothing that may block runs on it: requests run on the request
/// threads, which hand answers back through the outbox; `attend` (an eventfd) wakes the
/// loop to write them or to look at a connection again.
package final class EventLoop: @unchecked Sendable {
    package let epoll: Epoll
    private let wakeup: EventFD
    private let name: String
    /// What other threads hand the loop: connections to adopt and connections to look at.
    private let inbox = Mutex<(adopted: [Connection], attention: [Connection], stopping: Bool)>(([], [], false))

    // MARK: Touched only by the loop's thread.

    /// The connections it owns, by tag.
    private var connections: [UInt64: Connection] = [:]
    /// Where reads land before they go to a connection's line reader.
    private let scratch = UnsafeMutableRawBufferPointer.allocate(byteCount: 64 * 1024, alignment: 16)
    private var nextCheck = 0.0

    #if DEBUG
        /// The loop's thread once it runs, for `assertInLoop()`.
        private let thread = Mutex<pthread_t?>(nil)
    #endif

    /// Traps in debug builds unless called on this loop's thread: for what only the loop
    /// may touch (a connection's reader, its epoll interest, its deadlines), in the manner
    /// of SwiftNIO's `EventLoop.assertInEventLoop()`. Release builds check nothing.
    @inline(__always)
    package func assertInLoop(_ what: @autoclosure () -> String, file: StaticString = #fileID, line: UInt = #line) {
        #if DEBUG
            let owner = thread.withLock { $0 }
            precondition(
                owner.map { pthread_equal($0, pthread_self()) != 0 } ?? false,
                "\(what()) ran off the thread of event loop \(name)", file: file, line: line)
        #endif
    }

    /// The tag of the wake-up descriptor (connections' tags are their ids, from 1).
    private static let wakeTag: UInt64 = 0

    package init(name: String) throws(SocketError) {
        self.name = name
        epoll = try Epoll()
        wakeup = try EventFD()
        try epoll.add(wakeup.descriptor, events: .readable, tag: EventLoop.wakeTag)
    }

    deinit { scratch.deallocate() }

    /// Starts the loop's thread; the error that kept it from starting, if one did.
    package func start() -> SocketError? {
        startThread(name: name) { [self] in run() }
    }

    /// Gives `connection` to this loop (from any thread).
    package func adopt(_ connection: Connection) {
        inbox.withLock { $0.adopted.append(connection) }
        wakeup.signal()
    }

    /// Asks the loop to look at `connection` soon: write what is ready, read again, or
    /// close it (from any thread; once until the loop has looked).
    package func attend(_ connection: Connection) {
        guard !connection.attentionQueued.exchange(true, ordering: .acquiringAndReleasing) else { return }
        inbox.withLock { $0.attention.append(connection) }
        wakeup.signal()
    }

    /// Forgets a connection that closed or was handed over (on the loop's thread).
    package func forget(_ connection: Connection) {
        assertInLoop("EventLoop.forget")
        connections[connection.tag] = nil
    }

    /// Ends the thread once its connections are gone.
    package func stop() {
        inbox.withLock { $0.stopping = true }
        wakeup.signal()
    }

    private func run() {
        #if DEBUG
            thread.withLock { $0 = pthread_self() }
        #endif
        while true {
            let now = Connection.now()
            let ready = epoll.wait(timeout: max(0, nextCheck - now))
            let after = Connection.now()
            var touched: [Connection] = []
            for event in ready {
                if event.tag == EventLoop.wakeTag {
                    wakeup.drain()
                    continue
                }
                guard let connection = connections[event.tag] else { continue }
                if !event.events.isDisjoint(with: [.hangUp, .error]) {
                    connection.hungUp(scratch: scratch, now: after)
                } else if event.events.contains(.readable) {
                    connection.readAvailable(scratch: scratch, now: after)
                }
                touched.append(connection)
            }
            let (adopted, attention, stopping) = inbox.withLock { inbox in
                defer {
                    inbox.adopted.removeAll()
                    inbox.attention.removeAll()
                }
                return (inbox.adopted, inbox.attention, inbox.stopping)
            }
            for connection in adopted {
                connections[connection.tag] = connection
                connection.register()
                touched.append(connection)
            }
            for connection in attention {
                connection.attentionQueued.store(false, ordering: .releasing)
                touched.append(connection)
            }
            for connection in touched { connection.service(now: after) }
            if after >= nextCheck {
                nextCheck = after + 0.25
                for connection in Array(connections.values) {
                    connection.checkDeadlines(now: after)
                    connection.service(now: after)
                }
            }
            if stopping && connections.isEmpty { return }
        }
    }
}

/// A fixed number of threads that run jobs in the order queued, shared by every
/// connection. A connection is queued on the request threads when it has requests to run
/// and none of its own is running, so each runs its requests one at a time, in order, and
/// no client can hold more than one thread (waits for appends or for a slow reader hold
/// none). A watch's catch-up, which waits while its client is slow to read, runs on
/// threads of its own, so slow watchers never hold up other clients' requests.
package final class RequestThreads: Sendable {
    package typealias Job = @Sendable () -> Void
    private let queue = Mutex<(items: [Job?], head: Int)>(([], 0))
    private let available = DispatchSemaphore(value: 0)
    package let count: Int
    private let name: String

    package init(count: Int, name: String = "evrequest") {
        self.count = count
        self.name = name
    }

    /// Starts the threads; the error that kept one from starting, if one did.
    package func start() -> SocketError? {
        for index in 0..<count {
            if let error = startThread(name: "\(name)-\(index)", { [self] in run() }) { return error }
        }
        return nil
    }

    /// Runs `job` on the next free thread.
    package func submit(_ job: @escaping Job) {
        queue.withLock { $0.items.append(job) }
        available.signal()
    }

    /// Ends the threads once the requests queued before have run.
    package func stop() {
        for _ in 0..<count {
            queue.withLock { $0.items.append(nil) }
            available.signal()
        }
    }

    private func run() {
        while true {
            available.wait()
            let next = queue.withLock { queue -> Job?? in
                guard queue.head < queue.items.count else { return .none }
                let item = queue.items[queue.head]
                queue.head += 1
                if queue.head == queue.items.count {
                    queue.items.removeAll(keepingCapacity: true)
                    queue.head = 0
                } else if queue.head > 1024 && queue.head * 2 > queue.items.count {
                    queue.items.removeFirst(queue.head)
                    queue.head = 0
                }
                return .some(item)
            }
            guard let next else { continue }
            guard let job = next else { return }
            job()
        }
    }
}
