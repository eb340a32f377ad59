import Dispatch
import EventStore
import FoundationEssentials
import Projections
import UnixSocket

/// One client: a reader thread that decodes requests in order, and an outbox that sends
/// their responses in the same order.
///
/// Appends go to the writer without waiting, so a client that pipelines appends gets
/// them group-committed; any other request first waits for this connection's earlier
/// appends, so a client always reads its own writes. A response is written by the thread
/// that completes it when nothing is before it (the reader for a read, the writer for an
/// append); the sender thread writes the rest and waits for slow clients.
final class Connection: @unchecked Sendable {
    let socket: UnixConnection
    let outbox: Outbox
    let context: ServerContext
    let identifier: Int
    /// The watches this connection started; touched only by its reader thread.
    private var subscriptions: [Subscription] = []
    /// Who the client is and what it may do; set by the reader thread before it reads.
    private var client: ClientAccess?
    /// Whether a refusal on this connection was logged (one line per connection); touched
    /// only by the reader thread.
    private var refusalLogged = false
    private let senderDone = DispatchSemaphore(value: 0)
    /// The limits as they were when the connection came (a reload changes later ones).
    let limits: Limits

    init(socket: UnixConnection, context: ServerContext, identifier: Int) {
        self.socket = socket
        self.context = context
        self.identifier = identifier
        self.limits = context.limits
        self.outbox = Outbox(
            socket: socket, notificationLimit: limits.watchQueueEvents, byteLimit: limits.maxQueuedResponseBytes)
    }

    /// Starts the two threads; `ended` runs once the connection is closed. When a thread
    /// cannot be started (a task or memory limit), the client is sent an error line and
    /// the socket is closed at once; `ended` does not run and the error is returned.
    func start(ended: @escaping @Sendable (Connection) -> Void) -> SocketError? {
        // A client that stops reading for this long is dropped rather than held forever.
        try? socket.setTimeouts(read: nil, write: 30)
        if let error = startThread(
            name: "evsend-\(identifier)",
            { [self] in
                send()
                senderDone.signal()
            })
        {
            Connection.refuse(socket, error: Connection.threadRefusal(error))
            return error
        }
        if let error = startThread(
            name: "evread-\(identifier)",
            { [self] in
                read()
                for subscription in subscriptions { context.hub.remove(subscription) }
                outbox.finish()
                senderDone.wait()
                socket.close()
                ended(self)
            })
        {
            // The sender has nothing to write: the line goes out before it is stopped.
            _ = try? socket.writeAvailable(
                Connection.response(id: RequestParser.nullID, error: Connection.threadRefusal(error)))
            outbox.abort()
            senderDone.wait()
            socket.close()
            return error
        }
        return nil
    }

    /// Sends `error` as one line, without waiting, and closes the socket: for a client
    /// the daemon will not serve.
    static func refuse(_ socket: UnixConnection, error: RPCError) {
        _ = try? socket.writeAvailable(response(id: RequestParser.nullID, error: error))
        socket.close()
    }

    static func threadRefusal(_ error: SocketError) -> RPCError {
        RPCError(
            code: RPCError.applicationCodes["unavailable"]!,
            message:
                "the daemon cannot start a thread for this connection (\(error)): it is at a task or memory limit; close idle connections, or retry later",
            reason: "unavailable")
    }

    /// Stops taking requests; those already read are still answered.
    func stopReading() {
        socket.shutdown(writing: false)
    }

    private func send() {
        while let bytes = outbox.nextWrite() {
            do {
                try socket.write(bytes)
                outbox.wrote()
            } catch {
                context.logger.debug("connection \(identifier): write failed (\(error)); closing")
                outbox.abort()
                outbox.wrote()
                break
            }
        }
        if let failure = outbox.writeFailure {
            context.logger.debug("connection \(identifier): write failed (\(failure)); closing")
        }
        // Wakes the reader if it is still waiting for a request.
        socket.shutdown()
    }

