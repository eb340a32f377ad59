import Foundation
import TestSupport
import Testing

/// Blob retention on real daemons: exactly the blobs nothing needs go — overwritten,
/// removed from a set, of a deleted entity, never named — and never one a live value or a
/// peer's missing event needs; `blob_retention_s` keeps them for that long first, and a
/// SIGHUP changes it; a pending blob nothing needs leaves the pending list.
@Suite("Blob retention", .serialized)
struct BlobRetentionTests {
    struct Blob {
        var hash: String
        var reference: String
    }

    func evctl(_ daemon: DaemonProcess, _ arguments: [String]) throws -> (status: Int32, output: String) {
        try runProgram(try builtBinary("evctl").path, ["--socket", daemon.socketPath] + arguments)
    }

    /// A blob of `text` put on `daemon` through the socket in one request.
    func put(_ daemon: DaemonProcess, _ text: String) throws -> Blob {
        let data = Data(text.utf8).base64EncodedString()
        let result = try daemon.client().call("blob.put", #"{"data":"\#(data)"}"#)
        let hash = try #require(result["hash"] as? String)
        return Blob(hash: hash, reference: #"{"$blob":"\#(hash)","size":\#(text.utf8.count),"type":"text/plain"}"#)
    }

    func append(_ daemon: DaemonProcess, _ events: [String]) throws {
        _ = try daemon.client().call("append", eventsParams(events))
    }

    func state(_ daemon: DaemonProcess, _ hash: String) throws -> String? {
        try daemon.client().call("blob.stat", #"{"hash":"\#(hash)"}"#)["state"] as? String
    }

    func gc(_ daemon: DaemonProcess, dryRun: Bool = false) throws -> [String: Any] {
        try daemon.client().call("blob.gc", #"{"dry_run":\#(dryRun)}"#)
    }

    static func hashes(_ list: Any?) -> Set<String> {
        Set((list as? [[String: Any]] ?? []).compactMap { $0["hash"] as? String })
    }

    /// A daemon with `peers` (name, URL, blob policy) and `blob_retention_s` in its config file.
    func daemon(node: String, peers: [(String, String, String)], retention: Int) throws -> DaemonProcess {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evgc-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let list = peers.map { #"{"name":"\#($0.0)","url":"\#($0.1)","blobs":"\#($0.2)"}"# }.joined(separator: ",")
        try
            #"{"peers":[\#(list)],"sync_interval_s":3600,"backoff_base_s":3600,"backoff_cap_s":3600,"blob_retention_s":\#(retention)}"#
            .write(toFile: root + "/evstored.json", atomically: true, encoding: .utf8)
        return try DaemonProcess(root: root, arguments: ["--config", root + "/evstored.json", "--node", node])
    }

    @Test(
        "exactly the blobs nothing needs are removed: a live value, a conflict's value, a set's element and an event a peer lacks keep theirs",
        .timeLimit(.minutes(30)))
    func retentionRemovesExactlyTheUnneeded() throws {
        let van = try DaemonProcess(arguments: ["--node", "van"])
        defer { van.removeFiles() }
        let hq = try daemon(node: "hq", peers: [("van", "unix://\(van.socketPath)", "eager")], retention: 0)
        defer { hq.removeFiles() }
        // The start's session with the van has come and gone: the van holds nothing yet.
        let live = try put(hq, "the meter reads 004711")
        let overwritten = try put(hq, "a blurred photo")
        let removed = try put(hq, "a document taken back")
        let ofDeleted = try put(hq, "the signature of a cancelled job")
        let inSet = try put(hq, "a document kept")
        let never = try put(hq, "put and never named")
        try append(
            hq,
            [
                #"{"entity":"job/1","kind":"edit","fields":{"photo":\#(overwritten.reference)}}"#,
                #"{"entity":"job/1","kind":"edit","fields":{"photo":\#(live.reference)}}"#,
                #"{"entity":"job/1","kind":"add","set":"documents","element":\#(removed.reference)}"#,
                #"{"entity":"job/1","kind":"add","set":"documents","element":\#(inSet.reference)}"#,
                #"{"entity":"job/1","kind":"remove","set":"documents","element":\#(removed.reference)}"#,
                #"{"entity":"job/2","kind":"edit","fields":{"signature":\#(ofDeleted.reference)}}"#,
                #"{"entity":"job/2","kind":"delete"}"#,
            ])

        // The van lacks every event: only the blob no event names may go.
        let dry = try gc(hq, dryRun: true)
        #expect(BlobRetentionTests.hashes(dry["would_remove"]) == [never.hash], "\(dry)")
        #expect(try state(hq, never.hash) == "present", "a dry run changes nothing")
        let first = try gc(hq)
        #expect(BlobRetentionTests.hashes(first["removed"]) == [never.hash], "\(first)")
        #expect(try state(hq, never.hash) == "unknown")

        // A conflict: the van edits the field job/3 holds, concurrently; both values are live.
        let result = try van.client().call("sync", #"{"peer":"unix://\#(hq.socketPath)"}"#)
        #expect((result["peers"] as? [[String: Any]])?.first?["error"] is NSNull, "\(result)")
        let conflicting = try put(hq, "one side of a conflict")
        try append(hq, [#"{"entity":"job/3","kind":"edit","fields":{"photo":\#(conflicting.reference)}}"#])
        try append(van, [#"{"entity":"job/3","kind":"edit","fields":{"photo":"described in words"}}"#])
        for _ in 0..<2 { _ = try hq.client().call("sync", #"{"peer":"van"}"#) }
        let conflict = try hq.client().call("get", #"{"entity":"job/3"}"#)
        #expect((conflict["conflicts"] as? [String: Any])?["fields"] != nil, "\(conflict)")

        // Every event is on the van now: what no live value names goes.
        let second = try gc(hq)
        #expect(
            BlobRetentionTests.hashes(second["removed"]) == [overwritten.hash, removed.hash, ofDeleted.hash],
            "\(second)")
        for kept in [live, inSet, conflicting] { #expect(try state(hq, kept.hash) == "present") }
        for gone in [overwritten, removed, ofDeleted] { #expect(try state(hq, gone.hash) == "unknown") }
        // The van got every blob with its events, and keeps what is live there too.
        for kept in [live, inSet, conflicting] { #expect(try state(van, kept.hash) == "present") }

        // A new event the van lacks needs its blob however the value changes after it.
        let unsent = try put(hq, "taken while the van is away")
        try append(
            hq,
            [
                #"{"entity":"job/4","kind":"edit","fields":{"photo":\#(unsent.reference)}}"#,
                #"{"entity":"job/4","kind":"edit","fields":{"photo":null}}"#,
            ])
        #expect(BlobRetentionTests.hashes(try gc(hq)["removed"]).isEmpty)
        #expect(try state(hq, unsent.hash) == "present")
        _ = try hq.client().call("sync", #"{"peer":"van"}"#)
        #expect(try state(van, unsent.hash) == "present")
        #expect(BlobRetentionTests.hashes(try gc(hq)["removed"]) == [unsent.hash])

        // Resolving the conflict with a plain value frees the blob.
        try append(hq, [#"{"entity":"job/3","kind":"edit","fields":{"photo":"settled"},"resolve":true}"#])
        _ = try hq.client().call("sync", #"{"peer":"van"}"#)
        #expect(BlobRetentionTests.hashes(try gc(hq)["removed"]) == [conflicting.hash])
        // The store still answers as before; a removed blob named again must be put again.
        let refused = try hq.client().failure(
            "append", eventsParams([#"{"entity":"job/5","kind":"edit","fields":{"photo":\#(overwritten.reference)}}"#]))
        #expect(refused.reason == "invalid_event" && refused.message.contains("put the blob first"), "\(refused)")
        let (status, output) = try evctl(hq, ["rebuild", "--verify"])
        #expect(status == 0, "\(output)")
    }

    @Test(
        "blob_retention_s keeps an unused blob that long, listed with when it goes; a SIGHUP that shortens it lets it go",
        .timeLimit(.minutes(30)))
    func retentionWaits() throws {
        let hq = try daemon(node: "hq", peers: [], retention: 3600)
        defer { hq.removeFiles() }
        let blob = try put(hq, "a photo nobody names")
        let first = try gc(hq)
        #expect(BlobRetentionTests.hashes(first["removed"]).isEmpty, "\(first)")
        let kept = try #require((first["kept"] as? [[String: Any]])?.first)
        #expect(kept["hash"] as? String == blob.hash)
        #expect(kept["unused_since"] is String && kept["removed_after"] is String, "\(kept)")
        #expect(try state(hq, blob.hash) == "present")
        let (_, text) = try evctl(hq, ["blob", "gc", "--dry-run"])
        #expect(text.contains("would remove 0 blobs") && text.contains("kept \(blob.hash) until"), "\(text)")

        // Named again before it went: needed, its mark gone.
        try append(hq, [#"{"entity":"job/1","kind":"edit","fields":{"photo":\#(blob.reference)}}"#])
        let needed = try gc(hq)
        #expect((needed["kept"] as? [Any])?.isEmpty == true && needed["needed"] as? Int == 1, "\(needed)")
        try append(hq, [#"{"entity":"job/1","kind":"delete"}"#])
        _ = try gc(hq)

        let config = hq.root + "/evstored.json"
        try #"{"peers":[],"sync_interval_s":3600,"blob_retention_s":0}"#.write(
            toFile: config, atomically: true, encoding: .utf8)
        hq.signal(SIGHUP)
        var gone = false
        for _ in 0..<100 where !gone {
            Thread.sleep(forTimeInterval: 0.05)
            gone = BlobRetentionTests.hashes(try gc(hq)["removed"]) == [blob.hash]
        }
        #expect(gone)
        #expect(try state(hq, blob.hash) == "unknown")
        let (status, output) = try evctl(hq, ["blob", "gc"])
        #expect(status == 0 && output.contains("removed 0 blobs"), "\(output)")
    }

    @Test(
        "a pending blob nothing needs any more leaves the pending list", .timeLimit(.minutes(30)))
    func pendingUnneededLeaves() throws {
        let hq = try DaemonProcess(arguments: ["--node", "hq"])
        defer { hq.removeFiles() }
        let blob = try put(hq, "a photo the kiosk never fetches")
        try append(hq, [#"{"entity":"job/1","kind":"edit","fields":{"photo":\#(blob.reference)}}"#])
        let kiosk = try daemon(node: "kiosk", peers: [("hq", "unix://\(hq.socketPath)", "none")], retention: 0)
        defer { kiosk.removeFiles() }
        _ = try kiosk.client().call("sync", #"{"peer":"hq"}"#)
        #expect(try state(kiosk, blob.hash) == "pending")
        // Needed while job/1 names it.
        #expect(BlobRetentionTests.hashes(try gc(kiosk)["removed"]).isEmpty)
        #expect(try state(kiosk, blob.hash) == "pending")

        try append(hq, [#"{"entity":"job/1","kind":"delete"}"#])
        _ = try kiosk.client().call("sync", #"{"peer":"hq"}"#)
        let report = try gc(kiosk)
        let removed = try #require((report["removed"] as? [[String: Any]])?.first, "\(report)")
        #expect(removed["hash"] as? String == blob.hash && removed["held"] as? Bool == false, "\(report)")
        #expect(try state(kiosk, blob.hash) == "unknown")
        #expect((try kiosk.client().call("status")["blobs"] as? [String: Any])?["pending"] as? Int == 0)
    }
}
