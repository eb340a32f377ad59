// Writer: the one thread every commit goes through, taking typed jobs; it tells whoever
// publishes commits through a protocol it owns, and knows nothing of the socket or peers.

import Dispatch
import EventStore
import FoundationEssentials
import Lifecycle
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
package final class Writer: Sendable {
    /// What a requester asks of the writer.
    package enum Work: Sendable {
        /// Group-committed with the other jobs waiting; `completion` gets its output.
        case write(any WriteJob, completion: @Sendable (Result<any Sendable, EventStoreError>) -> Void)
        /// Run on the writer thread alone, between groups: rebuilds and dictionary installs.
        case alone(@Sendable () -> Void)
    }

    package struct Job: Sendable {
        /// The connection that sent it (sessions and tools use negative numbers).
        package let source: Int
        package let work: Work

        /// How many events it stores at most, to bound a group.
        package var weight: Int {
            guard case .write(let job, _) = work else { return 0 }
            return job.weight
        }
    }

    package let log: EventLog
    package let hub: any CommitPublisher
    private let queue = JobQueue()
    private let done = DispatchSemaphore(value: 0)
    /// Counters for status and benchmarks: commits made, requests committed, events written.
    package let commits = Atomic<Int>(0)
    package let requests = Atomic<Int>(0)
    package let eventsWritten = Atomic<Int>(0)
    /// Appends and receipts since the start, and the recent append rate, for status.
    package let appends = AppendCounter()
    private let logger: Logger

    package init(log: EventLog, hub: any CommitPublisher, logger: Logger) {
        self.log = log
        self.hub = hub
        self.logger = logger
    }

    package func start() {
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

    /// Queues a job; `completion` runs on the writer thread once its group is committed or
    /// failed. After `stop()` it fails at once with `unavailable`.
    package func submit<Job: WriteJob>(
        _ job: Job, from source: Int, completion: @escaping @Sendable (Result<Job.Output, EventStoreError>) -> Void
    ) {
        let work = Work.write(job) { result in
            completion(
                result.flatMap { output in
                    guard let output = output as? Job.Output else { return .failure(Writer.mismatch) }
                    return .success(output)
                })
        }
        if !queue.push(Writer.Job(source: source, work: work)) { completion(.failure(Writer.stopping)) }
    }

    /// Queues a job and waits for its output (a sync session, a batch request, a method).
    package func perform<Job: WriteJob>(_ job: Job, from source: Int) throws(EventStoreError) -> Job.Output {
        let box = Mutex<Result<Job.Output, EventStoreError>?>(nil)
        let signal = DispatchSemaphore(value: 0)
        submit(job, from: source) { result in
            box.withLock { $0 = result }
            signal.signal()
        }
        signal.wait()
        return try box.withLock { $0! }.get()
    }

    /// Runs `body` on the writer thread alone, between groups, and waits for it.
    private func performAlone<R: Sendable>(
        from source: Int, _ body: @escaping @Sendable () throws(EventStoreError) -> R
    )
        throws(EventStoreError) -> R
    {
        let box = Mutex<Result<R, EventStoreError>?>(nil)
        let signal = DispatchSemaphore(value: 0)
        let work = Work.alone {
            box.withLock { $0 = Result { () throws(EventStoreError) in try body() } }
            signal.signal()
        }
        guard queue.push(Writer.Job(source: source, work: work)) else { throw Writer.stopping }
        signal.wait()
        return try box.withLock { $0! }.get()
    }

    /// `EventLog.rebuild(verify:)` on the writer.
    package func rebuild(verify: Bool) throws(EventStoreError) -> RebuildReport {
        // Changes projections only: no event is stored, so nothing is published.
        try performAlone(from: -4) { [log] () throws(EventStoreError) in try log.rebuild(verify: verify) }
    }

    /// Trains a dictionary when one is due (sampling and training on the calling thread),
    /// and stores it on the writer. The new version, or nil when none was due.
    package func trainDictionaryIfDue() throws(EventStoreError) -> UInt32? {
        guard try log.dictionaryTrainingDue() else { return nil }
        let prepared = try log.prepareDictionary()
        return try performAlone(from: -5) { [log] () throws(EventStoreError) -> UInt32? in
            // The writer's own first training, or a peer's dictionary taken, may have been
            // stored while this one trained: then it is no longer due, and not stored.
            guard try log.dictionaryTrainingDue() else { return nil }
            return try log.install(prepared)
        }
    }

    /// `EventLog.adoptDictionaries(_:)` on the writer, alone: a peer's dictionaries taken
    /// by a store that has none yet. Whether they were.
    package func adoptDictionaries(_ loaded: LoadedDictionaries, from source: Int) throws(EventStoreError) -> Bool {
        try performAlone(from: source) { [log] () throws(EventStoreError) in try log.adoptDictionaries(loaded) }
    }

    private static let mismatch = EventStoreError(.corrupt, "the writer answered a job with another's output")
    private static let stopping = EventStoreError(.unavailable, "the daemon is stopping; retry when it is back")

    /// Commits what is queued, then ends the thread and waits for it.
    package func stop() {
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
                    if case .alone(let body) = jobs[start].work { body() }
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
    package static let gatherPatience = 0.001
    /// A client that appended within this window counts as active.
    package static let activeWindow = Duration.milliseconds(20)

    private func commit(_ jobs: [Job]) {
        let writes: [(job: any WriteJob, completion: @Sendable (Result<any Sendable, EventStoreError>) -> Void)] =
            jobs.map {
                guard case .write(let job, let completion) = $0.work else {
                    preconditionFailure("only writes are grouped")
                }
                return (job, completion)
            }
        var outcomes: [Result<Committed, EventStoreError>]
        // Held from before the commit until its events are published: a watch switching
        // from its catch-up read to live takes it, so it reads either before this commit
        // (and is published to) or after it.
        hub.publishLock.lock()
        let publishing = hub.hasSubscribers
        var stored: [CommittedEvent] = []
        do {
            let result = try log.commit(writes.map(\.job), keepStored: publishing)
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
        var counts = WriteCounts()
        for case .success(let committed) in outcomes {
            counts.appended += committed.counts.appended
            counts.appendRequests += committed.counts.appendRequests
            counts.received += committed.counts.received
        }
        eventsWritten.add(counts.appended + counts.received, ordering: .relaxed)
        if counts.appendRequests > 0 {
            appends.recordAppended(events: counts.appended, requests: counts.appendRequests)
        }
        if counts.received > 0 { appends.recordReceived(events: counts.received) }
        for (write, outcome) in zip(writes, outcomes) { write.completion(outcome.map(\.output)) }
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
