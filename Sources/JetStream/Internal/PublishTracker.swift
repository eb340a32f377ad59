import CNats
import Dispatch
import Synchronization

#if canImport(Glibc)
    import Glibc
#endif

/// The publishes of one connection that are in flight, and the callback that hears how each
/// ended: every publish libnats accepted is reported exactly once, by whichever comes first
/// of its acknowledgement, its acknowledgement timeout and the connection's close.
///
/// The timeout is kept here, not by libnats: libnats' `MaxWait` allocates a record of every
/// publish and, once the wait has passed, delivers a message of its own through the reply
/// subscription for each one, acknowledged or not (in a steady stream about as much work
/// again as the acknowledgements). Here a publish notes the tick of a coarse clock it was
/// registered at, and a timer advances that clock `ticksPerWait` times per wait and looks
/// over the publishes in flight (at most `maxPendingPublishes`): a publish is reported as
/// timed out between one and 1 + 1/`ticksPerWait` waits after it was sent. It keeps its place
/// in libnats' count of publishes in flight until its acknowledgement comes after all or
/// the connection closes.
///
/// A publish is known by the address of its `natsMsg`. libnats hands the ack handler the very
/// message that was published, so the address finds the tag without parsing a header and
/// without trusting anything the server sent. An address is unique while it is registered:
/// it is registered before libnats may answer, and removed before the message is freed,
/// whoever frees it (the ack handler; the publisher when libnats refused the message;
/// `jsCtx_Destroy` for messages still in flight when the connection is destroyed, whose tags
/// the close already removed). After the close nothing registers again, so a freed address
/// reused by a later allocation can never be mistaken for a publish in flight.
final class PublishTracker: Sendable {
    private let onResult: @Sendable (PublishResult) -> Void

    /// The server named in the errors reported to the callback.
    let server: String

    /// How long a publish waits for its acknowledgement, for the timeout's error.
    let ackWait: Duration

    /// The coarse clock's ticks per `ackWait`, and the time between two.
    let ticksPerWait: UInt64
    let tickInterval: Duration

    /// The coarse clock: ticks since the tracker was made.
    private let ticks = Atomic<UInt64>(0)

    /// A publish in flight: its tag, the stream it is for when it expects one, its subject
    /// (for the timeout's error: the message itself may be freed by then), and the tick it
    /// was registered at.
    private struct Entry {
        let tag: UInt64
        let stream: String?
        let subject: String
        let tick: UInt64
    }

    private struct State {
        /// Publishes registered and not yet reported, by their message's address.
        var tags: [UInt: Entry] = [:]
        /// Set once the connection is closed: what every publish still in flight is told,
        /// and why a new publish is refused.
        var closed: NATSError?
        /// Threads now running `onResult`, with how many reports each is in (the same thread
        /// may settle while it reports, if the callback publishes): `waitUntilReported` waits
        /// for them so that a close is a barrier.
        var reporting: [(thread: UInt, reports: Int)] = []

        mutating func startReporting(_ thread: UInt) {
            if let index = reporting.firstIndex(where: { $0.thread == thread }) {
                reporting[index].reports += 1
            } else {
                reporting.append((thread, 1))
            }
        }

        mutating func finishReporting(_ thread: UInt) {
            guard let index = reporting.firstIndex(where: { $0.thread == thread }) else { return }
            reporting[index].reports -= 1
            if reporting[index].reports == 0 { reporting.remove(at: index) }
        }
    }

    /// Protects the tags, the closed state, and the set of threads reporting.
    private let state = Mutex(State())

    init(server: String, ackWait: Duration, onResult: @escaping @Sendable (PublishResult) -> Void) {
        self.server = server
        self.ackWait = ackWait
        self.onResult = onResult
        tickInterval = max(ackWait / 8, .milliseconds(5))
        ticksPerWait = max(1, UInt64((ackWait / tickInterval).rounded(.up)))
    }

    /// Registers a publish to `subject` about to be handed to libnats, for `stream` when it
    /// expects one (an acknowledgement from any other stream is then reported as
    /// `streamMismatch`); false when the connection is closed.
    func register(_ message: OpaquePointer, tag: UInt64, subject: String, stream: String?) -> Bool {
        let tick = ticks.load(ordering: .relaxed)
        return state.withLock { state in
            guard state.closed == nil else { return false }
            state.tags[Self.key(message)] = Entry(tag: tag, stream: stream, subject: subject, tick: tick)
            return true
        }
    }

