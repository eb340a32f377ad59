@testable import Daemon
import EventStore
import Foundation
import Projections
@testable import Replication
@testable import Server
import TestSupport
import Testing
import UnixSocket
@testable import Writer

/// A hostile node hands a peer an event under the id of a third node's real event, with
/// other content. Range fingerprints cover ids only, so without content checks the two
/// honest nodes never notice; with the `verify` capability each session compares windows
/// of the events both hold by digest, the next one compares a window that differed event
/// by event, and both nodes list the difference under `attention`.
@Suite("Divergent content under one id")
struct DivergentContentTests {
    func node(_ daemon: DaemonProcess) throws -> String {
        try #require((try daemon.client().call("status")["node"] as? [String: Any])?["id"] as? String)
    }

    func sync(_ daemon: DaemonProcess, _ peer: DaemonProcess) throws -> [String: Any] {
        let result = try daemon.client().call("sync", #"{"peer":"unix://\#(peer.socketPath)"}"#)
        let session = try #require((result["peers"] as? [[String: Any]])?.first)
        #expect(session["error"] is NSNull, "\(session)")
        return session
    }

    func divergent(_ daemon: DaemonProcess) throws -> [[String: Any]] {
        try daemon.client().call("attention")["divergent"] as? [[String: Any]] ?? []
    }

    func divergentCount(_ daemon: DaemonProcess) throws -> Int? {
        (try daemon.client().call("status")["needs_attention"] as? [String: Any])?["divergent"] as? Int
    }

    /// Imports into `daemon` an event under `id` and `origin` (another node's), with content
    /// of our choosing.
    func forge(_ daemon: DaemonProcess, id: String, origin: String, entity: String, status: String) throws {
        let forged =
            #"{"entity":"\#(entity)","id":"\#(id)","kind":"status","origin":"\#(origin)","status":"\#(status)"}"#
        #expect(try daemon.client().call("import", eventsParams([forged]))["imported"] as? Int == 1)
    }

    @Test(
        "a forgery under a third node's id, passed on by a hostile node: the next session lists it as divergent on both nodes, either side initiating; dismissed, it comes back"
    )
    func forgeryIsListedOnBothNodes() throws {
        let third = try DaemonProcess(arguments: ["--node", "third"])
        let hostile = try DaemonProcess(arguments: ["--node", "hostile"])
        let receiver = try DaemonProcess(arguments: ["--node", "receiver"])
        defer { [third, hostile, receiver].forEach { $0.removeFiles() } }
        let appended = try third.client().call(
            "append",
            eventsParams(
                (0..<5).map { #"{"entity":"job/\#($0)","kind":"status","status":"assigned"}"# }))
        let ids = try #require(appended["ids"] as? [String])
        let real = ids[2]
        let thirdNode = try node(third)
        let receiverNode = try node(receiver)

        // The hostile node holds its own version of job/2's event, and hands it on.
        try forge(hostile, id: real, origin: thirdNode, entity: "job/2", status: "invoiced")
        _ = try sync(receiver, hostile)
        #expect(try divergentCount(receiver) == 0)

        // The receiver syncs with the third node: the ids match, the content does not. The
        // window's digest differs; the next session compares its events one by one.
        let flagged = try sync(receiver, third)
        #expect(flagged["protocol"] as? Int == 2)
        #expect(flagged["divergent"] as? Int == 0, "\(flagged)")
        // The responder logs once its side of the session is over, which may be just after
        // the initiator has its answer.
        let deadline = Date().addingTimeInterval(10)
        while !third.stderr.contains("1 content window differed"), Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        #expect(third.stderr.contains("1 content window differed"), "\(third.stderr.suffix(600))")
        let session = try sync(receiver, third)
        #expect(session["divergent"] as? Int == 1, "\(session)")
        #expect((session["verified"] as? Int ?? 0) >= 1, "\(session)")
        let here = try divergent(receiver)
        let there = try divergent(third)
        #expect(here.count == 1 && there.count == 1, "\(here) \(there)")
        let mine = try #require(here.first)
        let theirs = try #require(there.first)
        #expect(mine["id"] as? String == real && theirs["id"] as? String == real)
        #expect(mine["origin"] as? String == thirdNode && theirs["origin"] as? String == thirdNode)
        #expect(mine["peer_node"] as? String == thirdNode, "\(mine)")
        #expect(theirs["peer_node"] as? String == receiverNode, "\(theirs)")
        #expect((mine["peer"] as? String ?? "").contains(third.socketPath), "\(mine)")
        #expect((theirs["peer"] as? String ?? "").contains("receiver"), "\(theirs)")
        // Each side's hash is the other's "there".
        #expect(mine["here"] as? String == theirs["there"] as? String)
        #expect(mine["there"] as? String == theirs["here"] as? String)
        #expect(mine["here"] as? String != mine["there"] as? String)
        #expect(try divergentCount(receiver) == 1 && divergentCount(third) == 1)
        #expect(receiver.stderr.contains("divergent"), "\(receiver.stderr.suffix(600))")
        // Nothing else moved: the receiver kept what it held first, as ingest does.
        let state = try receiver.client().call("get", #"{"entity":"job/2"}"#)
        #expect((state["status"] as? [String: Any])?["current"] as? String == "invoiced")

        // evctl shows it: in status's needs attention, and in attention, which exits 1.
        let evctl = try builtBinary("evctl").path
        let (statusExit, statusText) = try runProgram(evctl, ["--socket", receiver.socketPath, "status"])
        #expect(statusExit == 0 && statusText.contains("needs attention: 1 divergent event"), "\(statusText)")
        let (attentionExit, attentionText) = try runProgram(evctl, ["--socket", receiver.socketPath, "attention"])
        #expect(attentionExit == 1, "\(attentionText)")
        #expect(attentionText.contains("divergent events") && attentionText.contains(real), "\(attentionText)")

        // Found again, recorded once.
        _ = try sync(receiver, third)
        _ = try sync(receiver, third)
        #expect(try divergent(receiver).count == 1 && divergent(third).count == 1)

        // Dismissed on both; then the third node initiates, and both list it again.
        let (dismissExit, dismissText) = try runProgram(
            evctl, ["--socket", receiver.socketPath, "attention", "dismiss", real])
        #expect(dismissExit == 0 && dismissText.contains("dismissed 1"), "\(dismissText)")
        #expect(try third.client().call("divergent.dismiss", #"{"ids":["\#(real)"]}"#)["dismissed"] as? Int == 1)
        #expect(try divergentCount(receiver) == 0 && divergentCount(third) == 0)
        #expect(try sync(third, receiver)["divergent"] as? Int == 0)
        let back = try sync(third, receiver)
        #expect(back["divergent"] as? Int == 1, "\(back)")
        #expect(try divergent(receiver).count == 1 && divergent(third).count == 1)

        // Bad ids are refused, and change nothing.
        let bad = try receiver.client().failure("divergent.dismiss", #"{"ids":["job/2"]}"#)
        #expect(bad.reason == "invalid_params", "\(bad)")
        #expect(try receiver.client().failure("divergent.dismiss", #"{"ids":[]}"#).reason == "invalid_params")
        #expect(try divergentCount(receiver) == 1)
    }

    @Test(
        "the window goes round the history: a forgery at the 150th of 200 events is found once the window reaches it, not before, and sessions over equal content find nothing"
    )
    func windowGoesRound() throws {
        // The responder picks the window: 16 events a session.
        let third = try DaemonProcess(arguments: ["--node", "third", "--sync-verify-events", "16"])
        let receiver = try DaemonProcess(arguments: ["--node", "receiver"])
        defer { [third, receiver].forEach { $0.removeFiles() } }
        var ids: [String] = []
        for batch in 0..<4 {
            let appended = try third.client().call(
                "append",
                eventsParams(
                    (0..<50).map { #"{"entity":"job/\#(batch * 50 + $0)","kind":"status","status":"assigned"}"# }))
            ids += try #require(appended["ids"] as? [String])
        }
        let position = 149
        try forge(receiver, id: ids[position], origin: try node(third), entity: "job/\(position)", status: "invoiced")

        var foundAt: Int?
        for session in 1...16 {
            let result = try sync(receiver, third)
            // 16 in windows, and 16 more event by event after a window that differed.
            #expect((result["verified"] as? Int ?? 0) <= 32, "\(result)")
            if (result["divergent"] as? Int ?? 0) > 0 {
                foundAt = session
                break
            }
            #expect(try divergent(receiver).isEmpty)
        }
        // Session 1 checks events the receiver does not hold yet (it held only the forgery
        // when the hellos were exchanged); the window holding the 150th is the 10th, and
        // the session after it compares that window's events one by one.
        let found = try #require(foundAt, "the forgery was not found in 16 sessions")
        #expect(found >= 10 && found <= 12, "found in session \(found)")
        #expect(try divergent(receiver).map { $0["id"] as? String } == [ids[position]])
        #expect(try divergent(third).map { $0["id"] as? String } == [ids[position]])
    }

    @Test(
        "a hostile initiator: a done naming more divergent events than allowed ends the session with protocol; one claiming every checked event differs fills the records to their bound and no further"
    )
    func hostileAnswers() throws {
        let daemon = try DaemonProcess(arguments: ["--sync-verify-events", "400"])
        defer { daemon.removeFiles() }
        let appended = try daemon.client().call(
            "append", eventsParams((0..<300).map { #"{"entity":"job/\#($0)","kind":"status","status":"assigned"}"# }))
        let ids = try #require(appended["ids"] as? [String])
        let origin = try node(daemon)

        /// Opens a protocol-2 session claiming to hold what the daemon holds; its hello.
        func open() throws -> (IncomingPeer, Messages.Hello) {
            let peer = try IncomingPeer(daemon)
            var hello = Messages.Hello(
                protocolVersion: 1, node: IncomingPeer.node.description, name: "claims", vector: [origin: ids.last!],
                ranges: nil)
            hello.protocols = [1, 2]
            hello.capabilities = [Frame.verifyCapability]
            try peer.channel.writePreamble()
            try peer.channel.write(Frame(kind: .hello, payload: Messages.encode(hello)))
            _ = try peer.channel.readPreamble()
            let frame = try peer.channel.read()
            #expect(frame.kind == .hello)
            return (peer, try Messages.decode(Messages.Hello.self, frame.payload, frame: "hello"))
        }
        func done(_ peer: IncomingPeer, _ divergent: [Messages.Check], recheck: [Messages.WireRange] = []) throws {
            // The opening range needs an answer: say it matches by giving no ranges.
            try peer.channel.write(
                Frame(kind: .reconcile, payload: Messages.encode(Messages.Reconcile(ranges: [], needs: []))))
            try peer.channel.write(
                Frame(
                    kind: .done,
                    payload: Messages.encode(
                        Messages.Done(sent: 0, reconciled: 0, divergent: divergent, recheck: recheck))))
        }
        /// A session that says every window differs, then one that gets their events to check.
        func checksAfterRecheck() throws -> (IncomingPeer, [Messages.Check]) {
            let (peer, hello) = try open()
            let windows = hello.windows ?? []
            #expect(windows.map { $0.count ?? 0 }.reduce(0, +) == 300, "\(windows)")
            #expect(hello.checks == [])
            try done(
                peer, [],
                recheck: windows.map {
                    var range = $0
                    range.count = nil
                    range.hash = nil
                    return range
                })
            while let frame = try? peer.channel.read(), frame.kind != .done {}
            peer.close()
            let (next, again) = try open()
            return (next, again.checks ?? [])
        }
        let fake = String(repeating: "0", count: 32)

        // Windows come by digest: 300 events in about 100 bytes.
        let (probe, hello) = try open()
        #expect(Messages.encode(hello.windows ?? []).count < 200)
        // Asking to recheck more windows than a done may list is refused.
        let many = Array(repeating: (hello.windows ?? [])[0], count: Messages.Done.maxRecheck + 1)
        try done(probe, [], recheck: many)
        let tooMany = try probe.failure()
        #expect(tooMany.reason == "protocol" && tooMany.message.contains("at most 64"), "\(tooMany)")
        probe.close()

        let (first, checks) = try checksAfterRecheck()
        #expect(checks.count == 300, "\(checks.count) checks")
        try done(first, checks.map { Messages.Check(id: $0.id, hash: fake) })
        let refused = try first.failure()
        #expect(refused.reason == "protocol" && refused.message.contains("at most 256"), "\(refused)")
        first.close()
        #expect(try divergentCount(daemon) == 0)

        // 256 claims each session: the records stop at their bound.
        for _ in 0..<2 {
            let (peer, checks) = try checksAfterRecheck()
            try done(peer, checks.prefix(256).map { Messages.Check(id: $0.id, hash: fake) })
            // The daemon sends what the peer lacks (nothing) and its done, then closes.
            while let frame = try? peer.channel.read(), frame.kind != .done {}
            peer.close()
        }
        let deadline = Date().addingTimeInterval(10)
        while try divergentCount(daemon) != DivergentEvent.maxRecords, Date() < deadline {
            Thread.sleep(forTimeInterval: 0.05)
        }
        #expect(try divergentCount(daemon) == DivergentEvent.maxRecords)
        #expect(try divergent(daemon).count == DivergentEvent.maxRecords)
        // A claim about an id the daemon did not ask about, or with a hash that is not one,
        // is ignored or refused; the daemon still serves.
        _ = try daemon.client().call("status")
    }

    @Test("content hashes are SHA-256 of the stored form, cut to 128 bits")
    func contentHash() {
        #expect(EventLog.contentHash(Array("abc".utf8)) == "ba7816bf8f01cfea414140de5dae2223")
        #expect(EventLog.contentHash([]) == "e3b0c44298fc1c149afbf4c8996fb924")
        #expect(DivergentEvent.isHash("ba7816bf8f01cfea414140de5dae2223"))
        #expect(!DivergentEvent.isHash("BA7816BF8F01CFEA414140DE5DAE2223"))
        #expect(!DivergentEvent.isHash("ba7816bf"))
    }
}
