import Dispatch
import EventStore
import FoundationEssentials
import Logging
import Projections
import Synchronization
import UnixSocket

/// The one writer: a thread that owns every write transaction of the daemon. It takes every
/// request waiting — appends, batches a sync session received, imports, peer records,
/// consumers' acknowledgements — and
/// commits them together, one write transaction and one sync to disk per group (group
/// commit), while each request stays all or nothing; rebuilds and dictionary installs run
/// on it alone. After each commit it publishes the stored events to watchers from memory,
/// in seq order, then hands each requester its result, which the requester encodes.
///
/// The store is bound to this thread (`EventLog.bindWriterThread()`): a write started
/// anywhere else fails, so no path can bypass it.
final class Writer: Sendable {
    /// What a requester asks of the writer.
    enum Work: Sendable {
        /// Group-committed with the other requests waiting.
        case write(WriteRequest)
        /// Folds every entity again (`EventLog.rebuild(verify:)`), alone.
        case rebuild(verify: Bool)
        /// Stores a trained dictionary and makes it current, alone.
        case installDictionary(PreparedDictionary)
    }

    /// What the writer hands back: values, never a reply.
    enum Outcome: Sendable {
        case written(WriteOutcome)
        case rebuilt(RebuildReport)
        case dictionaryInstalled(version: UInt32)
    }

    struct Job: Sendable {
        /// The connection that sent it (sessions and tools use negative numbers).
        let source: Int
        let work: Work
        let completion: @Sendable (Result<Outcome, EventStoreError>) -> Void

        /// How many events it stores at most, to bound a group.
        var weight: Int {
            guard case .write(let request) = work else { return 0 }
            switch request {
            case .append(let events): return events.count
            case .ingest(let events, _, _): return events.count
            case .importEvents(let events): return events.count
            case .peerEntries(let entries): return entries.count
            case .retryDeadLetters(let ids), .dropDeadLetters(let ids): return ids.count
            case .ackConsumer, .removeConsumer: return 1
            }
        }
    }

    let log: EventLog
    let hub: WatchHub
    private let queue = JobQueue()
    private let done = DispatchSemaphore(value: 0)
    /// Counters for status and benchmarks: commits made, requests committed, events written.
    let commits = Atomic<Int>(0)
    let requests = Atomic<Int>(0)
    let eventsWritten = Atomic<Int>(0)
    /// Appends and receipts since the start, and the recent append rate, for status.
    let appends = AppendCounter()
    private let logger: Logger

    init(log: EventLog, hub: WatchHub, logger: Logger) {
        self.log = log
        self.hub = hub
        self.logger = logger
    }

    func start() {
        let started = DispatchSemaphore(value: 0)
        startServiceThread(name: "evstored-writer") { [self] in
            log.bindWriterThread()
            started.signal()
            run()
            done.signal()
        }
        // Bound before anything else may write.
        started.wait()
    }

    /// Queues work; `completion` runs on the writer thread once it is committed or failed.
    /// After `stop()` it fails at once with `unavailable`.
    func submit(
        _ work: Work, from source: Int, completion: @escaping @Sendable (Result<Outcome, EventStoreError>) -> Void
    ) {
        if !queue.push(Job(source: source, work: work, completion: completion)) {
            completion(.failure(EventStoreError(.unavailable, "the daemon is stopping; retry when it is back")))
        }
    }

    /// Queues work and waits for its outcome (a sync session, a batch request, a method).
    func perform(_ work: Work, from source: Int) -> Result<Outcome, EventStoreError> {
        let box = Mutex<Result<Outcome, EventStoreError>?>(nil)
        let signal = DispatchSemaphore(value: 0)
        submit(work, from: source) { result in
            box.withLock { $0 = result }
            signal.signal()
        }
        signal.wait()
        return box.withLock { $0! }
    }

    /// Queues a client batch; `completion` runs on the writer thread once it is committed.
    func submit(
        _ events: [InputEvent], from source: Int,
        completion: @escaping @Sendable (Result<AppendResult, EventStoreError>) -> Void
    ) {
        submit(.write(.append(events)), from: source) { result in
            completion(
                result.flatMap { outcome in
                    guard case .written(.appended(let appended)) = outcome else { return .failure(Writer.mismatch) }
                    return .success(appended)
                })
        }
    }

    /// Appends and waits (for batch requests, which answer as a whole).
    func appendAndWait(_ events: [InputEvent], from source: Int) -> Result<AppendResult, EventStoreError> {
        perform(.write(.append(events)), from: source).flatMap { outcome in
            guard case .written(.appended(let appended)) = outcome else { return .failure(Writer.mismatch) }
            return .success(appended)
        }
    }

