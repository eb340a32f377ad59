import Foundation
import JetStream
import Synchronization
import TestSupport
import Testing

@Suite(.enabled(if: NATSServer.available, "nats-server is not installed (apt install nats-server, or set NATS_SERVER)"))
struct JetStreamConnectionTests {
    static let events = StreamConfig(name: "EVENTS", subjects: ["evstore.>"], duplicateWindow: .seconds(60))

    // MARK: Streams

    @Test func createsFindsAndComparesStreams() throws {
        let server = try NATSServer()
        defer { server.remove() }
        let connection = try JetStreamConnection(options: NATSOptions(url: server.url)) { _ in }
        #expect(connection.connectedURL == server.url)
        #expect(try connection.streamInfo("EVENTS") == nil)

        let created = try connection.addStream(Self.events)
        #expect(created.config == Self.events)
        #expect(created.state.messages == 0)
        let found = try #require(try connection.streamInfo("EVENTS"))
        #expect(found.config == Self.events)
        #expect(found.created == created.created)

        // The same configuration again: the stream as it is.
        let again = try connection.addStream(Self.events)
        #expect(again.created == created.created)

        // The same name with other subjects.
        var other = Self.events
        other.subjects = ["elsewhere.>"]
        let exists = #expect(throws: NATSError.self) { try connection.addStream(other) }
        #expect(exists?.code == .streamExists)
        #expect(exists?.operation == "js_AddStream")
        #expect(exists?.jetStreamCode == 10058)
        #expect(exists?.message.contains("EVENTS") == true)

        // Another stream whose subjects overlap.
        let overlapping = StreamConfig(name: "ITEMS", subjects: ["evstore.items.*"])
        let overlap = #expect(throws: NATSError.self) { try connection.addStream(overlapping) }
        #expect(overlap?.code == .subjectsOverlap)
        #expect(try connection.streamInfo("ITEMS") == nil)

        // A change the server allows.
        var wider = Self.events
        wider.subjects = ["evstore.>", "audit.>"]
        wider.maxAge = .seconds(3600)
        let updated = try connection.updateStream(wider)
        #expect(updated.config == wider)

        let missing = #expect(throws: NATSError.self) { try connection.updateStream(overlapping) }
        #expect(missing?.code == .streamNotFound)

        let memory = StreamConfig(name: "SCRATCH", subjects: ["scratch"], storage: .memory)
        #expect(try connection.addStream(memory).config.storage == .memory)
        connection.close()
        connection.close()
        #expect(connection.isClosed)
        #expect(throws: NATSError.connectionClosed) { try connection.streamInfo("EVENTS") }
    }

    // MARK: Publishing

