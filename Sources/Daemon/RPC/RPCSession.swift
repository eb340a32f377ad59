import EventStore
import FoundationEssentials
import Projections
import Server
import Synchronization
import Wire

/// One client's JSON-RPC session: runs each parsed line — a request, a batch, an invalid
/// line — puts the answers in the outbox in order, sends appends through the admission stage
/// to the writer, and keeps the client's watches.
///
/// It is used by one thread at a time: the request thread running its connection's `drain`
/// (or, while a watch catches up and no request runs, the catch-up thread). The connection
/// reads, queues and schedules; the session dispatches; `Response` encodes.
final class RPCSession: ConnectionSession, @unchecked Sendable {
    let outbox: Outbox
    let context: ServerContext
    let client: ClientAccess
    let identifier: Int
    let limits: Limits
    let methods: Methods
    /// What becomes of each append before the writer.
    let admission: Admission
    /// Set once, before the first request.
    weak var owner: (any SessionOwner)?
    /// How many watches it holds (read from the loop's thread).
    private let watches = Atomic<Int>(0)
    private var subscriptions: [Subscription] = []
    /// Whether a refusal was logged (the first at notice level, later ones at debug).
    private var refusalLogged = false

    init(
        outbox: Outbox, context: ServerContext, methods: Methods, admission: Admission, client: ClientAccess,
        identifier: Int, limits: Limits
    ) {
        self.outbox = outbox
        self.methods = methods
        self.admission = admission
        self.context = context
        self.client = client
        self.identifier = identifier
        self.limits = limits
    }

    var watchCount: Int { watches.load(ordering: .relaxed) }

    func isAppend(_ parsed: ParsedLine) -> Bool {
        if case .single(.request(let request)) = parsed, request.method == MethodTable.append,
            case .events = request.params
        {
            return true
        }
        return false
    }

    /// Stores the appends among `lines` that the admission stage admits, their answers
    /// dropped: what a client that sent them and left expects. The rest is dropped.
    func storeAppends(of lines: [ParsedLine]) {
        for parsed in lines {
            guard case .single(.request(let request)) = parsed, request.method == MethodTable.append,
                case .events(let events) = request.params, case .admit(let job) = admit(events)
            else { continue }
            context.writer.submit(job, from: identifier) { _ in }
        }
    }

    /// The session ends: its watches and its blob uploads go.
    func end() {
        methods.blobs?.abortAll(owner: identifier)
        for subscription in subscriptions { context.hub.remove(subscription) }
        subscriptions.removeAll()
        watches.store(0, ordering: .relaxed)
    }

    /// Runs one parsed line; false when its bytes are answered later (an append, by the
    /// writer's completion).
    func run(_ parsed: ParsedLine, bytes: Int) -> Bool {
        switch parsed {
        case .failed(let error):
            outbox.push(Response.line(id: RequestParser.nullID, error: error))
        case .single(.invalid(let id, let error)):
            outbox.push(Response.line(id: id, error: error))
        case .single(.request(let request)):
            return handle(request, bytes: bytes)
        case .batch(let elements):
            handleBatch(elements)
        }
        return true
    }

    /// The refusal of `request`, logged; nil when the client may make it.
    private func refusal(of request: Request) -> RPCError? {
        guard let error = client.refusal(of: request.method) else { return nil }
        logRefusal(request.method, message: error.message)
        return error
    }

    /// Logs this connection's first refusal at notice level (later ones at debug level).
    func logRefusal(_ what: String, message: String) {
        let pid = client.credentials.map { "pid \($0.pid)" } ?? "pid unknown"
        let line = "refused \(what) on connection \(identifier) (\(pid)): \(message)"
        if refusalLogged {
            context.logger.debug(line)
            return
        }
        refusalLogged = true
        context.refusals.log(line, now: Date().timeIntervalSince1970)
    }

    /// What the admission stage makes of an append's events; a refusal of access is logged.
    func admit(_ events: [InputEvent]) -> Admission.Outcome {
        let outcome = admission.decide(events, from: client)
        if outcome.isAccessRefusal, case .refuse(let error) = outcome {
            logRefusal(MethodTable.append, message: error.message)
        }
        return outcome
    }

