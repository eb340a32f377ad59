// Server: the socket — event loops, connections, outboxes, the watch hub, access; it hands
// each line to a session and each sync preamble to the protocols it owns, never to methods.

import Dispatch
import EventStore
import FoundationEssentials
import Logging
import Synchronization
import UnixSocket
import Wire
import Writer

#if canImport(Glibc)
    import Glibc
#endif

/// The limits a config reload may change, read when a connection starts.
package struct Limits: Sendable {
    package var maxLineBytes: Int
    package var watchQueueEvents: Int
    package var maxConnections: Int
    /// Seconds; 0: idle connections are kept.
    package var idleTimeoutSeconds: Int
    package var lineTimeoutSeconds: Int
    package var maxQueuedResponseBytes: Int
    /// Bytes of requests read and not yet answered a client may hold while it leaves its
    /// answers unread; past it, it is cut off.
    package var maxUnansweredBytes: Int
    package var maxBatchRequests: Int
    package var maxBatchResponseBytes: Int
    /// Bytes of notifications one connection's watches may have queued.
    package var watchQueueBytes: Int
    /// A client whose answers have waited `slowReadWindowSeconds` while it took fewer than
    /// `minReadBytesPerSecond` of them is cut off (0: only one that took none).
    package var minReadBytesPerSecond: Int
    package var slowReadWindowSeconds: Int
    /// Sync sessions other nodes started that are answered at once.
    package var maxIncomingSessions: Int

    package init(
        maxLineBytes: Int, watchQueueEvents: Int, maxConnections: Int, idleTimeoutSeconds: Int, lineTimeoutSeconds: Int,
        maxQueuedResponseBytes: Int, maxUnansweredBytes: Int, maxBatchRequests: Int, maxBatchResponseBytes: Int,
        watchQueueBytes: Int, minReadBytesPerSecond: Int, slowReadWindowSeconds: Int, maxIncomingSessions: Int
    ) {
        self.maxLineBytes = maxLineBytes
        self.watchQueueEvents = watchQueueEvents
        self.maxConnections = maxConnections
        self.idleTimeoutSeconds = idleTimeoutSeconds
        self.lineTimeoutSeconds = lineTimeoutSeconds
        self.maxQueuedResponseBytes = maxQueuedResponseBytes
        self.maxUnansweredBytes = maxUnansweredBytes
        self.maxBatchRequests = maxBatchRequests
        self.maxBatchResponseBytes = maxBatchResponseBytes
        self.watchQueueBytes = watchQueueBytes
        self.minReadBytesPerSecond = minReadBytesPerSecond
        self.slowReadWindowSeconds = slowReadWindowSeconds
        self.maxIncomingSessions = maxIncomingSessions
    }
}

/// What every connection shares.
package final class ServerContext: Sendable {
    package let writer: Writer
    package let hub: WatchHub
    /// Makes each connection's session.
    package let sessions: any SessionFactory
    package let logger: Logger
    /// The sync sessions other nodes start on the socket.
    package let incoming: any IncomingSessions
    /// Logs the refused connections, without flooding.
    package let refusals: RefusalLog
    /// Where every connection's requests run, and the watches' catch-ups.
    package let requestThreads: RequestThreads
    package let catchUpThreads: RequestThreads
    /// What all connections together may hold (`max_buffered_bytes`).
    package let budget: BufferBudget
    /// Threads running sessions other nodes started (at most `max_incoming_sessions`).
    package let incomingSessions = Atomic<Int>(0)
    private let currentLimits: Mutex<Limits>
    /// Who may read and write; a reload replaces it, for the connections made after.
    private let currentAccess: Mutex<AccessPolicy>

    package init(
        writer: Writer, hub: WatchHub, sessions: any SessionFactory, incoming: any IncomingSessions, logger: Logger,
        limits: Limits,
        access: AccessPolicy, requestThreads: Int = 8, maxBufferedBytes: Int = 256 << 20
    ) {
        self.budget = BufferBudget(limit: maxBufferedBytes)
        self.requestThreads = RequestThreads(count: requestThreads)
        self.catchUpThreads = RequestThreads(count: max(2, requestThreads / 2), name: "evcatchup")
        self.writer = writer
        self.hub = hub
        self.sessions = sessions
        self.incoming = incoming
        self.logger = logger
        self.refusals = RefusalLog(logger: logger)
        self.currentLimits = Mutex(limits)
        self.currentAccess = Mutex(access)
    }

    package var limits: Limits {
        get { currentLimits.withLock { $0 } }
        set { currentLimits.withLock { $0 = newValue } }
    }

    package var access: AccessPolicy {
        get { currentAccess.withLock { $0 } }
        set { currentAccess.withLock { $0 = newValue } }
    }
}

