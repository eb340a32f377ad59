// Replication: sync with other nodes — sessions, frames, reconciliation, peer URLs and
// records; it writes through a protocol it owns (`JobWriter`) and never sees the RPC socket.

import Dispatch
import EventStore
import FoundationEssentials
import Lifecycle
import Logging
import Projections
import Synchronization
import UnixSocket
import Wire

/// Peer names: what `evctl sync NAME` and the config file use.
package enum PeerName {
    package static let rule = "1 to 64 letters, digits, '.', '_' or '-', starting with a letter or a digit"

    package static func isValid(_ name: String) -> Bool {
        let bytes = Array(name.utf8)
        guard (1...64).contains(bytes.count), let first = bytes.first else { return false }
        func alnum(_ b: UInt8) -> Bool {
            (0x30...0x39).contains(b) || (0x41...0x5A).contains(b) || (0x61...0x7A).contains(b)
        }
        return alnum(first)
            && bytes.allSatisfy {
                alnum($0) || $0 == UInt8(ascii: ".") || $0 == UInt8(ascii: "_") || $0 == UInt8(ascii: "-")
            }
    }
}

/// Node names: the human name of a node (`node`), which its hello carries to every peer.
///
/// Looser than a peer name, since a node of 0.4 could be named anything (`Van 7`), and a
/// node named that way must still sync with this release; bounded, because the name goes
/// into the peer's log lines and dead letters.
package enum NodeName {
    package static let rule = "1 to 64 bytes of UTF-8 without control characters"

    package static func isValid(_ name: String) -> Bool {
        guard (1...64).contains(name.utf8.count) else { return false }
        return name.unicodeScalars.allSatisfy { scalar in
            !(scalar.value < 0x20 || (0x7F...0x9F).contains(scalar.value))
        }
    }
}

extension EventStoreError.Reason {
    /// `max_peers` peers are configured already: `peers.add` is refused.
    package static let tooManyPeers = EventStoreError.Reason(rawValue: "too_many_peers")
}

