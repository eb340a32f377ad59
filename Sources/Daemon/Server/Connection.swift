import EventStore
import Foundation
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

    init(socket: UnixConnection, context: ServerContext, identifier: Int) {
        self.socket = socket
        self.context = context
        self.identifier = identifier
        self.outbox = Outbox(socket: socket, notificationLimit: context.limits.watchQueueEvents)
    }

    /// Starts the two threads; `ended` runs once the connection is closed.
    func start(ended: @escaping @Sendable (Connection) -> Void) {
        // A client that stops reading for this long is dropped rather than held forever.
        try? socket.setTimeouts(read: nil, write: 30)
        let sender = Thread { [self] in
            send()
            senderDone.signal()
        }
        sender.name = "evstored-send-\(identifier)"
        sender.start()
        let reader = Thread { [self] in
            read()
            for subscription in subscriptions { context.hub.remove(subscription) }
            outbox.finish()
            senderDone.wait()
            socket.close()
            ended(self)
        }
        reader.name = "evstored-read-\(identifier)"
        reader.start()
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
        var reader = LineReader(limit: context.limits.maxLineBytes)
        var first = true
        while !outbox.isEnding {
            let line: LineReader.Line
            do {
                line = try reader.next { buffer, count in try socket.read(into: &buffer, count: count) }
            } catch {
                return
            }
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
                // then speaks the sync protocol until the session ends.
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

    private func handle(_ line: [UInt8]) {
        switch RequestParser.parse(line) {
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
    private func handleBatch(_ elements: [ParsedLine.Element]) {
        var responses: [[UInt8]] = []
        for element in elements {
            switch element {
            case .invalid(let id, let error):
                responses.append(Connection.response(id: id, error: error, newline: false))
            case .request(let request):
                var line: [UInt8]
                if let error = refusal(of: request) {
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
                if !line.isEmpty {
                    line.removeLast()  // the newline: elements are joined with commas
                    responses.append(line)
                }
            }
        }
        guard !responses.isEmpty else { return }  // only notifications: nothing is sent
        var out: [UInt8] = [UInt8(ascii: "[")]
        for (index, response) in responses.enumerated() {
            if index > 0 { out.append(UInt8(ascii: ",")) }
            out.append(contentsOf: response)
        }
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

    static func response(id: [UInt8], error: RPCError, newline: Bool = true) -> [UInt8] {
        var out: [UInt8] = []
        begin(id: id, member: #","error":"#, into: &out)
        out.append(contentsOf: error.json())
        out.append(UInt8(ascii: "}"))
        if newline { out.append(0x0A) }
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
