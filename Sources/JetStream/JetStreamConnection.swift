import Dispatch
import Synchronization

/// A connection to a NATS server with a JetStream context: streams, asynchronous publishes
/// with message IDs, and reading messages back.
///
/// The connection does not reconnect. When it breaks (the server stops, the network fails,
/// two pings go unanswered) it closes, every publish in flight is reported failed through
/// `onPublishResult`, and later calls throw `NATSError.connectionClosed`; the caller makes a
/// new connection when it wants one. So once a connection reports its close, nothing it sent
/// is still undecided, and nothing is resent behind the caller's back.
///
/// - Important: `onPublishResult` is called once for every publish `publishAsync` accepted
///   (one that throws is not reported), on a libnats thread: the acknowledgements in the
///   order they arrive on the connection's reply thread, and at a close the publishes still
///   in flight, in tag order, on libnats' callback thread or on the thread calling `close()`.
///   Two such threads may call it at once while the connection breaks. It should return
///   quickly (libnats delivers the next acknowledgement only then), and must not hold a
///   strong reference to the connection (which would then never be freed).
///
/// libnats starts its library (its timer and callback threads) with the first connection of
/// the process (`nats_Open`, implicitly). This module never calls `nats_Close`: it would have
/// to wait for every connection of the process, and the threads end with the process.
public final class JetStreamConnection: Sendable {
    /// The URL of the server this connection reached, its password or token hidden
    /// (`nats://user:***@host:4222`): fit for a log line.
    public let connectedURL: String

    /// The largest message, headers and body together, the server accepts (its `max_payload`).
    public let maxPayload: Int

    private let handles: Handles
    private let tracker: PublishTracker
    /// The tracker's number in `CallbackRegistry`, which libnats' callbacks carry.
    private let registration: UInt
    private let jetStreamWait: Duration
    private let ackWait: Duration
    /// Reports the publishes whose acknowledgement is overdue (`PublishTracker.tick`), until
    /// the close cancels it.
    private let expiry: Mutex<(any DispatchSourceTimer)?>
    /// Set by the first `close()`.
    private let closing = Atomic<Bool>(false)

    /// Connects to the first server of `options.urls` that answers and checks that JetStream
    /// is enabled there (one JetStream API call), so that a server without it fails here, not
    /// at the first publish.
    ///
    /// - Parameter onPublishResult: Hears the outcome of every accepted asynchronous publish;
    ///   see the type's notes for the threads it runs on.
    public init(
        options: NATSOptions, onPublishResult: @escaping @Sendable (PublishResult) -> Void
    ) throws(NATSError) {
        // Every URL a message names is redacted; an error from here on is scrubbed of the
        // options' secrets as well, in case libnats quoted one another way.
        let servers = options.redactedURLs.joined(separator: ", ")
        guard !options.urls.isEmpty else {
            throw NATSError(code: .invalidArgument, operation: "init", message: "no NATS server URL was given")
        }
        guard options.maxPendingPublishes > 0 else {
            throw NATSError(
                code: .invalidArgument, operation: "init",
                message: "maxPendingPublishes is \(options.maxPendingPublishes): it must be at least 1")
        }
        guard options.credentialsFile == nil || options.nkeySeedFile == nil else {
            throw NATSError(
                code: .invalidArgument, operation: "init",
                message:
                    "both a .creds file and an NKey seed file were given: give one (a .creds file holds its own seed)")
        }
        let nkeyPublicKey = try options.nkeySeedFile.map { path throws(NATSError) in
            try NKey.userPublicKey(fromSeedFile: path)
        }

        // The number goes into libnats' options before the connection exists; the tracker,
        // which names the server connected to, is filed under it once there is one (nothing
        // can be in flight before).
        let registration = CallbackRegistry.reserve()
        let closure = CallbackRegistry.closure(for: registration)
        var connection: OpaquePointer?
        var context: OpaquePointer?
        do throws(NATSError) {
            let natsOptions = try attempt(.options) { () throws(NATSFailure) in
                try NATS.makeOptions(
                    options, nkeyPublicKey: nkeyPublicKey, closedHandler: connectionClosedHandler, closure: closure)
            }
            defer { NATS.destroyOptions(natsOptions) }
            let tls = options.tlsCAFile != nil || options.tlsCertificateFile != nil
            connection = try attempt(.connect(servers: servers, timeout: options.connectTimeout, tls: tls)) {
                () throws(NATSFailure) in try NATS.connect(natsOptions)
            }
            let server = NATS.connectedURL(connection!).map(Redactor.redact(url:)) ?? servers
            let api = Situation.jetStreamAPI(server: server, stream: nil, wait: options.jetStreamWait)
            context = try attempt(api) { () throws(NATSFailure) in
                try NATS.jetStream(
                    connection!, wait: options.jetStreamWait, maxPending: options.maxPendingPublishes,
                    stallWait: Self.stallSlice, ackHandler: publishAckHandler, closure: closure)
            }
            try attempt(api) { () throws(NATSFailure) in try NATS.checkJetStream(context!) }
            connectedURL = server
            tracker = PublishTracker(server: server, ackWait: options.publishAckTimeout, onResult: onPublishResult)
            CallbackRegistry.file(tracker, as: registration)
        } catch {
            if let context { NATS.destroyJetStream(context) }
            if let connection { NATS.destroyConnection(connection) }
            CallbackRegistry.remove(registration)
            throw error.redacted(by: Redactor(options))
        }
        handles = Handles(connection: connection!, jetStream: context!)
        maxPayload = NATS.maxPayload(connection!)
        self.registration = registration
        jetStreamWait = options.jetStreamWait
        ackWait = options.publishAckTimeout
        expiry = Mutex(tracker.startTicking())
    }

