import Foundation
import TestSupport
import Testing

/// `evstore-nats` between a real `evstored` and a real `nats-server` with JetStream: every
/// event the node stores reaches the stream exactly once, whatever is killed.
@Suite(
    "The NATS JetStream bridge", .serialized,
    .enabled(if: NATSServer.available, "needs nats-server (make deps installs it)"))
struct JetStreamBridgeTests {
    /// Waits until the bridge's consumer has no lag and the stream holds `count` messages.
    static func waitForDrain(
        _ daemon: DaemonProcess, url: String, count: Int, timeout: Double = 180, bridge: BridgeProcess? = nil
    ) throws {
        let deadline = Date().addingTimeInterval(timeout)
        var lag: Int?
        var held = 0
        while Date() < deadline {
            lag = try daemon.lag()
            held = streamCount(url: url)
            if lag == 0 && held >= count { return }
            Thread.sleep(forTimeInterval: 0.1)
        }
        Issue.record(
            "not drained: lag \(String(describing: lag)), stream \(held) of \(count); bridge: \(bridge?.log ?? "")")
    }

    @Test("20,000 local events and 10,000 older ones a sync brings while the bridge runs: each in the stream once")
    func localAndReplicatedEvents() throws {
        let nats = try NATSServer()
        defer { nats.remove() }
        let gateway = try DaemonProcess(arguments: ["--node", "gateway"])
        defer { gateway.removeFiles() }
        let van = try DaemonProcess(arguments: ["--node", "van"])
        defer { van.removeFiles() }
        // The van's events are made first: older ids than everything the gateway makes.
        try van.appendSpread(10_000, tag: "van")
        let bridge = try BridgeProcess(socket: gateway.socketPath, url: nats.url, arguments: BridgeProcess.quick)
        try gateway.appendSpread(10_000, tag: "gw")
        let synced = try gateway.client().call("sync", #"{"peer":"unix://\#(van.socketPath)"}"#)
        #expect((synced["peers"] as? [[String: Any]])?.first?["received"] as? Int == 10_000, "\(synced)")
        try gateway.appendSpread(10_000, tag: "gw2")
        try JetStreamBridgeTests.waitForDrain(gateway, url: nats.url, count: 30_000, bridge: bridge)

        let log = try gateway.storedLog()
        #expect(log.count == 30_000)
        let node = try #require((try gateway.client().call("status")["node"] as? [String: Any])?["id"] as? String)
        expectStreamHolds(try streamContents(url: nats.url), exactly: log, node: node)
        #expect(bridge.log.contains("created stream EVSTORE"), "\(bridge.log)")
        #expect(bridge.stop() == 0)
        #expect(bridge.log.contains("stopped"))
    }

    @Test(
        "kill -9 of the bridge (10 times), of evstored (3) and of nats-server (3) while events are appended: each once, in seq order"
    )
    func crashesLoseAndDoubleNothing() throws {
        let nats = try NATSServer()
        defer { nats.remove() }
        var gateway = try DaemonProcess(arguments: ["--node", "gateway"])
        let root = gateway.root
        defer { gateway.removeFiles() }
        let bridge = try BridgeProcess(socket: gateway.socketPath, url: nats.url, arguments: BridgeProcess.quick)
        let socket = gateway.socketPath

        // Appends go on throughout, riding out the daemon's restarts.
        let appending = AppendLoop(socket: socket)
        appending.start()
        var rng = SeededGenerator(seed: UInt64(Date().timeIntervalSince1970))
        let rounds =
            Array(repeating: "bridge", count: 10) + ["evstored", "evstored", "evstored", "nats", "nats", "nats"]
        for victim in rounds.shuffled(using: &rng) {
            Thread.sleep(forTimeInterval: Double.random(in: 0.3...1.2, using: &rng))
            switch victim {
            case "bridge":
                bridge.kill9()
                try bridge.start()
            case "evstored":
                gateway.signal(SIGKILL)
                reap(gateway.process)
                gateway = try DaemonProcess(root: root, arguments: ["--node", "gateway"])
            default:
                nats.stop(signal: SIGKILL)
                Thread.sleep(forTimeInterval: Double.random(in: 0...0.5, using: &rng))
                try nats.start()
            }
        }
        let appended = appending.stop()
        #expect(appended > 1000, "only \(appended) appends acknowledged")
        let log = try gateway.storedLog()
        try JetStreamBridgeTests.waitForDrain(gateway, url: nats.url, count: log.count, bridge: bridge)
        let node = try #require((try gateway.client().call("status")["node"] as? [String: Any])?["id"] as? String)
        let events = try streamContents(url: nats.url)
        expectStreamHolds(events, exactly: log, node: node)
        print(
            "crash rounds: \(log.count) events, \(events.count) in the stream; bridge log:\n\(bridge.log.suffix(3000))")
    }

    @Test("two gateways that sync with each other, both bridged into one stream: each event once")
    func twoGatewaysOneStream() throws {
        let nats = try NATSServer()
        defer { nats.remove() }
        let a = try DaemonProcess(arguments: ["--node", "a"])
        defer { a.removeFiles() }
        let b = try DaemonProcess(arguments: ["--node", "b"])
        defer { b.removeFiles() }
        try a.appendSpread(3000, tag: "a")
        try b.appendSpread(3000, tag: "b")
        let bridgeA = try BridgeProcess(socket: a.socketPath, url: nats.url, arguments: BridgeProcess.quick)
        let bridgeB = try BridgeProcess(socket: b.socketPath, url: nats.url, arguments: BridgeProcess.quick)
        _ = try a.client().call("sync", #"{"peer":"unix://\#(b.socketPath)"}"#)
        try a.appendSpread(1000, tag: "a2")
        try b.appendSpread(1000, tag: "b2")
        _ = try b.client().call("sync", #"{"peer":"unix://\#(a.socketPath)"}"#)
        try JetStreamBridgeTests.waitForDrain(a, url: nats.url, count: 8000, bridge: bridgeA)
        try JetStreamBridgeTests.waitForDrain(b, url: nats.url, count: 8000, bridge: bridgeB)
        let log = try a.storedLog()
        let other = try b.storedLog()
        #expect(log.count == 8000 && Set(log.map(\.id)) == Set(other.map(\.id)))
        let events = try streamContents(url: nats.url)
        expectStreamHolds(events, exactly: log, node: nil)
        // Both published: each event went out twice, and the stream kept one.
        #expect(Set(events.map(\.node)).count == 2)
    }

    @Test(
        "a server without JetStream, no server, an event over max_payload: clear errors, nothing acknowledged past them"
    )
    func clearErrors() throws {
        let gateway = try DaemonProcess(arguments: ["--node", "gateway"])
        defer { gateway.removeFiles() }
        try gateway.appendSpread(10, tag: "e")

        let plain = try NATSServer(jetStream: false)
        defer { plain.remove() }
        let noJetStream = try BridgeProcess(socket: gateway.socketPath, url: plain.url, arguments: BridgeProcess.quick)
        #expect(noJetStream.waitForLog("no JetStream"), "\(noJetStream.log)")
        #expect(try gateway.lag() == 10)
        noJetStream.kill9()

        let nowhere = try BridgeProcess(
            socket: gateway.socketPath, url: "nats://127.0.0.1:\(NATSServer.unusedPort())",
            arguments: BridgeProcess.quick)
        #expect(nowhere.waitForLog("trying again in"), "\(nowhere.log)")
        #expect(nowhere.log.contains("127.0.0.1"))
        nowhere.kill9()

        let small = try NATSServer(configuration: "max_payload: 2048\n")
        defer { small.remove() }
        let big = String(repeating: "x", count: 3000)
        _ = try gateway.client().call(
            "append", eventsParams([#"{"entity":"job/big","kind":"edit","fields":{"text":"\#(big)"}}"#]))
        try gateway.appendSpread(5, tag: "after")
        let bridge = try BridgeProcess(socket: gateway.socketPath, url: small.url, arguments: BridgeProcess.quick)
        #expect(bridge.waitForLog("max_payload"), "\(bridge.log)")
        // The events before it are in the stream; it and those after wait.
        let deadline = Date().addingTimeInterval(20)
        while streamCount(url: small.url) < 10, Date() < deadline { Thread.sleep(forTimeInterval: 0.1) }
        Thread.sleep(forTimeInterval: 0.5)
        #expect(streamCount(url: small.url) == 10)
        #expect(try gateway.lag() == 6)
        #expect(bridge.stop() == 0)

        // A configuration it cannot use stops it at once, saying why.
        let wrong = try BridgeProcess(socket: gateway.socketPath, url: small.url, arguments: ["--prefix", "a.*"])
        #expect(exitStatus(of: wrong.process!, timeout: 10) == 78)
        #expect(wrong.log.contains("--prefix must be subject tokens"), "\(wrong.log)")
    }

    @Test("start new: a consumer the bridge creates begins at the head, and an existing one is kept")
    func startAtTheHead() throws {
        let nats = try NATSServer()
        defer { nats.remove() }
        let gateway = try DaemonProcess(arguments: ["--node", "gateway"])
        defer { gateway.removeFiles() }
        try gateway.appendSpread(100, tag: "old")
        let bridge = try BridgeProcess(
            socket: gateway.socketPath, url: nats.url,
            arguments: BridgeProcess.quick + ["--start", "new", "--consumer", "hq-feed"])
        #expect(bridge.waitForLog("publishing the events"), "\(bridge.log)")
        try gateway.appendSpread(7, tag: "new")
        let deadline = Date().addingTimeInterval(30)
        while try gateway.lag(of: "hq-feed") != 0 || streamCount(url: nats.url) < 7, Date() < deadline {
            Thread.sleep(forTimeInterval: 0.1)
        }
        #expect(streamCount(url: nats.url) == 7)
        #expect(bridge.stop() == 0)
    }
}

/// Appends batches of 20 events to a daemon until stopped, reconnecting while it restarts;
/// counts the batches acknowledged.
final class AppendLoop: @unchecked Sendable {
    let socket: String
    private let lock = NSLock()
    private var running = true
    private var acknowledged = 0
    private let done = DispatchSemaphore(value: 0)

    init(socket: String) { self.socket = socket }

    func start() {
        Thread.detachNewThread { [self] in
            var index = 0
            var client: RPCClient?
            while lock.withLock({ running }) {
                do {
                    if client == nil { client = try RPCClient(path: socket) }
                    let events = (0..<20).map { offset -> String in
                        let n = index + offset
                        let type = ["job", "tech", "site"][n % 3]
                        return #"{"entity":"\#(type)/loop-\#(n % 53)","kind":"edit","fields":{"n":\#(n)}}"#
                    }
                    _ = try client!.call("append", eventsParams(events))
                    index += 20
                    lock.withLock { acknowledged += 20 }
                    Thread.sleep(forTimeInterval: 0.01)
                } catch {
                    client = nil
                    Thread.sleep(forTimeInterval: 0.05)
                }
            }
            done.signal()
        }
    }

    /// Stops and returns how many events were acknowledged.
    func stop() -> Int {
        lock.withLock { running = false }
        done.wait()
        return lock.withLock { acknowledged }
    }
}
