import EventStore
import FoundationEssentials
import Projections
import Synchronization

/// An event this node holds with other content than a peer holds under the same id: one of
/// the two is a forgery (a hostile node handed it on under a real event's id) or damaged.
/// Range fingerprints cover ids only, so two such nodes would never notice; the `verify`
/// capability of sync protocol 2 compares content hashes of a window of the events both
/// hold each session, and each side keeps what it finds as a record in the peers table,
/// listed by `attention` and counted in `status`, until `divergent.dismiss` removes it.
///
/// JSON of a record (key `divergent/<id>/<peer node>`): `{"id":…,"origin":…,"peer":…,
/// "peer_node":…,"here":hash,"there":hash,"detected_at":ms}`.
package struct DivergentEvent: Equatable, Sendable {
    package var id: ULID
    package var origin: ULID
    /// The peer, as named in dead letters and logs, and its node id.
    package var peer: String
    package var peerNode: ULID?
    /// The content hashes of the event here and on the peer (`EventLog.contentHash`).
    package var here: String
    package var there: String
    package var detectedAt: UInt64

    package static let keyPrefix = "divergent/"
    package var key: String { "\(DivergentEvent.keyPrefix)\(id)/\(peerNode?.description ?? "-")" }

    /// Records kept at most: a peer that claims every event differs fills them, and no
    /// more; the daemon logs what it could not keep.
    package static let maxRecords = 256

    package func encoded() -> [UInt8] {
        var record: [String: Any] = [
            "id": id.description, "origin": origin.description, "peer": peer, "here": here, "there": there,
            "detected_at": Int(clamping: detectedAt),
        ]
        if let peerNode { record["peer_node"] = peerNode.description }
        return JSONTree.encode(record) ?? []
    }

    package init(id: ULID, origin: ULID, peer: String, peerNode: ULID?, here: String, there: String, detectedAt: UInt64)
    {
        self.id = id
        self.origin = origin
        self.peer = peer
        self.peerNode = peerNode
        self.here = here
        self.there = there
        self.detectedAt = detectedAt
    }

    /// nil for a record that does not decode.
    package init?(decoding bytes: [UInt8]) {
        guard let object = try? JSONTree.parse(bytes) as? [String: Any],
            let id = (object["id"] as? String).flatMap(ULID.init),
            let origin = (object["origin"] as? String).flatMap(ULID.init),
            let here = object["here"] as? String, let there = object["there"] as? String
        else { return nil }
        self.init(
            id: id, origin: origin, peer: object["peer"] as? String ?? "",
            peerNode: (object["peer_node"] as? String).flatMap(ULID.init),
            here: here, there: there, detectedAt: UInt64(max(0, object["detected_at"] as? Int ?? 0)))
    }

    /// Whether `text` is a content hash as the wire carries it: 32 lowercase hex digits.
    package static func isHash(_ text: String) -> Bool {
        text.utf8.count == 32 && text.utf8.allSatisfy { (0x30...0x39).contains($0) || (0x61...0x66).contains($0) }
    }
}

