import EventStore
import Foundation
import Projections
import Testing

/// The README's first example, as written there, so it keeps compiling and saying the truth.
@Suite("README example")
struct ReadmeExampleTests {
    @Test func theFirstExampleRunsAndPrintsWhatItSays() throws {
        let directory = FileManager.default.temporaryDirectory.appendingPathComponent(
            "evstore-readme-\(UUID().uuidString)"
        ).path
        defer { try? FileManager.default.removeItem(atPath: directory) }

        let log = try EventLog.open(directory: directory)
        let result = try log.append([
            try EventCodec.decodeInput(
                Array(#"{"entity":"job/42","kind":"edit","fields":{"address":"12 Main St"}}"#.utf8)),
            try EventCodec.decodeInput(Array(#"{"entity":"job/42","kind":"status","status":"en_route"}"#.utf8)),
        ])
        #expect(result.ids.count == 2 && result.ids[0] < result.ids[1])
        let state = try log.canonicalState(of: try Validation.entity("job/42"))!
        let text = String(decoding: state, as: UTF8.self)
        #expect(
            text.hasPrefix(
                #"{"conflicts":{"fields":{},"status":[]},"deleted":false,"entity":"job/42","events":2,"fields":{"address":"12 Main St"},"sets":{},"status":{"current":"en_route","#
            ))
    }
}
