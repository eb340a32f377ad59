import Foundation
import StoreTestSupport
import Testing

@testable import EventStore

@Suite("Nested write transactions")
struct NestedTransactionTests {
    func withDatabase<R>(_ body: (Environment, Database) throws -> R) throws -> R {
        let directory = FileManager.default.temporaryDirectory
            .appendingPathComponent("evstore-nested-\(UUID().uuidString)").path
        defer { try? FileManager.default.removeItem(atPath: directory) }
        let environment = try Environment(directory: directory, options: EnvironmentOptions())
        return try body(environment, try environment.openDatabase("t", flags: [.create]))
    }

    struct Rejected: Error {}

    @Test func aThrowingNestedTransactionIsDiscardedAndTheParentGoesOn() throws {
        try withDatabase { environment, db in
            try environment.write { txn in
                try txn.put(db, Array("a".utf8), [1])
                try txn.nested { child in try child.put(db, Array("b".utf8), [2]) }
                var sawOwnWrite = false
                do {
                    try txn.nested { child in
                        try child.put(db, Array("c".utf8), [3])
                        sawOwnWrite = try child.get(db, Array("c".utf8)) == [3]
                        throw Rejected()
                    }
                    Issue.record("the nested transaction did not throw")
                } catch is Rejected {}
                #expect(sawOwnWrite)
                #expect(try txn.get(db, Array("c".utf8)) == nil)
                try txn.put(db, Array("d".utf8), [4])
            }
            try environment.read { txn throws in
                #expect(try txn.get(db, Array("a".utf8)) == [1])
                #expect(try txn.get(db, Array("b".utf8)) == [2])
                #expect(try txn.get(db, Array("c".utf8)) == nil)
                #expect(try txn.get(db, Array("d".utf8)) == [4])
            }
        }
    }

    #if DEBUG
        @Test func aFullMapInsideANestedTransactionGrowsTheMapAndRunsEverythingAgain() throws {
            try withDatabase { environment, db in
                environment.injectFailure(LMDBError.mapFull.code, at: .put, after: 1)
                var runs = 0
                try environment.write { txn in
                    runs += 1
                    try txn.put(db, Array("a".utf8), [1])
                    try txn.nested { child in try child.put(db, Array("b".utf8), [2]) }
                }
                #expect(runs == 2)
                try environment.read { txn throws in #expect(try txn.get(db, Array("b".utf8)) == [2]) }
            }
        }
    #endif
}

@Suite("One environment per directory")
struct OpenTwiceTests {
    @Test func openingAStoreTwiceInOneProcessIsRefusedUntilTheFirstCloses() throws {
        let store = try TempStore()
        do {
            _ = try EventLog.open(directory: store.directory, options: store.options)
            Issue.record("the same store opened twice")
        } catch {
            #expect(error.message.contains("already open in this process"))
        }
        try store.reopen()
        #expect(try store.log.statistics().events == 0)
    }
}
