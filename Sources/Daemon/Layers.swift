import EventStore
import Replication
import Server
import Writer

// Where the layers meet: each protocol a lower layer owns, met by the layer that has the
// thing it stands for.

/// Replication writes through the daemon's one writer.
extension Writer: JobWriter {}

/// The sync sessions other nodes start on the socket are the replication layer's.
extension SyncService: IncomingSessions {
    package func preambleVersion(_ line: [UInt8]) -> Int? { Frame.preambleVersion(line) }

    package func refusal(_ reason: IncomingRefusal, message: String) -> [UInt8] {
        let code =
            switch reason {
            case .forbidden: SyncError.forbiddenReason
            case .busy: SyncError.Reason.busy.rawValue
            }
        let error = Frame(kind: .error, payload: Messages.encode(Messages.Failure(reason: code, message: message)))
        return Frame.preamble() + error.encoded()
    }
}
