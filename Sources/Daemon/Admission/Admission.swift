import EventStore
import Projections
import Replication
import Server
import Wire
import Writer

// The admission stage. Its rule: it decides what becomes of a parsed `append` from the
// request and the client alone, before the writer sees it; what needs the store (if_match,
// a deleted entity, an idempotency key seen before) is decided in the write transaction.

/// What becomes of a parsed `append`: taken to the writer, answered at once, or refused.
/// (A daemon that is stopping refuses what is admitted: the writer answers `unavailable`.)
///
/// Every append a client sends passes here, alone or in a batch, and so do the appends a
/// departed client left queued; rules that hold per type, and handing an append to the node
/// that decides it, belong here too.
package struct Admission: Sendable {
    /// The types file's rules now in force (they change on SIGHUP).
    let rules: @Sendable () -> TypeRules
    /// Hands an append (its request line) to the authority named and waits for its answer;
    /// nil where appends are not handed on (an append another node handed to this one).
    let forward: (@Sendable (_ request: [UInt8], _ authority: String) -> ForwardOutcome)?
    /// The blobs this node holds: an event naming a blob is admitted only once it is here
    /// (nil: not checked, for an append another node handed to this one, which checked it).
    let blobs: BlobStore?

    package init(
        rules: @escaping @Sendable () -> TypeRules = { TypeRules() },
        forward: (@Sendable (_ request: [UInt8], _ authority: String) -> ForwardOutcome)? = nil,
        blobs: BlobStore? = nil
    ) {
        self.rules = rules
        self.forward = forward
        self.blobs = blobs
    }

    package enum Outcome: Sendable {
        /// To the writer, as this job.
        case admit(AppendJob)
        /// Answered with this result without the writer: there is nothing to write.
        case answer(AppendResult)
        /// Refused with this error, nothing stored.
        case refuse(RPCError)
        /// Made only at a type's authority (`offline: "refuse"`), and this node is not it:
        /// handed to it, and answered with its answer (`HandOff.run`, which waits).
        case handOff(HandOff)
    }

    /// An append for the authority of one of its types: never queued, never stored here.
    package struct HandOff: Sendable {
        let events: [InputEvent]
        /// The first event made only at the authority, and that node's name.
        let index: Int
        let authority: String
        let forward: @Sendable (_ request: [UInt8], _ authority: String) -> ForwardOutcome

        /// Hands the append on and waits (`sync_timeout_s` at most): the authority's answer,
        /// or why there was none. The events then arrive here by sync.
        package func run() -> Result<[UInt8], RPCError> {
            let type = events[index].entity.type
            switch forward(InputJSON.appendRequest(events), authority) {
            case .answered(let line):
                return Response.read(line)
                    ?? .failure(
                        .application(
                            .unavailable,
                            "event \(index): \(authority), the authority of \(type), answered with something that is not a response: it may have stored the append; look after the next sync before you try again"
                        ))
            case .unreachable(let why):
                return .failure(
                    .application(
                        .unavailable,
                        "event \(index): appends of \(type) are made only at its authority, \(authority), which this node cannot reach (\(why)): reconnect to take this action (nothing was stored)"
                    ))
            case .unanswered(let why):
                return .failure(
                    .application(
                        .unavailable,
                        "event \(index): the append was handed to \(authority), the authority of \(type), and no answer came back (\(why)): it may be stored there; look after the next sync, or send it again with the same key, before you take the action again"
                    ))
            }
        }
    }

    package func decide(_ events: [InputEvent], from client: ClientAccess) -> Outcome {
        if let refusal = client.refusal(of: MethodTable.append) { return .refuse(refusal) }
        guard !events.isEmpty else { return .answer(AppendResult(ids: [], versions: [:], written: [])) }
        if let blobs, let refusal = Admission.missingBlob(in: events, blobs: blobs) { return .refuse(refusal) }
        let rules = self.rules()
        if !rules.types.isEmpty,
            let (index, authority) = events.enumerated().lazy.compactMap({ index, event in
                rules.refusedOffline(event.entity).map { (index, $0) }
            }).first
        {
            // Never queued and never stored here first: the authority makes these or no one.
            if let forward {
                return .handOff(HandOff(events: events, index: index, authority: authority, forward: forward))
            }
            let type = events[index].entity.type
            return .refuse(
                RPCError.application(
                    .unavailable,
                    "event \(index): appends of \(type) are made only at its authority, \(authority), and this node is not it (nothing was stored)"
                ))
        }
        return .admit(AppendJob(events))
    }
}

extension Admission {
    /// The refusal of the first event that names a blob this node does not hold, or holds
    /// with another size than the reference says.
    static func missingBlob(in events: [InputEvent], blobs: BlobStore) -> RPCError? {
        for (index, event) in events.enumerated() {
            for reference in event.blobReferences {
                guard let size = blobs.size(of: reference.hash) else {
                    return RPCError(
                        EventStoreError(
                            .invalidEvent,
                            "event \(index) names blob \(reference.hash), which this node does not hold: put the blob first (evctl blob put FILE)",
                            index: index))
                }
                guard size == reference.size else {
                    return RPCError(
                        EventStoreError(
                            .invalidEvent,
                            "event \(index) says blob \(reference.hash) is \(reference.size) bytes; it is \(size)",
                            index: index))
                }
            }
        }
        return nil
    }
}

extension Admission.Outcome {
    /// Its response line for `id`, once the writer has committed an admitted job or the
    /// authority has answered one handed to it (waiting for either).
    package func responseLine(id: [UInt8], writer: Writer, source: Int) -> [UInt8] {
        switch self {
        case .admit(let job):
            Response.line(
                id: id,
                append: Result { () throws(EventStoreError) in try writer.perform(job, from: source) }.mapError(
                    RPCError.init))
        case .answer(let result): Response.line(id: id, append: Result<AppendResult, RPCError>.success(result))
        case .refuse(let error): Response.line(id: id, error: error)
        case .handOff(let handOff):
            switch handOff.run() {
            case .success(let result): Response.line(id: id, result: result)
            case .failure(let error): Response.line(id: id, error: error)
            }
        }
    }

    /// Whether this is an access refusal (which the connection logs as it logs the others).
    var isAccessRefusal: Bool {
        guard case .refuse(let error) = self else { return false }
        return error.reason == "forbidden"
    }
}

extension Admission {
    /// The writer's source of appends another node handed to this one.
    static let forwardedSource = -10

    /// Answers an append another node handed to this one (`forward`): `line` is its
    /// JSON-RPC request, and the answer a response line with its id. It passes this node's
    /// admission as a client's append does — the peer's account had the access a sync
    /// session needs, which is what an append needs — and is never handed on again.
    package static func answerForwarded(_ line: [UInt8], rules: @escaping @Sendable () -> TypeRules, writer: Writer)
        -> [UInt8]
    {
        guard case .single(.request(let request)) = RequestParser.parse(line, maxBatch: 1),
            request.method == MethodTable.append
        else {
            return Response.line(
                id: RequestParser.nullID, error: .invalidRequest("a node hands on only an append, as one request"))
        }
        let id = request.id ?? RequestParser.nullID
        guard case .events(let events) = request.params else {
            if case .invalid(let error) = request.params { return Response.line(id: id, error: error) }
            return Response.line(id: id, error: .invalidParams("append takes \"events\": an array of events"))
        }
        let peer = ClientAccess(
            credentials: nil, groups: [],
            grant: AccessPolicy.Grant(level: MethodAccess.syncSession, why: "a peer's sync session"))
        return Admission(rules: rules).decide(events, from: peer).responseLine(
            id: id, writer: writer, source: forwardedSource)
    }
}
