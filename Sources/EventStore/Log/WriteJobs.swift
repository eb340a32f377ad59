import Projections

// The kinds of write: each a `WriteJob` whose `run` calls the store's function for it.

/// A client batch (the `append` method): all or nothing. As `EventLog.append(_:)`.
public struct AppendJob: WriteJob {
    public var inputs: [InputEvent]
    public init(_ inputs: [InputEvent]) { self.inputs = inputs }
    public var weight: Int { inputs.count }
    public func run(in scope: inout WriteScope) throws -> AppendResult {
        let (ids, written) = try scope.batch.append(inputs, txn: &scope.txn, writer: &scope.writer)
        return scope.batch.result(ids: ids, written: written)
    }
    public func counts(_ output: AppendResult) -> WriteCounts {
        WriteCounts(appended: output.appended, appendRequests: 1)
    }
}

/// Events replicated from a peer. As `EventLog.ingest(_:from:maxDeadLetters:)`: the dead
/// letters it may add are what its allowance has left when it runs, and those it adds are
/// taken from it (a session's batches in the writer share one).
public struct IngestJob: WriteJob {
    public var events: [ReplicatedEvent]
    public var peer: IngestPeer
    public var allowance: DeadLetterAllowance
    public init(_ events: [ReplicatedEvent], from peer: IngestPeer, allowance: DeadLetterAllowance) {
        self.events = events
        self.peer = peer
        self.allowance = allowance
    }
    public init(_ events: [ReplicatedEvent], from peer: IngestPeer, maxDeadLetters: Int = .max) {
        self.init(events, from: peer, allowance: DeadLetterAllowance(maxDeadLetters))
    }
    public var weight: Int { events.count }
    public func run(in scope: inout WriteScope) throws -> IngestResult {
        let result = try scope.log.ingest(
            events, from: peer, maxDeadLetters: allowance.remaining, batch: &scope.batch, txn: &scope.txn,
            writer: &scope.writer)
        allowance.spend(result.deadLettered.count)
        return result
    }
    public func counts(_ output: IngestResult) -> WriteCounts { WriteCounts(received: output.ingested.count) }
}

/// Stored events to take as they are (the `import` method), all or nothing. As
/// `EventLog.importEvents(_:dryRun:)` without a dry run.
public struct ImportJob: WriteJob {
    public var events: [[UInt8]]
    public init(_ events: [[UInt8]]) { self.events = events }
    public var weight: Int { events.count }
    public func run(in scope: inout WriteScope) throws -> ImportResult {
        try scope.log.importEvents(events, batch: &scope.batch, txn: &scope.txn, writer: &scope.writer)
    }
    public func counts(_ output: ImportResult) -> WriteCounts { WriteCounts(received: output.imported.count) }
}

/// Entries of the peers table to store (or with nil, delete).
public struct PeerEntriesJob: WriteJob {
    public var entries: [PeerEntry]
    public init(_ entries: [PeerEntry]) { self.entries = entries }
    public var weight: Int { entries.count }
    public func run(in scope: inout WriteScope) throws {
        try scope.log.storePeerEntries(entries.map { ($0.key, $0.value) }, txn: &scope.txn)
    }
}

/// Dead letters to validate again and store when they pass (`dead_letters.retry`).
public struct RetryDeadLettersJob: WriteJob {
    public var ids: [ULID]
    public init(_ ids: [ULID]) { self.ids = ids }
    public var weight: Int { ids.count }
    public func run(in scope: inout WriteScope) throws -> DeadLetterRetry {
        try scope.log.retryDeadLetters(ids, batch: &scope.batch, txn: &scope.txn, writer: &scope.writer)
    }
    public func counts(_ output: DeadLetterRetry) -> WriteCounts { WriteCounts(received: output.stored.count) }
}

/// Dead letters to remove (`dead_letters.drop`); how many were.
public struct DropDeadLettersJob: WriteJob {
    public var ids: [ULID]
    public init(_ ids: [ULID]) { self.ids = ids }
    public var weight: Int { ids.count }
    public func run(in scope: inout WriteScope) throws -> Int {
        try scope.log.dropDeadLetters(ids, txn: &scope.txn)
    }
}

/// A consumer's acknowledgement (`consumers.ack`), creating it when new. As
/// `EventLog.ackConsumer(_:seq:maxConsumers:)`.
public struct AckConsumerJob: WriteJob {
    public var name: String
    public var seq: UInt64
    public var maxConsumers: Int
    public init(_ name: String, seq: UInt64, maxConsumers: Int = .max) {
        self.name = name
        self.seq = seq
        self.maxConsumers = maxConsumers
    }
    public var weight: Int { 1 }
    public func run(in scope: inout WriteScope) throws -> Consumer {
        try scope.log.ackConsumer(name, seq: seq, maxConsumers: maxConsumers, batch: scope.batch, txn: &scope.txn)
    }
}

/// A consumer to remove (`consumers.remove`); whether there was one.
public struct RemoveConsumerJob: WriteJob {
    public var name: String
    public init(_ name: String) { self.name = name }
    public var weight: Int { 1 }
    public func run(in scope: inout WriteScope) throws -> Bool {
        try scope.log.removeConsumer(name, txn: &scope.txn)
    }
}

/// The proposals held undecided of the types this node is now the authority of (its types
/// file or its name changed, or they arrived before it was): decided as on arrival, at most
/// `limit` a job; `more` says whether another job has some left.
public struct DecidePendingJob: WriteJob {
    public var limit: Int
    public init(limit: Int = 1000) { self.limit = limit }
    public var weight: Int { limit }
    public func run(in scope: inout WriteScope) throws -> (decided: Int, more: Bool) {
        try scope.batch.decidePending(limit: limit, txn: &scope.txn, writer: &scope.writer)
    }
}
