import Foundation
import Projections
import StoreTestSupport
import TestSupport
import Testing

@testable import EventStore

func input(_ text: String) throws -> InputEvent {
    try EventCodec.decodeInput(Array(text.utf8))
}

func inputs(_ lines: String...) throws -> [InputEvent] {
    try lines.map(input)
}

func entity(_ text: String) -> EntityKey { EntityKey(validated: Array(text.utf8)) }

/// The entity's state as `get` returns it, without its node-local `rev` (the last member),
/// so states of different stores compare.
func stateJSON(_ log: EventLog, _ name: String) throws -> String? {
    try log.canonicalState(of: entity(name)).map { json in
        let text = String(decoding: json, as: UTF8.self)
        guard let range = text.range(of: #","rev":"#, options: .backwards) else { return text }
        return String(text[..<range.lowerBound]) + "}"
    }
}

/// Damages `bytes` as a flaky medium might: one byte dropped, one inserted, the end cut
/// off, or one bit flipped, at a place `rng` picks.
func damage(_ bytes: inout [UInt8], using rng: inout some RandomNumberGenerator) {
    let index = Int.random(in: 0..<bytes.count, using: &rng)
    switch Int.random(in: 0..<4, using: &rng) {
    case 0: bytes.remove(at: index)
    case 1: bytes.insert(UInt8.random(in: 0...255, using: &rng), at: index)
    case 2: bytes.removeLast(Int.random(in: 1...bytes.count, using: &rng))
    default: bytes[index] ^= UInt8(1) << UInt8.random(in: 0..<8, using: &rng)
    }
}

/// The workload's field-service events, generated in-process (same shape as fieldops.py).
func workload(seed: UInt64, count: Int, jobs: Int = 50, actor: String = "tech-0") -> [InputEvent] {
    var rng = SeededGenerator(seed: seed)
    let statuses = ["assigned", "en_route", "on_site", "paused", "done"]
    let parts = ["valve-3", "gasket-12", "pump-seal", "filter-a", "fuse-10a"]
    var out: [InputEvent] = []
    let entities = (0..<jobs).map { "job/J\(seed)-\($0)" }
    while out.count < count {
        let e = entities.randomElement(using: &rng)!
        let line: String
        switch Int.random(in: 0..<10, using: &rng) {
        case 0..<4:
            line =
                #"{"entity":"\#(e)","kind":"edit","by":"\#(actor)","fields":{"address":"\#(Int.random(in: 1...480, using: &rng)) Main St","phone":"+1555\#(Int.random(in: 1_000_000...9_999_999, using: &rng))"}}"#
        case 4..<7:
            line =
                #"{"entity":"\#(e)","kind":"status","status":"\#(statuses.randomElement(using: &rng)!)","by":"\#(actor)"}"#
        case 7..<9:
            line = #"{"entity":"\#(e)","kind":"add","set":"parts","element":"\#(parts.randomElement(using: &rng)!)"}"#
        default:
            line =
                #"{"entity":"\#(e)","kind":"remove","set":"parts","element":"\#(parts.randomElement(using: &rng)!)"}"#
        }
        out.append(try! input(line))
    }
    return out
}

/// Every event of a store in its stored form, for feeding another store's `ingest`.
func allStoredEvents(_ log: EventLog) throws -> [[UInt8]] {
    var out: [[UInt8]] = []
    var after: ULID?
    while true {
        let page = try log.events(after: after, limit: 1000)
        out.append(contentsOf: page.events.map { EventCodec.encodeStored($0) })
        guard let next = page.next else { return out }
        after = next
    }
}

extension EventLog {
    /// Client batches group-committed as the daemon's writer commits them: one result each.
    func appendGroups(_ groups: [[InputEvent]]) throws(EventStoreError) -> [Result<AppendResult, EventStoreError>] {
        try commit(groups.map { AppendJob($0) }).outcomes.map { outcome in
            outcome.flatMap { committed in
                guard let appended = committed.output as? AppendResult else { return .failure(EventLog.noOutcome) }
                return .success(appended)
            }
        }
    }
}

extension Result where Success == Committed, Failure == EventStoreError {
    /// The output of a committed job, as `type`; nil on failure or another type.
    func output<T>(as type: T.Type) -> T? {
        guard case .success(let committed) = self else { return nil }
        return committed.output as? T
    }
}
