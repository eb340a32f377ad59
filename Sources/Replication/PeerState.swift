import EventStore
import FoundationEssentials
import Projections

/// A peer's `state/<name>` record in the store: what the peer holds (its node id, version
/// vector, last success) and how its syncs have gone (its schedule), so that a restart
/// keeps a failing peer failing, with its last error and its backoff.
///
/// JSON: `{"vector":{origin:id},"last_success":ms,"node":id,"dead_lettered":[ids],"schedule":{"failures":n,
/// "backoff_failures":n,"failing_since":ms,"last_attempt":ms,"next_attempt":ms,
/// "last_error":{"reason":r,"message":m},"url":u}}`. A record of the previous release has no
/// `schedule` and still loads (the peer is then synced at once, as before); that release
/// ignores the member it does not know.
package struct PeerState {
    package var known: SyncService.Known
    package var schedule: PeerSchedule?
    /// The peer's URL when the schedule was written: the schedule is of that URL.
    package var url: String?

    package func encoded() -> [UInt8]? {
        var record: [String: Any] = ["vector": known.vector.wire]
        if let lastSuccess = known.lastSuccess { record["last_success"] = Int(clamping: lastSuccess) }
        if let node = known.node { record["node"] = node.description }
        if !known.deadLettered.isEmpty { record["dead_lettered"] = known.deadLetteredWire }
        if let schedule {
            var object: [String: Any] = [
                "failures": schedule.failures,
                "backoff_failures": schedule.backoffFailures,
                "next_attempt": Int(clamping: schedule.nextAttempt),
            ]
            if let at = schedule.failingSince { object["failing_since"] = Int(clamping: at) }
            if let at = schedule.lastAttempt { object["last_attempt"] = Int(clamping: at) }
            if let url { object["url"] = url }
            if let error = schedule.lastError {
                object["last_error"] = ["reason": error.reason.rawValue, "message": error.message]
            }
            record["schedule"] = object
        }
        return JSONTree.encode(record)
    }

    /// nil for a record that is not a JSON object; members that do not decode are left out.
    package init?(decoding bytes: [UInt8]) {
        guard let object = try? JSONTree.parse(bytes) as? [String: Any] else {
            return nil
        }
        func milliseconds(_ value: Any?) -> UInt64? {
            if let number = value as? Int { return number >= 0 ? UInt64(number) : nil }
            guard let number = value as? Double, number >= 0, number < 9.2e18 else { return nil }
            return UInt64(number)
        }
        func integer(_ value: Any?) -> Int? {
            if let number = value as? Int { return number }
            return (value as? Double).flatMap { Int(exactly: $0.rounded(.towardZero)) }
        }
        var known = SyncService.Known()
        known.node = (object["node"] as? String).flatMap { ULID($0) }
        for (origin, last) in object["vector"] as? [String: String] ?? [:] {
            if let o = ULID(origin), let l = ULID(last) { known.vector[o] = l }
        }
        known.lastSuccess = milliseconds(object["last_success"])
        known.deadLettered = SyncService.Known.deadLettered(fromWire: object["dead_lettered"])
        self.known = known
        guard let saved = object["schedule"] as? [String: Any], let next = milliseconds(saved["next_attempt"]) else {
            schedule = nil
            url = nil
            return
        }
        url = saved["url"] as? String
        var schedule = PeerSchedule(nextAttempt: next)
        schedule.lastSuccess = known.lastSuccess
        schedule.failures = max(0, integer(saved["failures"]) ?? 0)
        schedule.backoffFailures = max(0, integer(saved["backoff_failures"]) ?? schedule.failures)
        schedule.failingSince = milliseconds(saved["failing_since"])
        schedule.lastAttempt = milliseconds(saved["last_attempt"])
        if let error = saved["last_error"] as? [String: Any], let text = error["reason"] as? String {
            // A reason this release does not know (a record of a newer one) still shows its message.
            let reason = SyncError.Reason(rawValue: text) ?? .peerFailed
            schedule.lastError = SyncError(reason, error["message"] as? String ?? "")
        }
        if schedule.failures == 0 {
            schedule.lastError = nil
            schedule.failingSince = nil
        }
        self.schedule = schedule
    }

    package init(known: SyncService.Known, schedule: PeerSchedule?, url: String? = nil) {
        self.known = known
        self.schedule = schedule
        self.url = url
    }
}
