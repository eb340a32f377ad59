@testable import Daemon
import Foundation
@testable import Server
import Testing
@testable import Writer

/// The `import` method against a real daemon: stored events in, ids and origins kept.
@Suite("import method")
struct ImportTests {
    /// The stored events of a daemon's log, each as the daemon wrote it.
    static func storedEvents(_ client: RPCClient) throws -> [String] {
        let log = try client.call("log", #"{"limit":10000}"#)
        let events = try #require(log["events"] as? [[String: Any]])
        return try events.map {
            String(
                decoding: try JSONSerialization.data(
                    withJSONObject: $0, options: [.sortedKeys, .withoutEscapingSlashes]), as: UTF8.self)
        }
    }

    /// A source daemon whose events are exported, and a target daemon they are imported into,
    /// each with a client.
    struct Nodes {
        let source: DaemonProcess
        let target: DaemonProcess
        let from: RPCClient
        let to: RPCClient

        init() throws {
            let source = try DaemonProcess(arguments: ["--node", "source"])
            var target: DaemonProcess?
            do {
                target = try DaemonProcess(arguments: ["--node", "target"])
                (from, to) = (try source.client(), try target!.client())
            } catch {
                source.removeFiles()
                target?.removeFiles()
                throw error
            }
            self.source = source
            self.target = target!
        }

        func remove() {
            source.removeFiles()
            target.removeFiles()
        }
    }

    @Test("dry_run commits nothing; the real request stores all; again, all are skipped")
    func dryRunThenImport() throws {
        let nodes = try Nodes()
        defer { nodes.remove() }
        let (from, to) = (nodes.from, nodes.to)
        _ = try from.call(
            "append",
            eventsParams([
                #"{"entity":"job/1","kind":"status","status":"new","by":"ana"}"#,
                #"{"entity":"job/1","kind":"edit","fields":{"address":"12 Main St"}}"#,
                #"{"entity":"job/1","kind":"add","set":"parts","element":{"sku":"v-3"}}"#,
                #"{"entity":"job/1","kind":"remove","set":"parts","element":{"sku":"v-3"}}"#,
                #"{"entity":"job/2","kind":"delete"}"#,
            ]))
        let events = try ImportTests.storedEvents(from)
        let before = try to.call("status")

        let dry = try to.call("import", #"{"dry_run":true,"events":[\#(events.joined(separator: ","))]}"#)
        #expect(dry["imported"] as? Int == 5 && dry["skipped"] as? Int == 0)
        let afterDry = try to.call("status")
        #expect(afterDry["events"] as? Int == before["events"] as? Int)
        #expect(afterDry["digest"] as? String == before["digest"] as? String)

        let done = try to.call("import", eventsParams(events))
        #expect(done["imported"] as? Int == 5 && done["skipped"] as? Int == 0)
        #expect(try to.call("status")["digest"] as? String == from.call("status")["digest"] as? String)
        #expect(try ImportTests.storedEvents(to) == events)
        let appends = try #require(try to.call("status")["appends"] as? [String: Any])
        #expect(appends["received_total"] as? Int == 5 && appends["events_total"] as? Int == 0)
        let again = try to.call("import", eventsParams(events))
        #expect(again["imported"] as? Int == 0 && again["skipped"] as? Int == 5)
    }

    @Test("a bad element fails the whole request with its index; nothing of it is stored")
    func allOrNothing() throws {
        let nodes = try Nodes()
        defer { nodes.remove() }
        let (from, to) = (nodes.from, nodes.to)
        _ = try from.call(
            "append",
            eventsParams((1...4).map { #"{"entity":"job/\#($0)","kind":"status","status":"new"}"# }))
        let events = try ImportTests.storedEvents(from)
        let before = try to.call("status")

        var broken = events
        broken[2] = broken[2].replacingOccurrences(of: #""kind":"status""#, with: #""kind":"teleport""#)
        let invalid = try to.failure("import", eventsParams(broken))
        #expect(invalid.reason == "invalid_event" && invalid.code == -32005)
        #expect(invalid.message.hasPrefix("event 2 ("), "\(invalid.message)")
        #expect(invalid.message.contains("teleport"))

        // A gap in an origin's events: the third is given after the fourth.
        let gap = try to.failure("import", eventsParams([events[0], events[1], events[3], events[2]]))
        #expect(gap.reason == "invalid_event")
        #expect(gap.message.hasPrefix("event 3 (") && gap.message.contains("out of id order"), "\(gap.message)")

        // The same id with other content.
        let changed = events[0].replacingOccurrences(of: #""status":"new""#, with: #""status":"old""#)
        let twice = try to.failure("import", eventsParams([events[0], changed]))
        #expect(twice.reason == "invalid_event" && twice.message.contains("same id"), "\(twice.message)")

        // An input event (no id, no origin) is not a stored event.
        let input = try to.failure("import", eventsParams([#"{"entity":"job/9","kind":"delete"}"#]))
        #expect(input.reason == "invalid_event" && input.message.contains("\"id\""), "\(input.message)")

        let after = try to.call("status")
        #expect(after["events"] as? Int == before["events"] as? Int)
        #expect(after["digest"] as? String == before["digest"] as? String)

        // Once the first events are held, a held one that comes again is skipped, and one
        // below them that is not held is refused.
        _ = try to.call("import", eventsParams([events[0], events[1], events[3]]))
        let refused = try to.failure("import", eventsParams([events[1], events[2]]))
        #expect(refused.message.hasPrefix("event 1 (") && refused.message.contains("partial or filtered"))
        #expect(try to.call("status")["events"] as? Int == 3)

        #expect(try to.failure("import", #"{"events":{}}"#).code == -32602)
        #expect(try to.failure("import", #"{}"#).code == -32602)
        #expect(try to.failure("import", #"{"events":[],"extra":1}"#).message.contains("unknown parameter"))
        let many = "[" + Array(repeating: "{}", count: Methods.maxImportEvents + 1).joined(separator: ",") + "]"
        #expect(try to.failure("import", #"{"events":\#(many)}"#).message.contains("at most"))
    }

    @Test("import needs read-write access")
    func access() {
        #expect(MethodAccess.required["import"] == .write)
        #expect(Methods.names.contains("import"))
    }
}