    deinit {
        close()
        NATS.destroyJetStream(handles.jetStream)
        NATS.destroyConnection(handles.connection)
    }

    /// Whether the connection is closed (by `close()`, or because it broke).
    public var isClosed: Bool { NATS.isClosed(handles.connection) }

    // MARK: Streams

    /// The stream named `name`, nil when the server has none.
    /// The corresponding C function is `js_GetStreamInfo`.
    public func streamInfo(_ name: String) throws(NATSError) -> StreamInfo? {
        try attempt(api(stream: name)) { () throws(NATSFailure) in try NATS.streamInfo(handles.jetStream, name: name) }
    }

    /// The names of the streams that take subjects of `subject` (wildcards allowed), sorted;
    /// empty when none does. The corresponding C function is `js_StreamNames`.
    public func streamNames(subject: String) throws(NATSError) -> [String] {
        try attempt(api(stream: nil)) { () throws(NATSFailure) in
            try NATS.streamNames(handles.jetStream, subject: subject)
        }
    }

    /// Creates a stream, or returns the existing one when it has exactly this configuration.
    ///
    /// Throws `streamExists` when a stream of that name has another configuration, and
    /// `subjectsOverlap` when another stream already takes one of the subjects.
    /// The corresponding C function is `js_AddStream`.
    @discardableResult
    public func addStream(_ config: StreamConfig) throws(NATSError) -> StreamInfo {
        try attempt(api(stream: config.name)) { () throws(NATSFailure) in
            try NATS.putStream(handles.jetStream, config, update: false)
        }
    }

    /// Changes an existing stream's configuration (subjects, limits, duplicate window; the
    /// server refuses to change the storage type).
    /// The corresponding C function is `js_UpdateStream`.
    @discardableResult
    public func updateStream(_ config: StreamConfig) throws(NATSError) -> StreamInfo {
        try attempt(api(stream: config.name)) { () throws(NATSFailure) in
            try NATS.putStream(handles.jetStream, config, update: true)
        }
    }

    /// The message stored at `sequence` in `stream`, nil when the stream holds none there.
    /// Throws `streamNotFound` when there is no such stream.
    /// The corresponding C function is `js_GetMsg`.
    public func message(stream: String, sequence: UInt64) throws(NATSError) -> StoredMessage? {
        guard sequence > 0 else { return nil }
        return try attempt(api(stream: stream)) { () throws(NATSFailure) in
            try NATS.message(handles.jetStream, stream: stream, sequence: sequence)
        }
    }

    // MARK: Publishing

