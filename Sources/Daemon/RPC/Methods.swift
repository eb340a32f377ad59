import EventStore
import FoundationEssentials
import Lifecycle
import Projections
import Replication
import Server
import Wire
import Writer

/// The socket API's methods that answer at once (reads and maintenance); `append` and
/// `watch` go through the connection, which owns their ordering.
package struct Methods: Sendable {
    /// Every method's name, from the table.
    static var names: [String] { MethodTable.names }

    /// The most events one `import` request may carry (`evctl import` sends 1000).
    static let maxImportEvents = 10_000

    let log: EventLog
    let node: NodeInfo
    let startedAt: Date
    /// The writer's counters, for `status`.
    let writer: Writer
    let sync: SyncService
    /// `backup_dir`: when set, backups are written only under it.
    var backupDirectory: String? = nil
    /// `max_page_bytes`: a page of `log` or `dead_letters` ends early, with `next`, once its
    /// events reach this many bytes, so one request cannot make the daemon build a huge answer.
    var maxPageBytes = Configuration.defaultMaxPageBytes
    /// `max_consumers`: the durable consumers the store keeps.
    var maxConsumers = Configuration.defaultMaxConsumers
    /// The blobs (nil only in tests that make no blob store).
    var blobs: BlobStore? = nil
    /// Blob retention, which `blob.gc` runs now.
    var retention: BlobRetentionService? = nil

    package struct NodeInfo: Sendable {
        var name: String?
        var dataDirectory: String

        package init(name: String?, dataDirectory: String) {
            self.name = name
            self.dataDirectory = dataDirectory
        }
    }

    /// Runs `method` for a client with access `level` and returns its `result` as JSON.
    /// The connection has checked `level` against the method; `level` further decides
    /// which peer URLs the client may give.
    /// `caller` is the client's connection, which owns what it begins (a blob upload) until
    /// it ends, and holds the descriptors it passed.
    package func call(
        _ request: Request, level: AccessLevel = .full, caller: Caller = Caller(connection: -1)
    ) throws(RPCError) -> [UInt8] {
        do {
            switch MethodTable[request.method]?.handler {
            case .methods(let handler): return try handler(self, request, level)
            case .owned(let handler): return try handler(self, request, caller)
            case .connection, nil: throw RPCError.methodNotFound(request.method, methods: Methods.names)
            }
        } catch let error as RPCError {
            throw error
        } catch let error as EventStoreError {
            throw RPCError(error)
        } catch {
            throw RPCError(code: RPCError.internalErrorCode, message: "\(error)", reason: "internal")
        }
    }

    func get(_ request: Request) throws -> [UInt8] {
        let params = try Params(request)
        guard let entity = try params.entity("entity") else { throw RPCError.invalidParams("get takes \"entity\"") }
        if try params.bool("sync") == true { return try getWithSync(entity) }
        guard let state = try log.canonicalState(of: entity) else {
            throw RPCError.application(.notFound, "no event of \(entity) is held on this node")
        }
        return withBlobStates(state)
    }

    /// The largest projection record a `get` answered on the event loop reads (a job's is
    /// about 1 KiB): a larger entity's `get` goes to a request thread, so no read of one
    /// holds the loop and its other connections.
    static let maxLoopRecordBytes = 16 << 10

    /// `get`, when it is cheap: without `sync`, of an entity whose record is small. Nil when
    /// it is not (a request thread answers it).
    func getOnLoop(_ request: Request) -> Result<[UInt8], RPCError>? {
        do {
            let params = try Params(request)
            guard try params.bool("sync") != true else { return nil }
            guard let entity = try params.entity("entity") else { throw RPCError.invalidParams("get takes \"entity\"") }
            switch try log.canonicalState(of: entity, maxRecordBytes: Methods.maxLoopRecordBytes) {
            case .tooLarge: return nil
            case .notFound: throw RPCError.application(.notFound, "no event of \(entity) is held on this node")
            case .state(let state): return .success(withBlobStates(state))
            }
        } catch let error as RPCError {
            return .failure(error)
        } catch let error as EventStoreError {
            return .failure(RPCError(error))
        } catch {
            return nil
        }
    }

    func list(_ request: Request) throws -> [UInt8] {
        let params = try Params(request)
        let type = try params.type("type")
        let status = try params.string("status")
        let includeDeleted = try params.bool("include_deleted") ?? false
        let after = try params.entity("after")
        let limit = try params.int("limit", in: 1...10_000) ?? 100
        let (entities, next) =
            if let peer = try params.string("pending_for") {
                try entitiesPending(
                    for: peer, type: type, status: status, includeDeleted: includeDeleted, after: after, limit: limit)
            } else {
                try log.entities(type: type, status: status, includeDeleted: includeDeleted, after: after, limit: limit)
            }
        return JSONWriter.page("entities", entities, next: next?.description, capacity: 64 + entities.count * 96) {
            out, summary in
            out.beginObject()
            out.member("entity", summary.entity.description)
            out.member("version", summary.version?.description)
            out.member("rev", Int(clamping: summary.rev))
            out.member("status", summary.status)
            out.member("deleted", summary.deleted)
            out.endObject()
        }
    }

    /// `log`: the events this node stored, in seq order after `after` (a seq; 0 or absent:
    /// from the start) or after what the durable consumer `consumer` acknowledged, filtered
    /// by entity, origin and type; `next` is where the next page starts (null: the page
    /// reached `head`, the seq the page was read at).
    ///
    /// With `order: "id"` (what `evctl export` asks for: an import needs each origin's events
    /// in id order), the events come in id order instead, without `seq`, `after` and `next`
    /// being event ids, as 0.4 gave them.
    func logPage(_ request: Request) throws -> [UInt8] {
        let params = try Params(request)
        switch try params.string("order") ?? "seq" {
        case "seq": break
        case "id":
            if try params.string("consumer") != nil {
                throw RPCError.invalidParams("\"consumer\" goes with the seq order of log, not with \"order\": \"id\"")
            }
            return try logPageInIDOrder(params)
        case let order:
            throw RPCError.invalidParams("\"order\" is \"seq\" (the default) or \"id\", not \"\(order.prefix(40))\"")
        }
        let after =
            try Methods.resumePoint(after: params.seq("after"), consumer: params.string("consumer"), log: log) ?? 0
        let limit = try params.int("limit", in: 1...10_000) ?? 100
        let filter = FeedFilter(
            entity: try params.entity("entity"), origin: try params.id("origin"), type: try params.type("type"))
        let page = try log.storedFeed(after: after, limit: limit, filter: filter, maxBytes: maxPageBytes)
        var out = JSONWriter()
        out.bytes.reserveCapacity(64 + page.events.count * 256)
        out.beginObject()
        out.key("events")
        out.beginArray()
        for item in page.events {
            try out.raw { bytes throws(EventStoreError) in try EventJSON.stored(item, into: &bytes) }
        }
        out.endArray()
        out.key("next")
        if let next = page.next { out.int(Int(clamping: next)) } else { out.null() }
        out.member("head", Int(clamping: page.head))
        out.endObject()
        return out.bytes
    }

    /// `log` in id order: the events after the event id `after`, by entity or origin.
    func logPageInIDOrder(_ params: Params) throws -> [UInt8] {
        let after = try params.id("after")
        let limit = try params.int("limit", in: 1...10_000) ?? 100
        if try params.type("type") != nil {
            throw RPCError.invalidParams("\"type\" goes with the seq order of log, not with \"order\": \"id\"")
        }
        let entity = try params.entity("entity")
        let origin = try params.id("origin")
        let page: (events: [Event], next: ULID?)
        switch (entity, origin) {
        case (let entity?, nil):
            page = try log.events(ofEntity: entity, after: after, limit: limit, maxBytes: maxPageBytes)
        case (nil, let origin?):
            page = try log.events(ofOrigin: origin, after: after, limit: limit, maxBytes: maxPageBytes)
        case (nil, nil): page = try log.events(after: after, limit: limit, maxBytes: maxPageBytes)
        case (.some, .some):
            throw RPCError.invalidParams("with \"order\": \"id\", give \"entity\" or \"origin\", not both")
        }
        return JSONWriter.page("events", page.events, next: page.next?.description, capacity: page.events.count * 256) {
            out, event in out.raw(EventCodec.encodeStored(event, includeID: true))
        }
    }

    func status(_ request: Request) throws -> [UInt8] {
        _ = try Params(request)
        let statistics = try log.statistics()
        var out = JSONWriter()
        out.beginObject()
        out.key("node")
        out.beginObject()
        out.member("id", log.nodeID.description)
        out.member("name", node.name)
        out.endObject()
        out.member("events", statistics.events)
        out.member("entities", statistics.entities)
        out.member("bytes", statistics.bytesUsed)
        out.member("digest", statistics.digest.description)
        out.member("seq", Int(clamping: statistics.seq))
        if let blobs {
            let held = blobs.statistics()
            out.key("blobs")
            out.beginObject()
            out.member("count", held.blobs)
            out.member("bytes", Int(clamping: held.bytes))
            out.member("uploads", held.uploads)
            out.member("pending", try log.pendingBlobEntries())
            out.member("receiving", held.receiving)
            out.member("partial_bytes", Int(clamping: held.partialBytes))
            out.endObject()
        }
        out.key("consumers")
        Methods.write(try log.consumers(), head: statistics.seq, to: &out)
        out.key("clock")
        out.beginObject()
        out.member("max_skew_ms", Int(clamping: log.maxClockSkewMilliseconds))
        out.key("skewed_origins")
        out.beginObject()
        for (origin, skew) in log.skewedOrigins(idLeads: statistics.skewedOrigins).sorted(by: { $0.key < $1.key }) {
            out.key(origin.description)
            out.int(Int(clamping: skew))
        }
        out.endObject()
        out.key("offsets")
        out.beginObject()
        for (node, offset) in log.measuredClockOffsets.sorted(by: { $0.key < $1.key }) {
            out.key(node.description)
            out.int(Int(clamping: offset))
        }
        out.endObject()
        out.endObject()
        out.key("needs_attention")
        out.beginObject()
        out.member("conflicts", statistics.conflicts)
        out.member("dead_letters", statistics.deadLetters)
        out.member("divergent", try DivergenceLedger.records(log).count)
        out.member("rule_violations", try log.ruleViolations().count)
        out.member("rejected_proposals", try log.rejectedOwnProposals().count)
        let peers = sync.status()
        out.member("failing_peers", peers.filter(\.schedule.needsAttention).count)
        out.endObject()
        out.key("health")
        Methods.write(sync.health.reports, to: &out)
        out.key("peers")
        out.beginArray()
        for peer in peers {
            out.beginObject()
            out.member("name", peer.peer.name)
            out.member("url", peer.peer.url)
            out.member("state", peer.schedule.state.rawValue)
            out.member("last_success", peer.schedule.lastSuccess.map { EventLog.timestamp(milliseconds: $0) })
            if let pending = peer.pending {
                out.member("pending", pending)
            } else {
                out.key("pending")
                out.null()
            }
            if let blobs = peer.blobsPending { out.member("blobs_pending", blobs) }
            out.member("failures", peer.schedule.failures)
            out.member("next_attempt", EventLog.timestamp(milliseconds: peer.schedule.nextAttempt))
            out.key("last_error")
            Methods.write(peer.schedule.lastError, to: &out)
            out.member("source", peer.peer.fromConfig ? "config" : "api")
            out.endObject()
        }
        out.endArray()
        out.member("data_dir", node.dataDirectory)
        out.member("map_bytes", statistics.mapSize)
        out.member("dictionary_version", Int(statistics.dictionaryVersion))
        out.member("uptime_s", Int(Date().timeIntervalSince(startedAt)))
        out.member("started_at", Int((startedAt.timeIntervalSince1970 * 1000).rounded(.down)))
        out.member("version", Evstored.version)
        let appends = writer.appends.snapshot()
        out.key("appends")
        out.beginObject()
        out.member("events_total", appends.eventsTotal)
        out.member("requests_total", appends.requestsTotal)
        out.member("per_second", appends.perSecond)
        out.member("received_total", appends.receivedTotal)
        out.endObject()
        let cache = log.blockCacheStatistics
        out.key("block_cache")
        out.beginObject()
        out.member("blocks", cache.blocks)
        out.member("bytes", cache.bytes)
        out.member("max_bytes", cache.maxBytes)
        out.member("hits", cache.hits)
        out.member("misses", cache.misses)
        out.endObject()
        out.key("writer")
        out.beginObject()
        out.member("commits", writer.commits.load(ordering: .relaxed))
        out.member("requests", writer.requests.load(ordering: .relaxed))
        out.member("events", writer.eventsWritten.load(ordering: .relaxed))
        out.endObject()
        out.endObject()
        return out.bytes
    }

    /// `{"ok":bool,"problems":[{"problem","message","since","failures"}]}`: the storage
    /// writes that failed with no client to tell (see `Health`).
    static func write(_ reports: [Health.Report], to out: inout JSONWriter) {
        out.beginObject()
        out.member("ok", reports.isEmpty)
        out.key("problems")
        out.beginArray()
        for report in reports {
            out.beginObject()
            out.member("problem", report.problem.rawValue)
            out.member("message", report.message)
            out.member("since", EventLog.timestamp(milliseconds: report.since))
            out.member("failures", report.count)
            out.endObject()
        }
        out.endArray()
        out.endObject()
    }

    func types(_ request: Request) throws -> [UInt8] {
        _ = try Params(request)
        var out = JSONWriter()
        out.beginObject()
        out.key("types")
        out.beginArray()
        for type in try log.types() { out.string(type) }
        out.endArray()
        // The types file's rules, by type (a type may have rules before the store holds any).
        let rules = log.typeRules
        out.key("rules")
        out.beginObject()
        for type in rules.sources.keys.sorted() {
            out.key(type)
            out.raw(rules.sources[type]!)
        }
        out.endObject()
        out.endObject()
        return out.bytes
    }

    func conflicts(_ request: Request) throws -> [UInt8] {
        let params = try Params(request)
        let (entities, next) = try log.conflicts(
            type: try params.type("type"), after: try params.entity("after"),
            limit: try params.int("limit", in: 1...10_000) ?? 100)
        return JSONWriter.page("entities", entities, next: next?.description) { out, summary in
            Methods.write(summary, to: &out)
        }
    }

    func deadLetters(_ request: Request) throws -> [UInt8] {
        let params = try Params(request)
        let limit = try params.int("limit", in: 1...10_000) ?? 100
        let (letters, more) = try log.deadLetterPage(
            after: try params.id("after"), limit: limit, maxBytes: maxPageBytes)
        let next = more ? letters.last?.key.description : nil
        return JSONWriter.page("dead_letters", letters, next: next) { out, letter in Methods.write(letter, to: &out) }
    }

    func rebuild(_ request: Request) throws -> [UInt8] {
        let params = try Params(request)
        let report = try writer.rebuild(verify: try params.bool("verify") ?? false)
        var out = JSONWriter()
        out.beginObject()
        out.member("entities", report.entities)
        out.member("events", report.events)
        out.key("mismatched")
        out.beginArray()
        for entity in report.mismatched { out.string(entity.description) }
        out.endArray()
        out.member("digest_mismatch", report.digestMismatch)
        out.member("unsequenced", report.unsequenced)
        out.endObject()
        return out.bytes
    }

    /// `backup`: a consistent copy of the store in a new (or empty) directory of the
    /// daemon's own, its `data.mdb` mode 0600 from creation (see `BackupDestination`).
    func backup(_ request: Request) throws -> [UInt8] {
        let params = try Params(request)
        guard let path = try params.string("path") else {
            throw RPCError.invalidParams("backup takes \"path\": an absolute directory path the daemon can write")
        }
        var destination = try BackupDestination(path: path, confinement: backupDirectory)
        let size = try destination.write(from: log)
        var out = JSONWriter()
        out.beginObject()
        out.member("path", path)
        out.member("bytes", size)
        out.endObject()
        return out.bytes
    }

    /// `import`: stored events (as `log` returns them), taken as replication takes them, all
    /// or nothing; `dry_run` checks them and writes nothing.
    func importEvents(_ request: Request) throws -> [UInt8] {
        let params = try Params(request)
        guard let events = try params.array("events") else {
            throw RPCError.invalidParams("import takes \"events\": an array of stored events, as `log` returns them")
        }
        guard events.count <= Methods.maxImportEvents else {
            throw RPCError.invalidParams(
                "\"events\" holds \(events.count) events; import takes at most \(Methods.maxImportEvents) per request: "
                    + "split them")
        }
        // A dry run only reads, on this thread.
        let result =
            try params.bool("dry_run") == true || events.isEmpty
            ? try log.importEvents(events, dryRun: true) : try writer.perform(ImportJob(events), from: -2)
        var out = JSONWriter()
        out.beginObject()
        out.member("imported", result.imported.count)
        out.member("skipped", result.skipped)
        out.endObject()
        return out.bytes
    }
}

extension Methods {
    /// The methods of a store with the other settings at their defaults.
    package static func withDefaults(
        log: EventLog, node: NodeInfo, startedAt: Date, writer: Writer, sync: SyncService
    ) -> Methods {
        Methods(log: log, node: node, startedAt: startedAt, writer: writer, sync: sync)
    }
}
