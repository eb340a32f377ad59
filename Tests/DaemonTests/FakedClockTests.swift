import Foundation
import Projections
import TestSupport
import Testing

/// The real `evstored` under libfaketime (Debian's `libfaketime`, installed by
/// `make deps`): its wall clock moved back a day while it runs, and peers days ahead and
/// behind.
@Suite("Faked clocks", .serialized)
struct FakedClockTests {
    static let library = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
    /// libfaketime and a sanitizer's runtime both hook the clock early in a process; the
    /// daemon hangs at start when both are loaded, so sanitized builds skip these tests.
    static let available = FileManager.default.fileExists(atPath: library) && !builtWithSanitizer
    static let day: Int64 = 86_400_000

    /// A daemon whose clock reads the offset in `clockFile` ("+0", "-1d", ...) at every call.
    ///
    /// Preloaded this way libfaketime hides argv from the Swift runtime (the `faketime`
    /// wrapper does not, but its FAKETIME would override the file), so the daemon takes
    /// its settings from the environment, which it reads like flags.
    private func fakedDaemon(clock offset: String, root existing: String? = nil) throws -> (DaemonProcess, String) {
        let root =
            existing
            ?? FileManager.default.temporaryDirectory.appendingPathComponent("evd-\(UUID().uuidString.prefix(8))").path
        try FileManager.default.createDirectory(atPath: root, withIntermediateDirectories: true)
        let clockFile = root + "/clock"
        try offset.write(toFile: clockFile, atomically: true, encoding: .utf8)
        let daemon = try DaemonProcess(
            root: root,
            environment: [
                "LD_PRELOAD": Self.library, "FAKETIME_TIMESTAMP_FILE": clockFile, "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1", "EVSTORE_DATA_DIR": root + "/data",
                "EVSTORE_SOCKET": root + "/evstored.sock",
            ])
        return (daemon, clockFile)
    }

    private func append(_ client: RPCClient, _ event: String) throws -> ULID {
        let result = try client.call("append", eventsParams([event]))
        let id = try #require((result["ids"] as? [String])?.first)
        return try #require(ULID(id))
    }

