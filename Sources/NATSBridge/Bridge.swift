import Backoff
import Dispatch
import FoundationEssentials
import JetStream
import Logging
import Projections
import Synchronization
import UnixSocket

/// Publishes every event a node stores into a JetStream stream, exactly once however often
/// either side crashes: it reads the daemon's feed as a durable consumer, in seq order,
/// publishes each event with its id as `Nats-Msg-Id` (JetStream drops a copy), and
/// acknowledges a seq to the daemon only once JetStream has acknowledged every event up to
/// it. After a crash of anything it publishes again from the last seq acknowledged: what
/// was stored already is dropped as a duplicate, nothing is skipped.
///
/// One session is one connection to each side. Any failure ends the session; the next one
/// starts after a backoff (doubling from `backoff_base_s` to `backoff_cap_s`, with jitter).
/// A stream that takes the events' subjects but is not the configured one is such a
/// failure too: its acknowledgement is not taken, so the bridge waits until the server is
/// set right, then goes on from where it stopped.
///
/// Passwords and tokens never reach the log: the URLs it names are redacted, and every line
/// is scrubbed of the configured secrets before it is written.
public final class Bridge: Sendable {
    let configuration: BridgeConfiguration
    let logger: RedactingLogger
    private let stopping = Atomic<Bool>(false)
    /// Wakes a backoff wait, and guards nothing else.
    private let wake = Condition()
    /// The session's watch connection, so `stop()` and a publish failure can end its read.
    private let feed = Mutex<DaemonLink?>(nil)
    /// The node and the seq JetStream confirmed in the sessions so far: a new session with
    /// the same node acknowledges it first when the daemon lost a later acknowledgement (it
    /// was restarted). Another node's seqs say nothing of this one's.
    private let remembered = Mutex<(node: String, seq: UInt64)?>(nil)

    public init(configuration: BridgeConfiguration, logger: Logger) {
        self.configuration = configuration
        self.logger = RedactingLogger(logger: logger, redactor: Redactor(configuration.server))
    }

    /// Runs sessions until `stop()`; the exit status.
    public func run() -> Int32 {
        var failures = 0
        while !stopping.load(ordering: .acquiring) {
            do throws(BridgeError) {
                try session()
                failures = 0
            } catch {
                if stopping.load(ordering: .acquiring) { break }
                failures += 1
                let delay = backoff(failures: failures)
                logger.error("\(error); trying again in \(Bridge.seconds(delay))")
                wait(seconds: delay)
            }
        }
        logger.info("stopped")
        return 0
    }

    /// Ends the run: the session stops reading, waits (briefly) for the acknowledgements of
    /// what it published, acknowledges them to the daemon, and `run()` returns.
    public func stop() {
        stopping.store(true, ordering: .releasing)
        feed.withLock { $0?.shutdown() }
        wake.lock()
        wake.broadcast()
        wake.unlock()
    }

    /// Ends the session running (its watch), not the run: the next session starts afresh.
    func endSession() {
        feed.withLock { $0?.shutdown() }
    }

    /// The wait before the next session after `failures` in a row: the base doubled per
    /// failure, times a random factor from 0.5 to 1.5, never more than the cap (`Backoff`,
    /// as the daemon waits for a failing peer).
    func backoff(failures: Int) -> Double {
        Backoff(base: Double(configuration.backoffBaseSeconds), cap: Double(configuration.backoffCapSeconds))
            .delay(afterFailures: failures)
    }

    private func wait(seconds: Double) {
        let deadline = ContinuousClock.now + .milliseconds(Int(seconds * 1000))
        wake.lock()
        while !stopping.load(ordering: .acquiring), wake.wait(until: deadline) {}
        wake.unlock()
    }

    static func seconds(_ value: Double) -> String {
        value < 10 ? "\(Double(Int(value * 10)) / 10) s" : "\(Int(value)) s"
    }

    // MARK: A session