/// What this node verifies with each peer and what it found: the window of events the next
/// session with a peer checks, per origin, and the divergent events recorded.
package final class DivergenceLedger: Sendable {
    /// Per peer node, per origin, the last id the previous window checked; the next window
    /// starts after it and wraps to the origin's first id at the end of what both hold.
    /// In memory: after a restart the windows start from the first ids again.
    private let cursors = Mutex<[ULID: Window]>([:])
    /// Per peer node, the windows that peer found different at the last session: the next
    /// session checks their events one by one. In memory, at most `Messages.Done.maxRecheck`.
    private let rechecks = Mutex<[ULID: [Recheck]]>([:])
    /// Peers whose windows are kept at most (more, and all start again).
    package static let maxPeers = 1024

    /// A range of one origin's ids, `(after, through]`.
    package struct Recheck: Sendable, Hashable {
        package var origin: ULID
        package var after: ULID?
        package var through: ULID
    }

    /// The windows to check event by event with `peer` this session; taken, so each is
    /// checked once.
    package func takeRechecks(for peer: ULID) -> [Recheck] {
        rechecks.withLock { $0.removeValue(forKey: peer) ?? [] }
    }

    /// Keeps the windows `peer` found different, for the next session with it.
    package func recheck(_ windows: [Recheck], with peer: ULID) {
        guard !windows.isEmpty else { return }
        rechecks.withLock { rechecks in
            if rechecks[peer] == nil, rechecks.count >= DivergenceLedger.maxPeers { rechecks.removeAll() }
            rechecks[peer] = Array(((rechecks[peer] ?? []) + windows).suffix(Messages.Done.maxRecheck))
        }
    }

    /// The content hashes of `origin`'s events in `(after, through]` that `log` holds, the
    /// first `limit` of them at most.
    package static func hashes(
        of origin: ULID, after: ULID?, through: ULID, limit: Int, log: EventLog
    ) throws(EventStoreError) -> [(id: ULID, hash: String)] {
        let ids = try log.eventIDs(ofOrigin: origin, after: after, limit: limit)
        return try log.contentHashes(ids: ids.filter { $0 <= through })
    }

    /// The digest of a window: the first 128 bits of the SHA-256 of each event's id (16
    /// bytes) and content hash (its 32 hex digits), in id order.
    package static func digest(_ hashes: [(id: ULID, hash: String)]) -> String {
        var bytes: [UInt8] = []
        bytes.reserveCapacity(hashes.count * 48)
        for (id, hash) in hashes.sorted(by: { $0.id < $1.id }) {
            bytes += id.bytes
            bytes += Array(hash.utf8)
        }
        return SHA256.hexString(Array(SHA256.digest(bytes).prefix(16)))
    }

    package struct Window: Sendable {
        package var after: [ULID: ULID] = [:]
        /// The origin, in order, the next window begins with, so that with more origins than
        /// the budget covers each gets its turn.
        package var firstOrigin = 0
    }

    /// The events to check with `peer` this session: per origin both vectors hold, up to
    /// about `budget` ids in all of the ids both cover (through the smaller vector entry),
    /// after the previous window's, in at most `maxWindows` origins (the rest take their
    /// turn next time). Returns them and the window to keep once the peer has answered.
    package func window(
        for peer: ULID, mine: [ULID: ULID], theirs: [ULID: ULID], budget: Int,
        maxWindows: Int = Messages.Hello.maxWindows, log: EventLog
    ) throws(EventStoreError) -> (ids: [(origin: ULID, after: ULID?, ids: [ULID])], next: Window) {
        let origins = mine.keys.filter { theirs[$0] != nil }.sorted()
        var window = cursors.withLock { $0[peer] } ?? Window()
        guard budget > 0, !origins.isEmpty else { return ([], window) }
        let share = max(16, budget / origins.count)
        var out: [(origin: ULID, after: ULID?, ids: [ULID])] = []
        var total = 0
        var index = window.firstOrigin % origins.count
        for _ in 0..<origins.count where total < budget && out.count < maxWindows {
            let origin = origins[index]
            index = (index + 1) % origins.count
            let through = min(mine[origin]!, theirs[origin]!)
            let after = window.after[origin]
            let limit = min(share, budget - total)
            var ids = try log.eventIDs(ofOrigin: origin, after: after, limit: limit)
            let reachedEnd = ids.count < limit || ids.last.map { $0 >= through } == true
            ids = ids.filter { $0 <= through }
            if reachedEnd {
                window.after[origin] = nil
            } else if let last = ids.last {
                window.after[origin] = last
            }
            total += ids.count
            if !ids.isEmpty { out.append((origin, after, ids)) }
        }
        window.firstOrigin = index
        return (out, window)
    }

    /// Keeps the window the session with `peer` checked, for the next one.
    package func advance(_ peer: ULID, to window: Window) {
        cursors.withLock { cursors in
            if cursors[peer] == nil, cursors.count >= DivergenceLedger.maxPeers { cursors.removeAll() }
            cursors[peer] = window
        }
    }

    /// Every divergent event recorded, in key order.
    package static func records(_ log: EventLog) throws(EventStoreError) -> [DivergentEvent] {
        try log.peerEntries().filter { $0.key.hasPrefix(DivergentEvent.keyPrefix) }.compactMap {
            DivergentEvent(decoding: $0.value)
        }
    }

    /// Stores the records of `found` not stored already, while fewer than `maxRecords` are;
    /// returns how many were new and how many could not be kept.
    package static func record(_ found: [DivergentEvent], node: SyncNode) throws(EventStoreError) -> (
        new: Int, unkept: Int
    ) {
        guard !found.isEmpty else { return (0, 0) }
        let held = Set(try node.log.peerEntries().map(\.key).filter { $0.hasPrefix(DivergentEvent.keyPrefix) })
        var entries: [PeerEntry] = []
        var unkept = 0
        for record in found where !held.contains(record.key) && !entries.contains(where: { $0.key == record.key }) {
            if held.count + entries.count >= DivergentEvent.maxRecords {
                unkept += 1
            } else {
                entries.append(PeerEntry(key: record.key, value: record.encoded()))
            }
        }
        if !entries.isEmpty { try node.storePeerEntries(entries) }
        return (entries.count, unkept)
    }
}
