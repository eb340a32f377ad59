/// Why a sync session ended early, with a stable `reason` (shown in `status` and by
/// `evctl sync`) and whether retrying can help.
package struct SyncError: Error, Sendable, Equatable, CustomStringConvertible {
    package enum Reason: String, Sendable {
        /// The peer could not be reached: no socket, connection refused, ssh could not connect.
        case unreachable
        /// The peer sent nothing for `sync_timeout_s`.
        case timeout
        /// The peer closed the connection in the middle of the session.
        case closed
        /// The peer answered with something that is not the sync protocol (a captive
        /// portal's HTML page, a shell's greeting, random bytes).
        case notEvstore = "not_evstore"
        /// The peer speaks another version of the protocol.
        case protocolMismatch = "protocol_mismatch"
        /// The peer broke the protocol: a frame out of place, a message that does not decode.
        case protocolError = "protocol"
        /// A batch whose checksum, compression or records are wrong; nothing of it was kept.
        case corruptBatch = "corrupt_batch"
        /// ssh refused us: a key or a host key is wrong.
        case authentication = "auth"
        /// The remote side has no `evctl`, or its daemon is not running.
        case remoteCommand = "remote_command"
        /// The peer is this very node.
        case sameNode = "same_node"
        /// The peer reported a failure of its own (its message says which).
        case peerFailed = "peer_error"
        /// This node could not store what it received.
        case storage
        /// This node's disk, or its `map_max_bytes`, is full: nothing more can be received
        /// until there is room. What it sent before is with the peer.
        case storageFull = "storage_full"
        /// Not allowed: a peer or URL that is not acceptable.
        case invalidPeer = "invalid_peer"
        /// The peer answers as many sessions as its `max_incoming_sessions` allows already;
        /// the next attempt may get through.
        case busy
        /// The session went past one of its limits: its overall time (`sync_session_max_s`),
        /// or the rounds, bytes or ids of its reconciliation. What was committed stays.
        case sessionLimit = "session_limit"
        /// The peer sent more invalid events in one session than this node keeps as dead
        /// letters (`sync_session_max_dead_letters`); the rest of that batch was refused.
        case tooManyInvalid = "too_many_invalid"
    }

    package var reason: Reason
    package var message: String

    /// The reason in the error frame of a daemon that refuses a session because the
    /// connecting user may not write (its socket's `write_groups`); the initiator reports
    /// it as `auth`.
    package static let forbiddenReason = "forbidden"

    package init(_ reason: Reason, _ message: String) {
        self.reason = reason
        self.message = message
    }

    /// Retrying later cannot help until someone changes something (a key, a version).
    package var isTerminal: Bool {
        switch reason {
        case .protocolMismatch, .authentication, .sameNode, .invalidPeer, .remoteCommand: true
        default: false
        }
    }

    package var description: String { "\(reason.rawValue): \(message)" }

    /// How much a peer sent where something else belonged, for a message that must not
    /// quote it: `12 bytes`.
    package static func size(of text: String) -> String {
        "\(text.utf8.count) byte\(text.utf8.count == 1 ? "" : "s")"
    }

    /// Text a peer sent, quoted for a message: at most `limit` characters, control
    /// characters shown as `·`, so a peer cannot put megabytes or line breaks into the log.
    package static func quote(_ text: String, limit: Int = 80) -> String { "\"\(shown(text, limit: limit))\"" }

    /// As `quote`, without the quotation marks.
    package static func shown(_ text: String, limit: Int) -> String {
        var shown = String(
            text.unicodeScalars.prefix(limit).map { $0.properties.generalCategory == .control ? "·" : Character($0) })
        if !text.unicodeScalars.dropFirst(limit).isEmpty { shown += "…" }
        return shown
    }
}
