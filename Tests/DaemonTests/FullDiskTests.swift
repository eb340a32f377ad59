import Foundation
import TestSupport
import Testing

/// A store that runs out of room: on a small tmpfs (a full file system), and at its
/// configured `map_max_bytes`. Appends fail with `storage_full` and change nothing; reads,
/// status and sync towards peers keep working; nothing acknowledged is lost; and it works
/// again, without a restart, once there is room.
@Suite("Full disk", .serialized)
struct FullDiskTests {
    /// Whether this process may mount a tmpfs (root, or CAP_SYS_ADMIN in its namespace).
    static let canMount: Bool = {
        guard let point = try? SmallFileSystem(megabytes: 1) else { return false }
        point.remove()
        return true
    }()

    @Test(
        "a full file system: storage_full, reads and sync-out keep working, recovery when space returns",
        .enabled(if: canMount, "mounting a tmpfs needs root or CAP_SYS_ADMIN"), .timeLimit(.minutes(30)))
    func fullFileSystem() throws {
        let disk = try SmallFileSystem(megabytes: 4)
        defer { disk.remove() }
        // The whole daemon lives on the small file system, its stderr log included: a log
        // line that cannot be written must not stop it.
        let full = try DaemonProcess(root: disk.path)
        defer { full.removeFiles() }
        let client = try full.client()

        let (acknowledged, failure) = try fillUntilRefused(client)
        #expect(failure.reason == "storage_full", "\(failure.message)")
        #expect(failure.message.contains("disk"), "the message says what to do: \(failure.message)")
        #expect(acknowledged.count > 500)

        // Refused again, and still serving reads while full.
        let batch = (0..<100).map { noteEvent($0, seed: 1) }
        #expect(try client.failure("append", eventsParams(batch)).reason == "storage_full")
        #expect(try eventCount(client) == acknowledged.count)
        #expect(try loggedIDs(client) == Set(acknowledged))
        _ = try client.call("get", #"{"entity":"job/0"}"#)
        _ = try client.call("list", #"{"limit":10}"#)

        // Sync out: a peer pulls everything from the full node, which answers as responder.
        let peer = try DaemonProcess()
        defer { peer.removeFiles() }
        let pulled = try peer.client().call("sync", #"{"peer":"unix://\#(full.socketPath)"}"#)
        let pull = try #require((pulled["peers"] as? [[String: Any]])?.first)
        #expect(pull["error"] is NSNull, "pull from the full node: \(pull)")
        #expect(pull["received"] as? Int == acknowledged.count)

        // The full node starts a session: it sends what the peer lacks, and the peer's new
        // events cannot be stored here: a storage_full error for that session, nothing else.
        let peerClient = try peer.client()
        var extraIDs: [String] = []
        for batch in 0..<3 {
            let events = (0..<100).map { noteEvent(1_000_000 + batch * 100 + $0, seed: 2) }
            extraIDs += try #require(try peerClient.call("append", eventsParams(events))["ids"] as? [String])
        }
        let pushed = try client.call("sync", #"{"peer":"unix://\#(peer.socketPath)"}"#)
        let push = try #require((pushed["peers"] as? [[String: Any]])?.first)
        let pushError = try #require(push["error"] as? [String: Any], "the session could not store: \(push)")
        #expect(pushError["reason"] as? String == "storage_full", "\(push)")
        #expect(try eventCount(client) == acknowledged.count)

        // Space returns: the same daemon appends and takes the peer's events, no restart.
        try disk.resize(megabytes: 64)
        let after = try client.call("append", eventsParams([noteEvent(2, seed: 4)]))
        let afterID = try #require((after["ids"] as? [String])?.first)
        let resumed = try #require(
            (try client.call("sync", #"{"peer":"unix://\#(peer.socketPath)"}"#)["peers"] as? [[String: Any]])?.first)
        #expect(resumed["error"] is NSNull, "\(resumed)")
        #expect(resumed["received"] as? Int == extraIDs.count)

        // After a restart everything acknowledged is there once, and projections match a rebuild.
        try full.stop()
        let again = try DaemonProcess(root: disk.path)
        defer { again.removeFiles() }
        let reopened = try again.client()
        #expect(try loggedIDs(reopened) == Set(acknowledged + extraIDs + [afterID]))
        #expect(try eventCount(reopened) == acknowledged.count + extraIDs.count + 1)
        let verify = try reopened.call("rebuild", #"{"verify":true}"#)
        #expect((verify["mismatched"] as? [Any])?.isEmpty == true)
        #expect(verify["digest_mismatch"] as? Bool == false)
        #expect(!again.stderr.contains("Fatal error"))
    }

    @Test(
        "map_max_bytes reached: storage_full, and a raised maximum applies at SIGHUP", .timeLimit(.minutes(30)))
    func mapMaximum() throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent("evd-\(UUID().uuidString.prefix(8))")
            .path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let config = root + "/evstored.json"
        try #"{"map_max_bytes": 4194304}"#.write(toFile: config, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(root: root, arguments: ["--config", config])
        defer { daemon.removeFiles() }
        let client = try daemon.client()

        let (acknowledged, failure) = try fillUntilRefused(client)
        #expect(failure.reason == "storage_full")
        #expect(failure.message.contains("map_max_bytes"), "\(failure.message)")
        #expect(try loggedIDs(client) == Set(acknowledged))

        try #"{"map_max_bytes": 67108864}"#.write(toFile: config, atomically: true, encoding: .utf8)
        daemon.signal(SIGHUP)
        let deadline = Date().addingTimeInterval(20)
        var appended: [String: Any]?
        while appended == nil, Date() < deadline {
            let response = try client.request("append", eventsParams([noteEvent(3, seed: 5)]))
            appended = response["result"] as? [String: Any]
            if appended == nil { Thread.sleep(forTimeInterval: 0.05) }
        }
        #expect(appended != nil, "appends work again after the maximum was raised: \(daemon.stderr)")
        #expect(try eventCount(client) == acknowledged.count + 1)
    }

    /// Appends batches of poorly compressible events until the daemon refuses one; the ids
    /// it acknowledged and the refusal.
    private func fillUntilRefused(_ client: RPCClient) throws -> (
        [String], (reason: String, code: Int, message: String)
    ) {
        var acknowledged: [String] = []
        for batch in 0..<5000 {
            let events = (0..<100).map { noteEvent(batch * 100 + $0, seed: UInt64(batch)) }
            let response = try client.request("append", eventsParams(events))
            if let result = response["result"] as? [String: Any] {
                acknowledged += try #require(result["ids"] as? [String])
                continue
            }
            let error = try #require(response["error"] as? [String: Any])
            let data = error["data"] as? [String: Any]
            return (
                acknowledged,
                (data?["reason"] as? String ?? "", error["code"] as? Int ?? 0, error["message"] as? String ?? "")
            )
        }
        throw DaemonError("5000 batches were all accepted")
    }

    private func noteEvent(_ index: Int, seed: UInt64) -> String {
        var rng = SeededGenerator(seed: seed &* 1_000_003 &+ UInt64(index))
        let note = (0..<24).map { _ in String(UInt64.random(in: 0...UInt64.max, using: &rng), radix: 16) }.joined()
        return #"{"entity":"job/\#(index % 500)","kind":"edit","fields":{"note":"\#(note)"}}"#
    }

    private func eventCount(_ client: RPCClient) throws -> Int {
        try #require(try client.call("status")["events"] as? Int)
    }

    /// Every id in the log, which must hold each once.
    private func loggedIDs(_ client: RPCClient) throws -> Set<String> {
        var ids: [String] = []
        var after: Int?
        repeat {
            let params = after.map { #"{"limit":1000,"after":\#($0)}"# } ?? #"{"limit":1000}"#
            let page = try client.call("log", params)
            ids += (page["events"] as? [[String: Any]] ?? []).compactMap { $0["id"] as? String }
            after = page["next"] as? Int
        } while after != nil
        let distinct = Set(ids)
        #expect(distinct.count == ids.count, "each event is logged once")
        return distinct
    }
}

/// A tmpfs of a given size mounted on a fresh temp directory, for tests that need a file
/// system to fill up.
struct SmallFileSystem {
    let path: String

    init(megabytes: Int) throws {
        path = FileManager.default.temporaryDirectory.appendingPathComponent("evfs-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        let mounted = try runProgram(
            "/bin/mount", ["-t", "tmpfs", "-o", "size=\(megabytes)m,mode=0700", "tmpfs", path])
        guard mounted.status == 0 else {
            try? FileManager.default.removeItem(atPath: path)
            throw DaemonError("mount failed: \(mounted.output)")
        }
    }

    func resize(megabytes: Int) throws {
        let result = try runProgram("/bin/mount", ["-o", "remount,size=\(megabytes)m", path])
        guard result.status == 0 else { throw DaemonError("remount failed: \(result.output)") }
    }

    func remove() {
        _ = try? runProgram("/bin/umount", ["-l", path])
        try? FileManager.default.removeItem(atPath: path)
    }
}