    private func read() {
        let client = ClientAccess(socket: socket, policy: context.access)
        self.client = client
        if client.grant.level < .write, let credentials = client.credentials {
            context.logger.debug(
                "connection \(identifier) from pid \(credentials.pid): \(client.who), \(client.grant.level) (\(client.grant.why))"
            )
        }
        var reader = LineReader(limit: limits.maxLineBytes)
        var clock = ReadClock(now: Connection.now())
        var first = true
        while !outbox.isEnding {
            // A client that does not read its answers is not read either.
            outbox.waitForRoom()
            let line: LineReader.Line
            do {
                line = try reader.nextLine(reading: { buffer, count, midLine in
                    try receive(into: &buffer, count: count, midLine: midLine, clock: &clock)
                })
            } catch ReadStop.lineTimeout {
                context.logger.debug("connection \(identifier): a line was not finished in time; closing")
                outbox.push(
                    Connection.response(
                        id: RequestParser.nullID,
                        error: .invalidRequest(
                            "a line was begun and not finished within \(limits.lineTimeoutSeconds) s (line_timeout_s); the connection is closed",
                            reason: "timeout")))
                return
            } catch ReadStop.idle {
                context.logger.debug(
                    "connection \(identifier): idle for \(limits.idleTimeoutSeconds) s (idle_timeout_s); closing")
                return
            } catch {
                return
            }
            defer { clock.active = Connection.now() }
            switch line {
            case .end:
                return
            case .tooLong(let bytes):
                outbox.push(
                    Connection.response(
                        id: RequestParser.nullID,
                        error: .invalidRequest(
                            "the line is \(bytes) bytes, over the limit of \(reader.limit) (max_line_bytes); split the batch",
                            reason: "too_large")))
            case .line(let bytes):
                // A peer's sync session announces itself in the first line; the connection
                // then speaks the sync protocol until the session ends (with its own
                // deadlines: the idle and line timeouts end here).
                if first, let version = Frame.preambleVersion(bytes) {
                    if client.grant.level < MethodAccess.syncSession {
                        let message = client.refusalMessage(doing: "a sync session is refused")
                        logRefusal("a sync session", message: message)
                        context.sync.refuse(socket, message: message)
                        return
                    }
                    context.sync.serve(socket, buffered: reader.takeBuffered(), version: version)
                    return
                }
                first = false
                if bytes.allSatisfy({ $0 == 0x20 || $0 == 0x09 || $0 == 0x0D }) { continue }
                handle(bytes)
            }
        }
    }

    /// Why the reader stopped reading before the end of the stream.
    private enum ReadStop: Error {
        /// A line was begun and not finished within `line_timeout_s`.
        case lineTimeout
        /// No request came for `idle_timeout_s`, and nothing was waiting.
        case idle
    }

    /// When the current line began (nil: between lines) and when the connection last
    /// had work, in seconds of the monotonic clock.
    private struct ReadClock {
        var lineStarted: Double?
        var active: Double

        init(now: Double) { active = now }
    }

    /// Reads from the socket for the line reader, within the line and idle deadlines: a
    /// line begun must end within `line_timeout_s`; between lines, a connection with no
    /// watch and nothing to send or answer is closed after `idle_timeout_s`.
    private func receive(into buffer: inout [UInt8], count: Int, midLine: Bool, clock: inout ReadClock) throws
        -> Int
    {
        while true {
            let now = Connection.now()
            let wait: Double?
            if midLine {
                let started = clock.lineStarted ?? now
                clock.lineStarted = started
                wait = started + Double(limits.lineTimeoutSeconds) - now
                if wait! <= 0 { throw ReadStop.lineTimeout }
            } else {
                clock.lineStarted = nil
                let idle = Double(limits.idleTimeoutSeconds)
                if idle <= 0 {
                    wait = nil
                } else if subscriptions.isEmpty && outbox.isIdle {
                    wait = clock.active + idle - now
                    if wait! <= 0 { throw ReadStop.idle }
                } else {
                    // Busy: not idle now; look again once a whole timeout has passed.
                    clock.active = now
                    wait = idle
                }
            }
            if let wait, try !socket.waitReadable(timeout: wait) { continue }
            return try socket.read(into: &buffer, count: count)
        }
    }

    /// Seconds of the monotonic clock.
    static func now() -> Double {
        Double(DispatchTime.now().uptimeNanoseconds) / 1e9
    }

    private func handle(_ line: [UInt8]) {
        switch RequestParser.parse(line, maxBatch: limits.maxBatchRequests) {
        case .failed(let error):
            outbox.push(Connection.response(id: RequestParser.nullID, error: error))
        case .single(.invalid(let id, let error)):
            outbox.push(Connection.response(id: id, error: error))
        case .single(.request(let request)):
            handle(request)
        case .batch(let elements):
            handleBatch(elements)
        }
    }

