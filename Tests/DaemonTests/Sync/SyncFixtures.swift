@testable import Daemon
import Dispatch
import EventStore
import Foundation
import Projections
@testable import Replication
@testable import Server
import StoreTestSupport
import Synchronization
import TestSupport
import UnixSocket
@testable import Writer

/// The shared `TempStore`, with what the sync tests add.
extension TempStore {
    /// Appends input events given as JSON lines, one batch each, skipping those the store
    /// refuses (appends to a deleted entity).
    func append(_ lines: [String]) throws {
        for line in lines {
            let input = try EventCodec.decodeInput(Array(line.utf8))
            do {
                _ = try log.append([input])
            } catch {
                // Appends to a deleted entity, and restores of one that is not, are refused.
                if error.reason != .deleted && error.reason != .conflict { throw error }
            }
        }
    }

    /// Every entity's canonical state, by entity.
    func states() throws -> [String: String] {
        var out: [String: String] = [:]
        var after: EntityKey?
        repeat {
            let page = try log.entities(includeDeleted: true, after: after, limit: 1000)
            for summary in page.entities {
                // Without the rev: it is this store's own.
                out[summary.entity.description] = withoutRev(
                    String(decoding: try log.canonicalState(of: summary.entity)!, as: UTF8.self))
            }
            after = page.next
        } while after != nil
        return out
    }
}

/// Runs one session between two stores in this process over a socket pair: `a` starts it,
/// within `limits`.
@discardableResult
func syncPair(_ a: EventLog, _ b: EventLog, timeout: Double = 20, limits: SyncLimits = SyncLimits()) throws -> (
    SyncReport, SyncReport
) {
    let (left, right) = try UnixConnection.pair()
    let answer = Mutex<Result<SyncReport, SyncError>?>(nil)
    let done = DispatchSemaphore(value: 0)
    DispatchQueue.global().async {
        let channel = FrameChannel(connection: right, timeoutSeconds: timeout)
        let session = SyncSession(node: SyncNode(log: b, name: "b"), channel: channel, peerLabel: "")
        let result: Result<SyncReport, SyncError>
        do throws(SyncError) {
            result = .success(try session.respond(initiatorVersion: try channel.readPreamble()))
        } catch {
            result = .failure(error)
        }
        right.close()
        answer.withLock { $0 = result }
        done.signal()
    }
    let session = SyncSession(
        node: SyncNode(log: a, name: "a"), channel: FrameChannel(connection: left, timeoutSeconds: timeout),
        peerLabel: "b", limits: limits)
    let mine: Result<SyncReport, SyncError>
    do throws(SyncError) {
        mine = .success(try session.initiate())
    } catch {
        mine = .failure(error)
    }
    left.shutdown()
    done.wait()
    left.close()
    let theirs = answer.withLock { $0! }
    return (try mine.get(), try theirs.get())
}

/// Several replicas working offline on partly the same jobs: each gets its own jobs and
/// a share of common ones, with field edits, status changes, set adds and removes and
/// the odd delete and restore, so concurrent edits and conflicts arise between replicas.
func replicaWorkloads(replicas: Int, eventsEach: Int, seed: UInt64) -> [[String]] {
    var rng = SeededGenerator(seed: seed)
    let shared = max(1, eventsEach / 40)
    let statuses = ["assigned", "en_route", "on_site", "paused", "done"]
    let parts = ["valve-3", "gasket-12", "pump-seal", "filter-a", "fuse-10a"]
    let streets = ["Main St", "Mill Way", "Canal St"]
    return (0..<replicas).map { replica in
        var lines: [String] = []
        for index in 0..<eventsEach {
            let common = Int.random(in: 0..<10, using: &rng) < 3
            let job = common ? "job/shared-\(Int.random(in: 0..<shared, using: &rng))" : "job/r\(replica)-\(index / 8)"
            switch Int.random(in: 0..<100, using: &rng) {
            case 0..<35:
                let street = streets.randomElement(using: &rng)!
                lines.append(
                    #"{"entity":"\#(job)","kind":"edit","fields":{"address":"\#(Int.random(in: 1..<99, using: &rng)) \#(street)","tech":"r\#(replica)"}}"#
                )
            case 35..<65:
                lines.append(
                    #"{"entity":"\#(job)","kind":"status","status":"\#(statuses.randomElement(using: &rng)!)"}"#)
            case 65..<82:
                lines.append(
                    #"{"entity":"\#(job)","kind":"add","set":"parts","element":"\#(parts.randomElement(using: &rng)!)"}"#
                )
            case 82..<97:
                lines.append(
                    #"{"entity":"\#(job)","kind":"remove","set":"parts","element":"\#(parts.randomElement(using: &rng)!)"}"#
                )
            case 97..<99:
                lines.append(#"{"entity":"\#(job)","kind":"delete"}"#)
            default:
                lines.append(#"{"entity":"\#(job)","kind":"restore"}"#)
            }
        }
        return lines
    }
}