    /// Advances the coarse clock one tick and reports as timed out, in tag order, every
    /// publish registered more than `ticksPerWait` ticks before: at least `ackWait` ago.
    func tick() {
        let now = ticks.add(1, ordering: .relaxed).newValue
        guard now > ticksPerWait else { return }
        let due = now - ticksPerWait
        let thread = UInt(pthread_self())
        let overdue: [Entry] = state.withLock { state in
            var overdue: [Entry] = []
            for (key, entry) in state.tags where entry.tick < due {
                state.tags[key] = nil
                overdue.append(entry)
            }
            if !overdue.isEmpty { state.startReporting(thread) }
            return overdue.sorted { $0.tag < $1.tag }
        }
        guard !overdue.isEmpty else { return }
        let timeout = NATSFailure(status: NATS_TIMEOUT, jetStreamCode: 0, detail: "", operation: "js_PublishMsgAsync")
        for entry in overdue {
            onResult(PublishResult(tag: entry.tag, outcome: .failure(publishError(timeout, of: entry))))
        }
        finishedReporting(thread)
    }

    /// A timer on a queue of its own that calls `tick()` every `tickInterval`, until it is
    /// cancelled.
    func startTicking() -> any DispatchSourceTimer {
        let (seconds, attoseconds) = tickInterval.components
        let nanoseconds = Int(seconds) * 1_000_000_000 + Int(attoseconds / 1_000_000_000)
        let timer = DispatchSource.makeTimerSource(queue: DispatchQueue(label: "evstore.jetstream.ack-timeout"))
        timer.schedule(deadline: .now() + .nanoseconds(nanoseconds), repeating: .nanoseconds(nanoseconds))
        timer.setEventHandler { [self] in tick() }
        timer.resume()
        return timer
    }

    /// Takes back a publish libnats refused; false when the close already reported it (the
    /// publisher must then not report it again).
    func withdraw(_ message: OpaquePointer) -> Bool {
        state.withLock { $0.tags.removeValue(forKey: Self.key(message)) != nil }
    }

    /// Reports the outcome of `message`'s publish, unless it was already reported (the close
    /// got there first) or it is not this connection's: its acknowledgement, or libnats'
    /// failure as an error naming the publish's subject and stream. An acknowledgement from
    /// another stream than the one the publish expected is reported as a failure.
    func settle(_ message: OpaquePointer, _ outcome: Result<PublishAck, NATSFailure>) {
        let thread = UInt(pthread_self())
        let entry: Entry? = state.withLock { state in
            guard let entry = state.tags.removeValue(forKey: Self.key(message)) else { return nil }
            state.startReporting(thread)
            return entry
        }
        guard let entry else { return }
        let reported: Result<PublishAck, NATSError>
        switch outcome {
        case .success(let ack):
            if let expected = entry.stream, ack.stream != expected {
                reported = .failure(mismatch(ack, expected: expected, subject: entry.subject))
            } else {
                reported = .success(ack)
            }
        case .failure(let failure):
            reported = .failure(publishError(failure, of: entry))
        }
        onResult(PublishResult(tag: entry.tag, outcome: reported))
        finishedReporting(thread)
    }

    /// libnats' `failure` of the publish `entry`, as an error that names it.
    private func publishError(_ failure: NATSFailure, of entry: Entry) -> NATSError {
        NATSError(
            failure,
            in: .publish(server: server, subject: entry.subject, maxPayload: 0, ackWait: ackWait, stream: entry.stream))
    }

    /// The error for a message `expected` should have stored that another stream acknowledged.
    private func mismatch(_ ack: PublishAck, expected: String, subject: String) -> NATSError {
        NATSError(
            code: .streamMismatch, operation: "js_PublishMsgAsync",
            message:
                "the message to \(subject) was stored by stream \(ack.stream) on \(server) (its sequence \(ack.sequence)), not by stream \(expected) it was published for: \(ack.stream) takes the subject; give \(expected) the subject and take it from \(ack.stream) (a subject is stored by one stream only), or publish to \(ack.stream)"
        )
    }