/// Replication in the daemon: the peers (from the config file and from `peers.add`, kept
/// in the store), a background thread that syncs each one on its schedule, `sync` on
/// demand, and the responder side of sessions other nodes start.
package final class SyncService: Sendable {
    package struct Settings: Equatable, Sendable {
        package var interval: Double
        package var backoffBase: Double
        package var backoffCap: Double
        package var timeout: Double
        package var maxIncomingSessions: Int
        package var maxOutgoingSessions: Int
        package var maxPeers: Int
        /// The request threads of the socket: `sync` calls may hold half of them at most.
        package var requestThreads: Int
        package var configPeers: [NamedPeer]
        package var sshCommand: [String]
        package var limits: SyncLimits

        package init(
            interval: Double, backoffBase: Double, backoffCap: Double, timeout: Double, maxIncomingSessions: Int,
            maxOutgoingSessions: Int, maxPeers: Int, requestThreads: Int, configPeers: [NamedPeer],
            sshCommand: [String], limits: SyncLimits
        ) {
            self.interval = interval
            self.backoffBase = backoffBase
            self.backoffCap = backoffCap
            self.timeout = timeout
            self.maxIncomingSessions = maxIncomingSessions
            self.maxOutgoingSessions = maxOutgoingSessions
            self.maxPeers = maxPeers
            self.requestThreads = requestThreads
            self.configPeers = configPeers
            self.sshCommand = sshCommand
            self.limits = limits
        }
    }

    package struct Peer: Equatable, Sendable {
        package var name: String
        package var url: String
        package var fromConfig: Bool
        /// What this node fetches of its blobs.
        package var blobs: BlobPolicy = .eager
    }

    /// One peer's sync, for `sync`'s answer.
    package struct Outcome: Sendable {
        package var name: String?
        package var url: String
        package var report: SyncReport
        package var error: SyncError?
        package var milliseconds: Int
    }

    /// What `status` shows of a peer.
    package struct PeerStatus: Sendable {
        package var peer: Peer
        package var schedule: PeerSchedule
        /// Nil when it could not be counted (the read failed): never 0 for "unknown".
        package var pending: Int?
        /// The blobs it asked for at its last session that were not sent whole; nil before
        /// a session that agreed to `blobs`.
        package var blobsPending: Int? = nil
    }

    package let node: SyncNode
    package let logger: Logger
    /// Where a failed write of peer state or fingerprints is raised, for `status` and the watchdog.
    package let health: Health
    /// Milliseconds since the epoch.
    package let now: @Sendable () -> UInt64
    let settings: Mutex<Settings>
    private let schedules = Mutex<[String: PeerSchedule]>([:])
    /// Per peer name: the peer's node id and, merged over the sessions, what it holds.
    private let known = Mutex<[String: Known]>([:])
    /// The outgoing sessions in progress: several at once, one per target.
    let outgoing: OutgoingSessions
    /// The `sync` calls in progress, each holding a request thread while its sessions run:
    /// at most half the request threads, so the other clients' requests always have some.
    /// Appends handed to their authority (`forward`) wait on request threads too, and count here.
    let syncCalls = Atomic<Int>(0)
    /// Per peer name, the name the peer gave in its last hello: how an authority is found
    /// among peers named otherwise.
    let helloNames = Mutex<[String: String]>([:])
    /// Per peer name, the blobs it asked for at its last session that this node holds and
    /// it did not keep (the session was cut, or it could not store them): pending for that
    /// peer, in `status` and in `get` with `sync`.
    let blobsWanted = Mutex<[String: Set<BlobHash>]>([:])
    /// Held while a `state/<name>` record is built and stored, so two sessions' records of
    /// one peer (an outgoing and an incoming one) are stored in the order they were built.
    private let persisting = Mutex<Void>(())
    /// Held while `peers.add` checks the peers and stores one, so two adds at once cannot
    /// take the peers past `max_peers`.
    private let adding = Mutex<Void>(())
    private let wake = DispatchSemaphore(value: 0)
    let stopping = Atomic<Bool>(false)
    private let finished = DispatchSemaphore(value: 0)
    private let running = Atomic<Bool>(false)
    /// Sessions other nodes started that are being answered, held to `max_incoming_sessions`:
    /// each holds a connection, a decompression context and up to a 64 MiB batch.
    private let incoming = Atomic<Int>(0)
    /// When a refusal for being busy was last logged (seconds since the epoch), and how many
    /// refusals were not logged since: a peer retrying in a loop must not flood the log.
    private let busyLog = Mutex<(at: Double, unlogged: Int)>((0, 0))

    package struct Known: Sendable {
        package var node: ULID?
        package var vector: [ULID: ULID] = [:]
        package var lastSuccess: UInt64?
        /// The ids of events the peer holds only as dead letters (or dropped), as its last
        /// hello and acks said: not delivered, though its vector covers them.
        package var deadLettered: Set<ULID> = []
    }

    package init(
        node: SyncNode, settings: Settings, logger: Logger, health: Health = Health(),
        now: @escaping @Sendable () -> UInt64 = SyncService.wallClock
    ) {
        self.node = node
        self.health = health
        self.settings = Mutex(settings)
        self.logger = logger
        self.now = now
        outgoing = OutgoingSessions(limit: settings.maxOutgoingSessions)
        loadKnown()
        takeBlobPolicies(settings)
    }

    /// The blob policies of the peers (configured and added), for the sessions.
    private func takeBlobPolicies(_ settings: Settings) {
        let policies = Dictionary(peers().map { ($0.name, $0.blobs) }, uniquingKeysWith: { first, _ in first })
        node.blobs?.policies.withLock { $0 = policies }
    }

    package static let wallClock: @Sendable () -> UInt64 = { UInt64(max(0, Date().timeIntervalSince1970 * 1000)) }

    // MARK: Peers

    /// Config peers first, then those added through the API, each name once.
    package func peers() -> [Peer] {
        let fromConfig = settings.withLock { $0.configPeers }.map {
            Peer(name: $0.name, url: $0.url, fromConfig: true, blobs: $0.blobs)
        }
        var seen = Set(fromConfig.map(\.name))
        var all = fromConfig
        let entries = storedPeerEntries()
        // `peer_blobs/NAME`: the policy of a peer added with one other than eager.
        var policies: [String: BlobPolicy] = [:]
        for entry in entries where entry.key.hasPrefix(SyncService.policyPrefix) {
            policies[String(entry.key.dropFirst(SyncService.policyPrefix.count))] = BlobPolicy(
                rawValue: String(decoding: entry.value, as: UTF8.self))
        }
        for entry in entries where entry.key.hasPrefix("peer/") {
            let name = String(entry.key.dropFirst("peer/".count))
            guard !seen.contains(name) else { continue }
            seen.insert(name)
            all.append(
                Peer(
                    name: name, url: String(decoding: entry.value, as: UTF8.self), fromConfig: false,
                    blobs: policies[name] ?? .eager))
        }
        return all
    }

    /// The peers table's records; none when it cannot be read, which is logged and raised
    /// as `peer_state` until a peer's state is stored again.
    private func storedPeerEntries() -> [(key: String, value: [UInt8])] {
        do {
            return try node.log.peerEntries()
        } catch {
            logger.error("cannot read the peers table: \(error)")
            health.raise(.peerState, "cannot read the peers table: \(error)")
            return []
        }
    }

    /// Recomputes the range fingerprints after a session stored events; a failure is logged
    /// and raised as `fingerprints` (sessions then compare stale ones and send more).
    private func refreshFingerprints() {
        do {
            try node.log.refreshFingerprints()
            health.lower(.fingerprints)
        } catch {
            logger.error("cannot refresh the range fingerprints: \(error)")
            health.raise(.fingerprints, "cannot refresh the range fingerprints: \(error)")
        }
    }

    static let policyPrefix = "peer_blobs/"

    package func add(name: String, url: String, blobs: BlobPolicy = .eager) throws(RPCError) -> [Peer] {
        guard PeerName.isValid(name) else {
            throw RPCError.invalidParams("peer name \"\(name)\" is not valid: \(PeerName.rule)")
        }
        do {
            _ = try PeerURL(url)
        } catch {
            throw RPCError.invalidParams(error.message)
        }
        let list = try adding.withLock { _ throws(RPCError) in try store(name: name, url: url, blobs: blobs) }
        takeBlobPolicies(settings.withLock { $0 })
        return list
    }

    private func store(name: String, url: String, blobs: BlobPolicy) throws(RPCError) -> [Peer] {
        let current = peers()
        if let existing = current.first(where: { $0.name == name }) {
            guard existing.url != url || existing.blobs != blobs else { return current }
            if !existing.fromConfig, existing.url == url {
                // The same peer with another blob policy: the policy changes.
                do {
                    try node.storePeerEntries([SyncService.policyEntry(name, blobs)])
                } catch {
                    throw RPCError(error)
                }
                return peers()
            }
            throw RPCError.application(
                .conflict,
                existing.fromConfig
                    ? "peer \(name) is defined in the config file; change it there and reload (SIGHUP)"
                    : "peer \(name) exists with URL \(existing.url); remove it first")
        }
        let limit = settings.withLock { $0.maxPeers }
        guard current.count < limit else {
            throw RPCError.application(
                .tooManyPeers,
                "this node has \(current.count) peers, the most max_peers allows (\(limit)): remove one with "
                    + "peers.remove, or raise max_peers in the daemon's configuration and reload it")
        }
        do {
            try node.storePeerEntries([
                PeerEntry(key: "peer/\(name)", value: Array(url.utf8)), SyncService.policyEntry(name, blobs),
            ])
        } catch {
            throw RPCError(error)
        }
        schedules.withLock { $0[name] = PeerSchedule(nextAttempt: now()) }
        wake.signal()
        return peers()
    }

    /// The peers-table entry of a peer's blob policy: none for eager, the default.
    static func policyEntry(_ name: String, _ policy: BlobPolicy) -> PeerEntry {
        PeerEntry(key: policyPrefix + name, value: policy == .eager ? nil : Array(policy.rawValue.utf8))
    }

    package func remove(name: String) throws(RPCError) -> [Peer] {
        guard let existing = peers().first(where: { $0.name == name }) else {
            throw RPCError.application(.notFound, "no peer is named \(name)")
        }
        guard !existing.fromConfig else {
            throw RPCError.application(
                .forbidden, "peer \(name) is defined in the config file; remove it there and reload (SIGHUP)")
        }
        do {
            try node.storePeerEntries([
                PeerEntry(key: "peer/\(name)", value: nil), PeerEntry(key: "state/\(name)", value: nil),
                SyncService.policyEntry(name, .eager),
            ])
        } catch {
            throw RPCError(error)
        }
        schedules.withLock { _ = $0.removeValue(forKey: name) }
        known.withLock { _ = $0.removeValue(forKey: name) }
        return peers()
    }

    /// Applies reloaded settings; peers that are new or whose URL changed are synced now.
    package func update(_ fresh: Settings) {
        let before = Dictionary(peers().map { ($0.name, $0.url) }, uniquingKeysWith: { first, _ in first })
        settings.withLock { $0 = fresh }
        takeBlobPolicies(fresh)
        outgoing.setLimit(fresh.maxOutgoingSessions)
        let current = now()
        let changed = peers().filter { before[$0.name] != $0.url }.map(\.name)
        schedules.withLock { schedules in
            for name in changed { schedules[name] = PeerSchedule(nextAttempt: current) }
        }
        wake.signal()
    }

    /// The network may have come back (an address, route or link appeared): every peer
    /// that is retrying or failing is synced now, its backoff started over; but a peer's
    /// wait is cut at most once per `backoff_base_s`, and the cuts back off as its retries
    /// do (`PeerSchedule.networkReturned`), so a flapping link cannot keep failing peers
    /// retrying without pause.
    package func networkChanged() {
        let at = now()
        let (base, cap) = settings.withLock { ($0.backoffBase, $0.backoffCap) }
        let (reset, held) = schedules.withLock { schedules in
            var reset = 0
            var held = 0
            for name in schedules.keys where schedules[name]!.failures > 0 {
                if schedules[name]!.networkReturned(at: at, base: base, cap: cap) {
                    reset += 1
                } else {
                    held += 1
                }
            }
            return (reset, held)
        }
        guard reset > 0 else {
            if held > 0 {
                logger.debug(
                    "the network changed: \(held) failing peer\(held == 1 ? " was" : "s were") synced after the last "
                        + "change already; they wait for their backoff")
            }
            return
        }
        logger.info(
            "the network changed: syncing \(reset) peer\(reset == 1 ? "" : "s") that failed before, backoff reset"
                + (held > 0 ? " (\(held) more synced after a recent change wait for their backoff)" : ""))
        wake.signal()
    }

    // MARK: Background

    package func start() {
        running.store(true, ordering: .relaxed)
        startServiceThread(name: "evstored-sync") { [self] in
            schedule()
            finished.signal()
        }
    }

    /// Ends the background thread; every outgoing session in progress is cut (the batches
    /// acknowledged so far are kept, the next session resumes) and waited for.
    package func stop() {
        stopping.store(true, ordering: .relaxed)
        outgoing.stopAll()
        if running.load(ordering: .relaxed) {
            wake.signal()
            finished.wait()
        }
        // A cut session ends at once; one starting a process gives it a moment to exit.
        if !outgoing.waitUntilIdle(timeout: 10) {
            logger.warning("sync sessions still running after 10 s of stopping; stopping anyway")
        }
    }

    private func schedule() {
        refreshFingerprints()
        while !stopping.load(ordering: .relaxed) {
            let peers = peers()
            let current = now()
            var due: [Peer] = []
            var earliest = current + 60_000
            // A peer whose session runs is looked at again when a session ends (it wakes
            // this thread), not before: its next attempt is set then.
            schedules.withLock { schedules in
                for peer in peers {
                    let schedule = schedules[peer.name] ?? PeerSchedule(nextAttempt: current)
                    schedules[peer.name] = schedule
                    if schedule.nextAttempt <= current {
                        if !outgoing.isActive(SyncService.target(of: peer.url)) { due.append(peer) }
                    } else {
                        earliest = min(earliest, schedule.nextAttempt)
                    }
                }
                for name in schedules.keys where !peers.contains(where: { $0.name == name }) {
                    schedules.removeValue(forKey: name)
                }
            }
            // Each due peer's session on a thread of its own, while slots are free; the rest
            // wait for a session to end.
            for peer in due {
                if stopping.load(ordering: .relaxed) { return }
                let key = SyncService.target(of: peer.url)
                guard case .owner(let attempt) = outgoing.claim(key, until: nil) else { continue }
                runOnThread(name: "evstored-sync-out") { [self] in
                    _ = finishSession(of: peer, key, attempt)
                    wake.signal()
                }
            }
            let wait = Double(earliest - min(earliest, now())) / 1000
            _ = wake.wait(timeout: .now() + min(max(wait, 0.01), 60))
        }
    }

    // MARK: Sessions

    /// What a peer URL reaches (`PeerURL.target`), the key of its outgoing sessions. A URL
    /// that does not parse (none should: config and API URLs are checked when given) is its
    /// own target, and its session fails with the reason.
    package static func target(of url: String) -> String {
        do {
            return try PeerURL(url).target
        } catch {
            return "url " + url
        }
    }

    /// The peer whose URL reaches what `url` reaches, however either is spelled.
    package func peer(reaching url: String) -> Peer? {
        let peers = peers()
        if let peer = peers.first(where: { $0.url == url }) { return peer }
        let key = SyncService.target(of: url)
        return peers.first { SyncService.target(of: $0.url) == key }
    }

    /// Syncs now with the peer named `target`, with a URL, or (nil) with every peer.
    ///
    /// The caller's request thread waits for the sessions, so at most half the request
    /// threads wait in `sync` at once: past that the call is `unavailable` at once. A
    /// target whose session is running already is joined, not started twice; when every
    /// outgoing session is busy, a call waits `sync_timeout_s` for one, then answers
    /// `unavailable`.
    package func syncNow(_ target: String?) throws(RPCError) -> [Outcome] {
        let settings = settings.withLock { $0 }
        let callers = max(1, settings.requestThreads / 2)
        guard syncCalls.add(1, ordering: .relaxed).newValue <= callers else {
            syncCalls.subtract(1, ordering: .relaxed)
            throw RPCError.application(
                .unavailable,
                "\(callers) sync calls are in progress already, the most that may wait at once (half of request_threads); retry when one has answered"
            )
        }
        defer { syncCalls.subtract(1, ordering: .relaxed) }
        guard let target else { return syncConcurrently(peers()) }
        if let peer = peers().first(where: { $0.name == target }) { return [try answer(sync(peer))] }
        guard target.contains(":") else {
            throw RPCError.application(.notFound, "no peer is named \(target); `evctl peers list` shows them")
        }
        let url: PeerURL
        do {
            url = try PeerURL(target)
        } catch {
            throw RPCError.invalidParams(error.message)
        }
        if let peer = peer(reaching: target) { return [try answer(sync(peer))] }
        // A URL given once: one session for its target at a time, like a peer's.
        let key = url.target
        switch outgoing.claim(key, until: slotDeadline(settings)) {
        case .owner(let attempt):
            let outcome = run(url: target, name: nil)
            outgoing.finish(key, attempt, with: outcome)
            return [outcome]
        case .joined(let attempt):
            guard let outcome = outgoing.outcome(of: attempt) else { throw allBusy(settings) }
            return [
                Outcome(
                    name: nil, url: target, report: outcome.report, error: outcome.error,
                    milliseconds: outcome.milliseconds)
            ]
        case .busy, .timedOut:
            throw allBusy(settings)
        }
    }

    /// A single sync's outcome, or `unavailable` when it never got a session.
    private func answer(_ outcome: Outcome?) throws(RPCError) -> Outcome {
        guard let outcome else { throw allBusy(settings.withLock { $0 }) }
        return outcome
    }

    private func slotDeadline(_ settings: Settings) -> ContinuousClock.Instant {
        .now + .milliseconds(Int64(clamping: Int((settings.timeout * 1000).rounded())))
    }

    private func allBusy(_ settings: Settings) -> RPCError {
        RPCError.application(
            .unavailable,
            "all \(outgoing.slots) outgoing sync sessions stayed busy for \(Int(settings.timeout)) s (max_outgoing_sessions, sync_timeout_s); retry"
        )
    }

    /// Every peer's session (at most `max_outgoing_sessions` running), the outcomes in the
    /// peers' order. As many threads as there are slots take the peers in turn: never a
    /// thread per peer. A peer that gets no slot within `sync_timeout_s` is answered `busy`.
    private func syncConcurrently(_ peers: [Peer]) -> [Outcome] {
        guard !peers.isEmpty else { return [] }
        // Threads, not the dispatch pool: it runs as many blocks as there are cores, and a
        // session mostly waits on its peer.
        let outcomes = Mutex<[Outcome?]>(Array(repeating: nil, count: peers.count))
        let next = Atomic<Int>(0)
        let done = DispatchGroup()
        for _ in 0..<min(peers.count, outgoing.slots) {
            done.enter()
            runOnThread(name: "evstored-sync-now") { [self] in
                while true {
                    let index = next.add(1, ordering: .relaxed).oldValue
                    guard index < peers.count else { break }
                    let peer = peers[index]
                    let outcome =
                        sync(peer)
                        ?? Outcome(
                            name: peer.name, url: peer.url, report: SyncReport(),
                            error: SyncError(
                                .busy,
                                "no outgoing session became free within \(Int(settings.withLock { $0.timeout })) s (max_outgoing_sessions); the peer syncs on its schedule"
                            ), milliseconds: 0)
                    outcomes.withLock { $0[index] = outcome }
                }
                done.leave()
            }
        }
        done.wait()
        return outcomes.withLock { $0.map { $0! } }
    }

    /// A sync with a known peer now: its schedule and what it holds are updated; nil when
    /// no outgoing session became free within `sync_timeout_s`.
    ///
    /// When the session of the peer's target is running already (the background one),
    /// waits for it: a failure is the answer (a silent peer costs `sync_timeout_s` once, not
    /// twice); after a success a new session starts, so that everything appended before the
    /// call is sent.
    private func sync(_ peer: Peer) -> Outcome? {
        let key = SyncService.target(of: peer.url)
        let deadline = slotDeadline(settings.withLock { $0 })
        var joined = 0
        while true {
            switch outgoing.claim(key, until: deadline) {
            case .owner(let attempt):
                return finishSession(of: peer, key, attempt)
            case .joined(let attempt):
                guard let outcome = outgoing.outcome(of: attempt) else { return nil }
                joined += 1
                if outcome.error != nil || joined > 2 {
                    return Outcome(
                        name: peer.name, url: peer.url, report: outcome.report, error: outcome.error,
                        milliseconds: outcome.milliseconds)
                }
            case .busy, .timedOut:
                return nil
            }
        }
    }

    /// Runs the session `claim` gave to the caller, updates the peer's schedule and what it
    /// holds, stores them, and frees the slot of `key`.
    private func finishSession(of peer: Peer, _ key: String, _ attempt: OutgoingSessions.Attempt) -> Outcome {
        let outcome = run(url: peer.url, name: peer.name)
        defer { outgoing.finish(key, attempt, with: outcome) }
        let settings = settings.withLock { $0 }
        let at = now()
        // A session the stop cut is no failure of the peer's: its schedule stays as it was
        // (what it acknowledged is still stored below).
        let cut = outcome.error != nil && stopping.load(ordering: .relaxed)
        if !cut {
            schedules.withLock { schedules in
                var schedule = schedules[peer.name] ?? PeerSchedule(nextAttempt: at)
                if let error = outcome.error {
                    schedule.failed(
                        error, at: at, base: settings.backoffBase, cap: settings.backoffCap,
                        jitter: Double.random(in: 0..<1))
                } else {
                    schedule.succeeded(at: at, interval: settings.interval)
                }
                schedules[peer.name] = schedule
            }
        }
        warnOfSharedName(outcome.report, peer: peer.name)
        if let name = outcome.report.peerName { helloNames.withLock { $0[peer.name] = name } }
        if outcome.report.capabilities.contains(Frame.blobsCapability) {
            blobsWanted.withLock { $0[peer.name] = Set(outcome.report.peerLacksBlobs) }
        }
        if outcome.error == nil {
            remember(
                peer.name, node: outcome.report.peerNode, vector: outcome.report.peerVector,
                deadLetters: outcome.report.peerDeadLetters, at: at)
        } else {
            persist(peer.name)
        }
        return outcome
    }

    private func run(url: String, name: String?) -> Outcome {
        let settings = settings.withLock { $0 }
        let started = ContinuousClock.now
        var report = SyncReport()
        var failure: SyncError?
        do throws(SyncError) {
            if stopping.load(ordering: .relaxed) { throw SyncError(.closed, "the daemon is stopping") }
            let link = try PeerLink.open(try PeerURL(url), ssh: settings.sshCommand, timeout: settings.timeout)
            outgoing.hold(link.connection)
            defer { outgoing.forget(link.connection) }
            let session = SyncSession(
                node: node, channel: FrameChannel(connection: link.connection, timeoutSeconds: settings.timeout),
                peerLabel: name ?? url, limits: settings.limits)
            session.configuredPeer = name
            if let name {
                // What the peer acknowledged is held there: `pending` counts down batch by batch.
                session.acknowledged = { [self] origin, through in advance(name, origin: origin, through: through) }
            }
            do {
                report = try session.initiate()
            } catch {
                report = session.report
                failure = error
            }
            failure = link.close(after: failure, timeout: settings.timeout)
        } catch {
            failure = error
        }
        let elapsed = ContinuousClock.now - started
        let milliseconds = Int(
            elapsed.components.seconds * 1000 + elapsed.components.attoseconds / 1_000_000_000_000_000)
        let label = name ?? url
        if report.received > 0 { refreshFingerprints() }
        if let failure {
            logger.warning("sync with \(label) failed after \(milliseconds) ms: \(failure)")
        } else {
            let blobs =
                report.blobsSent + report.blobsReceived > 0
                ? ", blobs sent \(report.blobsSent) (\(report.blobBytesSent) bytes), received \(report.blobsReceived) (\(report.blobBytesReceived) bytes)"
                : ""
            logger.info(
                "sync with \(label): sent \(report.sent), received \(report.received)\(blobs)\(report.dictionaryNote) in \(milliseconds) ms (\(report.bytesSent) bytes out, \(report.bytesReceived) in, protocol \(report.protocolVersion ?? 1))"
            )
        }
        logDivergence(report, peer: label)
        return Outcome(name: name, url: url, report: report, error: failure, milliseconds: milliseconds)
    }

    /// A peer whose hello gives this node's own name with another node id: two nodes claim
    /// one name, and where a types file makes that name an authority both decide. Said in the
    /// log on every session; a second decision on one proposal is listed under attention.
    func warnOfSharedName(_ report: SyncReport, peer: String) {
        guard let name = node.name, report.peerName == name, let other = report.peerNode, other != node.log.nodeID
        else { return }
        logger.warning(
            "peer \(peer) is node \(other) and calls itself \(name), this node's name: two nodes claim one name. If a types file names \(name) as an authority, both decide; give one of them another node_name"
        )
    }

    /// Events a session found held with other content on the peer: one of the two nodes
    /// holds a forgery or a damaged event under that id.
    private func logDivergence(_ report: SyncReport, peer: String) {
        if report.windowsDiffering > 0 {
            logger.info(
                "sync from \(peer): \(report.windowsDiffering) content window\(report.windowsDiffering == 1 ? "" : "s") differed there; the next session compares their events one by one"
            )
        }
        guard report.divergent > 0 else { return }
        logger.warning(
            "sync with \(peer): \(report.divergent) of the \(report.verified) events compared are held there with other content under the same id (divergent; see `evctl attention`)"
                + (report.divergentUnkept > 0
                    ? "; \(report.divergentUnkept) of them were not recorded: \(DivergentEvent.maxRecords) records are held already"
                    : ""))
    }

    /// Refuses a session another node started on this daemon's socket: answers the
    /// preamble with its own and an error frame of `reason` (`forbidden`, which the
    /// initiator reports as `auth`, or `busy`) carrying `message`, then reads what the peer
    /// still sends until it hangs up, so it is not cut off before it has read the refusal:
    /// for at most the timeout (5 s at most) in all, so a peer that trickles bytes cannot
    /// hold the connection.
    package func refuse(_ connection: UnixConnection, message: String, reason: String = SyncError.forbiddenReason) {
        let timeout = min(settings.withLock { $0.timeout }, 5)
        let channel = FrameChannel(connection: connection, timeoutSeconds: timeout)
        do throws(SyncError) {
            try channel.writePreamble()
            try channel.write(
                Frame(
                    kind: .error,
                    payload: Messages.encode(Messages.Failure(reason: reason, message: message))))
        } catch {
            return
        }
        drain(connection, seconds: timeout, bytes: 64 << 20)
    }

    /// Once this side has said its last (a refusal, or the error frame of a failed
    /// session): stops writing and reads what the peer still sends until it hangs up, for
    /// `seconds` and `bytes` at most, so the peer reads the error frame rather than a reset
    /// (closing a socket with unread bytes in it resets the connection).
    private func drain(_ connection: UnixConnection, seconds: Double, bytes: Int) {
        connection.shutdownWriting()
        var discard: [UInt8] = []
        var total = 0
        let deadline = ContinuousClock.now + .seconds(seconds)
        while total < bytes, ContinuousClock.now < deadline,
            let count = try? connection.read(into: &discard, count: 64 * 1024), count > 0
        {
            total += count
            discard.removeAll(keepingCapacity: true)
        }
    }

    /// Answers a session another node started on this daemon's socket, once its preamble
    /// (protocol `version`) was read; `buffered` holds what came after the preamble.
    ///
    /// Past `max_incoming_sessions` sessions in progress, the new one is refused with an
    /// error frame of reason `busy` (the initiator retries on its schedule); those in
    /// progress go on.
    package func serve(_ connection: UnixConnection, buffered: [UInt8], version: Int) {
        let settings = settings.withLock { $0 }
        let limit = settings.maxIncomingSessions
        guard incoming.add(1, ordering: .relaxed).newValue <= limit else {
            incoming.subtract(1, ordering: .relaxed)
            logBusy(limit: limit)
            refuse(
                connection,
                message:
                    "this node is answering \(limit) sync sessions already, its limit (max_incoming_sessions); the next attempt may get through",
                reason: SyncError.Reason.busy.rawValue)
            return
        }
        defer { incoming.subtract(1, ordering: .relaxed) }
        let session = SyncSession(
            node: node,
            channel: FrameChannel(connection: connection, timeoutSeconds: settings.timeout, buffered: buffered),
            peerLabel: "", limits: settings.limits)
        do {
            let report = try session.respond(initiatorVersion: version)
            if report.forwarded {
                logger.info("\(session.peerLabel) handed this node an append (forward)")
                return
            }
            if report.received > 0 { refreshFingerprints() }
            logger.info(
                "sync from \(session.peerLabel): received \(report.received), sent \(report.sent)\(report.dictionaryNote) (\(report.bytesReceived) bytes in, \(report.bytesSent) out, protocol \(report.protocolVersion ?? 1))"
            )
            logDivergence(report, peer: session.peerLabel)
            warnOfSharedName(report, peer: session.peerLabel)
            // A configured peer that syncs with us: what it holds is known now too.
            let at = now()
            let names = known.withLock { known in known.filter { $0.value.node == report.peerNode }.map(\.key) }
            for name in names {
                remember(
                    name, node: report.peerNode, vector: report.peerVector, deadLetters: report.peerDeadLetters, at: at)
                if report.capabilities.contains(Frame.blobsCapability) {
                    blobsWanted.withLock { $0[name] = Set(report.peerLacksBlobs) }
                }
            }
        } catch {
            logger.warning("sync from \(session.peerLabel.isEmpty ? "a peer" : session.peerLabel) failed: \(error)")
            // A peer of another version may still be sending its hello; one that goes on
            // with a refused frame is not read for long.
            if error.reason != .closed && error.reason != .timeout {
                drain(connection, seconds: min(settings.timeout, 5), bytes: 1 << 20)
            }
        }
    }

    /// Logs a refusal for being busy, at most once a minute with the count of those since.
    private func logBusy(limit: Int) {
        let now = Date().timeIntervalSince1970
        let unlogged = busyLog.withLock { state -> Int? in
            guard now - state.at >= 60 else {
                state.unlogged += 1
                return nil
            }
            defer { state = (now, 0) }
            return state.unlogged
        }
        guard let unlogged else { return }
        logger.warning(
            "refused a sync session: \(limit) from other nodes are in progress (max_incoming_sessions)"
                + (unlogged > 0 ? "; \(unlogged) more refused since the last such message" : ""))
    }

    // MARK: What peers hold

    /// Records what a peer holds after a successful session, in memory and in the store.
    private func remember(
        _ name: String, node peerNode: ULID?, vector: [ULID: ULID], deadLetters: PeerDeadLetters = PeerDeadLetters(),
        at: UInt64
    ) {
        known.withLock { known in
            var entry = known[name] ?? Known()
            entry.node = peerNode ?? entry.node
            entry.vector.merge(vector) { max($0, $1) }
            entry.deadLettered = deadLetters.applied(to: entry.deadLettered)
            entry.lastSuccess = at
            known[name] = entry
        }
        persist(name)
    }

    /// The peer acknowledged the events of `origin` through `through` in the session in
    /// progress: they are committed there, and the events of an origin are sent in id
    /// order from what the peer held, so it holds that origin's prefix through `through`.
    private func advance(_ name: String, origin: ULID, through: ULID) {
        known.withLock { known in
            var entry = known[name] ?? Known()
            entry.vector[origin] = max(through, entry.vector[origin] ?? through)
            known[name] = entry
        }
    }

    /// Stores the peer's `state/<name>` record: what it holds and its schedule, so a restart
    /// keeps both. Through the writer, like every write.
    private func persist(_ name: String) {
        persisting.withLock { _ in
            // A peer removed meanwhile keeps no record.
            guard peers().contains(where: { $0.name == name }) else { return }
            let state = PeerState(
                known: known.withLock { $0[name] } ?? Known(), schedule: schedules.withLock { $0[name] },
                url: peers().first { $0.name == name }?.url)
            guard let bytes = state.encoded() else { return }
            do {
                try node.storePeerEntries([PeerEntry(key: "state/\(name)", value: bytes)])
                health.lower(.peerState)
            } catch {
                logger.error("cannot store the sync state of peer \(name): \(error)")
                health.raise(.peerState, "cannot store the sync state of peer \(name): \(error)")
            }
        }
    }

    /// What each peer held and how its syncs went, as the last run of the daemon left them.
    private func loadKnown() {
        var loaded: [String: Known] = [:]
        var restored: [String: PeerSchedule] = [:]
        let urls = Dictionary(peers().map { ($0.name, $0.url) }, uniquingKeysWith: { first, _ in first })
        for entry in storedPeerEntries() where entry.key.hasPrefix("state/") {
            guard let state = PeerState(decoding: entry.value) else { continue }
            let name = String(entry.key.dropFirst("state/".count))
            loaded[name] = state.known
            // The schedule was that of the URL the peer had then: one changed in the config
            // file since is due at once, as after a reload that changes it.
            if let schedule = state.schedule, state.url == nil || state.url == urls[name] {
                restored[name] = schedule
            }
        }
        known.withLock { $0 = loaded }
        schedules.withLock { $0 = restored }
    }

    /// Every peer with its schedule and how many local events it lacks by what it last held.
    package func status() -> [PeerStatus] {
        let current = now()
        return peers().map { peer in
            let known = known.withLock { $0[peer.name] } ?? Known()
            var schedule = schedules.withLock { $0[peer.name] } ?? PeerSchedule(nextAttempt: current)
            if schedule.lastSuccess == nil { schedule.lastSuccess = known.lastSuccess }
            // Events after its vector, and those it holds only as dead letters.
            let pending: Int?
            do {
                pending =
                    try node.log.countAfter(known.vector)
                    + node.log.countHeld(known.deadLettered, within: known.vector)
            } catch {
                pending = nil
            }
            return PeerStatus(
                peer: peer, schedule: schedule, pending: pending,
                blobsPending: blobsWanted.withLock { $0[peer.name]?.count })
        }
    }

    /// The blobs this node holds that `peer` asked for at its last session and still lacks.
    package func blobsLacking(_ peer: String) -> Set<BlobHash> { blobsWanted.withLock { $0[peer] ?? [] } }

    /// Every peer with what it is known to hold and its schedule, without counting what it
    /// lacks: per-item sync status looks only at the events it is asked about.
    package func standings() -> [(peer: Peer, known: Known, schedule: PeerSchedule)] {
        let current = now()
        return peers().map { peer in
            let known = known.withLock { $0[peer.name] } ?? Known()
            var schedule = schedules.withLock { $0[peer.name] } ?? PeerSchedule(nextAttempt: current)
            if schedule.lastSuccess == nil { schedule.lastSuccess = known.lastSuccess }
            return (peer, known, schedule)
        }
    }
}
