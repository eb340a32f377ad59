import FoundationEssentials
import Projections
import Synchronization

/// How a store behaves. Defaults follow the spec's configuration defaults.
public struct StoreOptions: Sendable {
    /// Largest stored event, as canonical JSON before compression (`max_event_bytes`).
    public var maxEventBytes: Int = 65_536
    /// Raw bytes the dead letters keep in all: past it, a new dead letter larger than
    /// `DeadLetter.prefixBytes` keeps only that much (`truncated`), so it cannot be retried.
    public var deadLetterRawBudget: Int = 256 << 20
    /// How far ahead of the local wall clock an id may be and still move the clock.
    public var maxClockSkewMilliseconds: UInt64 = 3_600_000
    /// Train the first compression dictionary once the store holds this many events; train
    /// again each time the count has grown tenfold since the last training.
    public var dictionaryTrainingThreshold: Int = 10_000
    /// Train inline after an append that makes training due (the daemon may do it itself).
    public var trainsDictionaryAutomatically: Bool = true
    /// Train the first dictionary inline even when `trainsDictionaryAutomatically` is off:
    /// the daemon's writer pauses once, at `dictionaryTrainingThreshold` events (about 60 ms
    /// for both dictionaries at 10,000 events, `firstDictionarySampleCount`), rather than store the events and records
    /// that arrive during a training on its maintenance thread without a dictionary, for
    /// good. A bulk load or a new node's first full sync brings tens of thousands in that
    /// time (docs/performance.md). Later trainings, on larger samples, stay off the writer.
    public var trainsFirstDictionaryInline: Bool = false
    /// Called on the writer's thread, once, after the commit that makes a training due when
    /// the store does not train by itself: the daemon wakes its maintenance thread, so a
    /// bulk load or a new node's first sync is compressed with a dictionary from its first
    /// ten thousand events on rather than from the next tick of a clock. It must return at
    /// once.
    public var trainingDue: (@Sendable () -> Void)?
    /// Size of a trained dictionary in bytes.
    public var dictionaryCapacity: Int = 32 * 1024
    /// Events sampled for training, newest first.
    public var dictionarySampleCount: Int = 20_000
    /// Events sampled for the first training (and a quarter as many projection records),
    /// when it is smaller: the first dictionary is trained while a store fills, on the
    /// daemon's writer, and zstd trains on 3,000 of the field workload's events in a third
    /// of the time it takes for 10,000, for blocks 1 % larger (docs/performance.md).
    public var firstDictionarySampleCount: Int = 3_000
    /// zstd level for event values.
    public var compressionLevel: Int32 = 3
    /// The zstd level of events compressed before the store has a dictionary: small frames
    /// without a dictionary are 4 times cheaper at -1 than at 3 and only 4 % larger.
    public static let levelWithoutDictionary: Int32 = -1
    /// Bytes of decompressed event blocks kept for readers, in total (`BlockCache`): a read
    /// of an event whose block is kept costs no decompression. 32 MiB holds the blocks of
    /// some 150,000 field-workload events (about 220 bytes each, decompressed); 0 keeps none.
    public var blockCacheBytes: Int = 32 << 20
    public var environment = EnvironmentOptions()
    /// The host's identity (/etc/machine-id). The store records it at first open; opened
    /// on a host with another one — a data directory copied to another machine — it takes
    /// a fresh node id (`EventLog.previousNodeID` tells). Nil: not checked.
    public var machineID: String?
    /// Whether the node holds the bytes of a blob (its `BlobStore`): a stored event naming
    /// one it does not is listed in `blob_pending` for sync to fetch. Nil: the store has no
    /// blobs beside it, and nothing is listed.
    public var blobPresent: (@Sendable (BlobHash) -> Bool)?
    /// Milliseconds since the Unix epoch; tests inject their own.
    public var wallClock: @Sendable () -> UInt64 = StoreOptions.systemMilliseconds

    /// The hard ceiling on a stored event, whatever `maxEventBytes` says; decoding never
    /// inflates a value beyond it.
    public static let absoluteMaxEventBytes = 16 * 1024 * 1024

