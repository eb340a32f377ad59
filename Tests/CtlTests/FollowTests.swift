import Foundation
import TestSupport
import Testing

/// `evctl log --follow` against a real `evstored`.
@Suite(.enabled(if: RunningDaemon.isAvailable, "evstored is not built"))
struct FollowTests {
    func ok(_ daemon: RunningDaemon, _ arguments: String...) throws -> EvctlResult {
        let result = try evctl(arguments, socket: daemon.socketPath)
        #expect(result.status == 0, "evctl \(arguments.joined(separator: " ")): \(result)")
        return result
    }

    @Test func logFollowPrintsNewEvents() throws {
        let daemon = try RunningDaemon()
        defer { daemon.remove() }
        let first = try ok(daemon, "append", "job/1", "status", "assigned").stdout.trimmingCharacters(in: .newlines)
        let follower = try EvctlProcess(["--json", "log", "--follow"], socket: daemon.socketPath)
        try follower.waitForOutput { $0.contains(first) }
        let second = try ok(daemon, "append", "job/1", "status", "en_route").stdout.trimmingCharacters(in: .newlines)
        let other = try ok(daemon, "append", "job/2", "set", "a=1").stdout.trimmingCharacters(in: .newlines)
        try follower.waitForOutput { $0.contains(other) }
        let result = follower.stop()
        let ids = try result.lines.map { try jsonObject($0)["id"] as? String }
        #expect(ids == [first, second, other], "\(result)")

        // Human lines, one entity, from nothing printed yet: only what comes.
        let human = try EvctlProcess(["log", "--follow", "--entity", "job/3"], socket: daemon.socketPath)
        Thread.sleep(forTimeInterval: 0.3)
        let third = try ok(daemon, "append", "job/3", "add", "parts", "valve-3").stdout.trimmingCharacters(
            in: .newlines)
        try human.waitForOutput { $0.contains(third) }
        let lines = human.stop().lines
        #expect(lines.count == 1 && lines[0].hasSuffix("  \(third)  job/3  add  parts  valve-3"), "\(lines)")
    }