    @Test func tenThousandPublishesEachReportedOnceAndDuplicatesDropped() throws {
        let server = try NATSServer()
        defer { server.remove() }
        let results = PublishResults()
        var options = NATSOptions(url: server.url)
        options.name = "evstore-jetstream-tests"
        options.maxPendingPublishes = 512
        let connection = try JetStreamConnection(options: options) { results.record($0) }
        defer { connection.close() }
        try connection.addStream(Self.events)

        let count = 10_000
        func publish(_ index: Int, tag: UInt64) throws {
            try connection.publishAsync(
                subject: "evstore.items.\(index % 7)", messageID: "event-\(index)",
                headers: [
                    ("Evstore-Type", "item.created"), ("Evstore-Index", "\(index)"), ("Evstore-Tag", "a"),
                    ("Evstore-Tag", "b"),
                ],
                body: Array("{\"index\":\(index)}".utf8), tag: tag)
        }
        for index in 0..<count { try publish(index, tag: UInt64(index)) }
        try connection.waitForPublishes(timeout: .seconds(120))
        #expect(connection.publishesInFlight == 0)
        #expect(results.count == count)

        var sequences = Set<UInt64>()
        for index in 0..<count {
            let ack = try #require(results.ack(UInt64(index)), "tag \(index): \(results.all[UInt64(index)] ?? [])")
            #expect(ack.stream == "EVENTS")
            #expect(!ack.duplicate)
            sequences.insert(ack.sequence)
        }
        #expect(sequences == Set(1...UInt64(count)))
        #expect(try connection.streamInfo("EVENTS")?.state.messages == UInt64(count))

        // The same message IDs again, under new tags: every one a duplicate of the first copy.
        for index in 0..<count { try publish(index, tag: UInt64(count + index)) }
        try connection.waitForPublishes(timeout: .seconds(120))
        #expect(results.count == 2 * count)
        for index in 0..<count {
            let first = try #require(results.ack(UInt64(index)))
            let again = try #require(results.ack(UInt64(count + index)))
            #expect(again.duplicate)
            #expect(again.sequence == first.sequence)
        }
        let state = try #require(try connection.streamInfo("EVENTS")).state
        #expect(state.messages == UInt64(count))
        #expect(state.lastSequence == UInt64(count))

        // Read back: subject, headers (with the message ID) and body as published.
        for index in [0, 1, 4_321, count - 1] {
            let sequence = try #require(results.ack(UInt64(index))).sequence
            let stored = try #require(try connection.message(stream: "EVENTS", sequence: sequence))
            #expect(stored.sequence == sequence)
            #expect(stored.subject == "evstore.items.\(index % 7)")
            #expect(stored.data == Array("{\"index\":\(index)}".utf8))
            #expect(stored.values(of: "Nats-Msg-Id") == ["event-\(index)"])
            #expect(stored.values(of: "Evstore-Index") == ["\(index)"])
            #expect(stored.values(of: "Evstore-Type") == ["item.created"])
            #expect(stored.values(of: "Evstore-Tag") == ["a", "b"])
            #expect(stored.time > 0)
        }
        #expect(try connection.message(stream: "EVENTS", sequence: UInt64(count + 1)) == nil)
        let noStream = #expect(throws: NATSError.self) { try connection.message(stream: "NOPE", sequence: 1) }
        #expect(noStream?.code == .streamNotFound)
    }

    @Test func concurrentPublishersGetTheirOwnAcknowledgements() throws {
        let server = try NATSServer()
        defer { server.remove() }
        let results = PublishResults()
        var options = NATSOptions(url: server.url)
        options.maxPendingPublishes = 64
        let connection = try JetStreamConnection(options: options) { results.record($0) }
        defer { connection.close() }
        try connection.addStream(Self.events)

        let publishers = 4
        let each = 1_000
        let failures = Mutex<[String]>([])
        DispatchQueue.concurrentPerform(iterations: publishers) { publisher in
            for index in 0..<each {
                let tag = UInt64(publisher * each + index)
                do {
                    try connection.publishAsync(
                        subject: "evstore.publisher.\(publisher)", messageID: "event-\(tag)",
                        body: Array("\(tag)".utf8),
                        tag: tag)
                } catch {
                    failures.withLock { $0.append("\(tag): \(error)") }
                }
            }
        }
        #expect(failures.withLock { $0 } == [])
        try connection.waitForPublishes(timeout: .seconds(60))
        #expect(results.count == publishers * each)
        // Each tag's acknowledgement names the sequence holding that tag's message.
        for tag in UInt64(0)..<UInt64(publishers * each) {
            let ack = try #require(results.ack(tag))
            let stored = try #require(try connection.message(stream: "EVENTS", sequence: ack.sequence))
            #expect(stored.values(of: "Nats-Msg-Id") == ["event-\(tag)"])
            #expect(stored.data == Array("\(tag)".utf8))
        }
    }

    @Test func closeReportsEveryPublishInFlightBeforeItReturns() throws {
        let server = try NATSServer()
        defer { server.remove() }
        let results = PublishResults()
        var options = NATSOptions(url: server.url)
        options.maxPendingPublishes = 2_000
        let connection = try JetStreamConnection(options: options) { results.record($0) }
        try connection.addStream(Self.events)
        for tag in UInt64(0)..<5_000 {
            try connection.publishAsync(subject: "evstore.items", messageID: "event-\(tag)", body: [1], tag: tag)
        }
        connection.close()
        // No waiting: when close returns, every publish has its one result.
        let all = results.all
        #expect(all.count == 5_000)
        #expect(all.values.allSatisfy { $0.count == 1 })
        for case .failure(let error) in all.values.map({ $0[0].outcome }) {
            #expect(error.code == .connectionClosed)
        }
        #expect(connection.publishesInFlight == 0)
    }