    /// Commits events received from a peer, group-committed with the appends waiting, and
    /// waits for the commit. `maxDeadLetters`: as `EventLog.ingest(_:from:maxDeadLetters:)`.
    func ingest(_ events: [ReplicatedEvent], from peer: IngestPeer, maxDeadLetters: Int = .max)
        throws(EventStoreError) -> IngestResult
    {
        guard !events.isEmpty else { return try log.ingest(events, from: peer) }  // nothing to write
        let outcome = try perform(.write(.ingest(events, from: peer, maxDeadLetters: maxDeadLetters)), from: -1).get()
        guard case .written(.ingested(let result)) = outcome else { throw Writer.mismatch }
        return result
    }

    /// Imports stored events (the `import` method), group-committed with the appends
    /// waiting. A dry run only reads, on the calling thread.
    func importEvents(_ events: [[UInt8]], dryRun: Bool) throws(EventStoreError) -> ImportResult {
        if dryRun { return try log.importEvents(events, dryRun: true) }
        guard !events.isEmpty else { return try log.importEvents(events) }  // nothing to write
        let outcome = try perform(.write(.importEvents(events)), from: -2).get()
        guard case .written(.imported(let result)) = outcome else { throw Writer.mismatch }
        return result
    }

    /// Stores (or with nil, deletes) entries of the peers table.
    func storePeerEntries(_ entries: [PeerEntry]) throws(EventStoreError) {
        _ = try perform(.write(.peerEntries(entries)), from: -3).get()
    }

    /// Validates dead letters again and stores those that pass, group-committed with the
    /// appends waiting (what is stored is published to watchers like any receipt).
    func retryDeadLetters(_ ids: [ULID]) throws(EventStoreError) -> DeadLetterRetry {
        guard
            case .written(.deadLettersRetried(let result)) = try perform(.write(.retryDeadLetters(ids)), from: -6).get()
        else { throw Writer.mismatch }
        return result
    }

    /// Removes dead letters; how many were.
    func dropDeadLetters(_ ids: [ULID]) throws(EventStoreError) -> Int {
        guard case .written(.deadLettersDropped(let count)) = try perform(.write(.dropDeadLetters(ids)), from: -7).get()
        else { throw Writer.mismatch }
        return count
    }

    /// Acknowledges `seq` for a consumer, creating it when new (`consumers.ack`),
    /// group-committed with the appends waiting.
    func ackConsumer(_ name: String, seq: UInt64, maxConsumers: Int) throws(EventStoreError) -> Consumer {
        let work = Work.write(.ackConsumer(name: name, seq: seq, maxConsumers: maxConsumers))
        guard case .written(.consumerAcked(let consumer)) = try perform(work, from: -8).get() else {
            throw Writer.mismatch
        }
        return consumer
    }

    /// Removes a consumer; whether there was one.
    func removeConsumer(_ name: String) throws(EventStoreError) -> Bool {
        guard
            case .written(.consumerRemoved(let removed)) = try perform(.write(.removeConsumer(name: name)), from: -9)
                .get()
        else { throw Writer.mismatch }
        return removed
    }

    /// `EventLog.rebuild(verify:)` on the writer.
    func rebuild(verify: Bool) throws(EventStoreError) -> RebuildReport {
        guard case .rebuilt(let report) = try perform(.rebuild(verify: verify), from: -4).get() else {
            throw Writer.mismatch
        }
        return report
    }

    /// Trains a dictionary when one is due (sampling and training on the calling thread),
    /// and stores it on the writer. The new version, or nil when none was due.
    func trainDictionaryIfDue() throws(EventStoreError) -> UInt32? {
        guard try log.dictionaryTrainingDue() else { return nil }
        let prepared = try log.prepareDictionary()
        guard case .dictionaryInstalled(let version) = try perform(.installDictionary(prepared), from: -5).get() else {
            throw Writer.mismatch
        }
        return version
    }

    private static let mismatch = EventStoreError(.corrupt, "the writer answered a request with another's outcome")

    /// Commits what is queued, then ends the thread and waits for it.
    func stop() {
        queue.close()
        done.wait()
        // The thread is gone: the store is its owner's again (a tool's final check).
        log.releaseWriterThread()
    }

    private func run() {
        // Group commit. A client that appended recently and has no append waiting is
        // most likely on its way with the next one (reading the answer, sending again):
        // once something waits, the writer gives those clients a moment to join rather
        // than commit — and sync — twice. One client alone never waits.
        var recent: [Int: ContinuousClock.Instant] = [:]
        while true {
            let now = ContinuousClock.now
            if recent.values.contains(where: { now - $0 >= Writer.activeWindow }) {
                recent = recent.filter { now - $0.value < Writer.activeWindow }
            }
            guard let jobs = queue.popAll(sources: recent.count, patience: Writer.gatherPatience) else { break }
            let arrived = ContinuousClock.now
            for job in jobs where job.source >= 0 { recent[job.source] = arrived }
            var start = 0
            // In the order queued: writes in bounded groups (one transaction's memory stays
            // in check under a flood), anything else alone.
            while start < jobs.count {
                guard case .write = jobs[start].work else {
                    runAlone(jobs[start])
                    start += 1
                    continue
                }
                var end = start
                var events = 0
                while end < jobs.count, case .write = jobs[end].work, events < 50_000 || end == start {
                    events += jobs[end].weight
                    end += 1
                }
                commit(Array(jobs[start..<end]))
                start = end
            }
        }
    }