    /// The seqs of `--json` lines.
    func seqs(_ result: EvctlResult) throws -> [Int] {
        try result.lines.map { try #require(try jsonObject($0)["seq"] as? Int) }
    }

    func consumerSeq(_ daemon: RunningDaemon, _ name: String) throws -> Int? {
        let listed = try ok(daemon, "--json", "consumers", "list").json()
        let consumers = listed["consumers"] as? [[String: Any]] ?? []
        return consumers.first { $0["name"] as? String == name }?["seq"] as? Int
    }

    @Test("log --follow --consumer acknowledges what it wrote; killed and run again, it goes on after it")
    func logFollowWithAConsumerResumesWhereItsAcknowledgementsEnd() throws {
        let daemon = try RunningDaemon()
        defer { daemon.remove() }
        let events = (0..<40).map { #"{"entity":"job/\#($0 % 7)","kind":"status","status":"s\#($0)"}"# }
        _ = try evctl(["append", "--file", "-"], socket: daemon.socketPath, stdin: events.joined(separator: "\n"))
        let unknown = try evctl(["log", "--consumer", "feed"], socket: daemon.socketPath)
        #expect(unknown.status == 2 && unknown.stderr.contains("evctl consumers add feed"), "\(unknown)")
        _ = try ok(daemon, "consumers", "add", "feed")

        // One page by hand, acknowledged as written.
        let page = try ok(daemon, "--json", "log", "--consumer", "feed", "--limit", "15")
        #expect(try seqs(page) == Array(1...15))
        #expect(try consumerSeq(daemon, "feed") == 15)

        let follower = try EvctlProcess(
            ["--json", "log", "--follow", "--consumer", "feed"], socket: daemon.socketPath)
        try follower.waitForOutput { $0.split(separator: "\n").count == 25 }
        _ = try evctl(["append", "--file", "-"], socket: daemon.socketPath, stdin: events.joined(separator: "\n"))
        try follower.waitForOutput { $0.split(separator: "\n").count == 65 }
        // Acknowledged once written and nothing more was waiting.
        let deadline = Date().addingTimeInterval(10)
        while try consumerSeq(daemon, "feed") != 80, Date() < deadline { Thread.sleep(forTimeInterval: 0.05) }
        #expect(try consumerSeq(daemon, "feed") == 80)
        let first = follower.stop()
        #expect(try seqs(first) == Array(16...80))

        _ = try ok(daemon, "append", "job/x", "status", "after-the-crash")
        let again = try EvctlProcess(["--json", "log", "--follow", "--consumer", "feed"], socket: daemon.socketPath)
        try again.waitForOutput { !$0.isEmpty }
        Thread.sleep(forTimeInterval: 0.3)
        #expect(try seqs(again.stop()) == [81])
        let deadline2 = Date().addingTimeInterval(10)
        while try consumerSeq(daemon, "feed") != 81, Date() < deadline2 { Thread.sleep(forTimeInterval: 0.05) }
        let status = try ok(daemon, "status").stdout
        #expect(status.contains("consumers:") && status.contains("at seq 81, 0 events behind"), "\(status)")
    }

    @Test func logFollowEndsWhenTheDaemonStops() throws {
        let daemon = try RunningDaemon()
        defer { daemon.remove() }
        let id = try ok(daemon, "append", "job/1", "status", "assigned").stdout.trimmingCharacters(in: .newlines)
        let follower = try EvctlProcess(["log", "--follow"], socket: daemon.socketPath)
        try follower.waitForOutput { $0.contains(id) }
        daemon.stop()
        let result = follower.finish(timeout: 20)
        #expect(result.status == 69, "\(result)")
        #expect(result.stderr.contains("closed the connection"))
        #expect(result.stderr.contains("evctl log --follow --after 1"), "resumes after the seq of \(id)")
    }

    @Test func aFollowerThatFallsBehindReconnectsWithoutAGap() throws {
        let daemon = try RunningDaemon(arguments: ["--watch-queue-events", "5"])
        defer { daemon.remove() }
        let first = try ok(daemon, "append", "job/0", "status", "assigned").stdout.trimmingCharacters(in: .newlines)

        // The follower writes into a pipe nobody reads yet: it stops reading the socket, the
        // daemon's queue for it overflows, and the daemon ends the watch.
        let pipe = Pipe()
        let follower = Process()
        follower.executableURL = try builtBinary("evctl")
        follower.arguments = ["--socket", daemon.socketPath, "--json", "log", "--follow"]
        follower.environment = cleanEnvironment()
        follower.standardOutput = pipe.fileHandleForWriting
        let stderr = try emptyFile(daemon.directory + "/follower.err")
        follower.standardError = FileHandle(forWritingAtPath: stderr)
        try follower.run()
        defer {
            kill(follower.processIdentifier, SIGKILL)
            follower.waitUntilExit()
        }
        try pipe.fileHandleForWriting.close()

        let events = (1...3000).map { #"{"entity":"job/\#($0 % 40)","kind":"edit","fields":{"n":\#($0)}}"# }
        let append = try evctl(
            ["append", "--file", "-"], socket: daemon.socketPath, stdin: events.joined(separator: "\n"))
        #expect(append.status == 0, "\(append)")
        let stored = try evctl(["--json", "log", "--all"], socket: daemon.socketPath).lines.map {
            try jsonObject($0)["id"] as? String ?? ""
        }
        #expect(stored.count == 3001 && stored.first == first)

        // Now read: everything, in order, each event once.
        let output = LockedData()
        let reader = Thread {
            while true {
                let chunk = pipe.fileHandleForReading.availableData
                if chunk.isEmpty { return }
                output.withLock { $0.append(chunk) }
            }
        }
        reader.start()
        let deadline = Date().addingTimeInterval(20)
        var printed: [String] = []
        while Date() < deadline {
            let text = output.withLock { String(decoding: $0, as: UTF8.self) }
            printed = text.split(separator: "\n").map {
                (try? jsonObject(String($0)))?["id"] as? String ?? "?"
            }
            if printed.count >= stored.count { break }
            Thread.sleep(forTimeInterval: 0.05)
        }
        let notes = (try? String(contentsOfFile: stderr, encoding: .utf8)) ?? ""
        let firstDifference = zip(printed, stored).enumerated().first { $0.element.0 != $0.element.1 }?.offset
        #expect(
            printed.count == stored.count && firstDifference == nil,
            "printed \(printed.count) of \(stored.count), first difference at \(firstDifference ?? -1): \(notes)")
        #expect(
            notes.contains("evctl: the daemon ended the watch: evctl fell too far behind; reconnecting"), "\(notes)")
    }
}

/// Bytes appended by one thread and read by another (an NSLock, which the thread
/// sanitizer sees, unlike Synchronization.Mutex on Linux).
final class LockedData: @unchecked Sendable {
    private let lock = NSLock()
    private var data = Data()

    func withLock<R>(_ body: (inout Data) -> R) -> R {
        lock.lock()
        defer { lock.unlock() }
        return body(&data)
    }
}
