import CNats
import Synchronization
import Testing

@testable import JetStream

/// The one table from libnats' statuses and the server's JetStream codes to `NATSError`.
@Suite struct ErrorMappingTests {
    static let server = "nats://127.0.0.1:4222"
    static let connect = Situation.connect(servers: server, timeout: .seconds(2), tls: false)
    static let connectTLS = Situation.connect(servers: server, timeout: .seconds(2), tls: true)
    static let api = Situation.jetStreamAPI(server: server, stream: "EVENTS", wait: .seconds(5))
    static let publish = Situation.publish(
        server: server, subject: "evstore.x", maxPayload: 1024, ackWait: .seconds(5), stream: "EVENTS")

    struct Case: Sendable, CustomTestStringConvertible {
        let status: natsStatus
        let jetStreamCode: Int
        let situation: Situation
        let code: NATSError.Code
        /// Words the sentence must hold.
        let mentions: [String]
        var testDescription: String { "\(NATS.statusText(status)) \(jetStreamCode) -> \(code)" }
    }

    static let cases: [Case] = [
        Case(status: NATS_NO_SERVER, jetStreamCode: 0, situation: connect, code: .cannotConnect, mentions: [server]),
        Case(status: NATS_TIMEOUT, jetStreamCode: 0, situation: connect, code: .cannotConnect, mentions: [server]),
        Case(
            status: NATS_CONNECTION_AUTH_FAILED, jetStreamCode: 0, situation: connect, code: .authenticationFailed,
            mentions: [server, "credentials"]),
        Case(status: NATS_SSL_ERROR, jetStreamCode: 0, situation: connect, code: .tls, mentions: ["TLS"]),
        Case(status: NATS_SSL_ERROR, jetStreamCode: 0, situation: .options, code: .invalidArgument, mentions: ["PEM"]),
        Case(
            status: NATS_SECURE_CONNECTION_REQUIRED, jetStreamCode: 0, situation: connect, code: .tls,
            mentions: ["tlsCAFile"]),
        Case(
            status: NATS_SECURE_CONNECTION_WANTED, jetStreamCode: 0, situation: connectTLS, code: .tls,
            mentions: [server]),
        Case(
            status: NATS_PROTOCOL_ERROR, jetStreamCode: 0, situation: connectTLS, code: .tls,
            mentions: ["client certificate"]),
        Case(
            status: NATS_PROTOCOL_ERROR, jetStreamCode: 0, situation: connect, code: .cannotConnect, mentions: [server]),
        Case(
            status: NATS_NO_RESPONDERS, jetStreamCode: 10076, situation: api, code: .jetStreamNotEnabled,
            mentions: [server, "-js", "enable jetstream"]),
        Case(status: NATS_ERR, jetStreamCode: 10039, situation: api, code: .jetStreamNotEnabled, mentions: ["account"]),
        Case(
            status: NATS_TIMEOUT, jetStreamCode: 0, situation: api, code: .timeout, mentions: [server, "5.0 seconds"]),
        Case(status: NATS_NOT_FOUND, jetStreamCode: 10059, situation: api, code: .streamNotFound, mentions: ["EVENTS"]),
        Case(status: NATS_ERR, jetStreamCode: 10058, situation: api, code: .streamExists, mentions: ["EVENTS"]),
        Case(status: NATS_ERR, jetStreamCode: 10065, situation: api, code: .subjectsOverlap, mentions: ["EVENTS"]),
        Case(status: NATS_ERR, jetStreamCode: 10052, situation: api, code: .jetStream, mentions: ["10052"]),
        Case(
            status: NATS_CONNECTION_CLOSED, jetStreamCode: 0, situation: api, code: .connectionClosed,
            mentions: [server]),
        Case(
            status: NATS_NO_RESPONDERS, jetStreamCode: 0, situation: publish, code: .noStream, mentions: ["evstore.x"]),
        Case(
            status: NATS_MAX_PAYLOAD, jetStreamCode: 0, situation: publish, code: .messageTooLarge,
            mentions: ["1024", "max_payload"]),
        Case(status: NATS_ERR, jetStreamCode: 10054, situation: publish, code: .messageTooLarge, mentions: ["stream"]),
        Case(
            status: NATS_ERR, jetStreamCode: 10060, situation: publish, code: .streamMismatch,
            mentions: ["stream EVENTS", "evstore.x", "nothing was stored"]),
        Case(
            status: NATS_TIMEOUT, jetStreamCode: 0, situation: publish, code: .timeout,
            mentions: ["evstore.x", "same message ID"]),
        Case(status: NATS_INVALID_SUBJECT, jetStreamCode: 0, situation: publish, code: .invalidArgument, mentions: []),
        Case(status: NATS_NO_MEMORY, jetStreamCode: 0, situation: publish, code: .library, mentions: []),
    ]