    /// The refusal of `request`, logged; nil when the client may make it.
    private func refusal(of request: Request) -> RPCError? {
        guard let error = client?.refusal(of: request.method) else { return nil }
        logRefusal(request.method, message: error.message)
        return error
    }

    /// Logs this connection's first refusal at notice level (later ones at debug level).
    private func logRefusal(_ what: String, message: String) {
        let pid = client?.credentials.map { "pid \($0.pid)" } ?? "pid unknown"
        let line = "refused \(what) on connection \(identifier) (\(pid)): \(message)"
        if refusalLogged {
            context.logger.debug(line)
            return
        }
        refusalLogged = true
        context.refusals.log(line, now: Date().timeIntervalSince1970)
    }

    private func handle(_ request: Request) {
        if let error = refusal(of: request) {
            if let id = request.id { outbox.push(Connection.response(id: id, error: error)) }
            return
        }
        if request.method == "append", case .events(let events) = request.params {
            let slot = outbox.reserve(isAppend: true)
            let id = request.id
            let outbox = self.outbox
            context.writer.submit(events, from: identifier) { result in
                outbox.fill(slot, with: id.map { Connection.response(id: $0, append: result) } ?? [])
            }
            return
        }
        outbox.waitForAppends()
        if request.method == "watch" {
            watch(request)
            return
        }
        let response = respond(request)
        if !response.isEmpty { outbox.push(response) }
    }

    /// The response line for a request that is not `append` (empty for a notification).
    private func respond(_ request: Request) -> [UInt8] {
        let result: Result<[UInt8], RPCError>
        if request.method == "append" {
            // Only reached when the params did not decode.
            if case .invalid(let error) = request.params {
                result = .failure(error)
            } else {
                result = .failure(.invalidParams("append takes \"events\": an array of events"))
            }
        } else {
            do throws(RPCError) {
                result = .success(try context.methods.call(request, level: client?.grant.level ?? .full))
            } catch {
                result = .failure(error)
            }
        }
        guard let id = request.id else { return [] }
        switch result {
        case .success(let bytes): return Connection.response(id: id, result: bytes)
        case .failure(let error): return Connection.response(id: id, error: error)
        }
    }

