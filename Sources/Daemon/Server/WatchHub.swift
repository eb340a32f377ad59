import EventStore
import Foundation
import Projections
import Synchronization

/// A connection's `watch`: which events it wants and where they go.
final class Subscription: WatchFiltering, @unchecked Sendable {
    let outbox: Outbox
    let entity: EntityKey?
    /// `TYPE/`, the prefix of the entities of the type watched.
    let typePrefix: [UInt8]?
    /// The id of the last event queued to it (for `resume_after`). Guarded by the hub's lock
    /// once registered; before that only the registering thread touches it.
    var lastQueued: ULID?
    /// Whether it counts against the hub's caps: from `admit` until it ends, so the slot is
    /// given back once however it ends. Guarded by the hub's slots lock.
    fileprivate var holdsSlot = false

    init(outbox: Outbox, entity: EntityKey?, type: String?, after: ULID?) {
        self.outbox = outbox
        self.entity = entity
        self.typePrefix = type.map { Array($0.utf8) + [UInt8(ascii: "/")] }
        self.lastQueued = after
    }

    func wants(_ event: Event) -> Bool { wants(event.entity) }

    func wants(_ entity: EntityKey) -> Bool {
        if let watched = self.entity, entity != watched { return false }
        if let typePrefix, !entity.bytes.starts(with: typePrefix) { return false }
        return true
    }
}

/// How many watches may be held at once: each one costs every append a little work under
/// the commit lock, and memory until its connection closes.
struct WatchLimits: Equatable, Sendable {
    /// `max_watches_per_connection`.
    var perConnection: Int
    /// `max_watches`, over all connections.
    var total: Int
}

extension WatchLimits {
    init(_ configuration: Configuration) {
        self.init(perConnection: configuration.maxWatchesPerConnection, total: configuration.maxWatches)
    }
}

/// The watch slots taken, per connection and overall.
private struct WatchSlots {
    var limits: WatchLimits
    var total = 0
    /// By the connection's outbox; an entry goes when its count reaches zero.
    var perConnection: [ObjectIdentifier: Int] = [:]
}

/// Delivers committed events to the watching connections.
///
/// - Important: The writer holds `publishLock` from before its commit until it has
///   published; a subscriber takes it to read the last events and join. So every event is
///   either in what the subscriber read or in what it is sent, never both, never neither.
final class WatchHub: @unchecked Sendable {
    /// Serializes commit-and-publish against a subscriber's switch from reading to live.
    let publishLock = NSLock()
    /// The live subscriptions, filed by what they watch. Guarded by `publishLock`.
    private var subscriptions = SubscriptionIndex<Subscription>()
    /// Subscriptions offered an event so far (whether or not they wanted it): the work
    /// publishing did. Guarded by `publishLock`.
    private(set) var examined = 0
    /// The watch slots taken and the caps on them. Taken after `publishLock` when both are.
    private let slots: Mutex<WatchSlots>
    private let logger: Logger

    init(logger: Logger, limits: WatchLimits) {
        self.logger = logger
        self.slots = Mutex(WatchSlots(limits: limits))
    }

    /// The caps; a reload changes them for the watches started after.
    var limits: WatchLimits {
        get { slots.withLock { $0.limits } }
        set { slots.withLock { $0.limits = newValue } }
    }

    /// Whether anyone watches. Call with `publishLock` held.
    var hasSubscribers: Bool { !subscriptions.isEmpty }

    /// The watches holding a slot, overall and on the connection of `outbox`.
    func slotsTaken(by outbox: Outbox? = nil) -> (total: Int, connection: Int) {
        slots.withLock { slots in (slots.total, outbox.map { slots.perConnection[ObjectIdentifier($0)] ?? 0 } ?? 0) }
    }

    /// Takes a slot for `subscription`, or says which cap refuses it. Call before `start`;
    /// the slot is given back when the subscription is removed or fails to start.
    func admit(_ subscription: Subscription) -> RPCError? {
        let connection = ObjectIdentifier(subscription.outbox)
        return slots.withLock { (slots) -> RPCError? in
            let held = slots.perConnection[connection] ?? 0
            if held >= slots.limits.perConnection {
                return WatchHub.refusal(
                    "this connection already holds \(held) watches, the most one connection may hold (max_watches_per_connection is \(slots.limits.perConnection)); watch a type, or everything, with one watch instead of one watch per entity, or raise max_watches_per_connection in the daemon's configuration and reload it"
                )
            }
            if slots.total >= slots.limits.total {
                return WatchHub.refusal(
                    "the daemon already holds \(slots.total) watches, as many as it serves at once (max_watches is \(slots.limits.total)); try again once other watchers have closed their connections, or raise max_watches in the daemon's configuration and reload it"
                )
            }
            guard !subscription.holdsSlot else { return nil }
            subscription.holdsSlot = true
            slots.total += 1
            slots.perConnection[connection] = held + 1
            return nil
        }
    }

    /// Gives back the slot of `subscription`, if it holds one.
    private func release(_ subscription: Subscription) {
        let connection = ObjectIdentifier(subscription.outbox)
        slots.withLock { slots in
            guard subscription.holdsSlot else { return }
            subscription.holdsSlot = false
            slots.total -= 1
            let held = (slots.perConnection[connection] ?? 1) - 1
            slots.perConnection[connection] = held > 0 ? held : nil
        }
    }