    @Test func anAcknowledgementThatComesTooLateIsATimeoutAndTheMessageADuplicate() throws {
        let server = try NATSServer()
        defer { server.remove() }
        let results = PublishResults()
        var options = NATSOptions(url: server.url)
        options.publishAckTimeout = .milliseconds(300)
        let connection = try JetStreamConnection(options: options) { results.record($0) }
        defer { connection.close() }
        try connection.addStream(Self.events)

        // A stopped server reads nothing: the acknowledgements come after the timeout.
        server.signal(SIGSTOP)
        for tag in UInt64(0)..<10 {
            try connection.publishAsync(subject: "evstore.items", messageID: "event-\(tag)", body: [1], tag: tag)
        }
        try connection.waitForPublishes(timeout: .seconds(10))
        server.signal(SIGCONT)
        #expect(results.count == 10)
        for tag in UInt64(0)..<10 {
            let outcome = try #require(results.all[tag]?.first).outcome
            #expect(throws: NATSError.timeout) { try outcome.get() }
        }

        // The server stored them once it ran again; the late acknowledgements were not
        // reported a second time, and publishing again with the same IDs stores nothing new.
        for tag in UInt64(0)..<10 {
            try connection.publishAsync(subject: "evstore.items", messageID: "event-\(tag)", body: [1], tag: 100 + tag)
        }
        try connection.waitForPublishes(timeout: .seconds(10))
        #expect(results.count == 20)
        for tag in UInt64(100)..<110 { #expect(results.ack(tag)?.duplicate == true) }
        #expect(try connection.streamInfo("EVENTS")?.state.messages == 10)
    }

    @Test func aPublishToASubjectNoStreamTakesIsReportedAsNoStream() throws {
        let server = try NATSServer()
        defer { server.remove() }
        let results = PublishResults()
        let connection = try JetStreamConnection(options: NATSOptions(url: server.url)) { results.record($0) }
        defer { connection.close() }
        try connection.addStream(Self.events)
        try connection.publishAsync(subject: "unstored.subject", messageID: "x", body: [1, 2, 3], tag: 7)
        try connection.waitForPublishes(timeout: .seconds(10))
        let result = try #require(results.all[7]?.first)
        #expect(results.count == 1)
        #expect(throws: NATSError.noStream) { try result.outcome.get() }
    }

    @Test func aMessageOverMaxPayloadThrowsAndTheConnectionGoesOn() throws {
        let server = try NATSServer(configuration: "max_payload: 1024\n")
        defer { server.remove() }
        let results = PublishResults()
        let connection = try JetStreamConnection(options: NATSOptions(url: server.url)) { results.record($0) }
        defer { connection.close() }
        #expect(connection.maxPayload == 1024)
        try connection.addStream(Self.events)

        let tooLarge = #expect(throws: NATSError.self) {
            try connection.publishAsync(
                subject: "evstore.big", messageID: "big", body: [UInt8](repeating: 0x61, count: 2000), tag: 1)
        }
        #expect(tooLarge?.code == .messageTooLarge)
        #expect(tooLarge?.message.contains("1024") == true)
        #expect(tooLarge?.message.contains("max_payload") == true)

        // Headers count too: a body that fits alone does not with them.
        #expect(throws: NATSError.messageTooLarge) {
            try connection.publishAsync(
                subject: "evstore.big", messageID: "big-2",
                headers: [("Evstore-Padding", String(repeating: "p", count: 200))],
                body: [UInt8](repeating: 0x61, count: 900), tag: 2)
        }

