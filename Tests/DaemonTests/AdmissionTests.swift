import EventStore
import Foundation
import Logging
import Projections
import StoreTestSupport
import Testing
import Wire

@testable import Daemon
@testable import Replication
@testable import Server
@testable import Writer

/// The admission stage between a parsed append and the writer: it refuses what the client
/// may not do, answers what has nothing to write, and admits the rest as the writer's job.
@Suite struct AdmissionTests {
    static func client(_ level: AccessLevel) -> ClientAccess {
        ClientAccess(credentials: nil, groups: [], grant: AccessPolicy.Grant(level: level, why: "the test's"))
    }

    @Test(
        "a client without write access is refused by name, an empty batch answered, the rest admitted whole; a stopping writer refuses"
    )
    func outcomes() throws {
        let store = try TempStore()
        defer { store.remove() }
        let writer = WriterTests.writer(store)
        writer.start()
        let admission = Admission()
        let events = [try WriterTests.edit("job/1", 1), try WriterTests.edit("job/2", 2)]

        for level in [AccessLevel.none, .read] {
            let outcome = admission.decide(events, from: Self.client(level))
            guard case .refuse(let error) = outcome else {
                Issue.record("level \(level): \(outcome)")
                continue
            }
            #expect(error.reason == "forbidden" && error.message.contains("append is refused"))
            #expect(outcome.isAccessRefusal)
        }
        for level in [AccessLevel.write, .full] {
            guard case .admit(let job) = admission.decide(events, from: Self.client(level)) else {
                Issue.record("level \(level) was not admitted")
                continue
            }
            #expect(job.inputs.map(\.entity) == events.map(\.entity))
            let line = Admission.Outcome.admit(job).responseLine(id: Array("7".utf8), writer: writer, source: 1)
            let answer = try #require(Response.read(line)).get()
            #expect(String(decoding: answer, as: UTF8.self).contains(#""appended":2"#), "\(answer)")
        }
        guard case .answer(let empty) = admission.decide([], from: Self.client(.write)) else {
            Issue.record("an empty batch went to the writer")
            return
        }
        #expect(empty.ids.isEmpty && empty.versions.isEmpty && empty.appended == 0)
        // Refused before anything else: an empty append of a read-only client too.
        #expect(admission.decide([], from: Self.client(.read)).isAccessRefusal)

        writer.stop()
        // A stopping daemon refuses what is admitted: the writer answers it.
        let stopping = admission.decide(events, from: Self.client(.write))
        guard case .failure(let error) = Response.read(stopping.responseLine(id: [0x31], writer: writer, source: 1))
        else {
            Issue.record("a stopping writer took \(stopping)")
            return
        }
        #expect(error.reason == "unavailable" && !stopping.isAccessRefusal)
        #expect(store.log.sequenceHead == 4)
    }

    @Test("a real daemon answers an empty append, alone and in a batch, without a commit; the appends beside it commit")
    func emptyAppendsTakeNoCommit() throws {
        let daemon = try DaemonProcess()
        defer { daemon.removeFiles() }
        defer { _ = try? daemon.stop() }
        let client = try daemon.client()
        let commits = { () throws -> Int in
            let writer = try client.call("status")["writer"] as? [String: Any]
            return try #require(writer?["commits"] as? Int)
        }
        let before = try commits()
        let empty = try client.call("append", #"{"events":[]}"#)
        #expect(empty["appended"] as? Int == 0 && (empty["ids"] as? [Any])?.isEmpty == true)
        #expect((empty["versions"] as? [String: Any])?.isEmpty == true)
        try client.send(
            #"[{"jsonrpc":"2.0","id":1,"method":"append","params":{"events":[]}},"#
                + #"{"jsonrpc":"2.0","id":2,"method":"append","params":{"events":[{"entity":"job/1","kind":"edit","fields":{"a":1}}]}}]"#
        )
        let text = try #require(try client.readLine())
        let batch = try #require(try JSONSerialization.jsonObject(with: Data(text.utf8)) as? [[String: Any]])
        #expect(batch.map { ($0["result"] as? [String: Any])?["appended"] as? Int } == [0, 1])
        #expect(try commits() == before + 1)
    }
}
