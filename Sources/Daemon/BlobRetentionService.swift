import Dispatch
import EventStore
import FoundationEssentials
import Lifecycle
import Logging
import Replication
import Synchronization
import Writer

/// Removes the blobs nothing needs once `blob_retention_s` has passed: every hour on a
/// thread of its own, and when `evctl blob gc` asks (`blob.gc`).
///
/// A blob is needed while an entity that is not deleted names it in its current state, or
/// while a known peer (every peer in the list, configured or added) lacks an event that
/// names it: the peer will ask for the blob when the event reaches it. A peer never synced
/// lacks every event, so nothing it may need goes. The check and the removal run in the
/// writer (`BlobRetentionJob`), a bounded number of blobs a job.
final class BlobRetentionService: Sendable {
    static let interval: Double = 3600

    let log: EventLog
    let store: BlobStore
    let writer: Writer
    let sync: SyncService
    let logger: Logger
    /// `blob_retention_s`, which a SIGHUP may change.
    let retentionSeconds: Atomic<Int>
    /// Held for the length of a run: one at a time.
    private let running = Mutex(false)
    private let stopped = DispatchSemaphore(value: 0)
    private let done = DispatchSemaphore(value: 0)

    init(log: EventLog, store: BlobStore, writer: Writer, sync: SyncService, logger: Logger, retentionSeconds: Int) {
        self.log = log
        self.store = store
        self.writer = writer
        self.sync = sync
        self.logger = logger
        self.retentionSeconds = Atomic(retentionSeconds)
    }

    func start() {
        startServiceThread(name: "evstored-blob-retention") { [self] in
            listMissing()
            while stopped.wait(timeout: .now() + BlobRetentionService.interval) == .timedOut {
                do {
                    let report = try run(dryRun: false)
                    if !report.removed.isEmpty {
                        logger.info(
                            "blob retention removed \(report.removed.count) blobs (\(report.bytesRemoved) bytes) nothing needed for \(retentionSeconds.load(ordering: .relaxed)) s"
                        )
                    }
                } catch {
                    logger.warning("blob retention: \(error)")
                }
            }
            done.signal()
        }
    }

    /// Puts back on the pending list the blobs needed and not held that it lacks (their
    /// files went after their events were stored: a backup restored without its blobs),
    /// so that sessions fetch them again.
    func listMissing() {
        do {
            let peers = sync.standings().map {
                PeerHoldings(vector: $0.known.vector, deadLettered: $0.known.deadLettered)
            }
            let missing = try log.unlistedMissingBlobs(present: { [store] in store.contains($0) }, peers: peers)
            guard !missing.isEmpty else { return }
            for start in stride(from: 0, to: missing.count, by: BlobRetentionJob.maxCandidates) {
                let part = Array(missing[start..<min(start + BlobRetentionJob.maxCandidates, missing.count)])
                try writer.perform(ListPendingBlobsJob(part), from: -5)
            }
            logger.notice(
                "\(missing.count) blobs events here need were not here and not on the pending list (their files were removed, or a backup restored without them): they are asked of the peers again"
            )
        } catch {
            logger.warning("cannot look for blobs missing from the pending list: \(error)")
        }
    }

    func stop() {
        stopped.signal()
        done.wait()
    }

    /// One run over every blob held and every blob pending; with `dryRun`, what it would
    /// remove and keep, changing nothing.
    func run(dryRun: Bool) throws(EventStoreError) -> BlobRetentionReport {
        let claimed = running.withLock { busy in
            defer { busy = true }
            return !busy
        }
        guard claimed else {
            throw EventStoreError(.unavailable, "a blob retention run is under way: try again when it has ended")
        }
        defer { running.withLock { $0 = false } }

        let peers = sync.standings().map { PeerHoldings(vector: $0.known.vector, deadLettered: $0.known.deadLettered) }
        var candidates: [(hash: BlobHash, size: UInt64?)] = store.list().map { ($0.hash, $0.size) }
        let held = Set(candidates.map(\.hash))
        candidates += try log.pendingBlobs().filter { !held.contains($0.hash) }.map { ($0.hash, nil) }
        candidates.sort { $0.hash.hex < $1.hash.hex }
        let now = StoreOptions.systemMilliseconds()
        let retention = UInt64(max(0, retentionSeconds.load(ordering: .relaxed))) * 1000
        if dryRun {
            return try log.blobRetentionDryRun(candidates, peers: peers, now: now, retentionMilliseconds: retention)
        }
        var report = BlobRetentionReport()
        var start = 0
        while start < candidates.count {
            let end = min(start + BlobRetentionJob.maxCandidates, candidates.count)
            let part = try writer.perform(
                BlobRetentionJob(
                    Array(candidates[start..<end]), peers: peers, now: now, retentionMilliseconds: retention,
                    store: store),
                from: -5)
            report.needed += part.needed
            report.removed += part.removed
            report.kept += part.kept
            start = end
        }
        return report
    }
}
