import Dispatch
import EventStore
import FoundationEssentials
import Projections
import Synchronization
import UnixSocket
import Wire

/// What replication writes through: in the daemon its one writer, which commits each job
/// in a group commit with the appends waiting and returns its output.
package protocol JobWriter: Sendable {
    func perform<Job: WriteJob>(_ job: Job, from source: Int) throws(EventStoreError) -> Job.Output
    func submit<Job: WriteJob>(
        _ job: Job, from source: Int, completion: @escaping @Sendable (Result<Job.Output, EventStoreError>) -> Void)
    /// Takes a peer's compression dictionaries when the store has none yet, on the writer
    /// alone (`EventLog.adoptDictionaries(_:)`).
    func adoptDictionaries(_ loaded: LoadedDictionaries, from source: Int) throws(EventStoreError) -> Bool
}

/// A peer by name and URL, as the configuration file gives it.
package struct NamedPeer: Equatable, Sendable {
    package var name: String
    package var url: String
    /// What this node fetches of the peer's blobs.
    package var blobs: BlobPolicy

    package init(name: String, url: String, blobs: BlobPolicy = .eager) {
        self.name = name
        self.url = url
        self.blobs = blobs
    }
}

/// What a session needs of its node.
package struct SyncNode: Sendable {
    package let log: EventLog
    package let name: String?
    /// Commits received events in one transaction (in the daemon through the writer, so
    /// watchers see them); the peer is named in dead letters, and once the batch has made
    /// as many dead letters as the allowance has left, the rest of it is refused.
    package let ingest:
        @Sendable ([ReplicatedEvent], IngestPeer, DeadLetterAllowance) throws(EventStoreError) -> IngestResult
    /// As `ingest`, without waiting: `completion` gets the result once committed. A session
    /// decodes the next batch meanwhile.
    package let ingestLater:
        @Sendable (
            [ReplicatedEvent], IngestPeer, DeadLetterAllowance,
            @escaping @Sendable (Result<IngestResult, EventStoreError>) -> Void
        ) -> Void
    /// Stores (nil: deletes) entries of the peers table: peer records and sync state.
    package let storePeerEntries: @Sendable ([PeerEntry]) throws(EventStoreError) -> Void
    /// Answers an append another node hands to this one (`forward`): the JSON-RPC request
    /// line in, the response line out. The daemon runs it through its own admission stage
    /// and writer; tools answer that they take none.
    package let forwarded: @Sendable ([UInt8]) -> [UInt8]
    /// Takes a peer's compression dictionaries as the store's first (`dictionary`), on the
    /// writer; false when the store has one by then.
    package let adoptDictionaries: @Sendable (LoadedDictionaries) throws(EventStoreError) -> Bool
    /// The windows of content checks per peer, shared by the node's sessions.
    package let divergence = DivergenceLedger()
    /// The node's blobs, which sessions agreeing to `blobs` move; nil: the node keeps none
    /// (tools, tests), and its hellos leave the capability out.
    package var blobs: SyncBlobs?

    /// The capabilities this node's hellos name.
    package var capabilities: [String] {
        blobs == nil ? Frame.capabilities.filter { $0 != Frame.blobsCapability } : Frame.capabilities
    }

    package init(
        log: EventLog, name: String?,
        ingest:
            @escaping @Sendable ([ReplicatedEvent], IngestPeer, DeadLetterAllowance) throws(EventStoreError) ->
            IngestResult,
        ingestLater: (
            @Sendable (
                [ReplicatedEvent], IngestPeer, DeadLetterAllowance,
                @escaping @Sendable (Result<IngestResult, EventStoreError>) -> Void
            ) -> Void
        )? = nil,
        storePeerEntries: @escaping @Sendable ([PeerEntry]) throws(EventStoreError) -> Void,
        forwarded: @escaping @Sendable ([UInt8]) -> [UInt8] = SyncNode.takesNoForwards,
        adoptDictionaries: (@Sendable (LoadedDictionaries) throws(EventStoreError) -> Bool)? = nil
    ) {
        self.log = log
        self.name = name
        self.ingest = ingest
        self.ingestLater =
            ingestLater ?? { events, peer, allowance, completion in
                completion(Result { () throws(EventStoreError) in try ingest(events, peer, allowance) })
            }
        self.storePeerEntries = storePeerEntries
        self.forwarded = forwarded
        if let adoptDictionaries {
            self.adoptDictionaries = adoptDictionaries
        } else {
            self.adoptDictionaries = { (loaded) throws(EventStoreError) in try log.adoptDictionaries(loaded) }
        }
    }

    /// The answer of a node that takes no forwarded appends.
    package static let takesNoForwards: @Sendable ([UInt8]) -> [UInt8] = { _ in
        Response.line(
            id: RequestParser.nullID,
            error: RPCError.application(.unavailable, "this node takes no appends handed to it by other nodes"))
    }

    /// Writes through the daemon's writer: the session thread decodes, the writer commits
    /// (group-committed with the appends waiting), the session waits for the result.
    package init(
        log: EventLog, name: String?, writer: some JobWriter,
        forwarded: @escaping @Sendable ([UInt8]) -> [UInt8] = SyncNode.takesNoForwards
    ) {
        self.init(
            log: log, name: name,
            ingest: { (events, peer, allowance) throws(EventStoreError) in
                guard !events.isEmpty else { return try log.ingest(events, from: peer) }  // nothing to write
                return try writer.perform(IngestJob(events, from: peer, allowance: allowance), from: -1)
            },
            ingestLater: { events, peer, allowance, completion in
                guard !events.isEmpty else {
                    completion(Result { () throws(EventStoreError) in try log.ingest(events, from: peer) })
                    return
                }
                writer.submit(IngestJob(events, from: peer, allowance: allowance), from: -1, completion: completion)
            },
            storePeerEntries: { (entries) throws(EventStoreError) in
                try writer.perform(PeerEntriesJob(entries), from: -3)
            }, forwarded: forwarded,
            adoptDictionaries: { (loaded) throws(EventStoreError) in
                try writer.adoptDictionaries(loaded, from: -5)
            })
    }

    /// Writes straight into the log (tools and tests).
    package init(log: EventLog, name: String? = nil) {
        self.init(
            log: log, name: name,
            ingest: { (events, peer, allowance) throws(EventStoreError) in
                guard !events.isEmpty else { return try log.ingest(events, from: peer) }
                return try log.perform(IngestJob(events, from: peer, allowance: allowance))
            },
            storePeerEntries: { (entries) throws(EventStoreError) in
                try log.setPeerEntries(entries.map { ($0.key, $0.value) })
            })
    }
}

