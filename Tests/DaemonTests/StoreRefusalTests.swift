import Foundation
import Projections
import TestSupport
import Testing

@testable import EventStore

/// `evstored` on a store that does not add up: it exits 74 with a message naming the data
/// file and what is wrong, and the file is byte for byte what it was.
@Suite("Daemon refuses a damaged store")
struct StoreRefusalTests {
    enum Damage: String, CaseIterable, CustomTestStringConvertible {
        case truncatedToHalf, truncatedTo8KiB, missingDictionary, sequenceAtTheEnd, nodeIDOfWrongLength, formatZero

        var testDescription: String { rawValue }

        /// What the daemon's message says beside the file's path.
        var problem: String {
            switch self {
            case .truncatedToHalf, .truncatedTo8KiB: "is truncated"
            case .missingDictionary: "compression dictionary 99 as current, but dictionary 99 is missing"
            case .sequenceAtTheEnd: "commit sequence is at \(UInt64.max)"
            case .nodeIDOfWrongLength: "node id is 12 bytes"
            case .formatZero: "format 0"
            }
        }

        /// Does the damage to the closed store in `directory`.
        func apply(to directory: String) throws {
            let file = directory + "/data.mdb"
            switch self {
            case .truncatedToHalf, .truncatedTo8KiB:
                let size = try #require(try FileManager.default.attributesOfItem(atPath: file)[.size] as? Int)
                let handle = try FileHandle(forWritingTo: URL(fileURLWithPath: file))
                try handle.truncate(atOffset: UInt64(self == .truncatedToHalf ? size / 2 : 8192))
                try handle.close()
            case .missingDictionary: try Damage.putMeta(directory, EventLog.Meta.dictionaryVersion, [0, 0, 0, 99])
            case .sequenceAtTheEnd:
                try Damage.putMeta(directory, EventLog.Meta.sequenceHead, Array(repeating: 0xFF, count: 8))
            case .nodeIDOfWrongLength:
                try Damage.putMeta(directory, EventLog.Meta.nodeID, Array(repeating: 1, count: 12))
            case .formatZero: try Damage.putMeta(directory, EventLog.Meta.format, [0, 0, 0, 0])
            }
        }

        /// Writes one meta value with LMDB itself, as a damaged or hand-edited store would hold it.
        static func putMeta(_ directory: String, _ key: [UInt8], _ value: [UInt8]) throws {
            let environment = try Environment(directory: directory)
            let meta = try environment.openDatabase("meta")
            try environment.write { txn in try txn.put(meta, key, value) }
        }
    }

    @Test("evstored exits 74 naming the file and the damage, and leaves data.mdb as it was", arguments: Damage.allCases)
    func refusedAtStart(damage: Damage) throws {
        let root = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evd-refuse-\(UUID().uuidString.prefix(8))"
        )
        .path
        defer { try? FileManager.default.removeItem(atPath: root) }
        let data = root + "/data"
        do {
            let log = try EventLog.open(directory: data)
            let inputs = (0..<300).map { index in
                InputEvent(
                    entity: EntityKey(validated: Array("job/\(index % 40)".utf8)), change: .status("s\(index)"))
            }
            _ = try log.append(inputs)
        }
        try damage.apply(to: data)
        let file = data + "/data.mdb"
        let before = try Data(contentsOf: URL(fileURLWithPath: file))

        let daemon = try DaemonProcess(root: root, waitForSocket: false)
        let status = try daemon.waitForExit(timeout: 60)
        #expect(status == 74, "exit status; stderr: \(daemon.stderr)")
        #expect(daemon.stderr.contains(file), "stderr names the file: \(daemon.stderr)")
        #expect(daemon.stderr.contains(damage.problem), "stderr says what is wrong: \(daemon.stderr)")
        #expect(!FileManager.default.fileExists(atPath: daemon.socketPath), "no socket was made")
        let after = try Data(contentsOf: URL(fileURLWithPath: file))
        #expect(after == before, "data.mdb changed")
    }
}
