import CNats
import Testing

@testable import JetStream

/// The one table from libnats' statuses and the server's JetStream codes to `NATSError`.
@Suite struct ErrorMappingTests {
    static let server = "nats://127.0.0.1:4222"
    static let connect = Situation.connect(servers: server, timeout: .seconds(2), tls: false)
    static let connectTLS = Situation.connect(servers: server, timeout: .seconds(2), tls: true)
    static let api = Situation.jetStreamAPI(server: server, stream: "EVENTS", wait: .seconds(5))
    static let publish = Situation.publish(server: server, subject: "evstore.x", maxPayload: 1024, ackWait: .seconds(5))

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

    @Test func patternsMatchByCode() {
        let error = NATSError(code: .timeout, operation: "js_GetMsg", message: "slow")
        #expect(NATSError.timeout ~= error)
        #expect(!(NATSError.connectionClosed ~= error))
        #expect(error == NATSError.timeout)
        #expect(error.description == "js_GetMsg failed (timeout): slow")
    }
}
