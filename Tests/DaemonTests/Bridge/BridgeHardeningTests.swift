import Foundation
import JetStream
import TestSupport
import Testing

/// `evstore-nats` against the attacks of issue 23 (items 10 and 11), with a real `evstored`
/// and a real `nats-server`: no password or token reaches its output whatever fails, a file
/// that gives its secret away is named, and an acknowledgement from a stream other than the
/// configured one acknowledges nothing to the daemon.
@Suite(
    "evstore-nats keeps its secrets and its stream", .serialized,
    .enabled(if: NATSServer.available, "needs nats-server (make deps installs it)"))
struct BridgeHardeningTests {
    /// Everything the bridge wrote holds none of `secrets`.
    static func expectNoSecret(
        _ bridge: BridgeProcess, _ secrets: [String], sourceLocation: SourceLocation = #_sourceLocation
    ) {
        let log = bridge.log
        for secret in secrets {
            #expect(!log.contains(secret), "the secret is in the output:\n\(log)", sourceLocation: sourceLocation)
        }
    }

    static func consumerSeq(_ daemon: DaemonProcess, _ name: String = "nats") throws -> Int? {
        let consumers = try daemon.client().call("consumers.list")["consumers"] as? [[String: Any]] ?? []
        return consumers.first { $0["name"] as? String == name }?["seq"] as? Int
    }

    @Test("a password in the URL: hidden at the session start, in a killed server's errors and a refusal's")
    func passwordInTheURL() throws {
        let password = "pw-S3cr3t-9731"
        let nats = try NATSServer(configuration: "authorization { user: evstore, password: \"\(password)\" }\n")
        defer { nats.remove() }
        let gateway = try DaemonProcess(arguments: ["--node", "gateway"])
        defer { gateway.removeFiles() }
        try gateway.appendSpread(3, tag: "pw")
        let address = "127.0.0.1:\(nats.port)"
        let unused = "127.0.0.1:\(NATSServer.unusedPort())"

        let bridge = try BridgeProcess(
            socket: gateway.socketPath, url: "nats://evstore:\(password)@\(address)", arguments: BridgeProcess.quick)
        #expect(bridge.waitForLog("publishing the events"), "\(bridge.log)")
        #expect(bridge.log.contains("nats://evstore:***@\(address)"), "\(bridge.log)")
        try JetStreamBridgeTests.waitForDrain(
            gateway, url: "nats://evstore:\(password)@\(address)", count: 3, timeout: 30, bridge: bridge)
        // The URL on the command line is named, not shown.
        #expect(bridge.log.contains("--url gives a password or token on the command line"), "\(bridge.log)")
        // A failing session: the server killed under it (noticed at the next publish), then
        // nobody at that port.
        nats.stop(signal: SIGKILL)
        try gateway.appendSpread(1, tag: "after")
        #expect(bridge.waitForLog("trying again in", count: 2), "\(bridge.log)")
        #expect(bridge.log.contains("127.0.0.1"))
        Self.expectNoSecret(bridge, [password])
        #expect(bridge.stop() == 0)

        // A wrong password, and a list whose first server is not there.
        try nats.start()
        let refused = try BridgeProcess(
            socket: gateway.socketPath,
            url: "nats://evstore:\(password)@\(unused),nats://evstore:x\(password)@\(address)",
            arguments: BridgeProcess.quick)
        #expect(refused.waitForLog("trying again in", count: 2), "\(refused.log)")
        #expect(refused.log.contains("evstore:***@"), "\(refused.log)")
        Self.expectNoSecret(refused, [password])
        #expect(refused.stop() == 0)
    }

    @Test("a token in the URL, and a password in the config file: hidden whatever fails")
    func tokenInTheURLAndPasswordInTheFile() throws {
        let token = "tok-S3cr3t-4412"
        let nats = try NATSServer(configuration: "authorization { token: \"\(token)\" }\n")
        defer { nats.remove() }
        let gateway = try DaemonProcess(arguments: ["--node", "gateway"])
        defer { gateway.removeFiles() }
        try gateway.appendSpread(2, tag: "tok")
        let address = "127.0.0.1:\(nats.port)"

        let bridge = try BridgeProcess(
            socket: gateway.socketPath, url: "nats://\(token)@\(address)", arguments: BridgeProcess.quick)
        #expect(bridge.waitForLog("publishing the events"), "\(bridge.log)")
        #expect(bridge.log.contains("nats://***@\(address)"), "\(bridge.log)")
        nats.stop(signal: SIGKILL)
        try gateway.appendSpread(1, tag: "after")
        #expect(bridge.waitForLog("trying again in", count: 2), "\(bridge.log)")
        #expect(bridge.log.contains(address))
        Self.expectNoSecret(bridge, [token])
        #expect(bridge.stop() == 0)

        // The token in the file, a wrong one: the refusal names the server, not the token.
        try nats.start()
        let path = NSTemporaryDirectory() + "evstore-nats-\(UUID().uuidString.prefix(8)).json"
        defer { try? FileManager.default.removeItem(atPath: path) }
        try #"{"token":"x\#(token)"}"#.write(toFile: path, atomically: true, encoding: .utf8)
        chmod(path, 0o600)
        let refused = try BridgeProcess(
            socket: gateway.socketPath, url: "nats://\(address)", arguments: BridgeProcess.quick + ["--config", path])
        #expect(refused.waitForLog("refused the credentials"), "\(refused.log)")
        #expect(refused.log.contains(address))
        #expect(!refused.log.contains("readable by"), "\(refused.log)")
        Self.expectNoSecret(refused, [token])
        #expect(refused.stop() == 0)
    }

