import EventStore
import Projections
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
    package init() {}

    package enum Outcome: Sendable {
        /// To the writer, as this job.
        case admit(AppendJob)
        /// Answered with this result without the writer: there is nothing to write.
        case answer(AppendResult)
        /// Refused with this error, nothing stored.
        case refuse(RPCError)
    }

    package func decide(_ events: [InputEvent], from client: ClientAccess) -> Outcome {
        if let refusal = client.refusal(of: MethodTable.append) { return .refuse(refusal) }
        guard !events.isEmpty else { return .answer(AppendResult(ids: [], versions: [:], written: [])) }
        return .admit(AppendJob(events))
    }
}

extension Admission.Outcome {
    /// The result its answer gives, once the writer has committed an admitted job (waiting
    /// for it): for a batch's append, whose answer goes with the others.
    package func result(writer: Writer, source: Int) -> Result<AppendResult, RPCError> {
        switch self {
        case .admit(let job):
            Result { () throws(EventStoreError) in try writer.perform(job, from: source) }.mapError(RPCError.init)
        case .answer(let result): .success(result)
        case .refuse(let error): .failure(error)
        }
    }

    /// Whether this is an access refusal (which the connection logs as it logs the others).
    var isAccessRefusal: Bool {
        guard case .refuse(let error) = self else { return false }
        return error.reason == "forbidden"
    }
}
