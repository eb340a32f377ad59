import Projections

/// One request to the writer: what a client, a sync session or a person asked to store.
public enum WriteRequest: Sendable {
    /// A client batch (the `append` method).
    case append([InputEvent])
    /// Events replicated from a peer: as `EventLog.ingest(_:from:maxDeadLetters:)`.
    case ingest([ReplicatedEvent], from: IngestPeer, maxDeadLetters: Int)
    /// Stored events to take as they are (the `import` method), all or nothing.
    case importEvents([[UInt8]])
    /// Entries of the peers table to store (or with nil, delete).
    case peerEntries([PeerEntry])
    /// Dead letters to validate again and store when they pass (`dead_letters.retry`).
    case retryDeadLetters([ULID])
    /// Dead letters to remove (`dead_letters.drop`).
    case dropDeadLetters([ULID])
    /// A consumer's acknowledgement (`consumers.ack`), creating it when new: as
    /// `EventLog.ackConsumer(_:seq:maxConsumers:)`.
    case ackConsumer(name: String, seq: UInt64, maxConsumers: Int)
    /// A consumer to remove (`consumers.remove`).
    case removeConsumer(name: String)
}

/// An entry of the peers table: its key and value (nil: delete it).
public struct PeerEntry: Sendable {
    public var key: String
    public var value: [UInt8]?

    public init(key: String, value: [UInt8]?) {
        self.key = key
        self.value = value
    }
}

/// What became of one `WriteRequest`.
public enum WriteOutcome: Sendable, Equatable {
    case appended(AppendResult)
    case ingested(IngestResult)
    case imported(ImportResult)
    case peerEntriesStored
    case deadLettersRetried(DeadLetterRetry)
    case deadLettersDropped(Int)
    case consumerAcked(Consumer)
    /// Whether there was such a consumer.
    case consumerRemoved(Bool)
}

/// What one commit of the writer did.
public struct CommitResult: Sendable {
    /// One per request, in order.
    public var outcomes: [Result<WriteOutcome, EventStoreError>]
    /// The events the commit stored, with their seqs, in seq order (empty unless asked for).
    public var stored: [SequencedEvent]
}

extension EventLog {
    /// Runs several independent requests in ONE write transaction and one commit (group
    /// commit): appends, replicated batches, imports, peer records and consumers' acknowledgements alike. Each request
    /// stays all or nothing on its own — one that fails is rolled back (a nested
    /// transaction) and reported, and the others are written.
    ///
    /// - Parameter keepStored: whether to return the events stored, for publishing them to
    ///   watchers from memory.
    /// - Throws: only what fails them all: storage full, an unusable store.
    public func commit(_ requests: [WriteRequest], keepStored: Bool = false) throws(EventStoreError) -> CommitResult {
        guard !requests.isEmpty else { return CommitResult(outcomes: [], stored: []) }
        // As `append(groups:)`: first all of them in the one transaction without a nested
        // transaction each; when one fails, nothing of that attempt is kept, and the requests
        // are run again each in a nested transaction.
        var requestFailed = false
        do {
            return try write { batch, txn, writer in
                requestFailed = false
                if keepStored { batch.stored = [] }
                var outcomes: [Result<WriteOutcome, EventStoreError>] = []
                outcomes.reserveCapacity(requests.count)
                for request in requests {
                    do {
                        outcomes.append(.success(try run(request, batch: &batch, txn: &txn, writer: &writer)))
                    } catch let error as EventStoreError {
                        requestFailed = true
                        throw error
                    }
                }
                try batch.finish(txn: &txn)
                return CommitResult(outcomes: outcomes, stored: batch.stored ?? [])
            }
        } catch {
            if !requestFailed { throw error }
        }
        return try write { batch, txn, writer in
            if keepStored { batch.stored = [] }
            var outcomes: [Result<WriteOutcome, EventStoreError>] = []
            outcomes.reserveCapacity(requests.count)
            for request in requests {
                let before = batch
                do {
                    let outcome = try txn.nested { child in
                        try run(request, batch: &batch, txn: &child, writer: &writer)
                    }
                    outcomes.append(.success(outcome))
                } catch let error as EventStoreError {
                    batch = before
                    outcomes.append(.failure(error))
                }
            }
            try batch.finish(txn: &txn)
            return CommitResult(outcomes: outcomes, stored: batch.stored ?? [])
        }
    }

    private func run(
        _ request: WriteRequest, batch: inout WriteBatch, txn: inout WriteTransaction, writer: inout EventLog.Writer
    ) throws -> WriteOutcome {
        switch request {
        case .append(let inputs):
            let (ids, written) = try batch.append(inputs, txn: &txn, writer: &writer)
            return .appended(batch.result(ids: ids, written: written))
        case .ingest(let events, let peer, let maxDeadLetters):
            return .ingested(
                try ingest(
                    events, from: peer, maxDeadLetters: maxDeadLetters, batch: &batch, txn: &txn, writer: &writer))
        case .importEvents(let events):
            return .imported(try importEvents(events, batch: &batch, txn: &txn, writer: &writer))
        case .peerEntries(let entries):
            try storePeerEntries(entries.map { ($0.key, $0.value) }, txn: &txn)
            return .peerEntriesStored
        case .retryDeadLetters(let ids):
            return .deadLettersRetried(try retryDeadLetters(ids, batch: &batch, txn: &txn, writer: &writer))
        case .dropDeadLetters(let ids):
            return .deadLettersDropped(try dropDeadLetters(ids, txn: &txn))
        case .ackConsumer(let name, let seq, let maxConsumers):
            return .consumerAcked(try ackConsumer(name, seq: seq, maxConsumers: maxConsumers, batch: batch, txn: &txn))
        case .removeConsumer(let name):
            return .consumerRemoved(try removeConsumer(name, txn: &txn))
        }
    }
}