    @Test("a secret in a file others may read: one warning naming the file and chmod 600; none at mode 600")
    func readableSecretFilesAreNamed() throws {
        let gateway = try DaemonProcess(arguments: ["--node", "gateway"])
        defer { gateway.removeFiles() }
        let directory = NSTemporaryDirectory() + "evstore-nats-\(UUID().uuidString.prefix(8))"
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let password = "pw-F1le-5521"
        let config = directory + "/evstore-nats.json"
        try #"{"user":"evstore","password":"\#(password)"}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let seed = directory + "/nkey.seed"
        try "SUAnotarealseed\n".write(toFile: seed, atomically: true, encoding: .utf8)
        let url = "nats://127.0.0.1:\(NATSServer.unusedPort())"

        chmod(config, 0o644)
        let readable = try BridgeProcess(
            socket: gateway.socketPath, url: url, arguments: BridgeProcess.quick + ["--config", config])
        #expect(readable.waitForLog("trying again in"), "\(readable.log)")
        let warning = "\(config) holds the password and is readable by its group and every user (mode 644)"
        #expect(readable.log.components(separatedBy: warning).count == 2, "\(readable.log)")
        #expect(readable.log.contains("chmod 600 \(config)"), "\(readable.log)")
        Self.expectNoSecret(readable, [password])
        #expect(readable.stop() == 0)

        // Group-readable: still a warning (a socket user of the group would read it).
        chmod(config, 0o640)
        chmod(seed, 0o640)
        let groupReadable = try BridgeProcess(
            socket: gateway.socketPath, url: url,
            arguments: BridgeProcess.quick + ["--config", config, "--nkey-seed", seed])
        #expect(groupReadable.waitForLog("trying again in"), "\(groupReadable.log)")
        #expect(groupReadable.log.contains("\(config) holds the password and is readable by its group (mode 640)"))
        #expect(groupReadable.log.contains("\(seed) holds an NKey seed and is readable by its group (mode 640)"))
        Self.expectNoSecret(groupReadable, [password, "SUAnotarealseed"])
        #expect(groupReadable.stop() == 0)

        chmod(config, 0o600)
        let private600 = try BridgeProcess(
            socket: gateway.socketPath, url: url, arguments: BridgeProcess.quick + ["--config", config])
        #expect(private600.waitForLog("trying again in"), "\(private600.log)")
        #expect(!private600.log.contains("readable by"), "\(private600.log)")
        #expect(private600.stop() == 0)

        // On the command line every user sees it: named, never shown.
        let flag = try BridgeProcess(
            socket: gateway.socketPath, url: url, arguments: BridgeProcess.quick + ["--password", password])
        #expect(flag.waitForLog("--password gives a password or token on the command line"), "\(flag.log)")
        Self.expectNoSecret(flag, [password])
        #expect(flag.stop() == 0)
    }

    @Test("another stream takes evstore.>: nothing acknowledged, both streams named; once fixed, every event once")
    func anotherStreamTakesTheSubjects() throws {
        let nats = try NATSServer()
        defer { nats.remove() }
        let admin = try JetStreamConnection(options: NATSOptions(url: nats.url)) { _ in }
        defer { admin.close() }
        try admin.addStream(StreamConfig(name: "EVSTORE", subjects: ["foo.>"], duplicateWindow: .seconds(604_800)))
        try admin.addStream(StreamConfig(name: "OTHER", subjects: ["evstore.>"]))
        let gateway = try DaemonProcess(arguments: ["--node", "gateway"])
        defer { gateway.removeFiles() }
        try gateway.appendSpread(5, tag: "two")

        let bridge = try BridgeProcess(socket: gateway.socketPath, url: nats.url, arguments: BridgeProcess.quick)
        #expect(bridge.waitForLog("trying again in", count: 2), "\(bridge.log)")
        let failure = bridge.log.components(separatedBy: "\n").first { $0.contains("trying again in") } ?? ""
        #expect(failure.contains("stream EVSTORE") && failure.contains("stream OTHER"), "\(failure)")
        #expect(failure.contains("stream_mismatch"), "\(failure)")
        // Nothing acknowledged to the daemon, nothing stored in either stream.
        #expect(try Self.consumerSeq(gateway) == 0)
        #expect(try gateway.lag() == 5)
        #expect(try admin.streamInfo("OTHER")?.state.messages == 0)
        #expect(try admin.streamInfo("EVSTORE")?.state.messages == 0)

        // Set right at HQ: the bridge goes on by itself, and nothing is lost.
        try admin.updateStream(StreamConfig(name: "OTHER", subjects: ["other.>"]))
        try admin.updateStream(
            StreamConfig(name: "EVSTORE", subjects: ["evstore.>"], duplicateWindow: .seconds(604_800)))
        try JetStreamBridgeTests.waitForDrain(gateway, url: nats.url, count: 5, timeout: 30, bridge: bridge)
        let node = try #require((try gateway.client().call("status")["node"] as? [String: Any])?["id"] as? String)
        expectStreamHolds(try streamContents(url: nats.url), exactly: try gateway.storedLog(), node: node)
        #expect(try admin.streamInfo("OTHER")?.state.messages == 0)
        #expect(bridge.stop() == 0)
    }
}