    private func session() throws(BridgeError) {
        let control = try DaemonLink(path: configuration.socketPath)
        let status = try control.call("status")
        let node = status["node"] as? [String: Any] ?? [:]
        guard let nodeID = node["id"] as? String else { throw .daemon("evstored's status names no node id") }
        let nodeText = nodeID + ((node["name"] as? String).map { " (\($0))" } ?? "")
        var cursor = try start(control)
        if let known = remembered.withLock({ $0 }), known.node == nodeID, known.seq > cursor {
            // JetStream confirmed more than the daemon kept (it was restarted meanwhile).
            do {
                cursor = try acknowledge(known.seq, on: control)
            } catch {
                logger.warning("resuming after seq \(cursor): \(error)")
            }
        }

        let confirmations = Confirmations(confirmed: cursor) { [weak self] _ in
            // From a libnats thread: end the feed's read; the session ends on the failure.
            self?.endSession()
        }
        let nats: JetStreamConnection
        do {
            nats = try JetStreamConnection(options: configuration.natsOptions, onPublishResult: confirmations.complete)
        } catch {
            throw .nats(error.description)
        }
        var ended: BridgeError?
        let acker = Acknowledger(bridge: self, control: control, confirmations: confirmations, from: cursor)
        do throws(BridgeError) {
            try ensureStream(nats)
            let head = status["seq"] as? Int ?? 0
            logger.info(
                "publishing the events of node \(nodeText) to stream \(configuration.stream) at \(nats.connectedURL) as \(configuration.prefix).<type>, reading as consumer \(configuration.consumer) after seq \(cursor) (\(max(0, head - Int(cursor))) behind)"
            )
            acker.start()
            try publish(after: cursor, node: nodeID, nats: nats, confirmations: confirmations)
        } catch {
            ended = error
        }
        // What was sent is acknowledged (or refused, or timed out) before the connection
        // closes, so the last acknowledgement to the daemon covers all that JetStream holds.
        do {
            try nats.waitForPublishes(timeout: .seconds(configuration.timeoutSeconds))
        } catch {
            // Each one left is reported as failed when the connection closes, below.
            logger.warning("closing the session: \(error)")
        }
        var takers = ""
        if confirmations.failure?.code == .streamMismatch {
            takers = streamsTakingTheSubjects(nats)
        }
        nats.close()
        acker.finish()
        remembered.withLock { $0 = (nodeID, confirmations.confirmed) }
        if let failure = confirmations.failure {
            if failure.code == .streamMismatch {
                let stream = configuration.stream
                throw .nats(
                    "publishing to stream \(stream) at \(nats.connectedURL) failed after seq \(confirmations.confirmed): another stream takes the events' subjects\(takers), and stream \(stream) does not: nothing after seq \(confirmations.confirmed) is acknowledged to evstored until stream \(stream) takes \(configuration.prefix).> (or the bridge is set to the stream that does); \(failure)"
                )
            }
            throw .nats("publishing to \(nats.connectedURL) failed after seq \(confirmations.confirmed): \(failure)")
        }
        if let ended { throw ended }
        if !stopping.load(ordering: .acquiring) {
            throw .daemon("evstored at \(configuration.socketPath) closed the connection (it stopped?)")
        }
    }

    /// The seq the consumer acknowledged; creates the consumer when the daemon has none
    /// (at the start of the log, or its head, as `start` says).
    private func start(_ control: DaemonLink) throws(BridgeError) -> UInt64 {
        let listed = try control.call("consumers.list")
        let consumers = listed["consumers"] as? [[String: Any]] ?? []
        if let consumer = consumers.first(where: { $0["name"] as? String == configuration.consumer }) {
            return UInt64(consumer["seq"] as? Int ?? 0)
        }
        let seq = configuration.start == .all ? 0 : UInt64(listed["head"] as? Int ?? 0)
        try acknowledge(seq, on: control)
        logger.notice(
            "created consumer \(configuration.consumer) of evstored at seq \(seq) (\(configuration.start == .all ? "every event held" : "events from now on"))"
        )
        return seq
    }