    /// Starts a watch. Its answer goes before every notification: without `after` the
    /// subscription joins first and the answer follows (an event the client appends once
    /// it has the answer is always sent to it); with `after`, the answer goes first and the
    /// replay follows it.
    private func watch(_ request: Request) {
        let slot = outbox.reserve()
        let subscription: Subscription
        let after: UInt64?
        do throws(RPCError) {
            let params = try Params(request.params, method: "watch", accepts: ["after", "entity", "type"])
            after = try params.seq("after")
            subscription = Subscription(
                outbox: outbox, entity: try params.entity("entity"), type: try params.type("type"), after: after)
        } catch {
            outbox.fill(slot, with: request.id.map { Connection.response(id: $0, error: error) } ?? [])
            return
        }
        if let refusal = context.hub.admit(subscription) {
            outbox.fill(slot, with: request.id.map { Connection.response(id: $0, error: refusal) } ?? [])
            return
        }
        let answer = request.id.map { Connection.response(id: $0, result: Array(#"{"watching":true}"#.utf8)) } ?? []
        if after != nil { outbox.fill(slot, with: answer) }
        do {
            if try context.hub.start(subscription, after: after, log: context.writer.log) {
                subscriptions.append(subscription)
            }
        } catch {
            context.logger.error("watch: reading the log failed: \(error)")
            if after == nil {
                outbox.fill(slot, with: request.id.map { Connection.response(id: $0, error: RPCError(error)) } ?? [])
            }
            outbox.finish()
            return
        }
        if after == nil { outbox.fill(slot, with: answer) }
    }

    /// A batch is answered as one array, in order; appends in it wait for their commit.
    ///
    /// Once the responses gathered reach `max_batch_response_bytes`, the members after are
    /// not run: each is answered `too_large` (a client still gets one response per
    /// request). A client that is gone gets nothing more: its batch stops there.
    private func handleBatch(_ elements: [ParsedLine.Element]) {
        var out: [UInt8] = [UInt8(ascii: "[")]
        var answered = 0
        for element in elements {
            if outbox.isEnding || socket.peerHasClosed {
                context.logger.debug("connection \(identifier): the client left during a batch; the rest is dropped")
                return
            }
            var line: [UInt8]
            switch element {
            case .invalid(let id, let error):
                line = Connection.response(id: id, error: error)
            case .request(let request):
                if out.count > limits.maxBatchResponseBytes {
                    line =
                        request.id.map {
                            Connection.response(
                                id: $0,
                                error: RPCError(
                                    code: RPCError.applicationCodes["too_large"]!,
                                    message:
                                        "the batch's responses before this one passed \(limits.maxBatchResponseBytes) bytes (max_batch_response_bytes), so it was not run; send it again in a smaller batch or on its own",
                                    reason: "too_large"))
                        } ?? []
                } else if let error = refusal(of: request) {
                    line = request.id.map { Connection.response(id: $0, error: error) } ?? []
                } else if request.method == "append", case .events(let events) = request.params {
                    let result = context.writer.appendAndWait(events, from: identifier)
                    line = request.id.map { Connection.response(id: $0, append: result) } ?? []
                } else if request.method == "watch" {
                    line =
                        request.id.map {
                            Connection.response(
                                id: $0,
                                error: .invalidParams("watch cannot be part of a batch; send it on its own line"))
                        } ?? []
                } else {
                    outbox.waitForAppends()
                    line = respond(request)
                }
            }
            if line.isEmpty { continue }
            line.removeLast()  // the newline: elements are joined with commas
            if answered > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: line)
            answered += 1
        }
        guard answered > 0 else { return }  // only notifications: nothing is sent
        out.append(contentsOf: [UInt8(ascii: "]"), 0x0A])
        outbox.push(out)
    }

    // MARK: - Response lines

    static func response(id: [UInt8], result: [UInt8]) -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(result.count + id.count + 32)
        begin(id: id, member: #","result":"#, into: &out)
        out.append(contentsOf: result)
        out.append(UInt8(ascii: "}"))
        out.append(0x0A)
        return out
    }

    static func response(id: [UInt8], error: RPCError) -> [UInt8] {
        var out: [UInt8] = []
        begin(id: id, member: #","error":"#, into: &out)
        out.append(contentsOf: error.json())
        out.append(UInt8(ascii: "}"))
        out.append(0x0A)
        return out
    }

    /// `{"ids":[...],"versions":{...},"revs":{...},"appended":n}` written straight into the response line.
    static func response(id: [UInt8], append result: Result<AppendResult, EventStoreError>) -> [UInt8] {
        switch result {
        case .failure(let error):
            return response(id: id, error: RPCError(error))
        case .success(let appended):
            var out: [UInt8] = []
            out.reserveCapacity(96 + id.count + appended.ids.count * 29 + appended.versions.count * 120)
            begin(id: id, member: #","result":{"ids":["#, into: &out)
            for (index, id) in appended.ids.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                id.appendJSON(to: &out)
            }
            append(#"],"versions":{"#, to: &out)
            for (index, (entity, version)) in appended.versions.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                CanonicalWriter.appendString(utf8: entity.bytes, to: &out)
                out.append(UInt8(ascii: ":"))
                version.appendJSON(to: &out)
            }
            append(#"},"revs":{"#, to: &out)
            for (index, (entity, rev)) in appended.revs.sorted(by: { $0.key < $1.key }).enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                CanonicalWriter.appendString(utf8: entity.bytes, to: &out)
                out.append(UInt8(ascii: ":"))
                CanonicalWriter.appendInteger(Int(clamping: rev), to: &out)
            }
            append(#"},"appended":"#, to: &out)
            CanonicalWriter.appendInteger(appended.appended, to: &out)
            append("}}\n", to: &out)
            return out
        }
    }

    /// `{"jsonrpc":"2.0","id":<id>` and then `member`.
    private static func begin(id: [UInt8], member: StaticString, into out: inout [UInt8]) {
        append(#"{"jsonrpc":"2.0","id":"#, to: &out)
        out.append(contentsOf: id)
        append(member, to: &out)
    }

    private static func append(_ text: StaticString, to out: inout [UInt8]) {
        text.withUTF8Buffer { out.append(contentsOf: $0) }
    }
}
