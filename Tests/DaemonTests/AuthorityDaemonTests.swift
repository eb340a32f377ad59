import Foundation
import TestSupport
import Testing

/// A type with an authority, on real daemons: the laptop's status events are proposals,
/// HQ decides each in the transaction that stores it, and the decisions sync back.
@Suite("Authority on real daemons")
struct AuthorityDaemonTests {
    static let rules = #"""
        {"job": {"status": {"initial": ["assigned"],
                            "transitions": {"assigned": ["en_route", "cancelled"], "en_route": ["on_site"],
                                            "on_site": ["done"]}},
                 "authority": "hq"}}
        """#

    func status(_ entity: String, _ status: String) -> String {
        #"{"entity":"\#(entity)","kind":"status","status":"\#(status)"}"#
    }

    func statusOf(_ daemon: DaemonProcess, _ entity: String) throws -> [String: Any] {
        try daemon.client().call("get", #"{"entity":"\#(entity)"}"#)["status"] as? [String: Any] ?? [:]
    }

    @Test("an offline proposal that HQ's move made stale is rejected with its reason; a legal one is accepted")
    func offlineProposals() throws {
        let (root, file) = try TypesFileTests.directory(rules: AuthorityDaemonTests.rules)
        let hq = try DaemonProcess(root: root + "/hq", arguments: ["--node", "hq", "--types-file", file])
        let laptop = try DaemonProcess(root: root + "/laptop", arguments: ["--node", "laptop", "--types-file", file])
        defer {
            hq.removeFiles()
            laptop.removeFiles()
        }
        _ = try laptop.client().call("peers.add", #"{"name":"hq","url":"unix://\#(hq.socketPath)"}"#)
        func sync() throws {
            // Twice: the decisions HQ makes while it takes the proposals come back on the next.
            for _ in 0..<2 {
                let result = try laptop.client().call("sync", #"{"peer":"hq"}"#)
                #expect((result["peers"] as? [[String: Any]])?.first?["error"] is NSNull, "\(result)")
            }
        }
        _ = try hq.client().call("append", eventsParams([status("job/1", "assigned"), status("job/2", "assigned")]))
        try sync()

        // Offline: the laptop proposes en_route for both; HQ cancels job/1 meanwhile.
        let proposed = try laptop.client().call(
            "append", eventsParams([status("job/1", "en_route"), status("job/2", "en_route")]))
        let proposals = proposed["ids"] as? [String] ?? []
        let pending = try statusOf(laptop, "job/1")
        #expect(pending["current"] as? String == "assigned", "a proposal leaves the current status: \(pending)")
        #expect((pending["proposed"] as? [[String: Any]])?.first?["status"] as? String == "en_route")
        _ = try hq.client().call("append", eventsParams([status("job/1", "cancelled")]))
        // A client cannot send a decision.
        let forged = try laptop.client().failure(
            "append", eventsParams([#"{"entity":"job/1","kind":"decide"}"#]))
        #expect(forged.reason == "invalid_event" && forged.message.contains("authority"), "\(forged.message)")

        try sync()
        for daemon in [hq, laptop] {
            let first = try statusOf(daemon, "job/1")
            #expect(first["current"] as? String == "cancelled", "\(first)")
            #expect(first["proposed"] == nil)
            let rejected = first["rejected"] as? [[String: Any]] ?? []
            #expect(rejected.map { $0["id"] as? String } == [proposals[0]])
            #expect((rejected.first?["reason"] as? String)?.hasPrefix("stale: job/1 is cancelled now") == true)
            let second = try statusOf(daemon, "job/2")
            #expect(second["current"] as? String == "en_route" && second["id"] as? String == proposals[1], "\(second)")
        }
        let digests = try [hq, laptop].map { try $0.client().call("status")["digest"] as? String }
        #expect(digests[0] != nil && digests[0] == digests[1])

        // Counted under needs attention on the proposing node, and shown by evctl.
        let needs = { (daemon: DaemonProcess) throws -> Int? in
            (try daemon.client().call("status")["needs_attention"] as? [String: Any])?["rejected_proposals"] as? Int
        }
        #expect(try needs(laptop) == 1)
        #expect(try needs(hq) == 0)
        let evctl = try builtBinary("evctl").path
        let (getCode, getOutput) = try runProgram(evctl, ["--socket", laptop.socketPath, "get", "job/1"])
        #expect(getCode == 0 && getOutput.contains("rejected:") && getOutput.contains("stale"), "\(getOutput)")
        let (code, attention) = try runProgram(evctl, ["--socket", laptop.socketPath, "attention"])
        #expect(code == 1 && attention.contains("rejected proposals") && attention.contains("job/1"), "\(attention)")

        // The next legal move builds on the accepted proposal; an illegal one is refused locally.
        let illegal = try laptop.client().failure("append", eventsParams([status("job/2", "done")]))
        #expect(illegal.reason == "invalid_transition")
        _ = try laptop.client().call("append", eventsParams([status("job/2", "on_site")]))
        try sync()
        #expect(try statusOf(hq, "job/2")["current"] as? String == "on_site")
        #expect(try statusOf(laptop, "job/2")["current"] as? String == "on_site")
    }
    @Test("proposals that reached HQ before its types file named it the authority are decided on SIGHUP")
    func decidedOnReload() throws {
        let (root, file) = try TypesFileTests.directory(rules: AuthorityDaemonTests.rules)
        let hqFile = root + "/hq-types.json"
        try "{}".write(toFile: hqFile, atomically: true, encoding: .utf8)
        let hq = try DaemonProcess(root: root + "/hq", arguments: ["--node", "hq", "--types-file", hqFile])
        let laptop = try DaemonProcess(root: root + "/laptop", arguments: ["--node", "laptop", "--types-file", file])
        defer {
            hq.removeFiles()
            laptop.removeFiles()
        }
        _ = try hq.client().call("append", eventsParams([status("job/1", "assigned")]))
        _ = try laptop.client().call("peers.add", #"{"name":"hq","url":"unix://\#(hq.socketPath)"}"#)
        _ = try laptop.client().call("sync", #"{"peer":"hq"}"#)
        _ = try laptop.client().call("append", eventsParams([status("job/1", "en_route")]))
        _ = try laptop.client().call("sync", #"{"peer":"hq"}"#)
        #expect((try statusOf(hq, "job/1")["proposed"] as? [[String: Any]])?.count == 1)

        try AuthorityDaemonTests.rules.write(toFile: hqFile, atomically: true, encoding: .utf8)
        hq.signal(SIGHUP)
        let deadline = Date().addingTimeInterval(10)
        while !hq.stderr.contains("decided 1 proposals"), Date() < deadline { Thread.sleep(forTimeInterval: 0.02) }
        #expect(hq.stderr.contains("decided 1 proposals held from before"), "\(hq.stderr)")
        _ = try laptop.client().call("sync", #"{"peer":"hq"}"#)
        #expect(try statusOf(laptop, "job/1")["current"] as? String == "en_route")
    }
}
