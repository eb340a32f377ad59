import Foundation
import TestSupport
import Testing

/// The commit sequence's promise against 3 real daemons: random appends, syncs in random
/// pairs and imports interleaved; on every node a `log` reader that stops and resumes from
/// its last seq with random page sizes, and a watcher that disconnects and resumes. Each
/// sees every event its node stores exactly once, and what it saw equals the node's log.
@Suite("Commit sequence across 3 daemons")
struct SequencePropertyTests {
    /// A `log` reader that resumes from the last seq it saw.
    struct Reader {
        var after = 0
        var seen: [(seq: Int, id: String)] = []

        mutating func read(_ client: RPCClient, pageSize: Int, pages: Int) throws {
            for _ in 0..<pages {
                let page = try client.call("log", #"{"after":\#(after),"limit":\#(pageSize)}"#)
                for event in page["events"] as? [[String: Any]] ?? [] {
                    seen.append((event["seq"] as? Int ?? -1, event["id"] as? String ?? ""))
                }
                guard let next = page["next"] as? Int else {
                    after = max(after, page["head"] as? Int ?? after)
                    return
                }
                after = next
            }
        }
    }

    /// A watcher on a connection of its own that it drops and opens again.
    struct Watcher {
        let socket: String
        var client: RPCClient?
        var lastSeq = 0
        var seen: [(seq: Int, id: String)] = []

        mutating func connect() throws {
            client = nil  // closes the connection, ending the watch
            let client = try RPCClient(path: socket)
            _ = try client.call("watch", #"{"after":\#(lastSeq)}"#)
            self.client = client
        }

        /// Reads notifications until it has seen `count` more or reached `head`.
        mutating func read(upTo head: Int, count: Int) throws {
            var taken = 0
            while lastSeq < head, taken < count, let client {
                let message = try client.readJSON()
                guard message["method"] as? String == "event",
                    let event = (message["params"] as? [String: Any])?["event"] as? [String: Any],
                    let seq = event["seq"] as? Int
                else { continue }
                #expect(seq > lastSeq, "a watch sent seq \(seq) after \(lastSeq)")
                lastSeq = seq
                seen.append((seq, event["id"] as? String ?? ""))
                taken += 1
            }
        }
    }

    static func head(_ daemon: DaemonProcess) throws -> Int {
        try daemon.client().call("status")["seq"] as? Int ?? -1
    }

    /// Every event of a node, in id order, as `log` gives them with `order: "id"` (what an
    /// import takes), as raw JSON.
    static func exported(_ daemon: DaemonProcess) throws -> [String] {
        let client = try daemon.client()
        var lines: [String] = []
        var after: String?
        repeat {
            let params =
                after.map { #"{"order":"id","limit":5000,"after":"\#($0)"}"# } ?? #"{"order":"id","limit":5000}"#
            let page = try client.call("log", params)
            for event in page["events"] as? [[String: Any]] ?? [] {
                let data = try JSONSerialization.data(withJSONObject: event, options: [.sortedKeys])
                lines.append(String(decoding: data, as: UTF8.self))
            }
            after = page["next"] as? String
        } while after != nil
        return lines
    }

    @Test("readers and watchers resuming by seq see every stored event once", arguments: [UInt64(7), 8])
    func consumersSeeEveryEventOnce(seed: UInt64) throws {
        var rng = SeededGenerator(seed: seed)
        let daemons = try (0..<3).map { try DaemonProcess(arguments: ["--node", "n\($0)"]) }
        defer { for daemon in daemons { daemon.removeFiles() } }
        let clients = try daemons.map { try $0.client() }
        var readers = Array(repeating: Reader(), count: 3)
        var watchers = daemons.map { Watcher(socket: $0.socketPath) }
        for index in 0..<3 { try watchers[index].connect() }
        var counter = 0
        for _ in 0..<60 {
            let node = Int.random(in: 0..<3, using: &rng)
            switch Int.random(in: 0..<10, using: &rng) {
            case 0..<4:
                let events = (0..<Int.random(in: 1...25, using: &rng)).map { _ -> String in
                    counter += 1
                    return #"{"entity":"job/\#(counter % 17)","kind":"edit","fields":{"n":\#(counter)}}"#
                }
                _ = try clients[node].call("append", eventsParams(events))
            case 4..<6:
                let peer = (node + Int.random(in: 1...2, using: &rng)) % 3
                _ = try clients[node].call("sync", #"{"peer":"unix://\#(daemons[peer].socketPath)"}"#)
            case 6:
                let source = (node + Int.random(in: 1...2, using: &rng)) % 3
                let lines = try SequencePropertyTests.exported(daemons[source])
                if !lines.isEmpty {
                    _ = try clients[node].call("import", #"{"events":[\#(lines.joined(separator: ","))]}"#)
                }
            case 7:
                try readers[node].read(
                    clients[node], pageSize: Int.random(in: 1...40, using: &rng),
                    pages: Int.random(in: 1...4, using: &rng))
            case 8:
                try watchers[node].read(
                    upTo: try SequencePropertyTests.head(daemons[node]), count: Int.random(in: 0...50, using: &rng))
            default:
                try watchers[node].connect()
            }
        }
        for node in 0..<3 {
            let head = try SequencePropertyTests.head(daemons[node])
            try readers[node].read(clients[node], pageSize: 1000, pages: 1000)
            try watchers[node].read(upTo: head, count: .max)
            var log = Reader()
            try log.read(clients[node], pageSize: 10_000, pages: 1000)
            #expect(log.seen.map(\.seq) == (0..<log.seen.count).map { $0 + 1 }, "node \(node): seqs 1...N")
            #expect(log.seen.count == head)
            #expect(readers[node].seen.map(\.seq) == log.seen.map(\.seq), "node \(node): the reader saw the log")
            #expect(readers[node].seen.map(\.id) == log.seen.map(\.id))
            #expect(watchers[node].seen.map(\.seq) == log.seen.map(\.seq), "node \(node): the watcher saw the log")
            #expect(watchers[node].seen.map(\.id) == log.seen.map(\.id))
            #expect(Set(log.seen.map(\.id)).count == log.seen.count, "node \(node): each event once")
        }
        for daemon in daemons { _ = try daemon.stop() }
    }
}
