import Foundation

/// What a connection has to send, in order: responses (some still being computed, like an
/// append waiting for its commit) and watch notifications.
///
/// Responses go out in request order however they complete; the sender thread writes
/// every response ready at the head in one write. Notifications pushed by the writer never
/// block it: past `notificationLimit` queued, the offer is refused and the caller
/// disconnects the consumer.
final class Outbox: @unchecked Sendable {
    /// A place in the order, filled when its response is ready.
    final class Slot: @unchecked Sendable {
        /// Guarded by the outbox's condition.
        fileprivate var bytes: [UInt8]?
        fileprivate let isAppend: Bool
        fileprivate let isNotification: Bool

        fileprivate init(bytes: [UInt8]?, isAppend: Bool, isNotification: Bool) {
            self.bytes = bytes
            self.isAppend = isAppend
            self.isNotification = isNotification
        }
    }

    let notificationLimit: Int
    /// Protects every var below (and each slot's bytes); wakes the sender and waiters.
    private let condition = NSCondition()
    private var slots: [Slot] = []
    private var head = 0
    private var queuedNotifications = 0
    private var appendsInFlight = 0
    /// No more pushes; the sender ends once everything queued is written.
    private var finishing = false
    /// The sender must stop now (the peer is gone).
    private var aborted = false

    init(notificationLimit: Int) {
        self.notificationLimit = notificationLimit
    }

    /// Takes the next place in the order for a response computed later.
    func reserve(isAppend: Bool = false) -> Slot {
        let slot = Slot(bytes: nil, isAppend: isAppend, isNotification: false)
        condition.lock()
        slots.append(slot)
        if isAppend { appendsInFlight += 1 }
        condition.unlock()
        return slot
    }

    /// Fills a reserved place (empty bytes for a notification request: nothing is sent).
    func fill(_ slot: Slot, with bytes: [UInt8]) {
        condition.lock()
        slot.bytes = bytes
        if slot.isAppend { appendsInFlight -= 1 }
        condition.broadcast()
        condition.unlock()
    }

    /// Queues a response that is ready now.
    func push(_ bytes: [UInt8]) {
        condition.lock()
        if !finishing && !aborted {
            slots.append(Slot(bytes: bytes, isAppend: false, isNotification: false))
            condition.broadcast()
        }
        condition.unlock()
    }

    /// Queues a notification unless `notificationLimit` are already waiting. Never blocks.
    func offerNotification(_ bytes: [UInt8]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        guard !finishing && !aborted else { return true }
        guard queuedNotifications < notificationLimit else { return false }
        appendNotification(bytes)
        return true
    }

    /// Queues a notification, waiting while `notificationLimit` are waiting (catch-up: a
    /// reader thread may wait, the writer never does). False when the connection is ending.
    func pushNotificationWaiting(_ bytes: [UInt8]) -> Bool {
        condition.lock()
        defer { condition.unlock() }
        while queuedNotifications >= notificationLimit && !finishing && !aborted { condition.wait() }
        guard !finishing && !aborted else { return false }
        appendNotification(bytes)
        return true
    }

    /// Queues a last message after everything else and ends the connection once written.
    func finish(after last: [UInt8]? = nil) {
        condition.lock()
        if let last, !finishing && !aborted {
            slots.append(Slot(bytes: last, isAppend: false, isNotification: false))
        }
        finishing = true
        condition.broadcast()
        condition.unlock()
    }

    /// Drops whatever is queued: the peer is gone.
    func abort() {
        condition.lock()
        aborted = true
        condition.broadcast()
        condition.unlock()
    }

    /// How many more notifications fit under `notificationLimit` now.
    var notificationRoom: Int {
        condition.lock()
        defer { condition.unlock() }
        return max(0, notificationLimit - queuedNotifications)
    }

    /// Waits until every append this connection sent has its response.
    func waitForAppends() {
        condition.lock()
        while appendsInFlight > 0 && !aborted { condition.wait() }
        condition.unlock()
    }

    var isEnding: Bool {
        condition.lock()
        defer { condition.unlock() }
        return finishing || aborted
    }

    /// For the sender: waits for the responses at the head and returns them as one
    /// write; nil when the connection is done.
    func nextWrite() -> [UInt8]? {
        condition.lock()
        defer { condition.unlock() }
        while true {
            if aborted { return nil }
            var out: [UInt8] = []
            var released = 0
            while head < slots.count, let bytes = slots[head].bytes {
                out.append(contentsOf: bytes)
                if slots[head].isNotification { released += 1 }
                head += 1
                if out.count >= 1 << 20 { break }
            }
            if head > 1024 && head * 2 > slots.count {
                slots.removeFirst(head)
                head = 0
            }
            if released > 0 {
                queuedNotifications -= released
                condition.broadcast()
            }
            if !out.isEmpty { return out }
            if finishing && head == slots.count { return nil }
            condition.wait()
        }
    }

    private func appendNotification(_ bytes: [UInt8]) {
        slots.append(Slot(bytes: bytes, isAppend: false, isNotification: true))
        queuedNotifications += 1
        condition.broadcast()
    }
}
