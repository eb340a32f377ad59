import Dispatch
import EventStore
import FoundationEssentials
import Projections
import Synchronization
import UnixSocket
import Wire

/// One client, served by an event loop and the request threads: the transport and the
/// scheduling of its requests. What each request does is its `RPCSession`'s, and how an
/// answer is written `Response`'s.
///
/// The loop that owns the connection reads what the socket has, splits it into lines and
/// queues them; a request thread runs them, one at a time and in order (`drain`), and
/// their responses go to the outbox, which sends them in the same order. Appends go to
/// the writer without waiting, so a client that pipelines appends gets them
/// group-committed; any other request is held back (`Outbox.admits`) until this
/// connection's earlier appends are answered, so a client always reads its own writes,
/// and while held back it holds no thread: other clients' requests run meanwhile.
///
/// Memory a client can make the daemon hold is bounded: a line by `max_line_bytes`;
/// answers it does not read by `max_queued_response_bytes` (past it its requests are
/// not run); requests read and not yet answered by `max_unanswered_bytes` (past it,
/// while its answers go unread, it is cut off). The loop reads ahead of the requests run
/// only up to a quarter of that (and `maxQueuedRequests` lines), so a client that reads
/// its answers is paced, not cut off. What every connection holds together is bounded by
/// the context's `BufferBudget` (`max_buffered_bytes`): while it is spent, a connection
/// holding more than its floor is neither read nor run. A client that takes its answers
/// slower than `min_read_bytes_per_s` is cut off.
///
/// Threads are shared fairly: a connection's requests run one at a time, and after a turn
/// (`turnRequests` requests or `turnSeconds`) it goes to the back of the request threads'
/// queue, so clients that pipeline long runs of requests never keep another's waiting for
/// more than a turn of each. A client that hangs up has its queued requests dropped, but
/// for the appends it sent, which are stored.
package final class Connection: @unchecked Sendable {
    package let socket: UnixConnection
    package let outbox: Outbox
    package let context: ServerContext
    package let identifier: Int
    /// The limits as they were when the connection came (a reload changes later ones).
    package let limits: Limits
    /// The loop that owns it: reads, flushes and closes run there.
    package let loop: EventLoop
    /// Runs once the connection is closed.
    private let ended: @Sendable (Connection) -> Void
    /// Who the client is and what it may do, from its credentials at accept.
    package let client: ClientAccess

    /// The most requests a connection runs before the others' turn.
    package static let turnRequests = 32
    package static let turnSeconds = 0.002
    /// The most lines read and not yet run one connection may have queued.
    package static let maxQueuedRequests = 4096

    /// What the loop has read for the request threads, in order.
    package enum Item {
        case line([UInt8])
        /// A line over `max_line_bytes`, of this many bytes.
        case tooLong(Int)
        /// A line was begun and not finished in time: answered, then the connection ends.
        case lineTimeout
        /// Nothing more comes: the connection ends once what is before is answered.
        case end
    }

    /// What the loop and the request threads share (under `work`'s lock).
    package struct Work {
        package var items: [Item] = []
        package var head = 0
        /// A request thread runs `drain` (or is about to).
        package var running = false
        /// `drain` stopped at a request `Outbox.admits` held back; `resume` restarts it.
        package var parked = false
        /// `resume` came while `drain` ran: it looks again before it parks.
        package var resumed = false
        /// Bytes of requests read and not yet answered.
        package var unanswered = 0
        /// The loop stopped reading to let the requests catch up: it is told when they have.
        package var readPaused = false
        /// `drain` ran the end: the watches are gone and the outbox is finishing.
        package var finished = false
        /// A watch catches up on a catch-up thread: no request runs until it has joined.
        package var catchingUp = false
        /// The client hung up: what it queued is dropped but for its appends.
        package var departed = false
        /// `unanswered`, charged to the budget.
        package let charge: BufferBudget.Charge

        package init(budget: BufferBudget) {
            charge = BufferBudget.Charge(budget)
        }

        /// Lines queued and not yet run.
        package var queuedCount: Int { items.count - head }

        /// Moves `unanswered` by `delta` bytes, and its charge.
        package mutating func account(_ delta: Int) {
            unanswered += delta
            charge.set(unanswered)
        }

        package var isEmpty: Bool { head == items.count }

        package mutating func pop() -> Item? {
            guard head < items.count else { return nil }
            let item = items[head]
            items[head] = .end
            head += 1
            if head == items.count {
                items.removeAll(keepingCapacity: items.count <= 64)
                head = 0
            } else if head > 1024 && head * 2 > items.count {
                items.removeFirst(head)
                head = 0
            }
            return item
        }
    }

    private let work: Mutex<Work>
    /// Descriptors the client passed with its requests (`SCM_RIGHTS`), oldest first, for the
    /// request that takes one (a blob's file); at most `maxPassedDescriptors` are held, more
    /// are closed as they arrive, and those left are closed when the connection ends.
    private let passed = Mutex<[Int32]>([])
    package static let maxPassedDescriptors = 2
    /// Queued for the loop's attention (at most once at a time).
    package let attentionQueued = Atomic<Bool>(false)
    /// Runs the requests: dispatch, batches, appends through admission, watches. Its
    /// watch count is read by the loop (an idle connection with a watch is kept).
    private let session: any ConnectionSession

    // MARK: Touched only by the request thread running `drain`.

    /// The request parsed and held back by `Outbox.admits`, with its size in bytes.
    private var current: (parsed: ParsedLine, bytes: Int)?

    // MARK: Touched only by the loop's thread.

    private var reader: LineReader
    /// The reader's buffer, charged to the budget.
    private let readerCharge: BufferBudget.Charge
    /// Reading waits for the budget to have room again.
    private var pausedForBudget = false
    /// A sync session was refused: what the peer still sends is read and dropped until it
    /// hangs up or until then, so it reads the refusal rather than a reset.
    private var refusingUntil: Double?
    /// The events the loop watches the socket for, once registered.
    private var interest: Epoll.Events?
    /// The loop reads no more: the end, an error, a timeout, or a cut-off.
    private var readEnded = false
    /// The loop let go of the socket: a sync session has it.
    private var handedOff = false
    private var closed = false
    private var first = true
    /// When the current line began (nil: between lines), when the connection last had
    /// work, and since when the socket has taken none of its answers, in seconds of the
    /// monotonic clock.
    private var lineStarted: Double?
    private var active: Double
    private var blockedSince: Double?
    /// What the outbox had written when the loop last looked, and when `blockedSince` was
    /// last set (a slow reader's rate is measured from there).
    private var lastWritten = 0
    private var writtenSinceBlocked = 0

    package init(
        socket: UnixConnection, context: ServerContext, identifier: Int, loop: EventLoop, client: ClientAccess,
        ended: @escaping @Sendable (Connection) -> Void
    ) {
        self.socket = socket
        self.context = context
        self.identifier = identifier
        self.loop = loop
        self.client = client
        self.ended = ended
        let limits = context.limits
        self.limits = limits
        self.reader = LineReader(limit: limits.maxLineBytes)
        self.readerCharge = BufferBudget.Charge(context.budget)
        self.work = Mutex(Work(budget: context.budget))
        self.active = Connection.now()
        self.outbox = Outbox(
            socket: socket, notificationLimit: limits.watchQueueEvents, byteLimit: limits.maxQueuedResponseBytes,
            notificationByteLimit: limits.watchQueueBytes, budget: context.budget)
        session = context.sessions.session(
            context: context, outbox: outbox, client: client, identifier: identifier, limits: limits)
        // Weak: the outbox is the connection's, and a subscription may outlive it briefly.
        outbox.onReady = { [weak self] in
            if let self { self.loop.attend(self) }
        }
        outbox.onResume = { [weak self] in self?.resume() }
        session.owner = self
    }

    package var tag: UInt64 { UInt64(identifier) }

    /// Sends `error` as one line, without waiting, and closes the socket: for a client
    /// the daemon will not serve.
    package static func refuse(_ socket: UnixConnection, error: RPCError) {
        _ = try? socket.writeAvailable(Response.line(id: RequestParser.nullID, error: error))
        socket.close()
    }

    /// Stops taking requests; those already read are still answered.
    package func stopReading() {
        socket.shutdown(writing: false)
    }

    /// Seconds of the monotonic clock.
    package static func now() -> Double {
        Double(DispatchTime.now().uptimeNanoseconds) / 1e9
    }

    /// How far the loop reads ahead of the requests run, in bytes of requests unanswered.
    private var readAhead: Int { max(limits.maxUnansweredBytes / 4, 64 << 10) }

    // MARK: - The loop's side

    /// Starts watching the socket (on the loop's thread, once).
    package func register() {
        loop.assertInLoop("Connection.register")
        do {
            try loop.epoll.add(socket.descriptor, events: .readable, tag: tag)
            interest = .readable
        } catch {
            context.logger.error("connection \(identifier): cannot watch its socket (\(error)); closing")
            readEnded = true
            outbox.abort()
            queue(.end, bytes: 0)
        }
    }

    /// Why the loop stops reading a line.
    private enum LoopRead: Error {
        /// Nothing more is available now.
        case wouldBlock
        /// This connection had its share of this round: others' turn.
        case yield
        /// The budget has no room for more of what this connection holds.
        case budget
    }

    /// Reads what the socket has (up to a share per round), queues the lines for the
    /// request threads, and bounds what the connection holds.
    ///
    /// `toTheEnd`: the peer hung up, so what is left in the socket (no more than its buffer)
    /// is read now, in one go and past the read-ahead.
    package func readAvailable(scratch: UnsafeMutableRawBufferPointer, now: Double, toTheEnd: Bool = false) {
        loop.assertInLoop("Connection.readAvailable")
        if refusingUntil != nil {
            discard(scratch: scratch)
            return
        }
        guard !readEnded, !handedOff, !closed else { return }
        var budget = toTheEnd ? Int.max : 256 << 10
        var lineReset = false
        while !readEnded && (toTheEnd || wantsRead()) {
            let line: LineReader.Line
            do {
                line = try reader.nextLine(reading: { buffer, count, midLine in
                    if !midLine { lineReset = true }
                    if budget <= 0 { throw LoopRead.yield }
                    readerCharge.set(buffer.capacity)
                    guard context.budget.allows(holding: buffer.capacity + count + queuedBytes) else {
                        throw LoopRead.budget
                    }
                    var descriptors: [Int32] = []
                    let read = try socket.readAvailable(
                        into: &buffer, count: count, scratch: scratch, descriptors: &descriptors)
                    if !descriptors.isEmpty { hold(descriptors) }
                    guard let n = read else { throw LoopRead.wouldBlock }
                    readerCharge.set(buffer.capacity)
                    budget -= max(n, 1)
                    return n
                })
            } catch let stop as LoopRead {
                if stop == .budget { pausedForBudget = true }
                break
            } catch {
                // A reset: the client is gone.
                endReading()
                break
            }
            active = now
            // A line ended: the next one's clock starts now, should it be begun.
            lineReset = true
            switch line {
            case .end:
                endReading()
            case .tooLong(let bytes):
                queue(.tooLong(bytes), bytes: 0)
            case .line(let bytes):
                // A peer's sync session announces itself in the first line; the connection
                // then speaks the sync protocol until the session ends (with its own
                // deadlines: the idle and line timeouts end here).
                if first, let version = context.incoming.preambleVersion(bytes) {
                    handOff(version: version, now: now)
                    return
                }
                first = false
                if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { continue }
                if answeredOnLoop(bytes) { continue }
                queue(.line(bytes), bytes: bytes.count)
                if checkUnanswered() { return }
            }
        }
        readerCharge.set(reader.capacity)
        if lineReset { lineStarted = nil }
        if reader.isMidLine && lineStarted == nil { lineStarted = now }
    }

    /// Bytes of requests queued and unanswered (for the budget's check on the loop).
    private var queuedBytes: Int { work.withLock { $0.unanswered } }

    /// Whether the loop should read: not past the read-ahead (in bytes and in lines), unless
    /// the client leaves its answers unread (then what it sends is read, and counted toward
    /// the cut-off); and not while the budget is spent, past this connection's floor.
    private func wantsRead() -> Bool {
        guard !readEnded, !handedOff else { return false }
        let over = outbox.isOverLimit
        let ahead = readAhead
        let held = reader.capacity
        let budget = context.budget
        let (wanted, room) = work.withLock { work -> (Bool, Bool) in
            let room = budget.allows(holding: held + work.unanswered)
            if !room { return (false, false) }
            if work.queuedCount < Connection.maxQueuedRequests && (over || work.unanswered <= ahead) {
                return (true, true)
            }
            work.readPaused = true
            return (false, true)
        }
        pausedForBudget = !room
        return wanted
    }

    /// Cuts the client off when it holds more than `max_unanswered_bytes` of requests
    /// unanswered while its answers go unread; true when it did.
    private func checkUnanswered() -> Bool {
        let unanswered = work.withLock { $0.unanswered }
        guard unanswered > limits.maxUnansweredBytes, outbox.isOverLimit else { return false }
        let unread = outbox.waitingBytes
        let pid = (try? socket.peerCredentials()).map { "pid \($0.pid)" } ?? "pid unknown"
        context.refusals.log(
            "cut off connection \(identifier) (\(pid)): \(unanswered) bytes of requests unanswered while \(unread) bytes of its answers were not read (max_unanswered_bytes is \(limits.maxUnansweredBytes))",
            now: Date().timeIntervalSince1970)
        outbox.cutOff(
            with: Response.line(
                id: RequestParser.nullID,
                error: RPCError(
                    code: RPCError.applicationCodes["too_large"]!,
                    message:
                        "this connection sent \(unanswered) bytes of requests not yet answered while it left \(unread) bytes of answers unread, over the limit of \(limits.maxUnansweredBytes) (max_unanswered_bytes); the connection is closed. Read the answers while sending, or send fewer requests at once",
                    reason: "too_large")))
        readEnded = true
        // What it sent is dropped now; the request running ends the connection.
        work.withLock { work in
            while let item = work.pop() {
                if case .line(let bytes) = item { work.account(-bytes.count) }
            }
        }
        queue(.end, bytes: 0)
        return true
    }

    /// Answers `line` here, on the loop, when the session can (`ConnectionSession.answerOnLoop`:
    /// a small `get`, or a small append it hands to the writer) and nothing of this
    /// connection's is queued, running or unanswered: the request then costs no thread
    /// wake-up. The connection counts as running meanwhile, so nothing else runs its
    /// requests, and the line's bytes count as unanswered from the start, as a queued
    /// line's do, since an append's answer may come from the writer before this returns.
    private func answeredOnLoop(_ line: [UInt8]) -> Bool {
        guard line.count <= Connection.maxLoopLineBytes, outbox.isAnswered else { return false }
        let claimed = work.withLock { work -> Bool in
            guard work.isEmpty, !work.running, !work.parked, !work.catchingUp, !work.finished else { return false }
            work.running = true
            work.account(line.count)
            return true
        }
        guard claimed else { return false }
        let answer = session.answerOnLoop(line)
        work.withLock { work in
            work.running = false
            if answer != .submitted { work.account(-line.count) }
        }
        return answer != .declined
    }

    /// The longest request line a connection answers on the loop: a `get` is a few hundred
    /// bytes, an append of one event a few hundred more.
    static let maxLoopLineBytes = 4096

    /// Queues `item` for the request threads and starts one on it when none runs.
    private func queue(_ item: Item, bytes: Int) {
        let start = work.withLock { work -> Bool in
            guard !work.finished else { return false }
            work.items.append(item)
            work.account(bytes)
            guard !work.running && !work.parked else { return false }
            work.running = true
            return true
        }
        if start { context.requestThreads.submit { [self] in drain() } }
    }

    /// Reads no more; what was read is answered, then the connection closes.
    private func endReading() {
        guard !readEnded else { return }
        readEnded = true
        queue(.end, bytes: 0)
    }

    /// The first line was a sync preamble: the socket goes to a session on a thread of its
    /// own, with the bytes read after it. A client without the access a session needs, or
    /// one past `max_incoming_sessions`, is refused here on the loop, before any thread is
    /// started for it.
    private func handOff(version: Int, now: Double) {
        readEnded = true
        let buffered = reader.takeBuffered()
        reader.shrinkIfEmpty()
        readerCharge.set(0)
        if client.grant.level < MethodAccess.syncSession {
            let message = client.refusalMessage(doing: "a sync session is refused")
            session.logRefusal("a sync session", message: message)
            refuseSession(.forbidden, message: message, now: now)
            return
        }
        let limit = limits.maxIncomingSessions
        guard context.incomingSessions.add(1, ordering: .relaxed).newValue <= limit else {
            context.incomingSessions.subtract(1, ordering: .relaxed)
            context.refusals.log(
                "refused a sync session on connection \(identifier): \(limit) from other nodes are in progress (max_incoming_sessions)",
                now: Date().timeIntervalSince1970)
            refuseSession(
                .busy,
                message:
                    "this node is answering \(limit) sync sessions already, its limit (max_incoming_sessions); the next attempt may get through",
                now: now)
            return
        }
        handedOff = true
        if interest != nil {
            loop.epoll.remove(socket.descriptor)
            interest = nil
        }
        loop.forget(self)
        let failure = startThread(name: "evsync-\(identifier)") { [self] in
            context.incoming.serve(socket, buffered: buffered, version: version)
            context.incomingSessions.subtract(1, ordering: .relaxed)
            socket.close()
            ended(self)
        }
        if let failure {
            context.incomingSessions.subtract(1, ordering: .relaxed)
            context.refusals.log(
                "refused a sync session on connection \(identifier): cannot start its thread (\(failure))",
                now: Date().timeIntervalSince1970)
            socket.close()
            ended(self)
        }
    }

    /// Answers a sync preamble with this node's and an error frame, without waiting (both
    /// fit in the socket's buffer), on the loop: no thread is started for it. What the peer
    /// still sends (its hello) is read and dropped until it hangs up, for 5 s at most, so it
    /// reads the refusal rather than a reset.
    private func refuseSession(_ reason: IncomingRefusal, message: String, now: Double) {
        // A peer that cannot take a few hundred bytes now gets nothing: it is gone, or not
        // waiting for an answer.
        _ = try? socket.writeAvailable(context.incoming.refusal(reason, message: message))
        socket.shutdownWriting()
        refusingUntil = now + 5
    }

    /// Reads and drops what a refused peer sends; closes at its end.
    private func discard(scratch: UnsafeMutableRawBufferPointer) {
        var dropped: [UInt8] = []
        for _ in 0..<16 {
            dropped.removeAll(keepingCapacity: true)
            do {
                // Nothing more for now: wait for the rest (or the deadline).
                guard let count = try socket.readAvailable(into: &dropped, count: scratch.count, scratch: scratch)
                else { return }
                if count == 0 { break }
            } catch {
                break
            }
            if dropped.count < scratch.count { return }
        }
        // The end, an error, or a flood: the others' turn; its deadline ends it.
        if dropped.count == scratch.count { return }
        close()
    }

    /// On the loop: writes what is ready, closes the connection once it is done, and
    /// watches the socket for what it waits for.
    package func service(now: Double) {
        loop.assertInLoop("Connection.service")
        guard !closed, !handedOff, refusingUntil == nil else { return }
        let state = outbox.flush()
        // Stalled only while the socket takes nothing at all.
        // Blocked from the moment the socket takes no more until everything ready is written.
        let written = outbox.written
        if state != .blocked { blockedSince = nil }
        if state == .blocked && blockedSince == nil {
            blockedSince = now
            writtenSinceBlocked = written
        }
        lastWritten = written
        if state == .done || outbox.isEnding { endReading() }
        if state == .done, work.withLock({ $0.finished && !$0.running }) {
            close()
            return
        }
        guard interest != nil else { return }
        var wanted: Epoll.Events = []
        if wantsRead() { wanted.insert(.readable) }
        if state == .blocked { wanted.insert(.writable) }
        if wanted != interest {
            try? loop.epoll.modify(socket.descriptor, events: wanted, tag: tag)
            interest = wanted
        }
    }

    /// On the loop: the peer hung up (or the socket failed). The requests it sent before
    /// are read and run, as a client that sends appends and leaves expects; what is
    /// answered fails to be written and ends the connection. The socket is no longer
    /// watched (a hung-up socket is reported at every wait).
    package func hungUp(scratch: UnsafeMutableRawBufferPointer, now: Double) {
        loop.assertInLoop("Connection.hungUp")
        guard !closed, !handedOff else { return }
        if refusingUntil != nil {
            close()
            return
        }
        readAvailable(scratch: scratch, now: now, toTheEnd: true)
        if handedOff || closed { return }
        if interest != nil {
            loop.epoll.remove(socket.descriptor)
            interest = nil
        }
        // Nobody is left to read answers: what it queued is dropped, but for its appends.
        work.withLock { $0.departed = true }
        endReading()
    }

    /// On the loop, every fraction of a second: the line and idle timeouts, a client that
    /// has taken none of its answers for 30 s, and idle buffers given back.
    package func checkDeadlines(now: Double) {
        loop.assertInLoop("Connection.checkDeadlines")
        guard !closed, !handedOff else { return }
        if let refusingUntil {
            if now > refusingUntil { close() }
            return
        }
        if let blockedSince, now - blockedSince >= Double(limits.slowReadWindowSeconds) {
            // Blocked all the window long: the rate it took its answers at decides.
            let taken = outbox.written - writtenSinceBlocked
            let rate = Double(taken) / (now - blockedSince)
            let waiting = outbox.waitingBytes
            let minimum = waiting > BufferBudget.floor ? Double(limits.minReadBytesPerSecond) : 0
            if taken == 0 || rate < minimum {
                let pid = client.credentials.map { "pid \($0.pid)" } ?? "pid unknown"
                context.refusals.log(
                    "cut off connection \(identifier) (\(pid)): it took \(taken) bytes of its answers in \(limits.slowReadWindowSeconds) s with \(waiting) bytes waiting (min_read_bytes_per_s is \(limits.minReadBytesPerSecond))",
                    now: Date().timeIntervalSince1970)
                self.blockedSince = nil
                outbox.abort()
                return
            }
            self.blockedSince = now
            writtenSinceBlocked = outbox.written
        }
        outbox.recheckRoom()
        guard !readEnded else { return }
        if let lineStarted, interest?.contains(.readable) == true || pausedForBudget,
            now - lineStarted > Double(limits.lineTimeoutSeconds)
        {
            context.logger.debug("connection \(identifier): a line was not finished in time; closing")
            readEnded = true
            queue(.lineTimeout, bytes: 0)
            return
        }
        if !reader.isMidLine && now - active > 1 {
            reader.shrinkIfEmpty()
            readerCharge.set(reader.capacity)
        }
        let idle = Double(limits.idleTimeoutSeconds)
        guard idle > 0, !reader.isMidLine else { return }
        let quiet =
            session.watchCount == 0 && work.withLock { $0.isEmpty && !$0.running && !$0.parked }
            && outbox.isIdle
        if !quiet {
            active = now
        } else if now - active > idle {
            context.logger.debug(
                "connection \(identifier): idle for \(limits.idleTimeoutSeconds) s (idle_timeout_s); closing")
            endReading()
        }
    }

    private func close() {
        closed = true
        if interest != nil {
            loop.epoll.remove(socket.descriptor)
            interest = nil
        }
        loop.forget(self)
        if let failure = outbox.writeFailure {
            context.logger.debug("connection \(identifier): write failed (\(failure)); closing")
        }
        socket.close()
        ended(self)
    }

    // MARK: - The request threads' side

    /// Restarts `drain` after `Outbox.admits` held a request back (from any thread).
    private func resume() {
        let start = work.withLock { work -> Bool in
            if work.parked && !work.catchingUp {
                work.parked = false
                work.running = true
                return true
            }
            if work.running { work.resumed = true }
            return false
        }
        if start { context.requestThreads.submit { [self] in drain() } }
    }

    /// Runs the queued requests in order, on a request thread, until none is left or one
    /// must wait (for room, or for this connection's appends: then it parks, holding no
    /// thread, and `resume` starts it again).
    package func drain() {
        let turnStarted = Connection.now()
        var turn = 0
        while true {
            if outbox.isEnding || work.withLock({ $0.departed }) {
                storeAppendsLeft()
                end()
                return
            }
            if turn >= Connection.turnRequests || (turn > 0 && Connection.now() - turnStarted > Connection.turnSeconds),
                current == nil, work.withLock({ !$0.isEmpty })
            {
                // Its turn is over: to the back of the queue, still running (nobody else
                // starts a drain meanwhile).
                context.requestThreads.submit { [self] in drain() }
                return
            }
            turn += 1
            if current == nil {
                let item = work.withLock { work -> Item? in
                    guard let item = work.pop() else {
                        work.running = false
                        return nil
                    }
                    return item
                }
                guard let item else {
                    afterProgress()
                    return
                }
                switch item {
                case .end:
                    end()
                    return
                case .lineTimeout:
                    outbox.push(
                        Response.line(
                            id: RequestParser.nullID,
                            error: .invalidRequest(
                                "a line was begun and not finished within \(limits.lineTimeoutSeconds) s (line_timeout_s); the connection is closed",
                                reason: "timeout")))
                    end()
                    return
                case .tooLong(let bytes):
                    outbox.push(
                        Response.line(
                            id: RequestParser.nullID,
                            error: .invalidRequest(
                                "the line is \(bytes) bytes, over the limit of \(limits.maxLineBytes) (max_line_bytes); split the batch",
                                reason: "too_large")))
                    continue
                case .line(let bytes):
                    current = (RequestParser.parse(bytes, maxBatch: limits.maxBatchRequests), bytes.count)
                }
            }
            guard let (parsed, bytes) = current else { continue }
            if !outbox.admits(needsAppends: readsAfterAppends(parsed)) {
                let parked = work.withLock { work -> Bool in
                    if work.resumed {
                        work.resumed = false
                        return false
                    }
                    work.running = false
                    work.parked = true
                    return true
                }
                if parked {
                    // The client may be leaving its answers unread: the loop reads on, to
                    // see whether it goes on sending.
                    loop.attend(self)
                    return
                }
                continue
            }
            current = nil
            work.withLock { $0.resumed = false }
            if session.run(parsed, bytes: bytes) { answered(bytes) }
            let catchingUp = work.withLock { work -> Bool in
                guard work.catchingUp else { return false }
                work.running = false
                work.parked = true
                return true
            }
            if catchingUp { return }
        }
    }

    /// A watch's catch-up ended: the requests after it run.
    package func caughtUp() {
        let start = work.withLock { work -> Bool in
            work.catchingUp = false
            guard work.parked else { return false }
            work.parked = false
            work.running = true
            return true
        }
        if start { context.requestThreads.submit { [self] in drain() } }
    }

    /// Whether a request must wait for this connection's appends: all but an append.
    private func readsAfterAppends(_ parsed: ParsedLine) -> Bool {
        if session.isAppend(parsed) { return false }
        if case .single(.invalid) = parsed { return false }
        if case .failed = parsed { return false }
        return true
    }

    /// `bytes` of requests are answered (from any thread): the loop reads on if it waited
    /// for that.
    package func answered(_ bytes: Int) {
        let ahead = readAhead
        let wake = work.withLock { work -> Bool in
            work.account(-bytes)
            guard work.readPaused, work.unanswered <= ahead else { return false }
            work.readPaused = false
            return true
        }
        if wake { loop.attend(self) }
    }

    /// The queue ran dry: the loop looks again (it may have stopped reading to let the
    /// requests catch up).
    private func afterProgress() {
        let wake = work.withLock { work -> Bool in
            guard work.readPaused else { return false }
            work.readPaused = false
            return true
        }
        if wake { loop.attend(self) }
    }

    /// The connection ends: its watches go, and the outbox finishes once the answers are
    /// written; the loop closes it then.
    /// The connection ends with requests still queued (the client closed before reading
    /// an answer, so writing one failed, or it is being dropped): its appends are still
    /// stored, as a client that wrote them and closed expects, their answers dropped;
    /// every other request is dropped.
    private func storeAppendsLeft() {
        var lines: [ParsedLine] = current.map { [$0.parsed] } ?? []
        current = nil
        work.withLock { work in
            while let item = work.pop() {
                if case .line(let bytes) = item {
                    lines.append(RequestParser.parse(bytes, maxBatch: limits.maxBatchRequests))
                }
            }
        }
        session.storeAppends(of: lines)
    }

    /// Keeps what the client passed, up to the bound; the rest is closed at once.
    private func hold(_ descriptors: [Int32]) {
        let extra: [Int32] = passed.withLock { held in
            let room = max(0, Connection.maxPassedDescriptors - held.count)
            held += descriptors.prefix(room)
            return Array(descriptors.dropFirst(room))
        }
        for descriptor in extra { FileDescriptor.close(descriptor) }
    }

    private func end() {
        let left = passed.withLock { held in
            defer { held.removeAll() }
            return held
        }
        for descriptor in left { FileDescriptor.close(descriptor) }
        session.end()
        current = nil
        outbox.finish()
        work.withLock { work in
            while work.pop() != nil {}
            work.finished = true
            work.running = false
            work.parked = false
        }
        loop.attend(self)
    }
}

extension Connection: SessionOwner {
    package func takeDescriptor() -> Int32? {
        passed.withLock { $0.isEmpty ? nil : $0.removeFirst() }
    }

    package func catchingUp() { work.withLock { $0.catchingUp = true } }
    package var clientHasLeft: Bool { socket.peerHasClosed }
}