    @Test(
        "the wall clock moved back a day mid-run and across a restart: ids keep growing",
        .enabled(if: available, "needs libfaketime (make deps installs it), and a build without a sanitizer"))
    func clockBackADay() throws {
        let (daemon, clockFile) = try fakedDaemon(clock: "+0")
        defer { daemon.removeFiles() }
        let client = try daemon.client()
        var ids: [ULID] = []
        for index in 0..<20 {
            ids.append(try append(client, #"{"entity":"job/\#(index % 3)","kind":"status","status":"s\#(index)"}"#))
        }
        try "-1d".write(toFile: clockFile, atomically: true, encoding: .utf8)
        Thread.sleep(forTimeInterval: 0.05)
        let before = ids.count
        for index in 0..<20 { ids.append(try append(client, #"{"entity":"job/x\#(index)","kind":"delete"}"#)) }
        #expect(zip(ids, ids.dropFirst()).allSatisfy { $0 < $1 }, "every id greater than the one before")
        // After the jump the ids carry on from the last reading before it, not from a day ago.
        #expect(Int64(ids[before].timestamp) - Int64(ids[before - 1].timestamp) < 1000)

        try daemon.stop()
        let restarted = try DaemonProcess(
            root: daemon.root,
            environment: [
                "LD_PRELOAD": Self.library, "FAKETIME_TIMESTAMP_FILE": clockFile, "FAKETIME_NO_CACHE": "1",
                "FAKETIME_DONT_FAKE_MONOTONIC": "1", "EVSTORE_DATA_DIR": daemon.dataDirectory,
                "EVSTORE_SOCKET": daemon.socketPath,
            ])
        defer { restarted.removeFiles() }
        let again = try restarted.client()
        let after = try append(again, #"{"entity":"job/y","kind":"delete"}"#)
        #expect(after > ids.last!, "after a restart with the clock still a day back")
        // The daemon's clock really is a day back: its log lines carry yesterday's date.
        let yesterday = Date(timeIntervalSinceNow: -86_400).formatted(.iso8601.year().month().day())
        #expect(restarted.stderr.contains(yesterday), "\(restarted.stderr)")
        let logged = try again.call("log", #"{"limit":100}"#)["events"] as? [[String: Any]] ?? []
        #expect(logged.compactMap { $0["id"] as? String } == (ids + [after]).map(\.description))
    }

    @Test(
        "peers days behind and ahead: causal context decides, ids stay local, skew is reported per origin",
        .enabled(if: available, "needs libfaketime (make deps installs it), and a build without a sanitizer"))
    func peersBehindAndAhead() throws {
        let hq = try DaemonProcess()
        let (slow, _) = try fakedDaemon(clock: "-3d")
        let (fast, _) = try fakedDaemon(clock: "+2d")
        defer {
            for daemon in [hq, slow, fast] { daemon.removeFiles() }
        }
        let hqClient = try hq.client()
        let slowClient = try slow.client()
        let fastClient = try fast.client()
        func sync(_ client: RPCClient, with peer: DaemonProcess) throws {
            let outcome = try #require(
                (try client.call("sync", #"{"peer":"unix://\#(peer.socketPath)"}"#)["peers"] as? [[String: Any]])?
                    .first)
            #expect(outcome["error"] is NSNull, "\(outcome)")
        }
        func nodeID(_ client: RPCClient) throws -> String {
            try #require((try client.call("status")["node"] as? [String: Any])?["id"] as? String)
        }

        // hq edits; the slow van syncs and edits after it: a smaller id, but a later edit.
        let first = try append(hqClient, #"{"entity":"job/1","kind":"edit","fields":{"address":"12 Main St"}}"#)
        try sync(slowClient, with: hq)
        let second = try append(slowClient, #"{"entity":"job/1","kind":"edit","fields":{"address":"14 Main St"}}"#)
        #expect(second < first)
        // Edits that do not see each other: a conflict, on both.
        _ = try append(hqClient, #"{"entity":"job/2","kind":"edit","fields":{"tech":"ana"}}"#)
        _ = try append(slowClient, #"{"entity":"job/2","kind":"edit","fields":{"tech":"bo"}}"#)
        try sync(slowClient, with: hq)
        for client in [hqClient, slowClient] {
            let job1 = try client.call("get", #"{"entity":"job/1"}"#)
            #expect((job1["fields"] as? [String: Any])?["address"] as? String == "14 Main St")
            #expect(((job1["conflicts"] as? [String: Any])?["fields"] as? [String: Any])?.isEmpty != false)
            let job2 = try client.call("get", #"{"entity":"job/2"}"#)
            let heads =
                ((job2["conflicts"] as? [String: Any])?["fields"] as? [String: Any])?["tech"] as? [[String: Any]]
            #expect(Set((heads ?? []).compactMap { $0["value"] as? String }) == ["ana", "bo"])
        }
        #expect(
            try hqClient.call("get", #"{"entity":"job/2"}"#) as NSDictionary
                == (try slowClient.call("get", #"{"entity":"job/2"}"#) as NSDictionary))

        // The fast gateway's events arrive at hq; hq's own next id stays on hq's clock.
        let future = try append(fastClient, #"{"entity":"job/3","kind":"status","status":"assigned"}"#)
        try sync(hqClient, with: fast)
        let local = try append(hqClient, #"{"entity":"job/3","kind":"status","status":"done"}"#)
        #expect(local < future)
        #expect(Int64(local.timestamp) - Int64(Date().timeIntervalSince1970 * 1000) < 3_600_000)
        let job3 = try hqClient.call("get", #"{"entity":"job/3"}"#)
        #expect((job3["status"] as? [String: Any])?["current"] as? String == "done")

        // Skew per origin, both ways, in status and in evctl status.
        let clock = try #require(try hqClient.call("status")["clock"] as? [String: Any])
        let skewed = try #require(clock["skewed_origins"] as? [String: Int])
        let slowSkew = Int64(try #require(skewed[try nodeID(slowClient)]))
        let fastSkew = Int64(try #require(skewed[try nodeID(fastClient)]))
        #expect(abs(slowSkew + 3 * Self.day) < 60_000, "slow: \(slowSkew)")
        #expect(abs(fastSkew - 2 * Self.day) < 60_000, "fast: \(fastSkew)")
        let slowView = try #require(
            (try slowClient.call("status")["clock"] as? [String: Any])?["skewed_origins"] as? [String: Int])
        #expect(abs(Int64(try #require(slowView[try nodeID(hqClient)])) - 3 * Self.day) < 60_000)
        let printed = try runProgram(
            try builtBinary("evctl").path, ["--socket", hq.socketPath, "status"])
        #expect(printed.output.contains("behind") && printed.output.contains("ahead"), "\(printed.output)")
    }
}