    /// Marks the connection closed with `error` and reports it for every publish in flight,
    /// in tag order. Only the first call reports; later ones find nothing left.
    func close(with error: NATSError) {
        let thread = UInt(pthread_self())
        let cutOff: [UInt64] = state.withLock { state in
            if state.closed == nil { state.closed = error }
            guard !state.tags.isEmpty else { return [] }
            let tags = state.tags.values.map(\.tag).sorted()
            state.tags.removeAll()
            state.startReporting(thread)
            return tags
        }
        guard !cutOff.isEmpty else { return }
        for tag in cutOff { onResult(PublishResult(tag: tag, outcome: .failure(error))) }
        finishedReporting(thread)
    }

    /// Waits until no other thread is running `onResult`. The calling thread's own reports
    /// are left out, so a callback that closes the connection does not wait for itself.
    func waitUntilReported() {
        let thread = UInt(pthread_self())
        while state.withLock({ $0.reporting.contains { $0.thread != thread } }) {
            NATS.sleep(milliseconds: 1)
        }
    }

    /// How many publishes are in flight (registered, not reported).
    var inFlight: Int { state.withLock { $0.tags.count } }

    /// The error the connection closed with, nil while it is open.
    var closedError: NATSError? { state.withLock { $0.closed } }

    private func finishedReporting(_ thread: UInt) {
        state.withLock { $0.finishReporting(thread) }
    }

    private static func key(_ message: OpaquePointer) -> UInt { UInt(bitPattern: Int(bitPattern: message)) }
}

/// The trackers libnats' callbacks can reach, by a number passed as the callbacks' closure.
///
/// libnats calls the ack handler from its reply subscription's thread, which it detaches and
/// which may still deliver one acknowledgement after the connection is closed and destroyed;
/// the closed handler comes later still, from libnats' callback thread. Neither can be waited
/// for, so the closure is not a pointer to the tracker (which would have to outlive every
/// such call) but a number looked up here: once a connection has removed its number, a late
/// call finds nothing, frees the message it was handed and returns.
enum CallbackRegistry {
    /// The next number to hand out and the trackers of open connections.
    private static let trackers = Mutex<(next: UInt, byNumber: [UInt: PublishTracker])>((1, [:]))

    /// A number no other connection has, for a tracker to come.
    static func reserve() -> UInt {
        trackers.withLock { registry in
            let number = registry.next
            registry.next += 1
            return number
        }
    }

    static func file(_ tracker: PublishTracker, as number: UInt) {
        trackers.withLock { $0.byNumber[number] = tracker }
    }

    static func remove(_ number: UInt) {
        _ = trackers.withLock { $0.byNumber.removeValue(forKey: number) }
    }

    /// The closure value libnats carries for `number` (never dereferenced).
    static func closure(for number: UInt) -> UnsafeMutableRawPointer? { UnsafeMutableRawPointer(bitPattern: number) }

    static func tracker(for closure: UnsafeMutableRawPointer?) -> PublishTracker? {
        let number = UInt(bitPattern: closure)
        return trackers.withLock { $0.byNumber[number] }
    }
}

/// Called by libnats for every asynchronous publish: an acknowledgement, a refusal from the
/// stream, or a timeout. The handler owns `message` and frees it here.
///
/// - Important: Runs on libnats' thread for the context's reply subscription, one call at a
///   time per connection.
let publishAckHandler: jsPubAckHandler = { _, message, ack, failure, closure in
    guard let message else { return }
    defer { NATS.destroyMessage(message) }
    guard let tracker = CallbackRegistry.tracker(for: closure) else { return }
    if let ack {
        tracker.settle(message, .success(NATS.acknowledgement(ack)))
    } else {
        tracker.settle(
            message,
            .failure(
                failure.map { NATS.failure($0) }
                    ?? NATSFailure(status: NATS_ERR, jetStreamCode: 0, detail: "", operation: "js_PublishMsgAsync")))
    }
}

/// Called by libnats once the connection is closed, by `close()` or because the server
/// went away (reconnection is off): fails every publish still in flight.
///
/// - Important: Runs on libnats' callback thread.
let connectionClosedHandler: natsConnectionHandler = { connection, closure in
    guard let tracker = CallbackRegistry.tracker(for: closure) else { return }
    let reason = connection.map { NATS.connectionError($0) } ?? ""
    tracker.close(
        with: NATSError(
            code: .connectionClosed, status: NATS.connectionClosedStatus,
            operation: "js_PublishMsgAsync",
            message:
                "the connection to \(tracker.server) closed before the server acknowledged the message\(reason.isEmpty ? "" : " (libnats: \(reason))"): it may or may not be stored, so publish it again with the same message ID once connected again"
        ))
}