    /// Publishes a message without waiting for its acknowledgement, which comes to
    /// `onPublishResult` with `tag`.
    ///
    /// `messageID` goes in the `Nats-Msg-Id` header: a stream that stored a message with the
    /// same ID within its duplicate window stores no second copy and acknowledges it as a
    /// duplicate, which makes publishing again after a failure safe. `headers` are added as
    /// given (a name may repeat).
    ///
    /// With `stream`, the publish is for that stream only: it goes with `Nats-Expected-Stream`,
    /// so a stream of another name that takes the subject refuses it, and an acknowledgement
    /// naming another stream (from a server that does not check) is not taken as stored. Both
    /// are reported as `streamMismatch`.
    ///
    /// Blocks while `maxPendingPublishes` publishes are in flight, until an acknowledgement
    /// frees a place or the connection closes. A publish reported as timed out (no
    /// acknowledgement within `publishAckTimeout`) keeps its place until its acknowledgement
    /// comes after all or the connection closes: a server that stopped answering fills the
    /// places, and a new connection starts with all of them.
    ///
    /// Either throws, and the message was not sent and will not be reported, or returns, and
    /// `onPublishResult` is called exactly once for `tag`. Throws `messageTooLarge` for a
    /// message over `maxPayload`, `connectionClosed` once the connection is closed, and
    /// `timeout` when no place frees up within twice the publish acknowledgement timeout.
    /// The corresponding C function is `js_PublishMsgAsync`.
    public func publishAsync(
        subject: String, messageID: String?, headers: [(String, String)] = [], body: [UInt8], tag: UInt64,
        stream: String? = nil
    ) throws(NATSError) {
        // What an error names, built only for one.
        func situation() -> Situation {
            .publish(server: connectedURL, subject: subject, maxPayload: maxPayload, ackWait: ackWait, stream: stream)
        }
        if tracker.closedError != nil { throw closedError() }
        let message: OpaquePointer
        do {
            message = try NATS.makeMessage(subject: subject, headers: headers, body: body)
        } catch {
            throw NATSError(error, in: situation())
        }
        var stallDeadline: ContinuousClock.Instant?
        while true {
            guard tracker.register(message, tag: tag, subject: subject, stream: stream) else {
                NATS.destroyMessage(message)
                throw closedError()
            }
            let failure: NATSFailure
            switch NATS.publishAsync(handles.jetStream, message, messageID: messageID, stream: stream) {
            case .accepted: return
            case .refused(let refused): failure = refused
            }
            // Still ours. If the close reported it meanwhile, that report stands.
            guard tracker.withdraw(message) else {
                NATS.destroyMessage(message)
                return
            }
            // libnats waits one stall slice at a time, so that a close (which leaves its
            // count of publishes in flight where it was) cannot hold a publisher for long.
            if failure.isStall, tracker.closedError == nil, !isClosed {
                let now = ContinuousClock.now
                let deadline = stallDeadline ?? now + ackWait * 2
                stallDeadline = deadline
                if now < deadline { continue }
            }
            NATS.destroyMessage(message)
            // A stall can end after the connection closed but before its handler ran.
            if tracker.closedError != nil || isClosed { throw closedError() }
            throw NATSError(failure, in: situation())
        }
    }

    /// Waits until every publish accepted so far has been reported (acknowledged, refused,
    /// timed out, or failed by a close). Throws `timeout` when some are still in flight after
    /// `timeout`. The corresponding C function is `js_PublishAsyncComplete`.
    public func waitForPublishes(timeout: Duration) throws(NATSError) {
        let deadline = ContinuousClock.now + timeout
        while tracker.inFlight > 0 {
            let left = deadline - ContinuousClock.now
            guard left > .zero else {
                throw NATSError(
                    code: .timeout, operation: "js_PublishAsyncComplete",
                    message:
                        "\(tracker.inFlight) publishes to \(connectedURL) were still unacknowledged after \(timeout): the server is slow or not answering; each is reported when its acknowledgement timeout passes"
                )
            }
            // libnats' count can reach zero a moment before a concurrent publisher registers;
            // its wait then returns at once, so pause rather than spin.
            if NATS.waitForAcknowledgements(handles.jetStream, timeout: min(left, Self.stallSlice)),
                tracker.inFlight > 0
            {
                NATS.sleep(milliseconds: 1)
            }
        }
    }

    /// How many publishes are in flight: accepted and not yet reported.
    public var publishesInFlight: Int { tracker.inFlight }

    // MARK: Closing

    /// Closes the connection: flushes what is buffered (for at most half a second), stops
    /// libnats' threads for it, and reports every publish still in flight as failed with
    /// `connectionClosed`. When it returns, every publish accepted has been reported and no
    /// report is running on another thread. Safe to call more than once and from any thread,
    /// also from `onPublishResult`. Call `waitForPublishes(timeout:)` first to let
    /// acknowledgements on their way arrive.
    public func close() {
        if closing.compareExchange(expected: false, desired: true, ordering: .acquiringAndReleasing).exchanged {
            expiry.withLock { timer in
                timer?.cancel()
                timer = nil
            }
            NATS.close(handles.connection)
            tracker.close(
                with: NATSError(
                    code: .connectionClosed, status: NATS.connectionClosedStatus, operation: "close",
                    message:
                        "the connection to \(connectedURL) was closed before the server acknowledged the message: it may or may not be stored, so publish it again with the same message ID on a new connection"
                ))
            CallbackRegistry.remove(registration)
        }
        tracker.waitUntilReported()
    }

    // MARK: Internal

    /// How long libnats blocks a publisher per try while `maxPendingPublishes` are in flight.
    private static let stallSlice: Duration = .milliseconds(50)

    private func api(stream: String?) -> Situation {
        .jetStreamAPI(server: connectedURL, stream: stream, wait: jetStreamWait)
    }

    /// The error of a publish refused because the connection is closed.
    private func closedError() -> NATSError {
        NATSError(
            code: .connectionClosed, status: NATS.connectionClosedStatus, operation: "js_PublishMsgAsync",
            message: "the connection to \(connectedURL) is closed: connect again to publish")
    }
}

/// Runs a libnats call and gives its failure a sentence for `situation`.
func attempt<T>(_ situation: Situation, _ body: () throws(NATSFailure) -> T) throws(NATSError) -> T {
    do {
        return try body()
    } catch {
        throw NATSError(error, in: situation)
    }
}
