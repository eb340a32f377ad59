import EventStore
import FoundationEssentials
import Projections
import Replication
import Wire

/// Sync truth down to the item (`get` with `sync`, `list` with `pending_for`,
/// `peers.show`) and the one view of what needs attention (`attention`).
extension Methods {
    /// What a peer holds, as the store's delivery checks take it.
    static func holdings(_ known: SyncService.Known) -> PeerHoldings {
        PeerHoldings(vector: known.vector, deadLettered: known.deadLettered)
    }

    /// `get` with `sync: true`: the state with `"sync":{"<peer>":"synced"|"pending"|"failed"}`
    /// added as its last member, one entry per configured peer.
    ///
    /// `synced`: the peer's last known vector covers every event of the entity, it
    /// dead-lettered none of them, and it is not known to lack a blob the entity names that
    /// this node holds (one it asked for at its last session and did not keep); `pending`
    /// otherwise; `failed` when the peer dead-lettered one of them, or when pending while
    /// the peer is failing or terminal.
    func getWithSync(_ entity: EntityKey) throws -> [UInt8] {
        let standings = sync.standings()
        guard
            let (state, delivery) = try log.canonicalState(
                of: entity, deliveredTo: standings.map { Methods.holdings($0.known) })
        else {
            throw RPCError.application(.notFound, "no event of \(entity) is held on this node")
        }
        let blobs = Set(BlobReference.hashes(inJSON: state))
        var out = JSONWriter()
        out.beginObject()
        for (standing, delivered) in zip(standings, delivery) {
            out.key(standing.peer.name)
            switch delivered {
            case .held where !blobs.isEmpty && !blobs.isDisjoint(with: sync.blobsLacking(standing.peer.name)):
                out.string(standing.schedule.needsAttention ? "failed" : "pending")
            case .held: out.string("synced")
            case .deadLettered: out.string("failed")
            case .lacking: out.string(standing.schedule.needsAttention ? "failed" : "pending")
            }
        }
        out.endObject()
        guard state.last == UInt8(ascii: "}") else { return state }
        var json = withBlobStates(state)
        json.removeLast()
        json.append(contentsOf: Array(#","sync":"#.utf8))
        json.append(contentsOf: out.bytes)
        json.append(UInt8(ascii: "}"))
        return json
    }

    /// `list` with `pending_for`: the entities that peer lacks an event of (by its last
    /// known vector and its dead letters), paged as `list` pages.
    func entitiesPending(
        for name: String, type: String?, status: String?, includeDeleted: Bool, after: EntityKey?, limit: Int
    ) throws -> (entities: [EntitySummary], next: EntityKey?) {
        guard let standing = sync.standings().first(where: { $0.peer.name == name }) else {
            throw RPCError.application(.notFound, "no peer is named \(name); `evctl peers list` shows them")
        }
        return try log.entitiesLacking(
            Methods.holdings(standing.known), type: type, status: status, includeDeleted: includeDeleted,
            after: after, limit: limit)
    }

    /// `peers.show`: one peer, its schedule, its last known vector, and per origin this
    /// node holds events of, how many of them it lacks.
    func peerShow(_ request: Request) throws -> [UInt8] {
        let params = try Params(request)
        guard let name = try params.string("name") else { throw RPCError.invalidParams("peers.show takes \"name\"") }
        guard let standing = sync.standings().first(where: { $0.peer.name == name }) else {
            throw RPCError.application(.notFound, "no peer is named \(name); `evctl peers list` shows them")
        }
        let known = standing.known
        let schedule = standing.schedule
        let origins = try log.lackingByOrigin(known.vector)
        var out = JSONWriter()
        out.beginObject()
        out.member("name", standing.peer.name)
        out.member("url", standing.peer.url)
        out.member("source", standing.peer.fromConfig ? "config" : "api")
        out.member("node", known.node?.description)
        out.member("state", schedule.state.rawValue)
        out.member("last_success", schedule.lastSuccess.map { EventLog.timestamp(milliseconds: $0) })
        out.member("failures", schedule.failures)
        out.member("since", schedule.failingSince.map { EventLog.timestamp(milliseconds: $0) })
        out.member("next_attempt", EventLog.timestamp(milliseconds: schedule.nextAttempt))
        out.key("last_error")
        Methods.write(schedule.lastError, to: &out)
        out.key("vector")
        out.beginObject()
        for (origin, last) in known.vector.sorted(by: { $0.key < $1.key }) {
            out.key(origin.description)
            out.string(last.description)
        }
        out.endObject()
        out.member("dead_lettered", known.deadLettered.count)
        out.member("pending", origins.values.reduce(0) { $0 + $1.lacking })
        out.key("origins")
        out.beginArray()
        for (origin, counts) in origins.sorted(by: { $0.key < $1.key }) {
            out.beginObject()
            out.member("origin", origin.description)
            out.member("held", counts.held)
            out.member("lacking", counts.lacking)
            out.endObject()
        }
        out.endArray()
        out.endObject()
        return out.bytes
    }

    /// `attention`: everything `status` counts under `needs_attention`, in one answer.
    ///
    /// One cursor pages through the conflicted entities, then the dead letters (`c:ENTITY`
    /// or `d:KEY`, opaque to clients): at most `limit` of them together, and the page ends
    /// early, with `next`, once its items reach `max_page_bytes` (one item at least). The
    /// divergent events and the failing and terminal peers, few, are on every page whole.
    func attention(_ request: Request) throws -> [UInt8] {
        let params = try Params(request)
        let limit = try params.int("limit", in: 1...10_000) ?? 100
        var conflictsAfter: EntityKey?
        var lettersAfter: ULID?
        var inLetters = false
        if let cursor = try params.string("after") {
            let parts = cursor.split(separator: ":", maxSplits: 1, omittingEmptySubsequences: false)
            let rest = parts.count == 2 ? String(parts[1]) : ""
            switch parts.first {
            case "c" where !rest.isEmpty: conflictsAfter = EntityKey(validated: Array(rest.utf8))
            case "d" where rest.isEmpty: inLetters = true
            case "d" where ULID(rest) != nil:
                inLetters = true
                lettersAfter = ULID(rest)
            default:
                throw RPCError.invalidParams(
                    "\"after\" is the \"next\" of a previous attention page, not \"\(cursor.prefix(80))\"")
            }
        }

        var conflicts: [ConflictSummary] = []
        var letters: [DeadLetter] = []
        var next: String?
        var bytes = 0
        if !inLetters {
            let page = try log.conflicts(after: conflictsAfter, limit: limit)
            conflicts = page.entities
            bytes = conflicts.reduce(0) { $0 + $1.entity.bytes.count + $1.fields.reduce(32) { $0 + $1.utf8.count + 3 } }
            if let last = page.next {
                next = "c:\(last)"
            } else if conflicts.count >= limit || bytes >= maxPageBytes {
                // The dead letters start the next page, if there are any.
                if try !log.deadLetterPage(limit: 1, maxBytes: 0).letters.isEmpty { next = "d:" }
            } else {
                inLetters = true
            }
        }
        if inLetters {
            let page = try log.deadLetterPage(
                after: lettersAfter, limit: limit - conflicts.count, maxBytes: maxPageBytes - bytes)
            letters = page.letters
            if page.more, let last = letters.last { next = "d:\(last.key)" }
        }

        var out = JSONWriter()
        out.beginObject()
        out.key("conflicts")
        out.beginArray()
        for summary in conflicts { Methods.write(summary, to: &out) }
        out.endArray()
        out.key("dead_letters")
        out.beginArray()
        for letter in letters { Methods.write(letter, to: &out) }
        out.endArray()
        // Few (at most `DivergentEvent.maxRecords`): on every page whole, as the peers.
        out.key("divergent")
        out.beginArray()
        for record in try DivergenceLedger.records(log) { Methods.write(record, to: &out) }
        out.endArray()
        // Few too (at most `RuleViolation.maxRecords`).
        out.key("rule_violations")
        out.beginArray()
        for violation in try log.ruleViolations() { Methods.write(violation, to: &out) }
        out.endArray()
        // This node's proposals the authority rejected, until it proposes again.
        out.key("rejected_proposals")
        out.beginArray()
        for record in try log.rejectedOwnProposals() {
            out.beginObject()
            out.member("id", record.proposal.id.description)
            out.member("entity", record.entity.description)
            out.member("status", record.proposal.status)
            out.member("reason", record.proposal.reason)
            out.member("decision", record.proposal.decision.description)
            out.endObject()
        }
        out.endArray()
        out.key("peers")
        out.beginArray()
        for standing in sync.standings() where standing.schedule.needsAttention {
            out.beginObject()
            out.member("name", standing.peer.name)
            out.member("url", standing.peer.url)
            out.member("state", standing.schedule.state.rawValue)
            out.member("failures", standing.schedule.failures)
            out.key("last_error")
            Methods.write(standing.schedule.lastError, to: &out)
            out.member("since", standing.schedule.failingSince.map { EventLog.timestamp(milliseconds: $0) })
            out.endObject()
        }
        out.endArray()
        out.key("next")
        out.stringOrNull(next)
        out.endObject()
        return out.bytes
    }

    /// A conflicted entity as `conflicts` and `attention` list it.
    static func write(_ summary: ConflictSummary, to out: inout JSONWriter) {
        out.beginObject()
        out.member("entity", summary.entity.description)
        out.key("fields")
        out.beginArray()
        for field in summary.fields { out.string(field) }
        out.endArray()
        out.member("status", summary.status)
        out.endObject()
    }

    /// A divergent event as `attention` lists it.
    static func write(_ record: DivergentEvent, to out: inout JSONWriter) {
        out.beginObject()
        out.member("id", record.id.description)
        out.member("origin", record.origin.description)
        out.member("peer", record.peer)
        out.member("peer_node", record.peerNode?.description)
        out.member("here", record.here)
        out.member("there", record.there)
        out.member("detected_at", Int(clamping: record.detectedAt))
        out.endObject()
    }

    /// `divergent.dismiss`: removes the records of the divergent events named (every peer's),
    /// once a person has dealt with them; answers how many records went. A later session
    /// that finds the same difference records it again.
    func dismissDivergent(_ request: Request) throws -> [UInt8] {
        try dismiss(request, max: DivergentEvent.maxRecords) { ids in
            try DivergenceLedger.records(self.log).filter { ids.contains($0.id) }.map(\.key)
        }
    }

    /// Removes the peers-table records `keys` finds for the event ids `ids` names (1 to
    /// `max`), answering how many went.
    private func dismiss(_ request: Request, max: Int, keys: (Set<ULID>) throws -> [String]) throws -> [UInt8] {
        let params = try Params(request)
        guard let elements = try params.array("ids"), !elements.isEmpty, elements.count <= max else {
            throw RPCError.invalidParams(
                "\(request.method) takes \"ids\": 1 to \(max) event ids, as `attention` lists them")
        }
        var ids = Set<ULID>()
        for element in elements { ids.insert(try Methods.id(element, being: "an event id")) }
        let gone = try keys(ids)
        if !gone.isEmpty {
            try writer.perform(PeerEntriesJob(gone.map { PeerEntry(key: $0, value: nil) }), from: -3)
        }
        var out = JSONWriter()
        out.beginObject()
        out.member("dismissed", gone.count)
        out.endObject()
        return out.bytes
    }

    /// A replicated event that breaks a local rule, as `attention` lists it.
    static func write(_ violation: RuleViolation, to out: inout JSONWriter) {
        out.beginObject()
        out.member("id", violation.id.description)
        out.member("origin", violation.origin.description)
        out.member("entity", violation.entity.description)
        out.member("rule", violation.rule)
        out.member("peer", violation.peer)
        out.member("detected_at", Int(clamping: violation.detectedAt))
        out.endObject()
    }

    /// `rule_violations.dismiss`: removes the records of the rule violations named, once a
    /// person has dealt with them; answers how many went. The events stay, folded.
    func dismissRuleViolations(_ request: Request) throws -> [UInt8] {
        try dismiss(request, max: RuleViolation.maxRecords) { ids in
            try self.log.ruleViolations().filter { ids.contains($0.id) }.map(\.key)
        }
    }

    /// A dead letter as `dead_letters` and `attention` list it.
    static func write(_ letter: DeadLetter, to out: inout JSONWriter) {
        out.beginObject()
        out.member("key", letter.key.description)
        out.member("id", letter.id)
        out.member("origin", letter.origin)
        out.member("peer", letter.peer)
        out.member("peer_node", letter.peerNode)
        out.member("reason", letter.reason)
        out.member("received_at", Int(clamping: letter.receivedAt))
        out.member("raw", String(decoding: letter.raw, as: UTF8.self))
        out.member("truncated", letter.isCut)
        out.endObject()
    }
}