    /// Runs one request; false when it is answered later (an append, once committed).
    private func handle(_ request: Request, bytes: Int) -> Bool {
        if request.method == MethodTable.append, case .events(let events) = request.params {
            return append(events, id: request.id, bytes: bytes, outcome: admit(events))
        }
        if let error = refusal(of: request) {
            if let id = request.id { outbox.push(Response.line(id: id, error: error)) }
            return true
        }
        // Admitted once this connection's appends were answered: this returns at once.
        outbox.waitForAppends()
        if request.method == MethodTable.watch {
            watch(request)
            return true
        }
        let response = respond(request)
        if !response.isEmpty { outbox.push(response) }
        return true
    }

    /// Answers an append of `events` as the admission stage decided (`outcome`), in its place
    /// in the outbox; false when the writer answers it later (then `owner.answered(bytes)`).
    private func append(_ events: [InputEvent], id: [UInt8]?, bytes: Int, outcome: Admission.Outcome) -> Bool {
        let slot = outbox.reserve(isAppend: true)
        let outbox = self.outbox
        switch outcome {
        case .admit(let job):
            context.writer.submit(job, from: identifier) { [self] result in
                outbox.fill(slot, with: id.map { Response.line(id: $0, append: result) } ?? [])
                owner?.answered(bytes)
            }
            return false
        case let outcome:
            // Answered or refused at once, or by the authority (this thread waits for it, so
            // a connection hands on one append at a time): nothing goes to the writer. A
            // notification handed on is still handed on.
            let line = outcome.responseLine(id: id ?? RequestParser.nullID, writer: context.writer, source: identifier)
            outbox.fill(slot, with: id == nil ? [] : line)
            return true
        }
    }

    /// A request answered on the event loop (`ConnectionSession.answerOnLoop`): a `get`
    /// that this client may make, of an entity whose record is small (`Methods.getOnLoop`);
    /// or an append this client may make, handed to the writer or answered at once as on a
    /// request thread, unless it names a blob (whose file the admission looks at) or goes
    /// to a type's authority (whose answer is waited for). The rest, refusals (which are
    /// logged) among them, go to the request threads.
    func answerOnLoop(_ line: [UInt8]) -> LoopAnswer {
        // Most lines are neither, and a batch is never answered here: both are told apart
        // without parsing. The rest is parsed once, whichever it turns out to be.
        guard line.first != UInt8(ascii: "["),
            RPCSession.mentions(RPCSession.quotedGet, in: line)
                || RPCSession.mentions(RPCSession.quotedAppend, in: line),
            case .single(.request(let request)) = RequestParser.parse(line, maxBatch: 1),
            client.refusal(of: request.method) == nil
        else { return .declined }
        switch (request.method, request.params) {
        case ("get", _):
            guard let id = request.id, let result = methods.getOnLoop(request) else { return .declined }
            switch result {
            case .success(let bytes): outbox.push(Response.line(id: id, result: bytes))
            case .failure(let error): outbox.push(Response.line(id: id, error: error))
            }
            return .answered
        case (MethodTable.append, .events(let events)) where events.allSatisfy({ $0.blobReferences.isEmpty }):
            let outcome = admit(events)
            if case .handOff = outcome { return .declined }
            return append(events, id: request.id, bytes: line.count, outcome: outcome) ? .answered : .submitted
        default:
            return .declined
        }
    }