    private static func refusal(_ message: String) -> RPCError {
        RPCError(
            code: RPCError.applicationCodes["too_many_watches"] ?? RPCError.internalErrorCode, message: message,
            reason: "too_many_watches")
    }

    /// Sends the events with these ids to whoever wants them. Call with `publishLock` held,
    /// right after the commit that wrote them.
    func publish(_ ids: [ULID], log: EventLog) {
        guard !subscriptions.isEmpty, !ids.isEmpty else { return }
        let events: [Event]
        do {
            events = try log.events(ids: ids)
        } catch {
            logger.error("watch: reading back committed events failed: \(error)")
            return
        }
        for event in events {
            var notification: [UInt8]?
            let candidates = subscriptions.candidates(for: event.entity)
            examined += candidates.count
            for subscription in candidates where subscription.wants(event) {
                let bytes = notification ?? WatchHub.notification(event)
                notification = bytes
                if subscription.outbox.offerNotification(bytes) {
                    subscription.lastQueued = event.id
                } else {
                    subscriptions.remove(subscription)
                    release(subscription)
                    subscription.outbox.finish(after: WatchHub.overflow(resumeAfter: subscription.lastQueued))
                    logger.info(
                        "watch: a consumer fell \(subscription.outbox.notificationLimit) events behind; disconnected it"
                    )
                }
            }
        }
    }

    /// Streams the held events after `after` (all of them when it is the zero id; none
    /// when nil), then joins the live stream. Runs on the connection's reader thread;
    /// waits while the consumer is behind. False when the connection ended meanwhile.
    /// The slot `admit` took is given back unless it joins.
    func start(_ subscription: Subscription, after: ULID?, log: EventLog) throws(EventStoreError) -> Bool {
        var joined = false
        defer { if !joined { release(subscription) } }
        let page = 1000
        var cursor: ULID? = after == ULID.zero ? nil : after
        if after != nil {
            // Catch up without the lock while pages are full...
            while true {
                let (events, scanned, more) = try read(subscription, after: cursor, log: log, limit: page)
                guard queueWaiting(events, to: subscription) else { return false }
                cursor = scanned
                guard more else { break }
            }
        }
        // ...then read what came meanwhile and join, with the writer held off.
        while true {
            publishLock.lock()
            if after != nil {
                let events: [Event]
                let scanned: ULID?
                let more: Bool
                do {
                    (events, scanned, more) = try read(subscription, after: cursor, log: log, limit: page)
                } catch {
                    publishLock.unlock()
                    throw error
                }
                cursor = scanned
                // Join only when the rest fits in the queue now (nothing else adds to it
                // before it joins): otherwise queue it with waiting, outside the lock.
                if more || events.count > subscription.outbox.notificationRoom {
                    publishLock.unlock()
                    guard queueWaiting(events, to: subscription) else { return false }
                    continue
                }
                for event in events {
                    let queued = subscription.outbox.offerNotification(WatchHub.notification(event))
                    assert(queued, "room was checked under the lock")
                    subscription.lastQueued = event.id
                }
            }
            subscriptions.insert(subscription)
            publishLock.unlock()
            joined = true
            return true
        }
    }

    /// Queues replayed events, waiting while the consumer is behind (never with the lock
    /// held). False when the connection ended meanwhile.
    private func queueWaiting(_ events: [Event], to subscription: Subscription) -> Bool {
        for event in events {
            guard subscription.outbox.pushNotificationWaiting(WatchHub.notification(event)) else { return false }
            subscription.lastQueued = event.id
        }
        return true
    }

    /// Ends a subscription (its connection closed) and gives back its slot.
    func remove(_ subscription: Subscription) {
        publishLock.lock()
        subscriptions.remove(subscription)
        publishLock.unlock()
        release(subscription)
    }

    /// A page of the events after `after` that the subscription wants; `scanned` is the
    /// last id read (where the next page starts) and `more` whether the log goes on.
    private func read(_ subscription: Subscription, after: ULID?, log: EventLog, limit: Int) throws(EventStoreError)
        -> (events: [Event], scanned: ULID?, more: Bool)
    {
        let page: (events: [Event], next: ULID?)
        if let entity = subscription.entity {
            page = try log.events(ofEntity: entity, after: after, limit: limit)
        } else {
            page = try log.events(after: after, limit: limit)
        }
        return (page.events.filter(subscription.wants), page.events.last?.id ?? after, page.next != nil)
    }

    static func notification(_ event: Event) -> [UInt8] {
        var out = Array(#"{"jsonrpc":"2.0","method":"event","params":{"event":"#.utf8)
        EventCodec.encodeStored(event, includeID: true, into: &out)
        out.append(contentsOf: Array("}}\n".utf8))
        return out
    }

    static func overflow(resumeAfter: ULID?) -> [UInt8] {
        var out = JSONWriter()
        out.beginObject()
        out.member("jsonrpc", "2.0")
        out.member("method", "watch.overflow")
        out.key("params")
        out.beginObject()
        out.member("reason", "too_far_behind")
        out.key("message")
        out.string(
            "this watch fell too far behind the events being written and was ended; watch again with \"after\" set to resume_after to continue without a gap"
        )
        out.member("resume_after", resumeAfter?.description)
        out.endObject()
        out.endObject()
        out.bytes.append(0x0A)
        return out.bytes
    }
}