/// What one session may cost this node, whatever the peer does. Past a limit the session
/// ends with `session_limit` (or `too_many_invalid`); what was committed before stays, and
/// the next session goes on from there. The defaults are far above what two honest nodes
/// need (a few differences among a million ids take six reconcile frames).
package struct SyncLimits: Equatable, Sendable {
    /// The longest a session may last, seconds (`sync_session_max_s`).
    package var sessionSeconds = 600.0
    /// Reconcile frames the peer may send (`sync_reconcile_max_rounds`).
    package var reconcileRounds = 1000
    /// Bytes of reconcile frames the peer may send (`sync_reconcile_max_bytes`).
    package var reconcileBytes = 256 << 20
    /// Ids the reconciliation keeps as lacking on the peer's side
    /// (`sync_reconcile_max_ids`); the rest are sent by a later session.
    package var reconcileIDs = 1_000_000
    /// Dead letters one session may add (`sync_session_max_dead_letters`).
    package var deadLetters = 1000
    /// Events whose content the responder checks with the initiator per session
    /// (`sync_verify_events`; 0: none).
    package var verifyEvents = 1024

    package init(
        sessionSeconds: Double = 600, reconcileRounds: Int = 1000, reconcileBytes: Int = 256 << 20,
        reconcileIDs: Int = 1_000_000, deadLetters: Int = 1000, verifyEvents: Int = 1024
    ) {
        self.sessionSeconds = sessionSeconds
        self.reconcileRounds = reconcileRounds
        self.reconcileBytes = reconcileBytes
        self.reconcileIDs = reconcileIDs
        self.deadLetters = deadLetters
        self.verifyEvents = verifyEvents
    }
}

/// What one session moved.
package struct SyncReport: Sendable, Equatable {
    package var peerNode: ULID?
    package var peerName: String?
    /// Events sent, and events received and kept (new to this node).
    package var sent = 0
    package var received = 0
    /// Received events this node held already, and those that became dead letters.
    package var skipped = 0
    package var deadLettered = 0
    package var bytesSent = 0
    package var bytesReceived = 0
    /// Ids found by reconciliation beyond the version vectors, each way.
    package var reconciledSent = 0
    package var reconciledReceived = 0
    /// What the peer holds once the session is done: its vector and ours, merged.
    package var peerVector: [ULID: ULID] = [:]
    /// What the peer said it holds only as dead letters: its hello's list (nil when it
    /// gave none, as older peers do), whether that was cut, and the ids its acks named.
    package var peerDeadLetters = PeerDeadLetters()
    /// The protocol version the session ran and the capabilities it agreed to, once the
    /// hellos were exchanged (nil before).
    package var protocolVersion: Int?
    package var capabilities: [String] = []
    /// Events whose content was compared with the peer's (`verify`), and those found held
    /// with other content there (recorded or recorded already).
    package var verified = 0
    package var divergent = 0
    /// Divergent events found that could not be recorded: the records were full.
    package var divergentUnkept = 0
    /// Of the responder's windows, those the initiator found different (checked event by
    /// event at the next session).
    package var windowsDiffering = 0
    /// The session carried an append handed to the responder (`forward`) and synced nothing.
    package var forwarded = false
    /// This side sent its compression dictionaries to a peer that had none (`dictionary`),
    /// and took the peer's as its first.
    package var dictionarySent = false
    package var dictionaryAdopted = false

    /// For the session's log line: the dictionaries that went either way, if any.
    package var dictionaryNote: String {
        (dictionarySent ? ", compression dictionary sent" : "")
            + (dictionaryAdopted ? ", the peer's compression dictionary taken" : "")
    }
    /// Blobs (`blobs`): those this side asked the peer for, received whole, passed over
    /// (another session was receiving them, or no upload was free), and the peer said it
    /// does not hold; the blobs and bytes sent, and those the peer asked for, this side
    /// holds and did not send whole (a cut session).
    package var blobsAsked = 0
    package var blobsReceived = 0
    package var blobsUnasked = 0
    package var blobsMissing = 0
    package var blobBytesReceived = 0
    package var blobsSent = 0
    package var blobBytesSent = 0
    package var blobsPeerWants = 0
    /// The blobs this node holds that the peer asked for and still lacks once the session
    /// ended (it was cut, or the peer could not keep them): pending for that peer.
    package var peerLacksBlobs: [BlobHash] = []
}

