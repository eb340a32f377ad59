import Projections

/// A kind of write the one writer group-commits: what it does inside the group's write
/// transaction and what it returns. A new kind is one type conforming to this (and, when
/// it stores events, one function of the store it calls); the writer, the group commit and
/// every caller take it as they are.
///
/// In the manner of a unit of work: `run` sees the transaction through `WriteScope`, is all
/// or nothing (a throw leaves the transaction as it was before it), and its output reaches
/// the caller only once the whole group has committed.
public protocol WriteJob: Sendable {
    associatedtype Output: Sendable
    /// How many events or records it writes at most: the writer bounds a group by their sum.
    var weight: Int { get }
    /// Its work, in the group's transaction.
    func run(in scope: inout WriteScope) throws -> Output
    /// What its output adds to the store's write counters (`status`'s `appends`).
    func counts(_ output: Output) -> WriteCounts
}

extension WriteJob {
    public func counts(_ output: Output) -> WriteCounts { WriteCounts() }
}

/// Events a commit added: for `status`'s counters.
public struct WriteCounts: Sendable, Equatable {
    /// Events appended by clients, and the append requests that did.
    public var appended = 0
    public var appendRequests = 0
    /// Events received from peers, imported or retried from the dead letters, and stored.
    public var received = 0

    public init(appended: Int = 0, appendRequests: Int = 0, received: Int = 0) {
        self.appended = appended
        self.appendRequests = appendRequests
        self.received = received
    }
}

/// What a job sees of the write in progress: the transaction, the events stored so far in
/// it (their seqs, the projections they changed) and the writer's clock and compressor.
public struct WriteScope: ~Copyable {
    let log: EventLog
    var batch: WriteBatch
    var txn: WriteTransaction
    var writer: EventLog.Writer
}

/// What became of one job of a commit: its output and what it adds to the counters.
public struct Committed: Sendable {
    public var output: any Sendable
    public var counts: WriteCounts
}

/// What one commit of the writer did.
public struct CommitResult: Sendable {
    /// One per job, in order.
    public var outcomes: [Result<Committed, EventStoreError>]
    /// The events the commit stored, with their seqs, in seq order (empty unless asked for).
    public var stored: [CommittedEvent]
}

/// What a commit keeps of each event it stored, for its watchers: which entity it is of
/// (who may want it) and what its notification is made from (the stored payload, with the
/// id and seq put in). Not the event itself: a copy of each event of a bulk load, made to
/// be published, cost the writer more than publishing it.
public struct CommittedEvent: Sendable {
    public var seq: UInt64
    public var id: ULID
    public var entity: EntityKey
    /// Whether the event has an idempotency key (its payload has a `key` member).
    public var hasKey: Bool
    /// The event's canonical JSON without its id, as stored.
    public var payload: [UInt8]
    /// Where the id goes in the payload, when the writer encoded it (an event made here);
    /// nil when it came encoded (replicated, imported).
    public var idPosition: Int?

    public init(seq: UInt64, id: ULID, entity: EntityKey, hasKey: Bool, payload: [UInt8], idPosition: Int? = nil) {
        self.seq = seq
        self.id = id
        self.entity = entity
        self.hasKey = hasKey
        self.payload = payload
        self.idPosition = idPosition
    }
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

extension EventLog {
    /// Runs several independent jobs in ONE write transaction and one commit (group
    /// commit): appends, replicated batches, imports, peer records and consumers'
    /// acknowledgements alike. Each job stays all or nothing on its own — one that fails is
    /// rolled back (a nested transaction) and reported, and the others are written.
    ///
    /// - Parameter keepStored: whether to return the events stored, for publishing them to
    ///   watchers from memory.
    /// - Throws: only what fails them all: storage full, an unusable store.
    public func commit(_ jobs: [any WriteJob], keepStored: Bool = false) throws(EventStoreError) -> CommitResult {
        guard !jobs.isEmpty else { return CommitResult(outcomes: [], stored: []) }
        // Jobs almost always succeed: first all of them in the one transaction, without a
        // nested transaction each (LMDB copies into a child every page its parent has
        // dirtied, and merges them back at its commit). When one fails, nothing of that
        // attempt is kept, and the jobs run again each in a nested transaction.
        var failed: EventStoreError?
        do {
            return try write { batch, txn, writer in
                failed = nil
                if keepStored { batch.stored = [] }
                var outcomes: [Result<Committed, EventStoreError>] = []
                outcomes.reserveCapacity(jobs.count)
                for job in jobs {
                    do {
                        outcomes.append(.success(try run(job, batch: &batch, txn: &txn, writer: &writer)))
                    } catch let error as EventStoreError {
                        failed = error
                        throw error
                    }
                }
                try batch.finish(txn: &txn)
                return CommitResult(outcomes: outcomes, stored: batch.stored ?? [])
            }
        } catch {
            guard let failed else { throw error }
            // Alone, it is the only one to report: nothing else needs writing again.
            if jobs.count == 1 { return CommitResult(outcomes: [.failure(failed)], stored: []) }
        }
        return try write { batch, txn, writer in
            if keepStored { batch.stored = [] }
            var outcomes: [Result<Committed, EventStoreError>] = []
            outcomes.reserveCapacity(jobs.count)
            for job in jobs {
                let before = batch
                do {
                    let outcome = try txn.nested { child in
                        try run(job, batch: &batch, txn: &child, writer: &writer)
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

    /// Runs one job in a transaction of its own, as the writer does: for tools, tests and
    /// the benchmark, which so write by the daemon's path.
    public func perform<Job: WriteJob>(_ job: Job) throws(EventStoreError) -> Job.Output {
        guard let outcome = try commit([job]).outcomes.first else { throw EventLog.noOutcome }
        let committed = try outcome.get()
        guard let output = committed.output as? Job.Output else { throw EventLog.noOutcome }
        return output
    }

    static let noOutcome = EventStoreError(.corrupt, "a write job's outcome was missing or of another kind")

    /// One job in the write in progress.
    private func run<Job: WriteJob>(
        _ job: Job, batch: inout WriteBatch, txn: inout WriteTransaction, writer: inout EventLog.Writer
    ) throws -> Committed {
        // The batch moves into the scope and back: a copy would share its arrays with the
        // caller's, and the job's first change to each would copy all of it (every entity an
        // earlier job of this commit touched, and then the arrays of each it touches again).
        var scope = WriteScope(log: self, batch: consume batch, txn: txn, writer: writer)
        let result = Result { () throws -> Job.Output in try job.run(in: &scope) }
        batch = scope.batch
        txn = scope.txn
        writer = scope.writer
        let output = try result.get()
        return Committed(output: output, counts: job.counts(output))
    }
}
