import Foundation
import TestSupport
import Testing

extension PreviousReleaseTests {
    @Test(
        "the previous release dead-letters the incr, proposal and decide events it cannot fold and syncs the rest; upgraded, it retries them and the digests are equal",
        .disabled(if: skipRequested, "EVSTORE_SKIP_PREVIOUS_RELEASE=1"), .timeLimit(.minutes(30)))
    func countersAndDecisionsReachThePreviousRelease() throws {
        let previous = try PreviousReleaseBinaries.locate()
        let (root, file) = try TypesFileTests.directory(rules: AuthorityDaemonTests.rules)
        let hq = try DaemonProcess(root: root + "/hq", arguments: ["--node", "hq", "--types-file", file])
        let van = try DaemonProcess(root: root + "/van", arguments: ["--node", "van", "--types-file", file])
        let old = try PreviousDaemon(binary: previous.evstored, arguments: ["--node", "previous"])
        defer {
            hq.removeFiles()
            van.removeFiles()
            old.removeFiles()
            try? FileManager.default.removeItem(atPath: root)
        }
        // HQ's work: a status and a counter; the van's: a proposal, which HQ accepts.
        try append(hq.socketPath, #"{"entity":"job/1","kind":"status","status":"assigned"}"#)
        try append(hq.socketPath, #"{"entity":"job/1","kind":"incr","counter":"parts_used","amount":2}"#)
        try append(hq.socketPath, #"{"entity":"job/2","kind":"edit","fields":{"address":"12 Main St"}}"#)
        _ = try call(van.socketPath, "sync", #"{"peer":"unix://\#(hq.socketPath)"}"#)
        try append(van.socketPath, #"{"entity":"job/1","kind":"status","status":"en_route"}"#)
        for _ in 0..<2 { _ = try call(van.socketPath, "sync", #"{"peer":"unix://\#(hq.socketPath)"}"#) }
        let decided = try call(hq.socketPath, "get", #"{"entity":"job/1"}"#)
        #expect((decided["status"] as? [String: Any])?["current"] as? String == "en_route", "\(decided)")

        // The previous release takes all of it over protocol 1: three events it cannot read.
        let first = try call(hq.socketPath, "sync", #"{"peer":"unix://\#(old.socketPath)"}"#)
        let session = try #require((first["peers"] as? [[String: Any]])?.first)
        #expect(session["error"] is NSNull, "\(first)")
        let letters = try call(old.socketPath, "dead_letters")["dead_letters"] as? [[String: Any]] ?? []
        #expect(letters.count == 3, "\(letters)")
        #expect(letters.allSatisfy { !(($0["reason"] as? String) ?? "").isEmpty }, "\(letters)")
        let job2 = try call(old.socketPath, "get", #"{"entity":"job/2"}"#)
        #expect((job2["fields"] as? [String: Any])?["address"] as? String == "12 Main St")
        // It keeps syncing what it can read.
        try append(hq.socketPath, #"{"entity":"job/2","kind":"edit","fields":{"floor":3}}"#)
        let second = try call(hq.socketPath, "sync", #"{"peer":"unix://\#(old.socketPath)"}"#)
        #expect((second["peers"] as? [[String: Any]])?.first?["error"] is NSNull, "\(second)")
        let floor = try call(old.socketPath, "get", #"{"entity":"job/2"}"#)
        #expect((floor["fields"] as? [String: Any])?["floor"] as? Int == 3)

        // The node is upgraded: this release on its data directory retries its dead letters.
        old.process.terminate()
        old.process.waitUntilExit()
        let upgraded = try DaemonProcess(root: old.root, arguments: ["--node", "previous", "--types-file", file])
        defer { upgraded.removeFiles() }
        let (code, output) = try runProgram(
            try builtBinary("evctl").path, ["--socket", upgraded.socketPath, "dead-letters", "retry", "--all"])
        #expect(code == 0, "\(output)")
        #expect((try call(upgraded.socketPath, "dead_letters")["dead_letters"] as? [Any])?.isEmpty == true)
        let status = try call(upgraded.socketPath, "status")
        #expect(((status["needs_attention"] as? [String: Any])?["dead_letters"] as? Int) == 0, "\(status)")
        #expect(status["digest"] as? String == (try call(hq.socketPath, "status")["digest"] as? String))
        let job1 = try call(upgraded.socketPath, "get", #"{"entity":"job/1"}"#)
        #expect((job1["status"] as? [String: Any])?["current"] as? String == "en_route", "\(job1)")
        #expect((job1["counters"] as? [String: Any])?["parts_used"] as? Int == 2, "\(job1)")
    }
}
