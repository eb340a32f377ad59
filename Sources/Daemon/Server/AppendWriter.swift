import EventStore
import Foundation
import Projections
import Synchronization

/// The one writer: a thread that takes every append waiting and commits them together —
/// one write transaction and one sync to disk per group (group commit) — while each
/// request's batch stays all or nothing.
final class AppendWriter: Sendable {
    struct Job: Sendable {
        /// The connection that sent it.
        let source: Int
        let events: [InputEvent]
        let completion: @Sendable (Result<AppendResult, EventStoreError>) -> Void
    }

    let log: EventLog
    let hub: WatchHub
    private let queue = JobQueue()
    private let done = DispatchSemaphore(value: 0)
    /// Counters for status and benchmarks: commits made, events written.
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
        let thread = Thread { [self] in
            run()
            done.signal()
        }
        thread.name = "evstored-writer"
        thread.start()
    }

    /// Queues a batch; `completion` runs on the writer thread once it is committed or
    /// failed. After `stop()` it fails at once with `unavailable`.
    func submit(
        _ events: [InputEvent], from source: Int,
        completion: @escaping @Sendable (Result<AppendResult, EventStoreError>) -> Void
    ) {
        if !queue.push(Job(source: source, events: events, completion: completion)) {
            completion(.failure(EventStoreError(.unavailable, "the daemon is stopping; retry when it is back")))
        }
    }

    /// Appends and waits (for batch requests, which answer as a whole).
    func appendAndWait(_ events: [InputEvent], from source: Int) -> Result<AppendResult, EventStoreError> {
        let box = Mutex<Result<AppendResult, EventStoreError>?>(nil)
        let signal = DispatchSemaphore(value: 0)
        submit(events, from: source) { result in
            box.withLock { $0 = result }
            signal.signal()
        }
        signal.wait()
        return box.withLock { $0! }
    }

    /// Commits events received from a peer in one transaction on the calling thread, and
    /// publishes them to watchers as the writer does its own. `maxDeadLetters`: as
    /// `EventLog.ingest(_:from:maxDeadLetters:)`.
    func ingest(_ events: [ReplicatedEvent], from peer: IngestPeer, maxDeadLetters: Int = .max)
        throws(EventStoreError) -> IngestResult
    {
        hub.publishLock.lock()
        defer { hub.publishLock.unlock() }
        let before = log.sequenceHead
        let result = try log.ingest(events, from: peer, maxDeadLetters: maxDeadLetters)
        if hub.hasSubscribers, !result.ingested.isEmpty { hub.publish(after: before, log: log) }
        commits.add(1, ordering: .relaxed)
        eventsWritten.add(result.ingested.count, ordering: .relaxed)
        if !result.ingested.isEmpty { appends.recordReceived(events: result.ingested.count) }
        return result
    }

    /// Imports stored events (the `import` method) in one transaction on the calling thread,
    /// and publishes them to watchers as the writer does its own. A dry run only reads.
    func importEvents(_ events: [[UInt8]], dryRun: Bool) throws(EventStoreError) -> ImportResult {
        if dryRun { return try log.importEvents(events, dryRun: true) }
        hub.publishLock.lock()
        defer { hub.publishLock.unlock() }
        let before = log.sequenceHead
        let result = try log.importEvents(events)
        if hub.hasSubscribers, !result.imported.isEmpty { hub.publish(after: before, log: log) }
        // Counted as a sync's events are: a commit, events written, events received.
        commits.add(1, ordering: .relaxed)
        eventsWritten.add(result.imported.count, ordering: .relaxed)
        if !result.imported.isEmpty { appends.recordReceived(events: result.imported.count) }
        return result
    }

    /// Commits what is queued, then ends the thread and waits for it.
    func stop() {
        queue.close()
        done.wait()
    }

    private func run() {
        // Group commit. A client that appended recently and has no append waiting is
        // most likely on its way with the next one (reading the answer, sending again):
        // once something waits, the writer gives those clients a moment to join rather
        // than commit — and sync — twice. One client alone never waits.
        var recent: [Int: ContinuousClock.Instant] = [:]
        while true {
            let now = ContinuousClock.now
            if recent.values.contains(where: { now - $0 >= AppendWriter.activeWindow }) {
                recent = recent.filter { now - $0.value < AppendWriter.activeWindow }
            }
            guard let jobs = queue.popAll(sources: recent.count, patience: AppendWriter.gatherPatience) else { break }
            let arrived = ContinuousClock.now
            for job in jobs { recent[job.source] = arrived }
            var start = 0
            // Bounded groups keep one transaction's memory in check under a flood.
            while start < jobs.count {
                var end = start
                var events = 0
                while end < jobs.count, events < 50_000 || end == start {
                    events += jobs[end].events.count
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
        var results: [Result<AppendResult, EventStoreError>]
        hub.publishLock.lock()
        let before = log.sequenceHead
        do {
            results = try log.append(groups: jobs.map(\.events))
        } catch {
            results = Array(repeating: .failure(error), count: jobs.count)
            if error.reason != .storageFull {
                logger.error("append of \(jobs.count) batches failed: \(error)")
            }
        }
        // The commit's events are the seqs after `before`: nothing else stores events while
        // `publishLock` is held.
        if hub.hasSubscribers { hub.publish(after: before, log: log) }
        hub.publishLock.unlock()
        commits.add(1, ordering: .relaxed)
        requests.add(jobs.count, ordering: .relaxed)
        var count = 0
        var succeeded = 0
        for case .success(let result) in results {
            count += result.appended
            succeeded += 1
        }
        eventsWritten.add(count, ordering: .relaxed)
        if succeeded > 0 { appends.recordAppended(events: count, requests: succeeded) }
        for (job, result) in zip(jobs, results) { job.completion(result) }
    }
}

/// The appends waiting for the writer. Producers never block, and wake the writer only
/// when it has something to do: the first job while it idles, or the job that completes
/// the group it gathers (one wakeup per group, not one per job).
private final class JobQueue: @unchecked Sendable {
    /// Protects every var below, and wakes the writer.
    private let condition = NSCondition()
    private var jobs: [AppendWriter.Job] = []
    /// The connections the waiting jobs came from.
    private var sources: Set<Int> = []
    /// While the writer waits for the first job.
    private var idle = false
    /// While the writer gathers a group: how many connections complete it; else 0.
    private var gathering = 0
    private var closed = false

    /// Adds a job; false (and nothing added) once the queue is closed.
    func push(_ job: AppendWriter.Job) -> Bool {
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
    func popAll(sources expected: Int, patience: Double) -> [AppendWriter.Job]? {
        condition.lock()
        defer { condition.unlock() }
        while jobs.isEmpty && !closed {
            idle = true
            condition.wait()
            idle = false
        }
        if !closed && expected > 1 && sources.count < expected {
            gathering = expected
            let deadline = Date(timeIntervalSinceNow: patience)
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
