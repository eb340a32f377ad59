import Projections

/// What a session learned of the events the peer holds only as dead letters (or dropped):
/// its vector covers them, yet they did not arrive. `pending` counts them as not delivered,
/// and `get` with `sync` shows their entities as failed.
package struct PeerDeadLetters: Sendable, Equatable {
    /// The ids its hello listed; nil when it listed none (a peer of an older release).
    package var listed: Set<ULID>?
    /// Whether its hello's list was cut (it holds more than `Messages.Hello.maxDeadLetterIDs`).
    package var cut = false
    /// The ids its acks named: events of this session that became dead letters there.
    package var acked: Set<ULID> = []

    /// What the peer holds as dead letters after the session, from what was known before:
    /// the hello's list replaces it (a retry or a drop there shows in the next hello), or
    /// adds to it when cut or absent; the acks add to it.
    package func applied(to known: Set<ULID>) -> Set<ULID> {
        var result = known
        if let listed { result = cut ? known.union(listed) : listed }
        return result.union(acked)
    }
}

extension SyncService.Known {
    /// `deadLettered` as the `dead_lettered` member of the `state/<name>` record: ids, sorted.
    package var deadLetteredWire: [String] { deadLettered.sorted().map(\.description) }

    package static func deadLettered(fromWire value: Any?) -> Set<ULID> {
        Set((value as? [String] ?? []).compactMap { ULID($0) })
    }
}