    @Test(arguments: cases)
    func mapsToItsReason(_ mapping: Case) {
        let failure = NATSFailure(
            status: mapping.status, jetStreamCode: mapping.jetStreamCode, detail: "detail from libnats",
            operation: "js_Call")
        let error = NATSError(failure, in: mapping.situation)
        #expect(error.code == mapping.code)
        #expect(error.operation == "js_Call")
        #expect(error.status == Int32(bitPattern: mapping.status.rawValue))
        #expect(error.jetStreamCode == mapping.jetStreamCode)
        #expect(error.message.hasSuffix("(libnats: detail from libnats)"))
        for word in mapping.mentions { #expect(error.message.contains(word), "\(error.message)") }
    }

    @Test func aURLInLibnatsTextLosesItsCredentials() {
        let failure = NATSFailure(
            status: NATS_NO_SERVER, jetStreamCode: 0,
            detail: "nats://evstore:pw-9731@10.0.0.1:4222 and nats://tok-55@h",
            operation: "natsConnection_Connect")
        let error = NATSError(failure, in: Self.connect)
        #expect(!error.message.contains("pw-9731") && !error.message.contains("tok-55"), "\(error.message)")
        #expect(error.message.contains("nats://evstore:***@10.0.0.1:4222 and nats://***@h"), "\(error.message)")
    }

    @Test func anAcknowledgementFromAnotherStreamIsAMismatch() throws {
        // Messages are freed through libnats' collector, which the library's start makes
        // (a connection starts it implicitly).
        #expect(nats_Open(-1) == NATS_OK)
        let reported = Mutex<[PublishResult]>([])
        let tracker = PublishTracker(server: Self.server, ackWait: .seconds(5)) { result in
            reported.withLock { $0.append(result) }
        }
        for (tag, stream) in [(UInt64(1), "OTHER"), (2, "EVENTS")] {
            let message = try NATS.makeMessage(subject: "evstore.job", headers: [], body: [1])
            defer { NATS.destroyMessage(message) }
            #expect(tracker.register(message, tag: tag, subject: "evstore.job", stream: "EVENTS"))
            tracker.settle(message, .success(PublishAck(stream: stream, sequence: 9, duplicate: false)))
        }
        let results = reported.withLock { $0 }
        #expect(results.map(\.tag) == [1, 2])
        guard case .failure(let error) = results.first?.outcome else {
            Issue.record("an acknowledgement from OTHER was taken: \(results)")
            return
        }
        #expect(error.code == .streamMismatch)
        #expect(error.message.contains("stored by stream OTHER") && error.message.contains("not by stream EVENTS"))
        #expect((try? results.last?.outcome.get())?.stream == "EVENTS")
    }

    @Test func aPublishWhoseAcknowledgementIsOverdueIsReportedOnceAsATimeout() throws {
        #expect(nats_Open(-1) == NATS_OK)
        let reported = Mutex<[PublishResult]>([])
        let tracker = PublishTracker(server: Self.server, ackWait: .seconds(5)) { result in
            reported.withLock { $0.append(result) }
        }
        #expect(tracker.ticksPerWait == 8 && tracker.tickInterval == .milliseconds(625))
        var messages: [OpaquePointer] = []
        defer { for message in messages { NATS.destroyMessage(message) } }
        for tag in [UInt64(3), 1, 2] {
            let message = try NATS.makeMessage(subject: "evstore.job", headers: [], body: [1])
            messages.append(message)
            #expect(tracker.register(message, tag: tag, subject: "evstore.job", stream: "EVENTS"))
        }
        tracker.settle(messages[0], .success(PublishAck(stream: "EVENTS", sequence: 1, duplicate: false)))
        // A whole wait may not have passed until the clock ticked ticksPerWait + 1 times.
        for _ in 0..<tracker.ticksPerWait { tracker.tick() }
        #expect(reported.withLock { $0.count } == 1)
        #expect(tracker.inFlight == 2)

        tracker.tick()
        let results = reported.withLock { $0 }
        #expect(results.map(\.tag) == [3, 1, 2])
        for result in results.dropFirst() {
            guard case .failure(let error) = result.outcome else {
                Issue.record("an overdue publish was reported as \(result.outcome)")
                continue
            }
            #expect(error.code == .timeout)
            #expect(
                error.message.contains("evstore.job") && error.message.contains("within 5.0 seconds"),
                "\(error.message)")
        }
        #expect(tracker.inFlight == 0)

        // The acknowledgement that comes after all, and later ticks, report nothing more;
        // a publish registered now is due a whole wait later.
        tracker.settle(messages[1], .success(PublishAck(stream: "EVENTS", sequence: 2, duplicate: false)))
        let late = try NATS.makeMessage(subject: "evstore.job", headers: [], body: [1])
        messages.append(late)
        #expect(tracker.register(late, tag: 4, subject: "evstore.job", stream: "EVENTS"))
        for _ in 0..<tracker.ticksPerWait { tracker.tick() }
        #expect(reported.withLock { $0.count } == 3)
        tracker.tick()
        #expect(reported.withLock { $0.map(\.tag) } == [3, 1, 2, 4])
    }

    @Test func patternsMatchByCode() {
        let error = NATSError(code: .timeout, operation: "js_GetMsg", message: "slow")
        #expect(NATSError.timeout ~= error)
        #expect(!(NATSError.connectionClosed ~= error))
        #expect(error == NATSError.timeout)
        #expect(error.description == "js_GetMsg failed (timeout): slow")
    }
}
