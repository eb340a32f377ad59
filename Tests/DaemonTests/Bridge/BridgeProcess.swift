import Foundation
import JetStream
import TestSupport
import Testing

/// A real `evstore-nats` beside a real `evstored`: started as a child process, killed and
/// started again by the test.
final class BridgeProcess: @unchecked Sendable {
    let socketPath: String
    let url: String
    let arguments: [String]
    let logPath: String
    private(set) var process: Process?
    private var starts = 0

    init(socket: String, url: String, arguments: [String] = []) throws {
        socketPath = socket
        self.url = url
        self.arguments = arguments
        logPath = NSTemporaryDirectory() + "evstore-nats-\(UUID().uuidString.prefix(8)).log"
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        try start()
    }

    deinit {
        kill9()
        try? FileManager.default.removeItem(atPath: logPath)
    }

    /// The bridge's settings for tests: quick retries and short waits.
    static let quick = ["--backoff-base-s", "1", "--backoff-cap-s", "2", "--timeout-s", "3", "--ack-interval-ms", "50"]

    func start() throws {
        let process = Process()
        process.executableURL = try builtBinary("evstore-nats")
        process.arguments = ["--socket", socketPath, "--url", url] + arguments
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("EVSTORE_") }
        let log = FileHandle(forWritingAtPath: logPath)
        log?.seekToEndOfFile()
        // Both outputs, so a test can assert what never reaches either.
        process.standardError = log
        process.standardOutput = log
        try process.run()
        self.process = process
        starts += 1
    }

    /// A crash: SIGKILL, then reaped.
    func kill9() {
        guard let process, process.isRunning else { return }
        kill(process.processIdentifier, SIGKILL)
        reap(process)
    }

    /// SIGTERM; the exit status.
    func stop() -> Int32 {
        guard let process else { return -1 }
        kill(process.processIdentifier, SIGTERM)
        return exitStatus(of: process, timeout: 30)
    }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Waits until the log holds `text`, `count` times when given.
    func waitForLog(_ text: String, count: Int = 1, timeout: Double = 30) -> Bool {
        let deadline = Date().addingTimeInterval(timeout)
        while Date() < deadline {
            if log.components(separatedBy: text).count > count { return true }
            Thread.sleep(forTimeInterval: 0.05)
        }
        return false
    }
}

/// One message of the stream, as a reader at HQ sees it.
struct StreamedEvent {
    var streamSequence: UInt64
    var subject: String
    var id: String
    var seq: Int
    var node: String
    var origin: String
    var body: String
}

/// Everything a stream holds, read back message by message.
func streamContents(url: String, stream: String = "EVSTORE") throws -> [StreamedEvent] {
    let connection = try JetStreamConnection(options: NATSOptions(url: url)) { _ in }
    defer { connection.close() }
    guard let info = try connection.streamInfo(stream), info.state.messages > 0 else { return [] }
    var events: [StreamedEvent] = []
    for sequence in info.state.firstSequence...info.state.lastSequence {
        guard let message = try connection.message(stream: stream, sequence: sequence) else { continue }
        events.append(
            StreamedEvent(
                streamSequence: sequence, subject: message.subject, id: message.values(of: "Nats-Msg-Id").first ?? "",
                seq: Int(message.values(of: "Evstore-Seq").first ?? "") ?? -1,
                node: message.values(of: "Evstore-Node").first ?? "",
                origin: message.values(of: "Evstore-Origin").first ?? "",
                body: String(decoding: message.data, as: UTF8.self)))
    }
    return events
}

/// How many messages the stream holds (0 when it does not exist yet).
func streamCount(url: String, stream: String = "EVSTORE") -> Int {
    guard let connection = try? JetStreamConnection(options: NATSOptions(url: url), onPublishResult: { _ in }) else {
        return -1
    }
    defer { connection.close() }
    return (try? connection.streamInfo(stream)).flatMap { $0.map { Int($0.state.messages) } } ?? 0
}

extension DaemonProcess {
    /// The node's whole log by seq: each event's seq, id and stored JSON without `seq`.
    func storedLog() throws -> [(seq: Int, id: String, origin: String, entity: String)] {
        let client = try self.client()
        var after = 0
        var events: [(seq: Int, id: String, origin: String, entity: String)] = []
        while true {
            let page = try client.call("log", #"{"after":\#(after),"limit":10000}"#)
            for event in page["events"] as? [[String: Any]] ?? [] {
                events.append(
                    (
                        event["seq"] as? Int ?? -1, event["id"] as? String ?? "", event["origin"] as? String ?? "",
                        event["entity"] as? String ?? ""
                    ))
            }
            guard let next = page["next"] as? Int else { return events }
            after = next
        }
    }

    /// The lag of `consumer`, nil while it does not exist.
    func lag(of consumer: String = "nats") throws -> Int? {
        let consumers = try client().call("consumers.list")["consumers"] as? [[String: Any]] ?? []
        return consumers.first { $0["name"] as? String == consumer }?["lag"] as? Int
    }

    /// Appends `count` events spread over the entities of three types, `batch` a request.
    func appendSpread(_ count: Int, tag: String, batch: Int = 1000) throws {
        let client = try self.client()
        var made = 0
        while made < count {
            let size = min(batch, count - made)
            let events = (made..<(made + size)).map { index -> String in
                let type = ["job", "tech", "site"][index % 3]
                return
                    #"{"entity":"\#(type)/\#(tag)-\#(index % 97)","kind":"edit","fields":{"n":\#(index),"by":"\#(tag)"}}"#
            }
            _ = try client.call("append", eventsParams(events))
            made += size
        }
    }
}

/// Checks that the stream holds each of `log`'s events exactly once, with the right
/// headers and body, and that per subject one node's events are in its seq order.
func expectStreamHolds(
    _ events: [StreamedEvent], exactly log: [(seq: Int, id: String, origin: String, entity: String)], node: String?,
    sourceLocation: SourceLocation = #_sourceLocation
) {
    let ids = events.map(\.id)
    #expect(Set(ids).count == ids.count, "an event is in the stream twice", sourceLocation: sourceLocation)
    #expect(
        events.count == log.count, "the stream holds \(events.count), the node \(log.count)",
        sourceLocation: sourceLocation)
    #expect(Set(ids) == Set(log.map(\.id)), "the stream's ids differ from the node's", sourceLocation: sourceLocation)
    let byID = Dictionary(log.map { ($0.id, $0) }, uniquingKeysWith: { first, _ in first })
    for event in events {
        guard let stored = byID[event.id] else { continue }
        let type = String(stored.entity.prefix { $0 != "/" })
        #expect(event.subject == "evstore.\(type)", sourceLocation: sourceLocation)
        #expect(event.origin == stored.origin, sourceLocation: sourceLocation)
        if let node, event.node == node {
            #expect(event.seq == stored.seq, "Evstore-Seq of \(event.id)", sourceLocation: sourceLocation)
        }
        #expect(
            event.body.contains(#""id":"\#(event.id)""#) && !event.body.contains(#""seq":"#),
            sourceLocation: sourceLocation)
    }
    // Per subject, each publishing node's events come in that node's seq order.
    var last: [String: Int] = [:]
    for event in events {
        let key = event.subject + " " + event.node
        #expect(
            event.seq > last[key, default: 0],
            "\(event.subject) from \(event.node): seq \(event.seq) after \(last[key, default: 0])",
            sourceLocation: sourceLocation)
        last[key] = event.seq
    }
}
