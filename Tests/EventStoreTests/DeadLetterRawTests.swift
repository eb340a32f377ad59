import Foundation
import Projections
import StoreTestSupport
import TestSupport
import Testing

@testable import EventStore

/// A dead letter keeps its raw event whole up to the replicated limit while the dead
/// letters' raw bytes stay within their budget, so it can be retried; past either it keeps
/// a 64 KiB prefix and says so.
@Suite("Raw events of dead letters")
struct DeadLetterRawTests {
    /// An event of an unknown kind (a dead letter) with a field of `bytes` bytes.
    func invalid(_ n: Int, bytes: Int) -> [UInt8] {
        let id = ULID(timestamp: 1_764_400_000_000 + UInt64(n), random: (1, UInt64(n)))
        let origin = ULID(timestamp: 1_764_000_000_000, random: (7, 7))
        let filler = String(repeating: "x", count: bytes)
        return Array(
            #"{"entity":"job/\#(n)","fields":{"note":"\#(filler)"},"id":"\#(id)","kind":"teleport","origin":"\#(origin)"}"#
                .utf8)
    }

    func retry(_ store: TempStore, _ letter: DeadLetter) throws -> DeadLetterRetry {
        try store.log.perform(RetryDeadLettersJob([letter.key]))
    }

    @Test("a 1 MiB invalid event is kept whole and retried as itself; past the budget one keeps 64 KiB, marked, and a drop frees its share")
    func keptWholeWithinTheBudget() throws {
        let store = try TempStore { $0.deadLetterRawBudget = 3 << 20 }
        let big = invalid(1, bytes: 1 << 20)
        var result = try store.log.ingest([big], from: "peer")
        let first = try #require(result.deadLettered.first)
        #expect(first.raw == big)
        #expect(first.truncated == false && !first.isCut)
        // Retried, it fails for what it is, not for being cut.
        #expect(try retry(store, first).stillInvalid.map(\.reason) == ["invalid_event"])

        // A second fits (2 MiB held); a third would pass 3 MiB: it keeps its first 64 KiB.
        result = try store.log.ingest([invalid(2, bytes: 1 << 20)], from: "peer")
        #expect(result.deadLettered.first?.isCut == false)
        result = try store.log.ingest([invalid(3, bytes: 1 << 20)], from: "peer")
        let third = try #require(result.deadLettered.first)
        #expect(third.raw.count == DeadLetter.prefixBytes && third.truncated == true)
        let retried = try retry(store, third)
        #expect(retried.stillInvalid.map(\.reason) == ["truncated"])
        #expect(retried.stillInvalid.first?.message.contains("a drop, which is final") == true)
        // Read back from the store, the marks are kept.
        let held = try store.log.deadLetters()
        #expect(held.map(\.isCut) == [false, false, true])

        // Dropping the first frees its megabyte: the next big one is kept whole again.
        #expect(try store.log.perform(DropDeadLettersJob([first.key])) == 1)
        result = try store.log.ingest([invalid(4, bytes: 1 << 20)], from: "peer")
        #expect(result.deadLettered.first?.isCut == false)
        // The running total survives a reopen.
        try store.reopen()
        result = try store.log.ingest([invalid(5, bytes: 1 << 20)], from: "peer")
        #expect(result.deadLettered.first?.isCut == true)
        try store.check()
    }

    @Test("an event past the replicated limit keeps a prefix however empty the budget")
    func pastTheReplicatedLimit() throws {
        let store = try TempStore()
        let result = try store.log.ingest([invalid(1, bytes: DeadLetter.maxRawBytes)], from: "peer")
        let letter = try #require(result.deadLettered.first)
        #expect(letter.raw.count == DeadLetter.prefixBytes && letter.isCut)
        try store.check()
    }

    @Test("a record of an earlier release (no mark) of exactly 64 KiB counts as cut; a shorter one does not")
    func legacyRecords() throws {
        let key = ULID(timestamp: 1, random: (0, 1))
        for (length, cut) in [(DeadLetter.prefixBytes, true), (DeadLetter.prefixBytes - 1, false)] {
            var letter = DeadLetter(
                key: key, id: nil, origin: nil, peer: "p", reason: "r", receivedAt: 0,
                raw: Array(repeating: UInt8(ascii: "a"), count: length))
            let decoded = try DeadLetter(key: key, decoding: letter.canonicalJSON())
            #expect(decoded.truncated == nil && decoded.isCut == cut)
            letter.truncated = false
            #expect(try DeadLetter(key: key, decoding: letter.canonicalJSON()).isCut == false)
        }
    }
}
