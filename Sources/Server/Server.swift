import Dispatch
import EventStore
import FoundationEssentials
import Logging
import Synchronization
import UnixSocket

#if canImport(Glibc)
    import Glibc
#endif

/// The limits a config reload may change, read when a connection starts.
struct Limits: Sendable {
    var maxLineBytes: Int
    var watchQueueEvents: Int
    var maxConnections: Int
    /// Seconds; 0: idle connections are kept.
    var idleTimeoutSeconds: Int
    var lineTimeoutSeconds: Int
    var maxQueuedResponseBytes: Int
    /// Bytes of requests read and not yet answered a client may hold while it leaves its
    /// answers unread; past it, it is cut off.
    var maxUnansweredBytes: Int
    var maxBatchRequests: Int
    var maxBatchResponseBytes: Int
    /// Bytes of notifications one connection's watches may have queued.
    var watchQueueBytes: Int
    /// A client whose answers have waited `slowReadWindowSeconds` while it took fewer than
    /// `minReadBytesPerSecond` of them is cut off (0: only one that took none).
    var minReadBytesPerSecond: Int
    var slowReadWindowSeconds: Int
    /// Sync sessions other nodes started that are answered at once.
    var maxIncomingSessions: Int

    /// The limits `configuration` sets.
    init(_ configuration: Configuration) {
        maxLineBytes = configuration.maxLineBytes
        watchQueueEvents = configuration.watchQueueEvents
        maxConnections = configuration.maxConnections
        idleTimeoutSeconds = configuration.idleTimeoutSeconds
        lineTimeoutSeconds = configuration.lineTimeoutSeconds
        maxQueuedResponseBytes = configuration.maxQueuedResponseBytes
        maxUnansweredBytes = configuration.maxUnansweredBytes
        maxBatchRequests = configuration.maxBatchRequests
        maxBatchResponseBytes = configuration.maxBatchResponseBytes
        watchQueueBytes = configuration.watchQueueBytes
        minReadBytesPerSecond = configuration.minReadBytesPerSecond
        slowReadWindowSeconds = configuration.slowReadWindowSeconds
        maxIncomingSessions = configuration.maxIncomingSessions
    }
}

/// What every connection shares.
final class ServerContext: Sendable {
    let writer: Writer
    /// What becomes of each append before the writer.
    let admission: Admission
    let hub: WatchHub
    let methods: Methods
    let logger: Logger
    let sync: SyncService
    /// Logs the refused connections, without flooding.
    let refusals: RefusalLog
    /// Where every connection's requests run, and the watches' catch-ups.
    let requestThreads: RequestThreads
    let catchUpThreads: RequestThreads
    /// What all connections together may hold (`max_buffered_bytes`).
    let budget: BufferBudget
    /// Threads running sessions other nodes started (at most `max_incoming_sessions`).
    let incomingSessions = Atomic<Int>(0)
    private let currentLimits: Mutex<Limits>
    /// Who may read and write; a reload replaces it, for the connections made after.
    private let currentAccess: Mutex<AccessPolicy>

    init(
        writer: Writer, hub: WatchHub, methods: Methods, sync: SyncService, logger: Logger, limits: Limits,
        access: AccessPolicy, requestThreads: Int = 8, maxBufferedBytes: Int = 256 << 20
    ) {
        self.budget = BufferBudget(limit: maxBufferedBytes)
        self.requestThreads = RequestThreads(count: requestThreads)
        self.catchUpThreads = RequestThreads(count: max(2, requestThreads / 2), name: "evcatchup")
        self.writer = writer
        self.admission = Admission()
        self.hub = hub
        self.methods = methods
        self.sync = sync
        self.logger = logger
        self.refusals = RefusalLog(logger: logger)
        self.currentLimits = Mutex(limits)
        self.currentAccess = Mutex(access)
    }

    var limits: Limits {
        get { currentLimits.withLock { $0 } }
        set { currentLimits.withLock { $0 = newValue } }
    }

    var access: AccessPolicy {
        get { currentAccess.withLock { $0 } }
        set { currentAccess.withLock { $0 = newValue } }
    }
}

/// Accepts clients on the listening socket, one `Connection` each, handed in turn to a
/// few event loops; their requests run on the context's request threads.
final class Server: Sendable {
    let listener: UnixListener
    let context: ServerContext
    private let loops: [EventLoop]
    /// The open connections by id, so a stop can drain them.
    private let connections = Mutex<[Int: Connection]>([:])
    private let accepting = Atomic<Bool>(true)
    private let acceptDone = DispatchSemaphore(value: 0)
    /// Signalled each time a connection ends (a stop waits on it).
    private let connectionEnded = DispatchSemaphore(value: 0)

    init(listener: UnixListener, context: ServerContext, eventLoops: Int = 1) throws(SocketError) {
        self.listener = listener
        self.context = context
        var loops: [EventLoop] = []
        for index in 0..<max(1, eventLoops) { loops.append(try EventLoop(name: "evloop-\(index)")) }
        self.loops = loops
    }

    /// Starts the loops, the request threads and the accepting thread; the error that kept
    /// one from starting, if one did.
    func start() -> SocketError? {
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

    var connectionCount: Int { connections.withLock { $0.count } }

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
    func stop(timeout: Double) {
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