/// Accepts clients on the listening socket, one `Connection` each, handed in turn to a
/// few event loops; their requests run on the context's request threads.
package final class Server: Sendable {
    package let listener: UnixListener
    package let context: ServerContext
    private let loops: [EventLoop]
    /// The open connections by id, so a stop can drain them.
    private let connections = Mutex<[Int: Connection]>([:])
    private let accepting = Atomic<Bool>(true)
    private let acceptDone = DispatchSemaphore(value: 0)
    /// Signalled each time a connection ends (a stop waits on it).
    private let connectionEnded = DispatchSemaphore(value: 0)

    package init(listener: UnixListener, context: ServerContext, eventLoops: Int = 1) throws(SocketError) {
        self.listener = listener
        self.context = context
        var loops: [EventLoop] = []
        for index in 0..<max(1, eventLoops) { loops.append(try EventLoop(name: "evloop-\(index)")) }
        self.loops = loops
    }

    /// Starts the loops, the request threads and the accepting thread; the error that kept
    /// one from starting, if one did.
    package func start() -> SocketError? {
        for loop in loops {
            if let error = loop.start() { return error }
        }
        if let error = context.requestThreads.start() { return error }
        if let error = context.catchUpThreads.start() { return error }
        return startThread(name: "evstored-accept") { [self] in
            acceptLoop()
            acceptDone.signal()
        }
    }

    package var connectionCount: Int { connections.withLock { $0.count } }

    private func acceptLoop() {
        var next = 0
        // A descriptor kept in reserve: when the process has none left (EMFILE), it is let
        // go so that a waiting client can be accepted and told, rather than left hanging
        // in the backlog.
        var spare = open("/dev/null", O_RDONLY | O_CLOEXEC)
        defer { if spare >= 0 { close(spare) } }
        while accepting.load(ordering: .relaxed) {
            // Taken back as soon as a descriptor is free again: another thread may have
            // had the one the reserve let go.
            if spare < 0 { spare = open("/dev/null", O_RDONLY | O_CLOEXEC) }
            let socket: UnixConnection?
            do {
                socket = try listener.accept(timeout: 0.2)
            } catch {
                if error.code == EMFILE || error.code == ENFILE, spare >= 0 {
                    close(spare)
                    if let waiting = try? listener.accept(timeout: 0) { refuseOutOfDescriptors(waiting) }
                    spare = open("/dev/null", O_RDONLY | O_CLOEXEC)
                    if spare >= 0 { continue }
                }
                context.logger.error("accept failed: \(error)")
                sleepThread(seconds: 0.1)  // e.g. out of descriptors: do not spin
                continue
            }
            guard let socket else { continue }
            guard accepting.load(ordering: .relaxed) else {
                socket.close()
                break
            }
            let limit = context.limits.maxConnections
            if connectionCount >= limit {
                refuseOverLimit(socket, limit: limit)
                continue
            }
            // Who it is, from its credentials: a client with no access is told so now,
            // before a byte of what it sends is read.
            let client = ClientAccess(socket: socket, policy: context.access)
            if client.grant.level == .none {
                refuseNoAccess(socket, client: client)
                continue
            }
            next += 1
            if client.grant.level < .write, let credentials = client.credentials {
                context.logger.debug(
                    "connection \(next) from pid \(credentials.pid): \(client.who), \(client.grant.level) (\(client.grant.why))"
                )
            }
            let loop = loops[next % loops.count]
            let connection = Connection(
                socket: socket, context: context, identifier: next, loop: loop, client: client
            ) {
                [self] ended in
                connections.withLock { $0[ended.identifier] = nil }
                connectionEnded.signal()
            }
            connections.withLock { $0[next] = connection }
            loop.adopt(connection)
        }
    }

    /// A client accepted on the spare descriptor: told that the daemon has no descriptor
    /// left for it, and closed.
    private func refuseOutOfDescriptors(_ socket: UnixConnection) {
        var limit = rlimit()
        getrlimit(Int32(RLIMIT_NOFILE.rawValue), &limit)
        refuse(
            socket,
            logging:
                "refused a connection: out of file descriptors (\(limit.rlim_cur) allowed, RLIMIT_NOFILE) with \(connectionCount) connections open",
            message:
                "the daemon has no file descriptor left for this connection (its limit is \(limit.rlim_cur), RLIMIT_NOFILE); close idle connections, raise its limit (LimitNOFILE) or lower max_connections below it"
        )
    }

    /// One connection more than `max_connections`: told so in one line, and closed.
    private func refuseOverLimit(_ socket: UnixConnection, limit: Int) {
        let pid = (try? socket.peerCredentials()).map { "pid \($0.pid)" } ?? "pid unknown"
        refuse(
            socket, logging: "refused a connection from \(pid): \(limit) connections are open (max_connections)",
            message:
                "the daemon serves at most \(limit) connections at once (max_connections) and all are in use; close idle connections or retry later"
        )
    }

    /// A client with no access at all: one `forbidden` line, and closed.
    private func refuseNoAccess(_ socket: UnixConnection, client: ClientAccess) {
        let message = client.refusalMessage(doing: "this connection is refused")
        let pid = client.credentials.map { "pid \($0.pid)" } ?? "pid unknown"
        context.refusals.log("refused a connection from \(pid): \(message)", now: Date().timeIntervalSince1970)
        Connection.refuse(socket, error: RPCError.application(.forbidden, message))
    }

    /// Logs the refusal (without flooding) and sends the client one `unavailable` line.
    private func refuse(_ socket: UnixConnection, logging: String, message: String) {
        context.refusals.log(logging, now: Date().timeIntervalSince1970)
        Connection.refuse(
            socket,
            error: RPCError(code: RPCError.applicationCodes["unavailable"]!, message: message, reason: "unavailable"))
    }

    /// Stops accepting, lets every connection answer what it has read, and waits for them
    /// (up to `timeout` seconds) to close.
    package func stop(timeout: Double) {
        accepting.store(false, ordering: .relaxed)
        acceptDone.wait()
        listener.close()
        for connection in connections.withLock({ Array($0.values) }) { connection.stopReading() }
        let deadline = Date().addingTimeInterval(timeout)
        while connectionCount > 0 {
            let left = deadline.timeIntervalSinceNow
            if left <= 0 {
                context.logger.warning("\(connectionCount) connections did not finish in \(Int(timeout)) s; closing")
                for connection in connections.withLock({ Array($0.values) }) { connection.socket.shutdown() }
                break
            }
            _ = connectionEnded.wait(timeout: .now() + min(left, 0.5))
        }
        if connectionCount == 0 {
            for loop in loops { loop.stop() }
            context.requestThreads.stop()
            context.catchUpThreads.stop()
        }
    }
}