    public init() {}

    public static let systemMilliseconds: @Sendable () -> UInt64 = {
        UInt64(max(0, Date().timeIntervalSince1970 * 1000))
    }
}

/// The outcome of `EventLog.append(_:)`.
public struct AppendResult: Equatable, Sendable {
    /// One id per input event, in order; for an event whose idempotency key was seen
    /// before, the id of the event first appended with that key.
    public var ids: [ULID]
    /// The version of each entity the batch touched, after the batch.
    public var versions: [EntityKey: ULID]
    /// The rev of each entity the batch touched, after the batch (what `if_match` takes).
    public var revs: [EntityKey: UInt64]
    /// The ids of the events actually written, in order (keys seen before write nothing).
    public var written: [ULID]
    /// How many events were actually written.
    public var appended: Int { written.count }

    public init(ids: [ULID], versions: [EntityKey: ULID], revs: [EntityKey: UInt64] = [:], written: [ULID]) {
        self.ids = ids
        self.versions = versions
        self.revs = revs
        self.written = written
    }
}

/// The outcome of `EventLog.ingest(_:from:)`.
public struct IngestResult: Equatable, Sendable {
    /// Ids of the events written, in the order received.
    public var ingested: [ULID] = []
    /// Events already held (deduplicated by id).
    public var skipped: Int = 0
    /// Events that failed validation, with the reason, now in the dead-letter table.
    public var deadLettered: [DeadLetter] = []
    /// Events at the end of the batch neither stored nor kept as dead letters, because the
    /// batch had put `maxDeadLetters` events in the dead letters already.
    public var refused: Int = 0
}

/// The dead letters a sync session may still add, shared by the batches it has handed the
/// writer at once: the writer runs them in turn, each allowed what the ones before left, so
/// together they add no more than one batch allowed the whole would.
public final class DeadLetterAllowance: Sendable {
    private let left: Atomic<Int>
    public init(_ count: Int) { left = Atomic(max(0, count)) }
    /// What is left.
    public var remaining: Int { left.load(ordering: .acquiring) }
    /// Takes `count` from what is left.
    func spend(_ count: Int) { left.subtract(count, ordering: .releasing) }
}

/// Who sent replicated events, as their dead letters name it.
public struct IngestPeer: Equatable, Sendable {
    /// How this node names the peer: its peer name or URL, or for a session the peer
    /// started, the name the peer gave and its node id.
    public var name: String?
    /// The peer's node id, from its hello; nil when not known (`import`, tools).
    public var node: ULID?

    public init(name: String?, node: ULID? = nil) {
        self.name = name
        self.node = node
    }
}

/// An event received from a peer that failed validation.
public struct DeadLetter: Equatable, Sendable {
    /// The local id under which it is kept (time of receipt order).
    public var key: ULID
    public var id: String?
    public var origin: String?
    public var peer: String?
    public var reason: String
    public var receivedAt: UInt64
    public var raw: [UInt8]
    /// The node id of the peer that sent it. Dead letters kept before it was recorded have none.
    public var peerNode: String? = nil
    /// Whether `raw` is only the first `DeadLetter.prefixBytes` of the event. Nil in the
    /// records of releases that cut every raw event at 64 KiB and did not say: those of
    /// exactly that length may be cut.
    public var truncated: Bool? = nil
}

/// Counts and fingerprints of a store: what `status` shows.
public struct StoreStatistics: Equatable, Sendable {
    public var events: Int
    public var entities: Int
    public var conflicts: Int
    public var deadLetters: Int
    /// Bytes the environment uses (pages in use × page size).
    public var bytesUsed: Int
    public var mapSize: Int
    public var digest: StateDigest
    public var dictionaryVersion: UInt32
    /// The commit sequence's head: the seq of the last event stored.
    public var seq: UInt64
    /// Origins whose ids were seen too far ahead of the local clock: the largest lead, in ms.
    public var skewedOrigins: [ULID: UInt64]
}