    static let quotedGet = Array(#""get""#.utf8)
    static let quotedAppend = Array(#""append""#.utf8)

    /// Whether `line` holds `"get"`, quotes included, anywhere.
    static func mentionsGet(_ line: [UInt8]) -> Bool { mentions(quotedGet, in: line) }

    /// Whether `line` holds `word` anywhere: a plain scan of its bytes. (Foundation's
    /// `firstRange(of:)` is generic over the collections it compares, and took a third of
    /// the loop's own work for a get.)
    static func mentions(_ word: [UInt8], in line: [UInt8]) -> Bool {
        let bytes = line.span
        let pattern = word.span
        guard let first = word.first, pattern.count <= bytes.count else { return false }
        var index = 0
        while index + pattern.count <= bytes.count {
            if bytes[index] == first {
                var offset = 1
                while offset < pattern.count, bytes[index + offset] == pattern[offset] { offset += 1 }
                if offset == pattern.count { return true }
            }
            index += 1
        }
        return false
    }

    /// The response line for a request that is not `append` (empty for a notification).
    private func respond(_ request: Request) -> [UInt8] {
        let result: Result<[UInt8], RPCError>
        if request.method == MethodTable.append {
            // Only reached when the params did not decode.
            if case .invalid(let error) = request.params {
                result = .failure(error)
            } else {
                result = .failure(.invalidParams("append takes \"events\": an array of events"))
            }
        } else {
            do throws(RPCError) {
                let caller = Caller(connection: identifier) { [weak self] in self?.owner?.takeDescriptor() }
                result = .success(try methods.call(request, level: client.grant.level, caller: caller))
            } catch {
                result = .failure(error)
            }
        }
        guard let id = request.id else { return [] }
        switch result {
        case .success(let bytes): return Response.line(id: id, result: bytes)
        case .failure(let error): return Response.line(id: id, error: error)
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
            let params = try Params(request)
            after = try Methods.resumePoint(
                after: params.seq("after"), consumer: params.string("consumer"), log: context.writer.log)
            subscription = Subscription(
                outbox: outbox, entity: try params.entity("entity"), type: try params.type("type"), after: after)
        } catch {
            outbox.fill(slot, with: request.id.map { Response.line(id: $0, error: error) } ?? [])
            return
        }
        if let refusal = context.hub.admit(subscription) {
            outbox.fill(slot, with: request.id.map { Response.line(id: $0, error: refusal) } ?? [])
            return
        }
        let answer = request.id.map { Response.line(id: $0, result: Array(#"{"watching":true}"#.utf8)) } ?? []
        guard after != nil else {
            join(subscription, after: nil, slot: slot, answer: answer, id: request.id)
            return
        }
        // The replay waits while the client is slow to read: not on a request thread.
        outbox.fill(slot, with: answer)
        owner?.catchingUp()
        context.catchUpThreads.submit { [self] in
            join(subscription, after: after, slot: slot, answer: answer, id: request.id)
            owner?.caughtUp()
        }
    }

    /// Replays the events after `after` (none when nil) to the subscription and joins it
    /// to the live stream; without `after`, the answer goes once it has joined.
    private func join(_ subscription: Subscription, after: UInt64?, slot: Outbox.Slot, answer: [UInt8], id: [UInt8]?) {
        do {
            if try context.hub.start(subscription, after: after, log: context.writer.log) {
                subscriptions.append(subscription)
                watches.store(subscriptions.count, ordering: .relaxed)
            }
        } catch {
            context.logger.error("watch: reading the log failed: \(error)")
            if after == nil {
                outbox.fill(slot, with: id.map { Response.line(id: $0, error: RPCError(error)) } ?? [])
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
            if outbox.isEnding || owner?.clientHasLeft ?? true {
                context.logger.debug("connection \(identifier): the client left during a batch; the rest is dropped")
                return
            }
            var line: [UInt8]
            switch element {
            case .invalid(let id, let error):
                line = Response.line(id: id, error: error)
            case .request(let request):
                if out.count > limits.maxBatchResponseBytes {
                    line =
                        request.id.map {
                            Response.line(
                                id: $0,
                                error: RPCError(
                                    code: RPCError.applicationCodes["too_large"]!,
                                    message:
                                        "the batch's responses before this one passed \(limits.maxBatchResponseBytes) bytes (max_batch_response_bytes), so it was not run; send it again in a smaller batch or on its own",
                                    reason: "too_large"))
                        } ?? []
                } else if request.method == MethodTable.append, case .events(let events) = request.params {
                    let answer = admit(events).responseLine(
                        id: request.id ?? RequestParser.nullID, writer: context.writer, source: identifier)
                    line = request.id == nil ? [] : answer
                } else if let error = refusal(of: request) {
                    line = request.id.map { Response.line(id: $0, error: error) } ?? []
                } else if request.method == MethodTable.watch {
                    line =
                        request.id.map {
                            Response.line(
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
}

/// Makes each connection's JSON-RPC session, with the methods and the admission stage every
/// session shares.
struct RPCSessions: SessionFactory {
    let methods: Methods
    let admission: Admission

    init(methods: Methods) {
        self.methods = methods
        let log = methods.log
        let sync = methods.sync
        self.admission = Admission(
            rules: { log.typeRules },
            forward: { request, authority in
                sync.forward(request, to: authority)
            },
            blobs: methods.blobs)
    }

    func session(
        context: ServerContext, outbox: Outbox, client: ClientAccess, identifier: Int, limits: Limits
    ) -> any ConnectionSession {
        RPCSession(
            outbox: outbox, context: context, methods: methods, admission: admission, client: client,
            identifier: identifier, limits: limits)
    }
}