    /// How long the writer waits for the rest of a group, seconds: less than a durable
    /// commit on a laptop SSD, so gathering never costs more than a second sync would.
    static let gatherPatience = 0.001
    /// A client that appended within this window counts as active.
    static let activeWindow = Duration.milliseconds(20)

    private func commit(_ jobs: [Job]) {
        let requests: [WriteRequest] = jobs.map {
            guard case .write(let request) = $0.work else { preconditionFailure("only writes are grouped") }
            return request
        }
        var outcomes: [Result<WriteOutcome, EventStoreError>]
        // Held from before the commit until its events are published: a watch switching
        // from its catch-up read to live takes it, so it reads either before this commit
        // (and is published to) or after it.
        hub.publishLock.lock()
        let publishing = hub.hasSubscribers
        var stored: [SequencedEvent] = []
        do {
            let result = try log.commit(requests, keepStored: publishing)
            outcomes = result.outcomes
            stored = result.stored
        } catch {
            outcomes = Array(repeating: .failure(error), count: jobs.count)
            if error.reason != .storageFull {
                logger.error("a commit of \(jobs.count) requests failed: \(error)")
            }
        }
        if publishing { hub.publish(stored) }
        hub.publishLock.unlock()
        commits.add(1, ordering: .relaxed)
        self.requests.add(jobs.count, ordering: .relaxed)
        var appended = 0
        var appendRequests = 0
        var received = 0
        for case .success(let outcome) in outcomes {
            switch outcome {
            case .appended(let result):
                appended += result.appended
                appendRequests += 1
            case .ingested(let result): received += result.ingested.count
            case .imported(let result): received += result.imported.count
            case .deadLettersRetried(let result): received += result.stored.count
            case .peerEntriesStored, .deadLettersDropped, .consumerAcked, .consumerRemoved: break
            }
        }
        eventsWritten.add(appended + received, ordering: .relaxed)
        if appendRequests > 0 { appends.recordAppended(events: appended, requests: appendRequests) }
        if received > 0 { appends.recordReceived(events: received) }
        for (job, outcome) in zip(jobs, outcomes) { job.completion(outcome.map { .written($0) }) }
    }

    private func runAlone(_ job: Job) {
        let result: Result<Outcome, EventStoreError>
        switch job.work {
        case .write: preconditionFailure("writes are group-committed")
        case .rebuild(let verify):
            // Changes projections only: no event is stored, so nothing is published.
            result = Result { () throws(EventStoreError) in .rebuilt(try log.rebuild(verify: verify)) }
        case .installDictionary(let prepared):
            result = Result { () throws(EventStoreError) in .dictionaryInstalled(version: try log.install(prepared)) }
        }
        job.completion(result)
    }
}

/// The appends waiting for the writer. Producers never block, and wake the writer only
/// when it has something to do: the first job while it idles, or the job that completes
/// the group it gathers (one wakeup per group, not one per job).
private final class JobQueue: @unchecked Sendable {
    /// Protects every var below, and wakes the writer.
    private let condition = Condition()
    private var jobs: [Writer.Job] = []
    /// The connections the waiting jobs came from.
    private var sources: Set<Int> = []
    /// While the writer waits for the first job.
    private var idle = false
    /// While the writer gathers a group: how many connections complete it; else 0.
    private var gathering = 0
    private var closed = false

    /// Adds a job; false (and nothing added) once the queue is closed.
    func push(_ job: Writer.Job) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !closed else { return false }
        jobs.append(job)
        sources.insert(job.source)
        if idle || (gathering > 0 && sources.count >= gathering) { condition.signal() }
        return true
    }

    /// Waits for jobs and takes every one waiting; nil once closed and empty. Once
    /// something waits, waits up to `patience` seconds more for jobs from `expected`
    /// different connections (how group commit gathers a group).
    func popAll(sources expected: Int, patience: Double) -> [Writer.Job]? {
        condition.lock()
        defer { condition.unlock() }
        while jobs.isEmpty && !closed {
            idle = true
            condition.wait()
            idle = false
        }
        if !closed && expected > 1 && sources.count < expected {
            gathering = expected
            let deadline = ContinuousClock.now + .seconds(patience)
            while !closed && sources.count < expected {
                if !condition.wait(until: deadline) { break }
            }
            gathering = 0
        }
        if jobs.isEmpty { return nil }
        let taken = jobs
        jobs.removeAll(keepingCapacity: true)
        sources.removeAll(keepingCapacity: true)
        return taken
    }

    /// Refuses further jobs; the writer still gets what is queued.
    func close() {
        condition.lock()
        closed = true
        condition.broadcast()
        condition.unlock()
    }
}