        try connection.publishAsync(subject: "evstore.small", messageID: "small", body: [1], tag: 3)
        try connection.waitForPublishes(timeout: .seconds(10))
        #expect(results.count == 1)
        #expect(results.ack(3)?.sequence == 1)
        #expect(results.all[1] == nil && results.all[2] == nil)
    }

    // MARK: Failing to connect

    @Test func aServerWithoutJetStreamIsNamedAsSuch() throws {
        let server = try NATSServer(jetStream: false)
        defer { server.remove() }
        var options = NATSOptions(url: server.url)
        options.jetStreamWait = .milliseconds(500)
        let started = ContinuousClock.now
        let error = #expect(throws: NATSError.self) { try JetStreamConnection(options: options) { _ in } }
        #expect(ContinuousClock.now - started < .seconds(10))
        #expect(error?.code == .jetStreamNotEnabled)
        #expect(error?.message.contains(server.url) == true)
        #expect(error?.message.contains("-js") == true)
    }

    @Test(arguments: ["nats://127.0.0.1:\(NATSServer.unusedPort())", "nats://10.255.255.1:4222"])
    func anUnreachableServerFailsWithinTheConnectTimeout(url: String) throws {
        var options = NATSOptions(url: url)
        options.connectTimeout = .seconds(1)
        let started = ContinuousClock.now
        let error = #expect(throws: NATSError.self) { try JetStreamConnection(options: options) { _ in } }
        #expect(ContinuousClock.now - started < .seconds(10))
        #expect(error?.code == .cannotConnect)
        #expect(error?.operation == "natsConnection_Connect")
        #expect(error?.message.contains(url) == true)
    }

    // MARK: A server killed mid-stream

    @Test func aKilledServerFailsEveryPublishInFlightOnce() throws {
        let server = try NATSServer()
        defer { server.remove() }
        let results = PublishResults()
        let kill = Once()
        var options = NATSOptions(url: server.url)
        options.maxPendingPublishes = 256
        let connection = try JetStreamConnection(options: options) { result in
            results.record(result)
            if results.successes >= 2_000, kill.claim() { server.signal(SIGKILL) }
        }
        try connection.addStream(Self.events)

        var accepted: [UInt64] = []
        var refused: [UInt64: NATSError] = [:]
        for tag in UInt64(0)..<30_000 {
            do {
                try connection.publishAsync(
                    subject: "evstore.items.\(tag % 5)", messageID: "event-\(tag)", body: Array("\(tag)".utf8), tag: tag
                )
                accepted.append(tag)
            } catch {
                refused[tag] = error
            }
        }
        // Every accepted publish is reported, once, soon after the connection broke.
        #expect(results.wait(for: accepted.count, timeout: .seconds(10)), "\(results.count) of \(accepted.count)")
        let all = results.all
        #expect(all.count == accepted.count)
        #expect(all.values.allSatisfy { $0.count == 1 })
        #expect(Set(all.keys) == Set(accepted))
        #expect(refused.values.allSatisfy { $0.code == .connectionClosed })
        #expect(!refused.isEmpty)
        let failures = all.values.compactMap { results -> NATSError? in
            if case .failure(let error) = results[0].outcome { return error }
            return nil
        }
        #expect(!failures.isEmpty)
        #expect(failures.allSatisfy { $0.code == .connectionClosed })
        #expect(connection.isClosed)

        let closing = ContinuousClock.now
        connection.close()
        #expect(ContinuousClock.now - closing < .seconds(10))
        try connection.waitForPublishes(timeout: .seconds(1))
        #expect(throws: NATSError.connectionClosed) {
            try connection.publishAsync(subject: "evstore.items.0", messageID: "late", body: [], tag: 99_999)
        }
        #expect(results.count == accepted.count)

        // Restarted on the same store: every acknowledged message is there.
        server.stop(signal: SIGKILL)
        try server.start()
        let again = try JetStreamConnection(options: NATSOptions(url: server.url)) { _ in }
        defer { again.close() }
        let acknowledged = all.compactMap { tag, results in (try? results[0].outcome.get()).map { (tag, $0) } }
        #expect(acknowledged.count >= 2_000)
        let state = try #require(try again.streamInfo("EVENTS")).state
        #expect(state.messages >= UInt64(acknowledged.count))
        for (tag, ack) in acknowledged where tag % 97 == 0 {
            let stored = try #require(try again.message(stream: "EVENTS", sequence: ack.sequence))
            #expect(stored.values(of: "Nats-Msg-Id") == ["event-\(tag)"])
        }
    }

    // MARK: Authentication and TLS

    @Test func nkeyAuthenticationWithOnlyTheSeedFile() throws {
        let server = try NATSServer(
            configuration: "authorization { users = [ { nkey: \(NKeyTests.documentedPublicKey) } ] }\n")
        defer { server.remove() }
        let seedFile = server.directory + "/user.nk"
        try (NKeyTests.documentedSeed + "\n").write(toFile: seedFile, atomically: true, encoding: .utf8)
        var options = NATSOptions(url: server.url)
        options.nkeySeedFile = seedFile
        try publishesOne(with: options, on: server)

        let refused = #expect(throws: NATSError.self) {
            try JetStreamConnection(options: NATSOptions(url: server.url)) { _ in }
        }
        #expect(refused?.code == .authenticationFailed)
        #expect(refused?.message.contains(server.url) == true)
    }

    @Test func userAndPasswordAndToken() throws {
        let server = try NATSServer(configuration: "authorization { user: evstore, password: \"s3cret pass\" }\n")
        defer { server.remove() }
        var options = NATSOptions(url: server.url)
        options.user = "evstore"
        options.password = "s3cret pass"
        try publishesOne(with: options, on: server)
        options.password = "wrong"
        #expect(throws: NATSError.authenticationFailed) { try JetStreamConnection(options: options) { _ in } }

        let tokenServer = try NATSServer(configuration: "authorization { token: \"t0ken\" }\n")
        defer { tokenServer.remove() }
        var tokenOptions = NATSOptions(url: tokenServer.url)
        tokenOptions.token = "t0ken"
        try publishesOne(with: tokenOptions, on: tokenServer)
    }

    @Test func credentialsInTheURLNeverReachAMessage() throws {
        let password = "pw-S3cr3t-7731"
        let server = try NATSServer(configuration: "authorization { user: evstore, password: \"\(password)\" }\n")
        defer { server.remove() }
        let address = "127.0.0.1:\(server.port)"
        let connection = try JetStreamConnection(options: NATSOptions(url: "nats://evstore:\(password)@\(address)")) {
            _ in
        }
        #expect(connection.connectedURL == "nats://evstore:***@\(address)")
        connection.close()
        let unused = "127.0.0.1:\(NATSServer.unusedPort())"
        for urls in [
            ["nats://evstore:wrong-\(password)@\(address)"], ["nats://evstore:\(password)@\(unused)"],
            ["nats://evstore:\(password)@\(unused)", "nats://\(password)@\(unused)"],
        ] {
            let refused = #expect(throws: NATSError.self) {
                try JetStreamConnection(options: NATSOptions(urls: urls)) { _ in }
            }
            let message = refused?.description ?? ""
            #expect(!message.contains(password), "\(message)")
            #expect(message.contains("nats://evstore:***@"), "\(message)")
        }

        let token = "tok-S3cr3t-4412"
        let tokenServer = try NATSServer(configuration: "authorization { token: \"\(token)\" }\n")
        defer { tokenServer.remove() }
        let tokenAddress = "127.0.0.1:\(tokenServer.port)"
        let byToken = try JetStreamConnection(options: NATSOptions(url: "nats://\(token)@\(tokenAddress)")) { _ in }
        #expect(byToken.connectedURL == "nats://***@\(tokenAddress)")
        byToken.close()
        let wrongToken = #expect(throws: NATSError.self) {
            try JetStreamConnection(options: NATSOptions(url: "nats://x\(token)@\(tokenAddress)")) { _ in }
        }
        #expect(wrongToken?.code == .authenticationFailed)
        #expect(wrongToken.map { !$0.description.contains(token) } == true, "\(String(describing: wrongToken))")
    }

    // MARK: The expected stream

    @Test func aPublishForOneStreamThatAnotherTakesIsRefused() throws {
        let server = try NATSServer()
        defer { server.remove() }
        let results = PublishResults()
        let connection = try JetStreamConnection(options: NATSOptions(url: server.url)) { results.record($0) }
        defer { connection.close() }
        try connection.addStream(StreamConfig(name: "MINE", subjects: ["foo.>"]))
        try connection.addStream(StreamConfig(name: "OTHER", subjects: ["evstore.>"]))
        try connection.publishAsync(subject: "evstore.job", messageID: "m1", body: [1], tag: 1, stream: "MINE")
        try connection.publishAsync(subject: "foo.job", messageID: "m2", body: [2], tag: 2, stream: "MINE")
        try connection.publishAsync(subject: "evstore.job", messageID: "m3", body: [3], tag: 3)
        try connection.waitForPublishes(timeout: .seconds(10))
        #expect(results.wait(for: 3))

        let refused = results.all[1]?.first.flatMap { result -> NATSError? in
            if case .failure(let error) = result.outcome { return error }
            return nil
        }
        #expect(refused?.code == .streamMismatch, "\(String(describing: results.all[1]))")
        #expect(
            refused?.message.contains("stream MINE does not take evstore.job") == true, "\(String(describing: refused))"
        )
        #expect(results.ack(2)?.stream == "MINE")
        // Without an expected stream, whichever takes the subject stores it.
        #expect(results.ack(3)?.stream == "OTHER")
        // The refused one is stored nowhere.
        #expect(try connection.streamInfo("OTHER")?.state.messages == 1)
        #expect(try connection.streamInfo("MINE")?.state.messages == 1)
        #expect(try connection.streamNames(subject: "evstore.>") == ["OTHER"])
        #expect(try connection.streamNames(subject: "foo.job") == ["MINE"])
        #expect(try connection.streamNames(subject: "nothing.>") == [])
    }

    @Test(.enabled(if: TestCertificates.openssl != nil, "openssl is not installed"))
    func tlsWithAClientCertificate() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "nats-tls-\(UUID().uuidString.prefix(8))"
        )
        .path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let certificates = try TestCertificates(in: directory)
        let server = try NATSServer(
            configuration: """
                tls {
                  cert_file: "\(certificates.serverCertificate)"
                  key_file: "\(certificates.serverKey)"
                  ca_file: "\(certificates.ca)"
                  verify: true
                  timeout: 5
                }

                """)
        defer { server.remove() }
        var options = NATSOptions(url: server.url)
        options.tlsCAFile = certificates.ca
        options.tlsCertificateFile = certificates.clientCertificate
        options.tlsKeyFile = certificates.clientKey
        try publishesOne(with: options, on: server)

        let plain = #expect(throws: NATSError.self) {
            try JetStreamConnection(options: NATSOptions(url: server.url)) { _ in }
        }
        #expect(plain?.code == .tls)

        var noClientCertificate = NATSOptions(url: server.url)
        noClientCertificate.tlsCAFile = certificates.ca
        let unverified = #expect(throws: NATSError.self) {
            try JetStreamConnection(options: noClientCertificate) { _ in }
        }
        #expect(unverified?.code == .tls)
        #expect(unverified?.message.contains("client certificate") == true)

        var missingFile = options
        missingFile.tlsCAFile = directory + "/missing.pem"
        #expect(throws: NATSError.invalidArgument) { try JetStreamConnection(options: missingFile) { _ in } }
    }

    /// Connects with `options`, creates a stream, and publishes one message that is acknowledged.
    /// Publishes one message through a connection made with `options` to `server`. A
    /// connection refused records what the server logged of it, the other side of the story.
    private func publishesOne(with options: NATSOptions, on server: NATSServer) throws {
        let results = PublishResults()
        let connection: JetStreamConnection
        do {
            connection = try JetStreamConnection(options: options) { results.record($0) }
        } catch {
            Issue.record("nats-server's log of the refused connection:\n\(server.log)")
            throw error
        }
        defer { connection.close() }
        try connection.addStream(Self.events)
        try connection.publishAsync(subject: "evstore.one", messageID: "one", body: [1], tag: 1)
        try connection.waitForPublishes(timeout: .seconds(10))
        #expect(results.ack(1)?.sequence == 1)
    }
}
