import Foundation
import Projections
import TestSupport
import Testing

@testable import EventStore

@Suite("Crash safety", .serialized)
struct CrashTests {
    @Test("kill -9 during bulk appends loses no acknowledged batch", arguments: Array(1...8))
    func killDuringAppend(round: Int) throws {
        let child = try builtBinary("evstore-append-child")
        let dir = FileManager.default.temporaryDirectory.appendingPathComponent("evstore-crash-\(UUID().uuidString)")
            .path
        defer { try? FileManager.default.removeItem(atPath: dir) }
        var acknowledged: [ULID] = []
        var rng = SeededGenerator(seed: UInt64(round))
        for run in 0..<3 {
            let process = Process()
            process.executableURL = child
            // A small initial map and an early dictionary (the child trains at 400 events), so
            // some kills land during map growth and during training.
            process.arguments = [dir, "\(50 + 25 * run)", "\(256 << 10)"]
            let pipe = Pipe()
            process.standardOutput = pipe
            process.standardError = FileHandle.nullDevice
            try process.run()
            // Kill after a random number of acknowledged batches plus a random delay, so
            // the kill lands anywhere in a batch, however fast or slow the machine is.
            let reader = pipe.fileHandleForReading
            var received = Data()
            let wanted = Int.random(in: 1...12, using: &rng)
            while received.split(separator: UInt8(ascii: "\n")).count <= wanted {
                let chunk = reader.availableData
                if chunk.isEmpty { break }  // the child exited
                received.append(chunk)
            }
            usleep(UInt32.random(in: 0...40_000, using: &rng))
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
            received.append(reader.readDataToEndOfFile())
            let output = String(decoding: received, as: UTF8.self)
            for line in output.split(separator: "\n") where line.hasPrefix("ack ") {
                // A line cut by the kill is not an acknowledgement the test can rely on.
                let fields = line.split(separator: " ").dropFirst(2)
                let ids = fields.compactMap { ULID(String($0)) }
                if ids.count == fields.count { acknowledged += ids }
            }
        }
        #expect(!acknowledged.isEmpty, "the child acknowledged nothing before it was killed")
        let log = try EventLog.open(directory: dir)
        for id in acknowledged { #expect(try log.event(id) != nil, "acknowledged \(id) is missing") }
        #expect(Set(acknowledged).count == acknowledged.count)
        let report = try log.rebuild(verify: true)
        #expect(report.mismatched.isEmpty)
        #expect(!report.digestMismatch)
        #expect(report.events == (try log.statistics().events))
    }
}