/// One sync session over a frame channel, from either end.
///
/// The initiator sends its preamble and hello; the responder answers with its preamble and
/// a hello carrying the fingerprints of the ranges both hold; reconcile frames go back and
/// forth while ranges differ; then the initiator streams what the responder lacks (each
/// batch acknowledged once committed, up to `window` in flight) and says done, and the
/// responder does the same the other way. docs/sync.md has it byte by byte.
package final class SyncSession {
    package let node: SyncNode
    package let channel: FrameChannel
    /// The peer, as named in dead letters and logs.
    private(set) var peerLabel: String
    var report = SyncReport()
    /// Per origin, the greatest id pushed (events appended during the session included).
    private var sentThrough: [ULID: ULID] = [:]
    /// Called as the peer acknowledges a batch of one origin's events sent in id order from
    /// what it held: it holds that origin's events through the id given (origin, id).
    package var acknowledged: ((ULID, ULID) -> Void)?
    /// Per batch in flight, oldest first: its origin and last id, nil for a batch of ids
    /// reconciliation found (not a prefix of anything).
    private var awaitingAck: [(origin: ULID, through: ULID)?] = []
    package static let window = 4
    /// The window when both hellos name `Frame.wideWindowCapability`.
    package static let wideWindow = 8
    /// The batches this side keeps unacknowledged as it sends, as the session agreed.
    var sendWindow: Int {
        channel.agreement.capabilities.contains(Frame.wideWindowCapability)
            ? SyncSession.wideWindow : SyncSession.window
    }
    /// A receiver hands the writer at most one batch less than the window at a time, so the
    /// sender always has the next on its way…
    var handedBatches: Int { sendWindow - 1 }
    /// …and at most this many bytes of events, but always one: a batch of the largest
    /// size is committed alone, as it would be without the overlap.
    package static let handedBytes = 8 << 20
    private let compressor = Compressor(level: 3)
    private let decompressor = Decompressor(windowLogMax: SyncSession.windowLogMax)
    /// The largest zstd window a batch may ask for: 128 MiB, more than any payload.
    package static let windowLogMax: Int32 = 27
    package let limits: SyncLimits
    /// The peer's reconcile frames so far, and their bytes.
    private var reconcileRounds = 0
    private var reconcileBytes = 0
    /// The responder's content checks in its hello, by id (with the origin and this node's
    /// hash), and the window to keep once the initiator has answered in its done.
    private var checksSent:
        (
            events: [ULID: (origin: ULID, hash: String)], windows: Set<DivergenceLedger.Recheck>,
            next: DivergenceLedger.Window
        )?
    /// The initiator's answer to the responder's checks, for its done.
    private var divergentReply: [Messages.Check]?
    /// The responder's windows whose digest differs here, for the done.
    private var recheckReply: [Messages.WireRange]?
    /// `dictionary`: this side's hello said it has no dictionary, and the peer's said so of
    /// the peer; whether this side has offered its own (before its first batch, once).
    private var askedForDictionary = false
    private var peerNeedsDictionary = false
    private var dictionaryOffered = false

    /// The session's clock starts now: it must be over `limits.sessionSeconds` later.
    /// The peer's name in this node's configuration, for a session this node started with
    /// a configured peer: what its blob policy is looked up by (else the peer's hello name).
    package var configuredPeer: String?
    /// The owner of this session's blob receipts in the blob store: one per session.
    let blobOwner = -1_000_000 - SyncSession.sessions.add(1, ordering: .relaxed).newValue
    private static let sessions = Atomic<Int>(0)

    package init(node: SyncNode, channel: FrameChannel, peerLabel: String, limits: SyncLimits = SyncLimits()) {
        self.node = node
        self.channel = channel
        self.peerLabel = peerLabel
        self.limits = limits
        channel.limitSession(toSeconds: limits.sessionSeconds)
    }

    /// Runs the session as the side that connected.
    package func initiate() throws(SyncError) -> SyncReport {
        try failing { () throws(SyncError) in
            let mine = try vector()
            let sentAt = node.log.options.wallClock()
            do throws(SyncError) {
                try channel.writePreamble()
                var hello = Messages.Hello(
                    protocolVersion: Frame.protocolVersion, node: node.log.nodeID.description, name: node.name,
                    vector: mine.wire, ranges: nil, clock: sentAt)
                hello.protocols = Array(Frame.protocolVersions)
                hello.capabilities = node.capabilities
                try askForDictionary(in: &hello)
                try listDeadLetters(in: &hello)
                try send(.hello, hello)
            } catch {
                // A peer that answers at once and hangs up (a portal, another service) is
                // better described by what it said than by the failed write.
                if error.reason == .closed, let said = garbageBeforeClosing() { throw said }
                throw error
            }
            let (hello, theirs) = try readHello(peerVersion: try channel.readPreamble(), sentAt: sentAt)
            try agree(hello, initiating: true)
            if channel.agreement.capabilities.contains(Frame.verifyCapability) {
                try answerChecks(hello.checks, windows: hello.windows)
            }
            var reconciler = Reconciler(source: node.log, maxIDs: limits.reconcileIDs)
            var incoming = try (hello.ranges ?? []).map { (range) throws(SyncError) in try range.decoded() }
            while !incoming.isEmpty {
                let (reply, needs) = try reconcile(&reconciler, incoming)
                try send(
                    .reconcile,
                    Messages.Reconcile(ranges: reply.map(Messages.WireRange.init), needs: needs.map(\.description)))
                if reply.isEmpty { break }
                incoming = try readReconcile(&reconciler)
            }
            try push(lacking: theirs, extras: reconciler.theyLack, mine: mine)
            try receive()
            if channel.agreement.capabilities.contains(Frame.blobsCapability), let blobs = node.blobs {
                try fetchBlobs(blobs)
                try serveBlobs(blobs)
            }
            try checkOverflow(reconciler)
            report.peerVector = theirs.merging(mine) { max($0, $1) }.merging(sentThrough) { max($0, $1) }
        }
        return finished()
    }

    /// Runs the session as the side that was connected to, once the initiator's preamble
    /// (protocol `version`) has been read.
    package func respond(initiatorVersion version: Int) throws(SyncError) -> SyncReport {
        try failing { () throws(SyncError) in
            try channel.writePreamble()
            let (theirHello, theirs) = try readHello(peerVersion: version, sentAt: nil)
            try agree(theirHello, initiating: false)
            if theirHello.forward == true, channel.agreement.capabilities.contains(Frame.forwardCapability) {
                return try answerForward()
            }
            let mine = try vector()
            var reconciler = Reconciler(source: node.log, maxIDs: limits.reconcileIDs)
            let opening = try storage { () throws(EventStoreError) in try reconciler.opening(mine: mine, theirs: theirs)
            }
            var hello = Messages.Hello(
                protocolVersion: channel.agreement.version, node: node.log.nodeID.description, name: node.name,
                vector: mine.wire, ranges: opening.map(Messages.WireRange.init),
                clock: node.log.options.wallClock())
            // A node of protocol 1 gets the hello 0.4 sent; a newer one our versions too.
            if theirHello.protocols != nil {
                hello.protocols = Array(Frame.protocolVersions)
                hello.capabilities = node.capabilities
                if channel.agreement.capabilities.contains(Frame.dictionaryCapability) {
                    try askForDictionary(in: &hello)
                }
            }
            if channel.agreement.capabilities.contains(Frame.verifyCapability) {
                (hello.windows, hello.checks) = try checks(mine: mine, theirs: theirs)
            }
            try listDeadLetters(in: &hello)
            try send(.hello, hello)
            if !opening.isEmpty {
                while true {
                    let incoming = try readReconcile(&reconciler)
                    if incoming.isEmpty { break }
                    let (reply, needs) = try reconcile(&reconciler, incoming)
                    try send(
                        .reconcile,
                        Messages.Reconcile(ranges: reply.map(Messages.WireRange.init), needs: needs.map(\.description)))
                    if reply.isEmpty { break }
                }
            }
            try receive()
            try push(lacking: theirs, extras: reconciler.theyLack, mine: mine)
            if channel.agreement.capabilities.contains(Frame.blobsCapability), let blobs = node.blobs {
                try serveBlobs(blobs)
                try fetchBlobs(blobs)
            }
            try checkOverflow(reconciler)
            report.peerVector = theirs.merging(mine) { max($0, $1) }.merging(sentThrough) { max($0, $1) }
        }
        return finished()
    }

    /// Whether a `forward` frame left: the append may be stored at the peer from then on,
    /// whatever became of the session.
    package private(set) var forwardSent = false

    /// Hands `request` (a JSON-RPC `append` request line) to the peer, which must call
    /// itself `authority` and speak `forward`, and returns its answer (a JSON-RPC response
    /// line). Nothing is synced: the events come back by the next sync.
    package func forward(_ request: [UInt8], to authority: String) throws(SyncError) -> [UInt8] {
        var answer: [UInt8] = []
        try failing { () throws(SyncError) in
            let sentAt = node.log.options.wallClock()
            try channel.writePreamble()
            var hello = Messages.Hello(
                protocolVersion: Frame.protocolVersion, node: node.log.nodeID.description, name: node.name,
                vector: [:], clock: sentAt)
            hello.protocols = Array(Frame.protocolVersions)
            hello.capabilities = node.capabilities
            hello.forward = true
            try send(.hello, hello)
            let (theirs, _) = try readHello(peerVersion: try channel.readPreamble(), sentAt: sentAt)
            try agree(theirs, initiating: true)
            guard channel.agreement.capabilities.contains(Frame.forwardCapability) else {
                throw SyncError(
                    .protocolMismatch,
                    "the peer speaks sync protocol \(channel.agreement.version) without \(Frame.forwardCapability), so it takes no appends handed to it: upgrade it"
                )
            }
            guard report.peerName == authority else {
                throw SyncError(
                    .invalidPeer,
                    "the peer calls itself \(report.peerName.map { "\"\($0)\"" } ?? "by no name"), not \(authority), the authority: nothing was handed to it"
                )
            }
            try channel.write(Frame(kind: .forward, payload: request))
            forwardSent = true
            answer = try expect(.forwarded).payload
        }
        _ = finished()
        return answer
    }

    /// The responder's side of a `forward` session: its hello (no ranges, no checks), then
    /// the answer to the one append.
    private func answerForward() throws(SyncError) {
        var hello = Messages.Hello(
            protocolVersion: channel.agreement.version, node: node.log.nodeID.description, name: node.name,
            vector: [:], clock: node.log.options.wallClock())
        hello.protocols = Array(Frame.protocolVersions)
        hello.capabilities = node.capabilities
        try send(.hello, hello)
        let request = try expect(.forward).payload
        report.forwarded = true
        try channel.write(Frame(kind: .forwarded, payload: node.forwarded(request)))
    }

    /// What the peer sent before it hung up, when that was not the protocol.
    private func garbageBeforeClosing() -> SyncError? {
        do {
            _ = try channel.readPreamble()
            return nil
        } catch {
            return error.reason == .notEvstore ? error : nil
        }
    }

    private func finished() -> SyncReport {
        report.bytesSent = channel.bytesSent
        report.bytesReceived = channel.bytesReceived
        return report
    }

    /// Runs `body`; on failure tells the peer why (when the channel still works) and rethrows.
    private func failing(_ body: () throws(SyncError) -> Void) throws(SyncError) {
        do {
            try body()
        } catch {
            report.bytesSent = channel.bytesSent
            report.bytesReceived = channel.bytesReceived
            switch error.reason {
            case .closed, .timeout, .peerFailed, .notEvstore: break
            default:
                try? channel.writeLast(
                    Frame(
                        kind: .error,
                        payload: Messages.encode(
                            Messages.Failure(reason: error.reason.rawValue, message: error.message))))
            }
            throw error
        }
    }

    // MARK: Steps

    private func vector() throws(SyncError) -> [ULID: ULID] {
        try storage { () throws(EventStoreError) in try node.log.versionVector() }
    }

    /// The peer's hello and version vector, once its preamble said `version`. `sentAt` is
    /// when our own hello left, for the initiator, which reads the peer's after a round trip.
    private func readHello(peerVersion version: Int, sentAt: UInt64?) throws(SyncError) -> (
        Messages.Hello, [ULID: ULID]
    ) {
        guard Frame.protocolVersions.contains(version) else {
            throw SyncError(
                .protocolMismatch,
                "the peer's preamble names sync protocol \(version), and this node speaks \(SyncSession.describe(Frame.protocolVersions)): no version in common; upgrade the older node"
            )
        }
        let hello = try Messages.decode(Messages.Hello.self, try expect(.hello).payload, frame: "hello")
        let vector = try accept(hello)
        if let theirs = hello.clock, let peer = report.peerNode {
            // The responder compares with the time the hello arrived; the initiator with the
            // middle of its round trip, when the peer most likely wrote it.
            let now = node.log.options.wallClock()
            let ours = sentAt.map { $0 / 2 + now / 2 } ?? now
            node.log.recordClockOffset(of: peer, milliseconds: Int64(clamping: theirs) - Int64(clamping: ours))
        }
        return (hello, vector)
    }

    /// Agrees on the protocol version and the capabilities from the peer's hello. The
    /// responder picks the highest version both speak (a hello without `protocols` is a node
    /// of protocol 1 only, served as 0.4 served it); the initiator takes the version the
    /// responder's hello names, which must be one it speaks.
    private func agree(_ hello: Messages.Hello, initiating: Bool) throws(SyncError) {
        let ours = Frame.protocolVersions
        let theirs = hello.protocols ?? [hello.protocolVersion]
        let version: Int
        if initiating {
            version = hello.protocolVersion
            guard ours.contains(version), theirs.contains(version), hello.protocols != nil || version == 1 else {
                throw SyncError(
                    .protocolMismatch,
                    "the peer answered with sync protocol \(version), and this node speaks \(SyncSession.describe(ours)): upgrade the older node"
                )
            }
        } else {
            guard let common = theirs.filter(ours.contains).max() else {
                throw SyncError(
                    .protocolMismatch,
                    "the peer speaks sync protocol \(SyncSession.describe(theirs)) and this node \(SyncSession.describe(ours)): no version in common; upgrade the older node"
                )
            }
            version = common
        }
        let capabilities = version >= 2 ? Set(node.capabilities).intersection(hello.capabilities ?? []) : []
        channel.agreement = Frame.Agreement(version: version, capabilities: capabilities)
        report.protocolVersion = version
        report.capabilities = capabilities.sorted()
    }

    /// Versions for a message: `1`, `1 to 3`; a peer's list by its bounds alone.
    package static func describe(_ versions: some Sequence<Int>) -> String {
        guard let low = versions.min(), let high = versions.max() else { return "none" }
        return low == high ? "\(low)" : "\(low) to \(high)"
    }

    /// Checks the peer's hello; its version vector.
    private func accept(_ hello: Messages.Hello) throws(SyncError) -> [ULID: ULID] {
        guard let peer = ULID(hello.node) else { throw SyncError(.protocolError, "the peer's node id is not an id") }
        guard peer != node.log.nodeID else {
            throw SyncError(.sameNode, "the peer is this very node (\(peer)): check the peer's URL")
        }
        let name = try hello.validatedName()
        report.peerDeadLetters.listed = try hello.decodedDeadLetters()
        report.peerDeadLetters.cut = hello.deadLettersCut ?? false
        peerNeedsDictionary = hello.needsDictionary == true
        report.peerNode = peer
        report.peerName = name
        if peerLabel.isEmpty { peerLabel = name.map { "\($0) (\(peer))" } ?? peer.description }
        return try hello.decodedVector()
    }

    private func reconcile(_ reconciler: inout Reconciler, _ incoming: [IDRange]) throws(SyncError) -> (
        [IDRange], [ULID]
    ) {
        let deadline = channel.deadline
        let answer = try storage { () throws(EventStoreError) in try reconciler.respond(to: incoming, until: deadline) }
        // The reconciler stops at the deadline with half an answer: it is not sent.
        if channel.isPastDeadline { throw channel.deadlineError }
        return answer
    }

    /// The peer's next reconcile frame, counted against the session's limits before it is
    /// decoded; takes its `needs` and returns its ranges.
    private func readReconcile(_ reconciler: inout Reconciler) throws(SyncError) -> [IDRange] {
        let payload = try expect(.reconcile).payload
        reconcileRounds += 1
        reconcileBytes += payload.count
        if reconcileRounds > limits.reconcileRounds {
            throw SyncError(
                .sessionLimit,
                "the peer kept reconciling past \(limits.reconcileRounds) rounds (sync_reconcile_max_rounds); nothing was exchanged. Two honest nodes need a handful: if these are far apart, raise the limit"
            )
        }
        if reconcileBytes > limits.reconcileBytes {
            throw SyncError(
                .sessionLimit,
                "the peer's reconcile frames went past \(limits.reconcileBytes) bytes (sync_reconcile_max_bytes); nothing was exchanged. If both nodes are honest and far apart, raise the limit"
            )
        }
        let message = try Messages.decode(Messages.Reconcile.self, payload, frame: "reconcile")
        let needs = try ids(message.needs)
        try storage { () throws(EventStoreError) in try reconciler.take(needs: needs) }
        return try message.ranges.map { (range) throws(SyncError) in try range.decoded() }
    }

    /// Once everything else is done: a reconciliation that found more than it could keep
    /// ends the session with `session_limit`, after sending what it kept.
    private func checkOverflow(_ reconciler: Reconciler) throws(SyncError) {
        guard reconciler.overflowed else { return }
        throw SyncError(
            .sessionLimit,
            "reconciliation found more than \(limits.reconcileIDs) events the peer lacks below its version vector (sync_reconcile_max_ids): \(reconciler.theyLack.count) were sent, and the next session sends more"
        )
    }

    private func ids(_ texts: [String]) throws(SyncError) -> [ULID] {
        var out: [ULID] = []
        for text in texts {
            guard let id = ULID(text) else {
                throw SyncError(
                    .protocolError, "the peer listed something that is not an id (\(SyncError.size(of: text)))")
            }
            out.append(id)
        }
        return out
    }

    /// Streams the events a node holding `theirs` lacks: per origin in id order, then the
    /// ids reconciliation found; waits for every acknowledgement, then says done.
    private func push(lacking theirs: [ULID: ULID], extras: Set<ULID>, mine: [ULID: ULID]) throws(SyncError) {
        var inFlight = 0
        // What the peer holds as dead letters is not sent again: it would only be skipped.
        let refused = report.peerDeadLetters.listed ?? []
        func sendBatch(_ batch: [ReplicatedEvent], origin: ULID? = nil) throws(SyncError) {
            let events = refused.isEmpty ? batch : batch.filter { $0.id.map { !refused.contains($0) } ?? true }
            guard !events.isEmpty else { return }
            if !dictionaryOffered {
                dictionaryOffered = true
                try offerDictionary()
            }
            try channel.write(Frame(kind: .batch, payload: try BatchCodec.encode(events, compressor: compressor)))
            // Through the batch's last event before the filter: those left out are the
            // peer's dead letters, below its vector already.
            if let origin, let last = batch.last?.id {
                awaitingAck.append((origin: origin, through: last))
            } else {
                awaitingAck.append(nil)
            }
            report.sent += events.count
            inFlight += 1
            if inFlight >= sendWindow {
                try readAck()
                inFlight -= 1
            }
        }
        for origin in mine.keys.sorted() {
            var cursor = theirs[origin]
            if let cursor, cursor >= mine[origin]! { continue }
            while true {
                let (events, more) = try storage { () throws(EventStoreError) in
                    try node.log.replicationEvents(
                        origin: origin, after: cursor, limit: BatchCodec.maxEvents, maxBytes: BatchCodec.targetBytes)
                }
                try sendBatch(events, origin: origin)
                if let last = events.last?.id { sentThrough[origin] = max(last, sentThrough[origin] ?? last) }
                guard more, let last = events.last?.id else { break }
                cursor = last
            }
        }
        let sortedExtras = extras.subtracting(refused).sorted()
        report.reconciledSent = sortedExtras.count
        var start = 0
        while start < sortedExtras.count {
            let chunk = Array(sortedExtras[start..<min(start + BatchCodec.maxEvents, sortedExtras.count)])
            try sendBatch(try storage { () throws(EventStoreError) in try node.log.replicationEvents(ids: chunk) })
            start += chunk.count
        }
        while inFlight > 0 {
            try readAck()
            inFlight -= 1
        }
        try send(
            .done,
            Messages.Done(
                sent: report.sent, reconciled: report.reconciledSent, divergent: divergentReply,
                recheck: recheckReply))
    }

    // MARK: Content checks (`verify`)

    /// The responder's content checks for its hello: the windows of this session
    /// (`DivergenceLedger.window`), each a range of an origin's ids with its count and
    /// digest, and the events of the windows the peer found different last time, each with
    /// its content hash.
    private func checks(mine: [ULID: ULID], theirs: [ULID: ULID]) throws(SyncError)
        -> (windows: [Messages.WireRange], checks: [Messages.Check])
    {
        guard let peer = report.peerNode else { return ([], []) }
        var events: [ULID: (origin: ULID, hash: String)] = [:]
        var checks: [Messages.Check] = []
        var budget = limits.verifyEvents
        for recheck in node.divergence.takeRechecks(for: peer) where budget > 0 {
            let hashes = try storage { () throws(EventStoreError) in
                try DivergenceLedger.hashes(
                    of: recheck.origin, after: recheck.after, through: recheck.through, limit: budget, log: node.log)
            }
            budget -= hashes.count
            for (id, hash) in hashes {
                events[id] = (recheck.origin, hash)
                checks.append(Messages.Check(id: id.description, hash: hash))
            }
        }
        let (window, next) = try storage { () throws(EventStoreError) in
            try node.divergence.window(
                for: peer, mine: mine, theirs: theirs, budget: limits.verifyEvents, log: node.log)
        }
        var windows: [Messages.WireRange] = []
        var sent = Set<DivergenceLedger.Recheck>()
        var covered = 0
        for (origin, after, ids) in window {
            guard let through = ids.last else { continue }
            let hashes = try storage { () throws(EventStoreError) in try node.log.contentHashes(ids: ids) }
            covered += hashes.count
            sent.insert(DivergenceLedger.Recheck(origin: origin, after: after, through: through))
            windows.append(
                Messages.WireRange(
                    origin: origin.description, after: after?.description, through: through.description,
                    count: hashes.count, hash: DivergenceLedger.digest(hashes), ids: nil))
        }
        checksSent = (events, sent, next)
        report.verified = covered + checks.count
        return (windows, checks)
    }

    /// The initiator compares the responder's checks with what it holds: each event held
    /// here with another hash is recorded, and listed in this side's done for the peer; each
    /// window whose digest differs here is listed in the done to be checked event by event.
    private func answerChecks(_ checks: [Messages.Check]?, windows: [Messages.WireRange]?) throws(SyncError) {
        try answerWindows(windows ?? [])
        guard let checks else { return }
        guard checks.count <= Messages.Hello.maxChecks else {
            throw SyncError(
                .protocolError,
                "the peer's hello carries \(checks.count) content checks; at most \(Messages.Hello.maxChecks) are allowed"
            )
        }
        var theirs: [ULID: String] = [:]
        for check in checks {
            guard let id = ULID(check.id), DivergentEvent.isHash(check.hash) else {
                throw SyncError(.protocolError, "the peer's content checks hold something that is not an id and a hash")
            }
            theirs[id] = check.hash
        }
        let ours = try storage { () throws(EventStoreError) in try node.log.contentHashes(ids: Array(theirs.keys)) }
        report.verified += ours.count
        var found: [DivergentEvent] = []
        var reply: [Messages.Check] = []
        for (id, hash) in ours.sorted(by: { $0.id < $1.id }) where theirs[id] != hash {
            guard let event = try storage({ () throws(EventStoreError) in try node.log.event(id) }) else { continue }
            found.append(divergent(id, origin: event.origin, here: hash, there: theirs[id]!))
            if reply.count < Messages.Done.maxDivergent { reply.append(Messages.Check(id: id.description, hash: hash)) }
        }
        divergentReply = reply
        try keep(found)
    }

    /// Digests the responder's windows over what this side holds in each range; those that
    /// differ (other content, or events only one side holds, such as a dead letter) go into
    /// the done's `recheck`.
    private func answerWindows(_ windows: [Messages.WireRange]) throws(SyncError) {
        let malformed = SyncError(
            .protocolError, "the peer's content windows hold something that is not a range with a count and a digest")
        guard windows.count <= Messages.Hello.maxWindows else {
            throw SyncError(
                .protocolError,
                "the peer's hello carries \(windows.count) content windows; at most \(Messages.Hello.maxWindows) are allowed"
            )
        }
        var total = 0
        var recheck: [Messages.WireRange] = []
        for window in windows {
            guard let origin = ULID(window.origin), let through = ULID(window.through), let count = window.count,
                count > 0, let hash = window.hash, DivergentEvent.isHash(hash), window.ids == nil
            else { throw malformed }
            let after = try window.after.map { (text) throws(SyncError) in
                guard let id = ULID(text), id < through else { throw malformed }
                return id
            }
            total += count
            guard total <= Messages.Hello.maxWindowEvents else {
                throw SyncError(
                    .protocolError,
                    "the peer's content windows cover more than \(Messages.Hello.maxWindowEvents) events")
            }
            let ours = try storage { () throws(EventStoreError) in
                try DivergenceLedger.hashes(of: origin, after: after, through: through, limit: count + 1, log: node.log)
            }
            report.verified += ours.count
            if ours.count != count || DivergenceLedger.digest(ours) != hash, recheck.count < Messages.Done.maxRecheck {
                recheck.append(
                    Messages.WireRange(
                        origin: window.origin, after: window.after, through: window.through, count: nil, hash: nil,
                        ids: nil))
            }
        }
        recheckReply = recheck
    }

    /// The responder takes the initiator's answer to its checks: the events listed that it
    /// checked with another hash are recorded; the windows it found different are checked
    /// event by event at the next session; the next session checks the next windows.
    private func takeDivergent(_ listed: [Messages.Check]?, recheck: [Messages.WireRange]?) throws(SyncError) {
        guard let (events, sent, next) = checksSent else { return }
        let listed = listed ?? []
        guard listed.count <= Messages.Done.maxDivergent else {
            throw SyncError(
                .protocolError,
                "the peer's done lists \(listed.count) divergent events; at most \(Messages.Done.maxDivergent) are allowed"
            )
        }
        var found: [DivergentEvent] = []
        for check in listed {
            guard let id = ULID(check.id), DivergentEvent.isHash(check.hash) else {
                throw SyncError(
                    .protocolError, "the peer's divergent events hold something that is not an id and a hash")
            }
            // Only what this side asked about, and truly different.
            guard let ours = events[id], ours.hash != check.hash else { continue }
            found.append(divergent(id, origin: ours.origin, here: ours.hash, there: check.hash))
        }
        try keep(found)
        let recheck = recheck ?? []
        guard recheck.count <= Messages.Done.maxRecheck else {
            throw SyncError(
                .protocolError,
                "the peer's done asks to recheck \(recheck.count) windows; at most \(Messages.Done.maxRecheck) are allowed"
            )
        }
        guard let peer = report.peerNode else { return }
        // Only windows this side sent: the peer cannot make it hash other ranges.
        let again = recheck.compactMap { range -> DivergenceLedger.Recheck? in
            guard let origin = ULID(range.origin), let through = ULID(range.through) else { return nil }
            let after = range.after.map(ULID.init)
            guard after != .some(nil) else { return nil }  // an `after` that is not an id
            let window = DivergenceLedger.Recheck(origin: origin, after: after ?? nil, through: through)
            return sent.contains(window) ? window : nil
        }
        report.windowsDiffering += again.count
        node.divergence.recheck(again, with: peer)
        node.divergence.advance(peer, to: next)
    }

    private func divergent(_ id: ULID, origin: ULID, here: String, there: String) -> DivergentEvent {
        DivergentEvent(
            id: id, origin: origin, peer: peerLabel, peerNode: report.peerNode, here: here, there: there,
            detectedAt: node.log.options.wallClock())
    }

    private func keep(_ found: [DivergentEvent]) throws(SyncError) {
        guard !found.isEmpty else { return }
        report.divergent += found.count
        let (_, unkept) = try storage { () throws(EventStoreError) in try DivergenceLedger.record(found, node: node) }
        report.divergentUnkept += unkept
    }

    private func readAck() throws(SyncError) {
        let ack = try Messages.decode(Messages.Ack.self, try expect(.ack).payload, frame: "ack")
        // Bounded as the batch it answers: at most the records a batch may hold.
        for text in (ack.deadLettered ?? []).prefix(BatchCodec.maxEvents * 10) {
            if let id = ULID(text) { report.peerDeadLetters.acked.insert(id) }
        }
        // Acks come in the order of the batches.
        if !awaitingAck.isEmpty, let held = awaitingAck.removeFirst() { acknowledged?(held.origin, held.through) }
    }

    // MARK: Dictionaries (`dictionary`)

    /// Says in this node's hello that it has no compression dictionary yet, when it has none.
    private func askForDictionary(in hello: inout Messages.Hello) throws(SyncError) {
        guard try !storage({ () throws(EventStoreError) in try node.log.hasDictionary() }) else { return }
        hello.needsDictionary = true
        askedForDictionary = true
    }

    /// Sends this node's dictionaries before its first batch, when the session agreed to
    /// `dictionary`, the peer's hello said it has none, and this node has one.
    private func offerDictionary() throws(SyncError) {
        guard peerNeedsDictionary, channel.agreement.capabilities.contains(Frame.dictionaryCapability),
            let dictionaries = try storage({ () throws(EventStoreError) in try node.log.currentDictionaries() })
        else { return }
        try channel.write(Frame(kind: .dictionary, payload: DictionaryFrame.encode(dictionaries)))
        report.dictionarySent = true
    }

    /// Takes the peer's dictionaries as this node's first: once, and only when this node
    /// asked. Bytes that are not a dictionary this node can use end the session (`protocol`).
    private func takeDictionary(_ frame: Frame) throws(SyncError) {
        guard askedForDictionary else {
            throw SyncError(
                .protocolError, "the peer sent a dictionary frame this node did not ask for, or a second one")
        }
        askedForDictionary = false
        // Loaded and tried here, on the session's thread: what a hostile peer sends costs
        // the writer nothing.
        let offered = try DictionaryFrame.decode(frame.payload)
        let loaded: LoadedDictionaries
        do {
            loaded = try offered.loaded(level: node.log.options.compressionLevel)
        } catch {
            throw SyncError(.protocolError, "the peer's dictionary frame: \(error.message)")
        }
        report.dictionaryAdopted = try storage { () throws(EventStoreError) in try node.adoptDictionaries(loaded) }
    }

    /// Puts the ids of the events this node holds as dead letters in its hello.
    private func listDeadLetters(in hello: inout Messages.Hello) throws(SyncError) {
        let (ids, cut) = try storage { () throws(EventStoreError) in
            try node.log.deadLetteredIDs(limit: Messages.Hello.maxDeadLetterIDs)
        }
        hello.deadLetters = ids.map(\.description)
        if cut { hello.deadLettersCut = true }
    }

    /// Takes the peer's batches, committing and acknowledging each, until it says done.
    ///
    /// Batches overlap: while the writer commits, this thread reads and decodes the next
    /// (`EventLog.predecode`: its JSON, fields and canonical payload) and hands it to the
    /// writer too, up to `handedBatches` batches and `handedBytes` bytes of events at a
    /// time. When the writer is the slower, the batches waiting for it are committed
    /// together, one transaction and one sync to disk for them all. Past either bound the
    /// oldest is settled first: its result waited for and acknowledged. When nothing more
    /// from the peer is waiting, the oldest are settled until something is: the peer may
    /// be waiting for an ack before it sends more. Acks go in the order of the batches,
    /// each once its batch is committed.
    private func receive() throws(SyncError) {
        /// A batch handed to the writer: its result, once there.
        final class Pending: @unchecked Sendable {
            let done = DispatchSemaphore(value: 0)
            var result: Result<IngestResult, EventStoreError>?
            /// Set before `done` is signalled: the writer is through with the batch.
            let finished = Atomic(false)
            let bytes: Int
            init(bytes: Int) { self.bytes = bytes }
        }
        // Signalled as the writer finishes each batch, so the session can wait for that or
        // the peer's next bytes, whichever comes first. Without it (no descriptor left)
        // the session waits for the writer alone, as it did before.
        let writerDone = try? EventFD()
        // Oldest first.
        var pending: [Pending] = []
        var pendingBytes = 0
        // Shared by the batches handed: each is allowed what those before it left.
        let allowance = DeadLetterAllowance(limits.deadLetters - report.deadLettered)
        let peer = IngestPeer(name: peerLabel, node: report.peerNode)
        /// Waits for the oldest batch in the writer and acknowledges it.
        func settle() throws(SyncError) {
            guard !pending.isEmpty else { return }
            let waiting = pending.removeFirst()
            pendingBytes -= waiting.bytes
            waiting.done.wait()
            let outcome = waiting.result!
            let result = try storage { () throws(EventStoreError) in try outcome.get() }
            report.received += result.ingested.count
            report.skipped += result.skipped
            report.deadLettered += result.deadLettered.count
            if report.deadLettered >= limits.deadLetters {
                // Whatever came before is committed; the peer learns why it gets no ack.
                throw SyncError(
                    .tooManyInvalid,
                    "the peer's invalid events made \(report.deadLettered) dead letters in this session, the most one may add (sync_session_max_dead_letters)\(result.refused > 0 ? "; the last \(result.refused) events of its batch were refused" : ""): see `evctl dead-letters`, and raise the limit if the peer is honest"
                )
            }
            // The ids of the new dead letters; left out when none, so the ack is what the
            // previous release sent.
            let ids = result.deadLettered.compactMap { $0.id.flatMap { ULID($0) }?.description }
            try send(
                .ack,
                Messages.Ack(
                    received: result.ingested.count, skipped: result.skipped,
                    deadLetters: result.deadLettered.count, deadLettered: ids.isEmpty ? nil : ids))
        }
        defer {
            // A session that fails leaves nothing running: what the writer has is committed
            // or refused before the session ends. A batch handed after the one that failed
            // may be committed unacknowledged; the peer sends it again, and it is skipped
            // as held.
            for waiting in pending { waiting.done.wait() }
        }
        while true {
            // Acknowledges what the writer is through with while the peer has sent nothing
            // more. A batch that arrives while the writer still works (or waits for the
            // disk's flush) is read and decoded meanwhile rather than after it.
            while let oldest = pending.first {
                if let writerDone, !oldest.finished.load(ordering: .acquiring) {
                    // One poll: bytes waiting end it at once, a batch finished loops.
                    if channel.waitForBytes(timeout: channel.timeoutSeconds, or: writerDone) { break }
                } else {
                    if channel.hasBytesWaiting { break }
                    try settle()
                }
            }
            let frame = try read()
            switch frame.kind {
            case .batch:
                let events = node.log.predecode(
                    try BatchCodec.decode(
                        frame.payload, decompressor: decompressor, maxEventBytes: StoreOptions.absoluteMaxEventBytes))
                let bytes = events.reduce(0) { $0 + $1.json.count }
                while !pending.isEmpty,
                    pending.count >= handedBatches || pendingBytes + bytes > SyncSession.handedBytes
                {
                    try settle()
                }
                let handed = Pending(bytes: bytes)
                pending.append(handed)
                pendingBytes += bytes
                node.ingestLater(events, peer, allowance) { result in
                    handed.result = result
                    handed.finished.store(true, ordering: .releasing)
                    handed.done.signal()
                    writerDone?.signal()
                }
            case .dictionary:
                try takeDictionary(frame)
            case .done:
                while !pending.isEmpty { try settle() }
                let done = try Messages.decode(Messages.Done.self, frame.payload, frame: "done")
                report.reconciledReceived = done.reconciled
                try takeDivergent(done.divergent, recheck: done.recheck)
                return
            default:
                throw SyncError(.protocolError, "the peer sent a \(frame.kind) frame where a batch or done belongs")
            }
        }
    }

    // MARK: Frames

    func send(_ kind: Frame.Kind, _ message: some Encodable) throws(SyncError) {
        try channel.write(Frame(kind: kind, payload: Messages.encode(message)))
    }

    /// The next frame; an error frame from the peer ends the session with its reason.
    func read() throws(SyncError) -> Frame {
        let frame = try channel.read()
        if frame.kind == .error {
            var failure = try Messages.decode(Messages.Failure.self, frame.payload, frame: "error")
            failure.reason = SyncError.shown(failure.reason, limit: 64)
            failure.message = SyncError.shown(failure.message, limit: 1000)
            if failure.reason == SyncError.forbiddenReason {
                // The peer's daemon will not let the account we reach it as write: retrying
                // cannot help until its configuration changes, as with a refused ssh key.
                throw SyncError(.authentication, "the peer refused the session (forbidden): \(failure.message)")
            }
            let reason = SyncError.Reason(rawValue: failure.reason)
            throw SyncError(
                reason == .protocolMismatch || reason == .busy ? reason! : .peerFailed,
                "the peer ended the session: \(failure.reason): \(failure.message)")
        }
        return frame
    }

    func expect(_ kind: Frame.Kind) throws(SyncError) -> Frame {
        let frame = try read()
        guard frame.kind == kind else {
            throw SyncError(.protocolError, "the peer sent a \(frame.kind) frame where a \(kind) frame belongs")
        }
        return frame
    }

    /// Runs a store call; its failure becomes a `storage` (or `storage_full`) error.
    func storage<R>(_ body: () throws(EventStoreError) -> R) throws(SyncError) -> R {
        do {
            return try body()
        } catch {
            if error.reason == .storageFull {
                throw SyncError(.storageFull, "this node cannot store more: \(error.message)")
            }
            throw SyncError(.storage, "this node's store failed: \(error)")
        }
    }
}