    /// Acknowledges `seq` for the bridge's consumer; the seq now kept.
    @discardableResult
    func acknowledge(_ seq: UInt64, on control: DaemonLink) throws(BridgeError) -> UInt64 {
        let result = try control.call("consumers.ack", #"{"name":"\#(configuration.consumer)","seq":\#(seq)}"#)
        let consumers = result["consumers"] as? [[String: Any]] ?? []
        let kept = consumers.first { $0["name"] as? String == configuration.consumer }?["seq"] as? Int
        return kept.map(UInt64.init) ?? seq
    }

    /// " (stream OTHER takes subjects of evstore.>)": the other streams that take the
    /// bridge's subjects, for an error; "" when the server cannot say.
    private func streamsTakingTheSubjects(_ nats: JetStreamConnection) -> String {
        let subjects = configuration.prefix + ".>"
        do {
            let others = try nats.streamNames(subject: subjects).filter { $0 != configuration.stream }
            guard !others.isEmpty else { return "" }
            let named =
                others.count == 1 ? "stream \(others[0]) takes" : "streams \(others.joined(separator: ", ")) take"
            return " (\(named) subjects of \(subjects))"
        } catch {
            logger.warning("cannot list the streams that take \(subjects): \(error)")
            return ""
        }
    }

    /// Finds the stream, or creates it; warns when one found may not take every event.
    private func ensureStream(_ nats: JetStreamConnection) throws(BridgeError) {
        let name = configuration.stream
        let wanted = configuration.prefix + ".>"
        let found: StreamInfo?
        do {
            found = try nats.streamInfo(name)
        } catch {
            throw .nats("stream \(name) at \(nats.connectedURL): \(error)")
        }
        if let info = found {
            let subjects = info.config.subjects
            if !subjects.contains(wanted) && !subjects.contains(">") {
                logger.warning(
                    "stream \(name) takes \(subjects.joined(separator: ", ")), not \(wanted): an event whose subject it does not take fails to publish\(streamsTakingTheSubjects(nats)), and the bridge stops there"
                )
            }
            if info.config.duplicateWindow < configuration.streamConfig.duplicateWindow {
                logger.warning(
                    "stream \(name) drops a copy of an event only within \(info.config.duplicateWindow), less than duplicate_window_s (\(configuration.duplicateWindowSeconds) s): an event another gateway publishes later than that is stored twice"
                )
            }
            return
        }
        guard configuration.createStream else {
            throw .nats(
                "the NATS server at \(nats.connectedURL) has no stream \(name), and create_stream is false: create it (subjects \(wanted)) or set create_stream"
            )
        }
        let created: Result<StreamInfo, NATSError> = Result { () throws(NATSError) in
            try nats.addStream(configuration.streamConfig)
        }
        switch created {
        case .success:
            logger.notice(
                "created stream \(name): subjects \(wanted), file storage, duplicate window \(configuration.duplicateWindowSeconds) s"
            )
        case .failure(let error) where error.code == .streamExists:
            break  // another gateway created it meanwhile
        case .failure(let error):
            throw .nats("creating stream \(name) at \(nats.connectedURL): \(error)")
        }
    }

    /// Watches the daemon's log after `cursor` and publishes each event, until the feed
    /// ends (a stop, a failure, the daemon gone).
    private func publish(
        after cursor: UInt64, node: String, nats: JetStreamConnection, confirmations: Confirmations
    ) throws(BridgeError) {
        var last = cursor
        var link = try watch(after: last)
        defer { feed.withLock { $0 = nil } }
        while true {
            if stopping.load(ordering: .acquiring) || confirmations.failure != nil { return }
            let line: [UInt8]?
            do {
                line = try link.nextLine()
            } catch {
                if stopping.load(ordering: .acquiring) || confirmations.failure != nil { return }
                throw error
            }
            guard let line else {
                if stopping.load(ordering: .acquiring) || confirmations.failure != nil { return }
                throw .daemon("evstored at \(configuration.socketPath) ended the watch (it stopped?)")
            }
            let parsed: FeedLine
            do {
                parsed = try FeedLine.parse(line)
            } catch {
                throw .daemon("evstored sent a line the bridge cannot read: \(error)")
            }
            switch parsed {
            case .event(let event):
                // A watch never repeats a seq; this keeps a resumed one honest too.
                guard event.seq > last else { continue }
                try send(event, node: node, nats: nats, confirmations: confirmations)
                last = event.seq
            case .overflow:
                // Fell behind the daemon's queue: watch again from the last one published.
                logger.info("the daemon ended the watch at seq \(last) (the bridge fell behind); watching again")
                link.shutdown()
                link = try watch(after: last)
            case .reply(_, let error?):
                throw .daemon("evstored refused the watch: \(error)")
            case .reply, .other:
                continue
            }
        }
    }

    /// Opens the session's watch after `seq`.
    private func watch(after seq: UInt64) throws(BridgeError) -> DaemonLink {
        let link = try DaemonLink(path: configuration.socketPath)
        feed.withLock { $0 = link }
        if stopping.load(ordering: .acquiring) { link.shutdown() }
        try link.send("watch", Array(#"{"after":\#(seq)}"#.utf8))
        return link
    }

    private func send(
        _ event: FeedEvent, node: String, nats: JetStreamConnection, confirmations: Confirmations
    ) throws(BridgeError) {
        let headers = [("Evstore-Origin", event.origin), ("Evstore-Node", node), ("Evstore-Seq", String(event.seq))]
        // Registered first: its acknowledgement may come before publishAsync returns.
        confirmations.published(event.seq)
        do {
            // For the configured stream only: another stream that takes the subject refuses it.
            try nats.publishAsync(
                subject: configuration.prefix + "." + event.type, messageID: event.id, headers: headers,
                body: event.body, tag: event.seq, stream: configuration.stream)
        } catch .messageTooLarge {
            throw .nats(
                "event \(event.id) (seq \(event.seq)) is \(event.body.count) bytes, more than the NATS server's max_payload (\(nats.maxPayload) bytes with the headers): raise max_payload in the server's configuration (events replicated from peers may be up to 16 MiB); the bridge waits here, nothing after it is published"
            )
        } catch {
            throw .nats("publishing event \(event.id) (seq \(event.seq)): \(error)")
        }
    }
}

/// Acknowledges to the daemon, every `ack_interval_ms`, the seq JetStream has confirmed,
/// on the session's control connection (a fresh one when the daemon closed it), and logs
/// the progress once a minute.
final class Acknowledger: Sendable {
    let bridge: Bridge
    let confirmations: Confirmations
    private let state: Mutex<(control: DaemonLink?, acknowledged: UInt64, running: Bool, done: Bool)>
    private let wake = Condition()
    private let finished = DispatchSemaphore(value: 0)

    init(bridge: Bridge, control: DaemonLink, confirmations: Confirmations, from seq: UInt64) {
        self.bridge = bridge
        self.confirmations = confirmations
        state = Mutex((control, seq, false, false))
    }

    func start() {
        state.withLock { $0.running = true }
        let error = startThread(name: "evstore-nats-acks") { [self] in
            run()
            finished.signal()
        }
        if let error {
            bridge.logger.error("cannot start the acknowledging thread: \(error.message)")
            finished.signal()
        }
    }

    /// Stops the thread, then acknowledges what is confirmed one last time.
    func finish() {
        wake.lock()
        let running = state.withLock { state in
            state.done = true
            return state.running
        }
        wake.broadcast()
        wake.unlock()
        if running { finished.wait() }
        flush()
    }

    private func run() {
        let interval = Double(bridge.configuration.ackIntervalMilliseconds) / 1000
        var lastReport = ContinuousClock.now
        var reported = (published: 0, duplicates: 0)
        while true {
            wake.lock()
            _ = wake.wait(seconds: interval)
            wake.unlock()
            if state.withLock({ $0.done }) { return }
            flush()
            if ContinuousClock.now - lastReport >= .seconds(60) {
                let counts = confirmations.counts
                if counts.published > reported.published {
                    bridge.logger.info(
                        "published \(counts.published - reported.published) events in the last minute (\(counts.duplicates - reported.duplicates) already in the stream); acknowledged up to seq \(confirmations.confirmed)"
                    )
                }
                reported = counts
                lastReport = ContinuousClock.now
            }
        }
    }

    /// Acknowledges the confirmed seq when it moved: on the control connection, or on a new
    /// one when the daemon closed that (it closes idle connections, and restarts).
    private func flush() {
        let confirmed = confirmations.confirmed
        let (control, acknowledged) = state.withLock { ($0.control, $0.acknowledged) }
        guard confirmed > acknowledged else { return }
        var lastError: BridgeError?
        for link in [control, nil] {
            do throws(BridgeError) {
                let used: DaemonLink
                if let link { used = link } else { used = try DaemonLink(path: bridge.configuration.socketPath) }
                state.withLock { $0.control = used }
                try bridge.acknowledge(confirmed, on: used)
                state.withLock { $0.acknowledged = confirmed }
                return
            } catch {
                state.withLock { $0.control = nil }
                lastError = error
                // The daemon refused it: a new connection would be refused the same.
                if error.reason != nil { break }
            }
        }
        guard let error = lastError else { return }
        if error.reason == "conflict" || error.reason == "invalid_params" {
            // Another reader moved the consumer, or the store went back (a restore): a new
            // session starts from what the daemon keeps.
            bridge.logger.error("acknowledging seq \(confirmed) to evstored: \(error); starting over")
            bridge.endSession()
            return
        }
        // The next tick tries again; the session ends if the daemon is gone.
        bridge.logger.warning("acknowledging seq \(confirmed) to evstored: \(error)")
    }

}
